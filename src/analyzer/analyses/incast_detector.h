// Incast (docs/analyzer.md, "Incast"): concurrent distinct senders with data in flight to one receiver;
// reported with its degree and duration.
//
// Time is cut in windows of window_ns (absolute multiples since the epoch). An operation of at least min_bytes
// has its bytes in flight on its link (data_link.h: sender NIC -> receiver NIC) from post to completion, spread
// evenly over the windows it spans. In a window, a sender counts towards a receiver when the receiver gets at
// least `share` of the bytes the sender has in flight then (inter-node links only): a many-to-one pattern,
// not the fan-in every node of a balanced all-to-all sees (there each receiver gets 1/(N-1) of each sender's
// data). A receiver with at least min_senders such senders in a window is in incast; consecutive incast windows
// (gaps of one window tolerated) make an episode, reported when it lasts at least min_duration_ns. Degree =
// the number of senders counted in a window (max and mean over the episode).
//
// Streaming: operations arrive in completion order, so a window is final once completions are kSlackWindows
// windows past it (an operation in flight longer than that has its earliest part cut, counted in
// clipped_bytes; a WQE without a visible completion, drained after its window is final, is left out uncounted:
// it has no completion time). Memory: the open windows' (sender, receiver) cells, and the episodes (at most
// kMaxEpisodesPerReceiver kept per receiver, the longest; all are counted).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "analyzer/analyses/data_link.h"
#include "analyzer/analyses/model.h"

namespace sigmatrace::analyzer {

class Topology;

struct IncastOptions {
    int64_t window_ns = 1'000'000;         // --incast-window
    uint32_t min_senders = 3;              // --incast-senders
    double share = 0.5;                    // --incast-share
    uint64_t min_bytes = 1024;             // --incast-min-bytes
    int64_t min_duration_ns = 2'000'000;   // --incast-min-duration
};

struct IncastEpisode {
    DevId receiver = kNoId;
    int64_t start_ns = 0;      // absolute: start of its first window
    int64_t end_ns = 0;        // absolute: end of its last window
    uint32_t max_degree = 0;
    double mean_degree = 0.0;  // over its incast windows
    uint32_t windows = 0;      // incast windows
    std::set<DevId> senders;   // every sender counted in one of its windows
    double bytes = 0.0;        // bytes in flight to the receiver from the counted senders, over the episode
};

struct IncastReceiver {
    DevId receiver = kNoId;
    uint64_t episodes = 0;             // every episode (kept ones below)
    int64_t total_ns = 0;              // summed duration of every episode
    uint32_t max_degree = 0;
    std::vector<IncastEpisode> kept;   // the longest ones, by start time
};

struct IncastResult {
    std::vector<IncastReceiver> receivers;   // receivers with at least one episode
    double clipped_bytes = 0.0;
};

class IncastDetector {
public:
    static constexpr int64_t kSlackWindows = 100;
    static constexpr std::size_t kMaxEpisodesPerReceiver = 16;

    IncastDetector(IncastOptions o, const Topology& topo);

    void add(const Operation& op, DataLink link);
    IncastResult finish();
    // The episodes of the windows final so far, and the runs still open that already last min_duration_ns (as
    // if they ended with their last window), leaving the detector as it is: a live analysis's view.
    IncastResult evaluate() const;

    const IncastOptions& options() const { return o_; }
    // A share in bytes (share_codec.cpp): what merge() takes, its windows closed first (close_share()).
    void close_share() { close_windows_before(base_ + static_cast<int64_t>(windows_.size())); }
    template <class Archive> void serialize(Archive& ar) {
        ar(base_, fans_, senders_, clipped_);
        cell_ = nullptr;
    }

    // A share of a trace (analysis.h, merge_share): each final window's fans (per receiver, the senders that
    // count towards it) are kept instead of being made into episodes, so that the shares' fans add up; finish()
    // makes the episodes. A sender's windows are exact in a share that holds all its bytes in flight: shares
    // merge when their senders differ (can_merge), which holds unless RDMA READs make a NIC of one share's node
    // the sender of another share's operations. Before the first operation.
    void keep_fans() { keep_fans_ = true; }
    bool can_merge(const IncastDetector& other) const;
    // Adds `other`'s fans and clipped bytes (both keep_fans(), neither finished, can_merge()).
    void merge(IncastDetector& other);

private:
    struct Run {
        int64_t first = 0, last = 0;
        uint32_t max_degree = 0;
        uint64_t degree_sum = 0;
        uint32_t windows = 0;
        std::set<DevId> senders;
        double bytes = 0.0;
    };
    using Cells = std::unordered_map<uint64_t, double>;   // link key -> bytes in flight in the window
    // The senders that count towards one receiver in one window.
    struct Fan {
        uint32_t degree = 0;
        double bytes = 0.0;
        std::vector<DevId> senders;
        template <class Archive> void serialize(Archive& ar) { ar(degree, bytes, senders); }
    };
    using Fans = std::map<DevId, Fan>;   // by receiver

    void close_windows_before(int64_t index);
    // Link `key`'s cell in window `w` (base_ <= w, held): the previous operation's when the same (a sender posts
    // to one peer for long stretches), else looked up in the window's map.
    double& cell(int64_t w, uint64_t key) {
        if (cell_ != nullptr && w == cell_window_ && key == cell_key_) return *cell_;
        cell_ = &windows_[static_cast<std::size_t>(w - base_)][key];
        cell_window_ = w;
        cell_key_ = key;
        return *cell_;
    }
    void evaluate(int64_t index, const Cells& cells);
    // Window `index`'s fans into the receivers' runs.
    void add_fans(int64_t index, const Fans& fans);
    void end_run(DevId receiver, const Run& run);
    void record_run(std::map<DevId, IncastReceiver>& receivers, DevId receiver, const Run& run) const;

    IncastOptions o_;
    const Topology& topo_;
    int64_t base_ = 0;            // window index of windows_.front()
    bool started_ = false;
    std::deque<Cells> windows_;
    // cell()'s last answer: a map's element stays where it is until its window is closed, and a closed window is
    // never asked for again (operations' windows start at base_); closing clears it all the same.
    double* cell_ = nullptr;
    int64_t cell_window_ = 0;
    uint64_t cell_key_ = 0;
    std::map<DevId, Run> open_;
    std::map<DevId, IncastReceiver> receivers_;
    double clipped_ = 0.0;
    // keep_fans(): the final windows' fans, by window index (windows without any left out), and the senders seen.
    bool keep_fans_ = false;
    std::map<int64_t, Fans> fans_;
    std::set<DevId> senders_;
    DevId last_sender_ = kNoId;
};

}  // namespace sigmatrace::analyzer
