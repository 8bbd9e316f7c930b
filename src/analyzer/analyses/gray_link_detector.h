// Gray links (docs/analyzer.md, "Links and gray links"): a link whose throughput on large transfers stays below a
// fraction of its own earlier level, or of its peers, for several windows.
//
// Measuring a link's throughput from the initiators' view. A link is a directed NIC pair (data_link.h). Only
// large operations (>= min_bytes) that completed count, and of those only the *queued* ones: posted while an
// earlier operation on the same link was still outstanding. For those the link was busy without a gap, so the
// time between the previous completion on the link and theirs is the time the link took to move them (a FIFO
// link: back-to-back completions, as packet-train bandwidth estimation uses). Operations that start a busy period
// are left out: their time is mostly latency and software overhead, not bandwidth. Operations completing at the
// same time (a poll returning several, or unsignaled WRs implied by a later signaled completion) form one batch
// whose bytes moved during the interval since the previous completion. Each batch's bytes and interval are
// spread over the windows that interval covers, so a window's throughput (its bytes over its busy time) does not
// depend on where batches fall. Operations arrive in completion order (the order the trace's poll events are
// read in).
//
// Detection, at the end (or on the windows closed so far: evaluate()): windows of window_ns (absolute, multiples of window_ns since the epoch) are measured
// when the link was measured busy for at least a quarter of the window, or moved kMinQueuedOps queued operations
// in it. Each measured window is compared with (a) the link's own earlier
// level: the median of its last 16 healthy measured windows (once it has 3), and (b) its peers: the median of
// the other links measured in the same window. It is slow when its throughput is below fraction x the larger
// reference. min_windows consecutive slow measured windows (windows without measurement in between neither break
// nor extend a run) make an episode. Its start and end are interpolated inside the transition windows from their
// mixed throughput (a window slow for a part a of its time measures R(1-a) + S a). Memory: a few words per link
// and measured window; past kMaxWindows windows per link the window doubles (older windows merged in pairs).
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "analyzer/analyses/data_link.h"
#include "analyzer/analyses/model.h"

namespace sigmatrace::analyzer {

struct GrayLinkOptions {
    int64_t window_ns = 50'000'000;   // --gray-window
    uint32_t min_windows = 3;         // --gray-windows: consecutive slow windows that make an episode
    double fraction = 0.5;            // --gray-fraction: slow when below fraction x reference
    uint64_t min_bytes = 65536;       // --gray-min-bytes: operations at least this large are measured
};

// One measured window of a link.
struct LinkWindowSample {
    int64_t start_ns = 0;          // absolute
    double bytes_per_s = 0.0;
    double reference = 0.0;        // max(own, peers) used for the decision (0: none available)
    bool slow = false;
};

struct GrayEpisode {
    DataLink link;
    int64_t start_ns = 0;          // absolute, interpolated
    int64_t end_ns = 0;            // absolute, interpolated (or the end of the last slow window)
    bool until_end = false;        // no healthy measurement after it: still slow when the link's traffic ended
    uint32_t slow_windows = 0;
    double slow_bytes_per_s = 0.0;     // median throughput of the slow windows
    double own_bytes_per_s = 0.0;      // the link's own earlier level (0 when it had none)
    double peers_bytes_per_s = 0.0;    // its peers' median over the episode (0 when it had none)
    double slowdown = 0.0;             // max(own, peers) / slow
    uint64_t bytes = 0;                // queued large bytes measured during the episode
    std::vector<LinkWindowSample> samples;   // windows around the episode (at most kMaxSamples)
};

struct LinkThroughput {
    DataLink link;
    uint64_t large_ops = 0;
    uint64_t queued_ops = 0;         // measured: queued behind a whole earlier completion interval
    uint64_t sender_bound_ops = 0;   // queued only just (the queue ran dry): paced by the sender, not measured
    uint64_t measured_windows = 0;
    double p50_bytes_per_s = 0.0;   // median over measured windows
    double max_bytes_per_s = 0.0;
};

struct GrayLinkResult {
    int64_t window_ns = 0;                // the window finally used (after doubling on long traces)
    std::vector<GrayEpisode> episodes;    // every episode of every link, by link (in key order) then time
    std::vector<LinkThroughput> links;    // every link that carried large transfers
};

class GrayLinkDetector {
public:
    static constexpr uint32_t kMinQueuedOps = 4;     // a window with fewer queued operations is not measured
    static constexpr std::size_t kMaxWindows = 4096; // per link, before the window doubles
    static constexpr std::size_t kMaxSamples = 48;

    explicit GrayLinkDetector(GrayLinkOptions o);

    void add(const Operation& op, DataLink link);
    // Whether `other`, another share of the trace (analysis.h, merge_share), measured none of these links: a
    // link's operations all come from its source NIC's node, so shares by host never share one.
    bool can_merge(const GrayLinkDetector& other) const;
    // Takes `other`'s links (can_merge() first), both at the wider of the two windows: a narrower one doubles as
    // a longer trace would have made it (integer counts and busy times merge exactly, the bytes, spread over
    // intervals, to the last bits of a double). `other` is left empty. Before finish().
    void merge(GrayLinkDetector& other);
    GrayLinkResult finish();
    // The episodes in the windows closed so far (a window closes when its link completes past it), leaving the
    // detector as it is: what a live analysis reports while the trace is still being read.
    GrayLinkResult evaluate() const;

    const GrayLinkOptions& options() const { return o_; }
    // A share in bytes (share_codec.cpp): what merge() takes, the window and the links' state.
    template <class Archive> void serialize(Archive& ar) {
        ar(window_ns_, links_);
        if constexpr (Archive::is_loading::value) {
            index_.clear();
            for (std::size_t i = 0; i < links_.size(); ++i) index_.emplace(links_[i].link.key(), i);
        }
    }

private:
    struct Window {
        int64_t index = 0;
        double bytes = 0.0;
        int64_t busy_ns = 0;
        uint32_t ops = 0;
        template <class Archive> void serialize(Archive& ar) { ar(index, bytes, busy_ns, ops); }
    };
    struct LinkState {
        DataLink link;
        int64_t last_done = 0;     // the latest completion on the link
        int64_t prev_done = 0;     // the completion on the link before last_done
        bool any = false;
        bool prev_any = false;
        uint64_t large_ops = 0;
        uint64_t queued_ops = 0;
        uint64_t sender_bound_ops = 0;
        // The batch of queued operations completing at last_done, moved during [batch_from, last_done].
        int64_t batch_from = 0;
        uint64_t batch_bytes = 0;
        uint32_t batch_ops = 0;
        bool batch_valid = false;
        Window cur;
        std::vector<Window> windows;
        template <class Archive> void serialize(Archive& ar) {
            ar(link.src, link.dst, last_done, prev_done, any, prev_any, large_ops, queued_ops, sender_bound_ops,
               batch_from, batch_bytes, batch_ops, batch_valid, cur, windows);
        }
    };

    void flush_batch(LinkState& s);
    void close_window(LinkState& s);
    void coarsen();

    GrayLinkOptions o_;
    int64_t window_ns_;
    std::unordered_map<uint64_t, std::size_t> index_;   // link key -> links_ position
    std::vector<LinkState> links_;
};

}  // namespace sigmatrace::analyzer
