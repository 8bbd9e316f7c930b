// Communication phases (docs/analyzer.md, "Phases"): the trace's data traffic cut into phases, each summarised
// by the bytes every NIC port sent and received, from which the report derives the phase's lower bound (the
// busiest port's bytes over its bandwidth) and efficiency (lower bound over the phase's duration).
//
// What is kept while reading is a set of segments: maximal runs of traffic, per split slot, in which no idle gap
// longer than the gap threshold separates two operations' in-flight intervals. An operation's interval is
// [post, completion]. Segments are merged as operations arrive in any order; memory is at most kMaxSegments
// segments of per-port tallies (when more would be needed the gap threshold doubles and neighbours merge), never
// proportional to the operations. Phases are built from the segments at the end: one per segment (gap split),
// one per slot (time split), or the segments grouped by boundary times (barrier epochs, operations of one
// opcode), a segment going to the phase in which it starts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analyzer/analyses/data_link.h"
#include "analyzer/analyses/model.h"

namespace sigmatrace::analyzer {

struct PhaseOptions {
    enum class Split { Auto, Gap, Times, Opcode };
    bool enabled = true;                 // --phase-split off disables them
    Split split = Split::Auto;           // Auto: barrier epochs when a barrier is detected, idle gaps otherwise
    int64_t gap_ns = 1'000'000;          // an idle gap longer than this ends a segment (gap:T)
    std::vector<int64_t> times_ns;       // Times: cut points, ns after the trace's start, ascending
    uint8_t opcode = 0;                  // Opcode: the post of each operation of this opcode starts a phase
    double port_bytes_per_s = 0.0;       // --port-bandwidth RATE; 0: each port's observed peak
    std::vector<std::pair<std::string, double>> device_bytes_per_s;   // "node/dev" or "dev" -> bytes/s
    double efficiency_threshold = 0.5;   // phase_inefficiency below this
    uint64_t finding_min_bytes = 1 << 20;   // phase_inefficiency only for phases that moved this much
    double straggler_share = 0.25;       // straggler: last byte later than the other ports' by this share of the phase
};

// One NIC port in one direction: the key is the device id shifted left once, the low bit set for receive.
inline uint64_t port_key(DevId dev, bool rx) { return static_cast<uint64_t>(dev) << 1 | (rx ? 1u : 0u); }
inline DevId port_dev(uint64_t key) { return static_cast<DevId>(key >> 1); }
inline bool port_rx(uint64_t key) { return (key & 1u) != 0; }

struct PortTally {
    double bytes = 0.0;
    int64_t first_ns = INT64_MAX;   // earliest post of its operations (a tally exists once one was added)
    int64_t last_ns = INT64_MIN;    // latest completion
    void add(double b, int64_t from, int64_t to) {
        first_ns = std::min(first_ns, from);
        last_ns = std::max(last_ns, to);
        bytes += b;
    }
    void merge(const PortTally& o);
    template <class Archive> void serialize(Archive& ar) { ar(bytes, first_ns, last_ns); }
};

struct PhaseSegment {
    int64_t start_ns = 0;
    int64_t end_ns = 0;
    uint32_t slot = 0;   // time split: the cut interval; 0 otherwise
    uint64_t ops = 0;
    std::unordered_map<uint64_t, PortTally> ports;   // port_key()
    void merge(PhaseSegment&& o);
    template <class Archive> void serialize(Archive& ar) { ar(start_ns, end_ns, slot, ops, ports); }
};

class PhaseTracker {
public:
    static constexpr std::size_t kMaxSegments = 4096;
    static constexpr std::size_t kMaxMarks = 65536;

    explicit PhaseTracker(PhaseOptions o)
        : o_(std::move(o)),
          gap_(o_.gap_ns),
          plain_split_(o_.enabled && (o_.split == PhaseOptions::Split::Auto || o_.split == PhaseOptions::Split::Gap ||
                                      (o_.split == PhaseOptions::Split::Times && o_.times_ns.empty()))) {}

    bool enabled() const { return o_.enabled; }
    // A send-side operation and its link; others are ignored. `trace_start_ns` is the trace's start as known
    // when the operation arrives (time split only: its cut points are relative to it).
    void add(const Operation& op, DataLink link, int64_t trace_start_ns) {
        // The hot path, inline: a completed operation of the previous one's link inside the current segment or
        // extending its end without reaching the next one (no cut points, no marks; refresh_fast()).
        if (op.post_ts >= fast_lo_ && op.done_ts < fast_to_limit_ && op.done_ts >= op.post_ts &&
            tallies_link_ == link.key() && op.outcome == OpOutcome::Completed && !op.is_recv() &&
            op.post_ts <= last_->second.end_ns + gap_) {
            add_to_current(1, op.bytes, op.post_ts, op.done_ts);
            return;
        }
        add_slow(op, link, trace_start_ns);
    }

    // A run of sends (data_link.h) on `link` is taken whole when add()'s inline path takes each of its
    // operations (it does for all once it does for the first: the segment's end then covers every post): the
    // same sums in one step. add_run() requires takes_run().
    bool takes_run(const SendRun& r, DataLink link) const {
        return r.min_post >= fast_lo_ && r.done_ts < fast_to_limit_ && tallies_link_ == link.key() &&
               r.ops.front().post_ts <= last_->second.end_ns + gap_;
    }
    void add_run(const SendRun& r) { add_to_current(r.ops.size(), r.bytes, r.min_post, r.done_ts); }

    // Adds the segments and marks of `other`, another share of the trace (analysis.h, merge_share), with the
    // same options: what one tracker given both shares' operations keeps (the marks, when more than kMaxMarks,
    // a different subset).
    void merge(const PhaseTracker& other);
    // A share in bytes (share_codec.cpp): what merge() takes, the gap, the segments and the marks.
    template <class Archive> void serialize(Archive& ar) {
        ar(gap_, segments_, marks_, marks_dropped_);
        have_last_ = false;
        tx_ = rx_ = nullptr;
        fast_lo_ = INT64_MAX;
        fast_to_limit_ = 0;
    }

    const PhaseOptions& options() const { return o_; }
    int64_t gap_ns() const { return gap_; }   // the threshold used (doubled when segments would exceed the bound)
    const std::map<int64_t, PhaseSegment>& segments() const { return segments_; }   // by start
    const std::vector<int64_t>& marks() const { return marks_; }   // opcode split: the posts that start a phase
    bool marks_dropped() const { return marks_dropped_; }

private:
    // `ops` operations moving `bytes` over [from, to] into the current segment and the cached tallies (the inline
    // paths: their conditions hold).
    void add_to_current(uint64_t ops, uint64_t bytes, int64_t from, int64_t to) {
        PhaseSegment& seg = last_->second;
        seg.end_ns = std::max(seg.end_ns, to);
        seg.ops += ops;
        tx_->add(static_cast<double>(bytes), from, to);
        rx_->add(static_cast<double>(bytes), from, to);
    }
    // Whether [from, to] of cut interval `slot` falls inside the current segment (last_, which must exist) or
    // extends its end without reaching the next one.
    bool extends_last(int64_t from, int64_t to, uint32_t slot) const {
        const PhaseSegment& seg = last_->second;
        return seg.slot == slot && from >= last_->first && from <= seg.end_ns + gap_ &&
               (to <= seg.end_ns || next_start_ - gap_ > to);
    }
    void add_slow(const Operation& op, DataLink link, int64_t trace_start_ns);
    void insert(int64_t from, int64_t to, uint32_t slot, DataLink link, double bytes, bool count);
    // `seg` joined with the segments it touches (same slot, within the gap), in place of them.
    std::map<int64_t, PhaseSegment>::iterator absorb(PhaseSegment seg);
    // Neighbours within the gap (after it grew) merged.
    void coalesce();
    void bound();

    PhaseOptions o_;
    int64_t gap_;
    std::map<int64_t, PhaseSegment> segments_;
    // The segment the previous operation went to: consecutive operations mostly fall inside it or extend its
    // end (the hot path is then two hash lookups). Reset whenever segments are erased.
    std::map<int64_t, PhaseSegment>::iterator last_;
    bool have_last_ = false;
    int64_t next_start_ = INT64_MAX;   // the start of the segment after last_ (none: INT64_MAX)
    bool plain_split_;                 // enabled, and neither cut points nor marks (the hot path applies)
    // The tallies of the previous operation's two ports in that segment: consecutive operations mostly share
    // their link too. Tallies keep their address while their segment is neither merged nor erased, and the cache
    // is dropped whenever segments are.
    uint64_t tallies_link_ = 0;
    PortTally* tx_ = nullptr;
    PortTally* rx_ = nullptr;
    std::vector<int64_t> marks_;
    bool marks_dropped_ = false;
    // What add()'s inline path accepts, while the current segment and the tallies are cached and neither cut
    // points nor marks apply: posts from fast_lo_ (the segment's start; INT64_MAX: nothing) to its end plus
    // the gap, completions before fast_to_limit_ (past the segment's end, short of the next segment's gap;
    // it stays valid as the inline path extends the end, since that path never reaches it). Set by refresh_fast()
    // whenever the segment, the tallies or the gap change.
    int64_t fast_lo_ = INT64_MAX;
    int64_t fast_to_limit_ = 0;
    void refresh_fast();
};

// A phase as reported: segments grouped, with its delimiter ("gap", "time", "barrier", "opcode", "trace").
struct Phase {
    int64_t start_ns = 0;
    int64_t end_ns = 0;
    uint64_t ops = 0;
    std::string delimiter;
    std::map<uint64_t, PortTally> ports;
};

// Groups the segments into phases. `boundaries` (absolute ns, ascending) are used for the barrier and opcode
// splits: a segment goes to the phase of the last boundary at or before its start.
std::vector<Phase> build_phases(const PhaseTracker& t, const std::vector<int64_t>& boundaries, const char* delimiter);

// Each port's observed peak in bytes/s: the highest rate it reached over any segment (its bytes over the time
// from its first post to its last completion there). Never below its rate in a phase, which holds whole segments.
std::map<uint64_t, double> observed_peaks(const PhaseTracker& t);

struct PhaseBound {
    double lower_bound_ns = 0.0;   // 0 when no port has a bandwidth
    uint64_t binding = 0;          // port_key() of the port that sets it
    double bytes_per_s = 0.0;      // that port's bandwidth
};
// The lower bound of a phase: the maximum over its ports of bytes / bandwidth(port) (bytes/s, <= 0: unknown).
template <class Bandwidth>
PhaseBound lower_bound(const Phase& p, Bandwidth&& bandwidth) {
    PhaseBound b;
    for (const auto& [key, tally] : p.ports) {
        const double bps = bandwidth(key);
        if (!(bps > 0)) continue;
        const double ns = tally.bytes * 1e9 / bps;
        if (ns > b.lower_bound_ns) b = {ns, key, bps};
    }
    return b;
}

struct Straggler {
    uint64_t port = 0;
    int64_t late_ns = 0;   // its last byte after the next latest port's of the same direction
};
// A port of direction `rx` whose last byte ends more than `share` of the phase's duration after every other
// port's of that direction (at least two of them).
std::optional<Straggler> straggler_of(const Phase& p, bool rx, double share);

}  // namespace sigmatrace::analyzer
