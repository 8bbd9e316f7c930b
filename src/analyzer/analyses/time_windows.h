// Time-resolved summaries (docs/analyzer.md, "Windows"): the trace cut into windows of equal length, each
// holding what moved in it per link (bytes, operations, in-flight time, latency) and the latency per opcode,
// from which the report derives the window's node matrix, links, rails, receivers and latency.
//
// The window length must be known before the first window is filled, and the trace's length is known only at
// the end: the windows start at kStartWidthNs (1.024 us) and double (neighbouring pairs merged, boundaries kept at
// multiples of the length since the epoch) whenever the trace's span needs more than max_windows of them. The
// final count lies between max_windows/2 and max_windows, whatever the trace's length: memory is max_windows
// windows of per-link cells, not proportional to the operations. With --window T the length starts at T; it
// doubles only past kMaxFixedWindows windows, and the report says the length used.
//
// An operation's bytes are spread evenly over [post, completion] (its data is in flight meanwhile, as in the
// incast detector), its count goes to the window of its completion, and its latency (own completion seen)
// too. Each QP's outstanding work is sampled into the window of each sample (max WRs and bytes, the bytes' p99,
// the receive queue's depth, RNR failures) and integrated over time (the mean WRs and bytes). The in-flight time of a link is the union of its operations' intervals, merged in completion order
// (an earlier gap hidden under a later, longer operation counts as in flight): a receiver's time-weighted
// concurrency of senders is the sum of its inbound links' in-flight time over the window's length.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <vector>

#include "analyzer/analyses/data_link.h"
#include "analyzer/analyses/model.h"
#include "analyzer/analyses/int_histogram.h"

namespace sigmatrace::analyzer {

struct WindowOptions {
    bool enabled = true;              // --window off disables them
    int64_t window_ns = 0;            // --window T; 0: chosen from the trace's length
    uint32_t max_windows = 256;       // automatic length: the count ends in (max_windows/2, max_windows]
    // QPs with a per-window series (the first created, QpId below it): windows x QPs cells bound the memory.
    uint32_t max_qps = 256;
};

struct WindowLinkCell {
    double bytes = 0.0;       // spread over the operations' intervals
    uint64_t ops = 0;         // operations completed in the window
    int64_t busy_ns = 0;      // time with data in flight on the link, inside the window
    IntHistogram latency;     // ns, operations completed in the window (own completion seen)
    template <class Archive> void serialize(Archive& ar) { ar(bytes, ops, busy_ns, latency); }
};

// A queue pair's outstanding work inside one window (outstanding.h samples it at each post and completion; a
// level holds until the next sample, so a window it spans without a sample still has it).
struct WindowQpCell {
    uint32_t max_wrs = 0;          // send queue: WRs posted and not completed, max over the window
    uint64_t max_bytes = 0;        // and their bytes
    IntHistogram bytes;            // the samples of outstanding bytes
    double wrs_ns = 0.0;           // outstanding WRs integrated over the window's time (/ its length: the mean)
    double bytes_ns = 0.0;         // and bytes
    uint32_t recv_max_posted = 0;  // receive queue: posted and not consumed, max
    uint32_t recv_min_posted = UINT32_MAX;   // right after a consumption, min (UINT32_MAX: none in the window)
    uint32_t rnr_events = 0;       // sends that failed with an RNR retry error, completed in the window
    void merge(const WindowQpCell& o);
    template <class Archive> void serialize(Archive& ar) {
        ar(max_wrs, max_bytes, bytes, wrs_ns, bytes_ns, recv_max_posted, recv_min_posted, rnr_events);
    }
};

struct Window {
    std::unordered_map<uint64_t, WindowLinkCell> links;   // DataLink::key()
    std::map<uint8_t, IntHistogram> latency_by_opcode;
    std::unordered_map<QpId, WindowQpCell> qps;           // QPs with a sample in the window
    void merge(Window&& other);
    template <class Archive> void serialize(Archive& ar) { ar(links, latency_by_opcode, qps); }
};

class TimeWindows {
public:
    // A power of two: automatic lengths stay powers of two, and a window index is a shift, not a division.
    static constexpr int64_t kStartWidthNs = 1024;
    static constexpr uint32_t kMaxFixedWindows = 1u << 16;

    explicit TimeWindows(WindowOptions o);

    bool enabled() const { return o_.enabled; }
    // A send-side operation and its link (data_link.h); receives and operations of unknown link are ignored
    // except for the opcode latency. Any order; memory stays bounded.
    [[gnu::always_inline]] void add(const Operation& op, DataLink link) {
        // The hot path, inline: a completed send inside the window of the cached cell, on that cell's link, and,
        // when its own completion was seen, of the cached latency's opcode (refresh_fast()).
        if (op.outcome == OpOutcome::Completed && op.post_ts >= fast_lo_ && op.done_ts < fast_hi_ &&
            op.done_ts > op.post_ts && link.key() == fast_key_ && !op.is_recv() &&
            (op.implied || op.opcode == fast_opcode_)) {
            latest_ts_ = std::max(latest_ts_, op.done_ts);
            WindowLinkCell& c = *cached_cell_;
            put_in_one_window(c, op.bytes, op.post_ts, op.done_ts);
            ++c.ops;
            if (!op.implied) {
                const auto ns = static_cast<uint64_t>(op.done_ts - op.post_ts);
                latency_->add(ns);
                c.latency.add(ns);
            }
            return;
        }
        add_slow(op, link);
    }

    // A run of sends (data_link.h) on `link` is taken whole when all of it lies in the window of the cached cell:
    // add()'s inline path for each of its operations in one step (the same sums; the in-flight time from the
    // first one's post, the others' posts lying under its interval). add_run() requires takes_run().
    bool takes_run(const SendRun& r, DataLink link) const {
        return r.min_post >= fast_lo_ && r.done_ts < fast_hi_ && r.done_ts > r.max_post && link.key() == fast_key_ &&
               (r.timed == 0 || r.ops.front().opcode == fast_opcode_);
    }
    void add_run(const SendRun& r) {
        latest_ts_ = std::max(latest_ts_, r.done_ts);
        WindowLinkCell& c = *cached_cell_;
        put_in_one_window(c, r.bytes, r.ops.front().post_ts, r.done_ts);
        c.ops += r.ops.size();
        const auto add_latency = [&](const Operation& op) {
            const auto ns = static_cast<uint64_t>(r.done_ts - op.post_ts);
            latency_->add(ns);
            c.latency.add(ns);
        };
        if (r.timed == 1 && !r.ops.back().implied) {
            add_latency(r.ops.back());   // the usual run: unsignaled WRs and the signaled one that retired them
        } else if (r.timed != 0) {
            for (const Operation& op : r.ops)
                if (!op.implied) add_latency(op);
        }
    }

    // Samples of a queue pair's outstanding work (outstanding.h) at time `ts`: the send queue after a post or a
    // completion, the receive queue after a post or (`consumed`) a consumption, an RNR failure. Samples outside
    // [0, 2^62) ns are ignored, as operations with such times are. sample_send says whether the sample went into
    // a window (the QP has a series and the time is valid).
    struct QpSeries;
    // The series of QP `q` (nullptr for a QP without one): taken once per operation, it serves that
    // operation's samples (valid until the next call of series()).
    QpSeries* series(QpId q) {
        if (!o_.enabled || q >= o_.max_qps) return nullptr;
        if (q >= series_.size()) series_.resize(q + 1);
        return &series_[q];
    }
    bool sample_send(QpSeries& s, QpId q, int64_t ts, uint32_t wrs, uint64_t bytes);
    void sample_recv(QpId q, int64_t ts, uint32_t posted, bool consumed);
    void rnr(QpId q, int64_t ts);
    // After the last sample: each QP's last level holds until the latest time seen (an operation's completion or
    // a sample). Call once.
    void finish();
    // Adds another share of the trace's windows (analysis.h, merge_share; the same options): both at the wider
    // length, over both spans (which may double it again: the length a whole trace's windows end at depends
    // only on the span they cover), cell by cell -- a link's cells, from its source node's share, and a QP's
    // cells and levels, from its process's share. The levels then hold to the later of the two latest times, at
    // finish(). Integer counts and times merge exactly, bytes spread over intervals to the last bits of a double.
    // `other` is left empty. Before finish().
    void merge(TimeWindows& other);
    // A share in bytes (share_codec.cpp): what merge() takes, the windows, the queues' levels, the links'
    // coverage and the latest time. Loaded into windows of the same options.
    template <class Archive> void serialize(Archive& ar) {
        ar(width_, base_, windows_, series_, covered_until_, latest_ts_);
        if constexpr (Archive::is_loading::value) after_load();
    }

    int64_t window_ns() const { return width_; }
    int64_t first_index() const { return base_; }   // windows()[i] covers [(first_index()+i)*window_ns(), +window_ns())
    const std::deque<Window>& windows() const { return windows_; }
    uint32_t max_qps() const { return o_.max_qps; }

private:
    void add_slow(const Operation& op, DataLink link);
    // `bytes` in flight over [post_ts, done_ts], which lies in the window of `c`, its link's cell: the bytes, and
    // the in-flight time past the link's covered end (covered_, that link's).
    void put_in_one_window(WindowLinkCell& c, uint64_t bytes, int64_t post_ts, int64_t done_ts) {
        c.bytes += static_cast<double>(bytes);
        const int64_t from = std::max(post_ts, *covered_);
        if (done_ts > from) {
            c.busy_ns += done_ts - from;
            *covered_ = done_ts;
        }
    }
    // Makes the windows cover [lo_ts, hi_ts], doubling their length while that needs more than the bound.
    void cover(int64_t lo_ts, int64_t hi_ts) {
        if (lo_ts < covered_lo_ || hi_ts > covered_hi_) grow(lo_ts, hi_ts);   // inline: most times are covered
    }
    void grow(int64_t lo_ts, int64_t hi_ts);
    void after_load();   // serialize(): the derived fields and caches of the loaded windows
    void double_width();
    // The cell of link `key` in window index `w`, through a one-entry cache: consecutive operations mostly share
    // their link and window (the per-operation path is hot). Cells keep their address until windows merge.
    WindowLinkCell& cell(int64_t w, uint64_t key);
    // The series of QP `q` with its cell at time `ts` (covering it first); nullptr for a QP without a series or
    // a time no window may hold.
    QpSeries* series_at(QpId q, int64_t ts);
    // Points `s` at its cell of the window holding `ts` (covering it first; ts is valid).
    void enter(QpSeries& s, QpId q, int64_t ts);
    static constexpr int64_t kMaxTs = kMaxPlausibleTs;
    int64_t index(int64_t ts) const { return shift_ >= 0 ? ts >> shift_ : ts / width_; }
    // Calls put(window index, share of [from, to), ns) for each window [from, to) spans.
    template <class Put>
    void spread(int64_t from, int64_t to, Put&& put);

    WindowOptions o_;
    uint32_t bound_;
    int64_t width_;
    int shift_ = -1;   // log2(width_) when width_ is a power of two
    int64_t base_ = 0;
    std::deque<Window> windows_;
    std::unordered_map<uint64_t, int64_t> covered_until_;   // per link: end of the in-flight union so far
    // One-entry caches (reset when windows merge).
    int64_t cached_window_ = -1;
    uint64_t cached_key_ = 0;
    WindowLinkCell* cached_cell_ = nullptr;
    uint64_t covered_key_ = 0;
    int64_t* covered_ = nullptr;
    int64_t latency_window_ = -1;
    uint8_t latency_opcode_ = 0;
    IntHistogram* latency_ = nullptr;
    // What add()'s inline path accepts, from the caches above: operations within [fast_lo_, fast_hi_) (the cached
    // cell's window; empty while the cell and the link's covered end are not cached for one link), on link
    // fast_key_, and with their own completion seen, of opcode fast_opcode_ (kNoOpcode: the latency cache is
    // another window's). Set by refresh_fast() whenever a cache changes.
    static constexpr uint16_t kNoOpcode = 0x100;
    int64_t fast_lo_ = 0, fast_hi_ = 0;
    uint64_t fast_key_ = 0;
    uint16_t fast_opcode_ = kNoOpcode;
    void refresh_fast();
    // The span the windows cover, in ns: most operations fall inside it (cover() grows it, inline otherwise).
    int64_t covered_lo_ = 0, covered_hi_ = -1;
    // Each QP's level since its latest sample (QPs with a series): held until the next sample, it is integrated
    // into the windows it spans, and raises the maxima of those without a sample of their own.
    struct Level {
        int64_t since = -1;   // no sample yet
        uint32_t wrs = 0;     // send queue: WRs; receive queue: the posted depth
        uint64_t bytes = 0;
        template <class Archive> void serialize(Archive& ar) { ar(since, wrs, bytes); }
    };
    std::vector<QpSeries> series_;   // by QpId, below max_qps
    int64_t latest_ts_ = 0;   // where the levels held at the end stop
public:
    // A QP's levels and the cell of its latest sample's window (kept per QP: the queues of one process
    // alternate). Cells keep their address until windows merge, which drops them.
    struct QpSeries {
        Level send, recv;
        int64_t window = -1;
        WindowQpCell* cell = nullptr;
        bool send_here = false;   // send's sample lies in `window` (cleared when the series enters another)
        template <class Archive> void serialize(Archive& ar) {   // the levels: the cell is the holder's
            ar(send, recv);
            window = -1;
            cell = nullptr;
            send_here = false;
        }
    };

private:
    // Holds `l` from its sample to `to`; `at_to` is the QP's cell of window `to_window`, the one holding `to`
    // (when known).
    void hold_send(QpId q, const Level& l, int64_t to, int64_t to_window, WindowQpCell* at_to);
    void hold_send_across(QpId q, const Level& l, int64_t to);   // over several windows
    // Adds send level `l` held for `ns` to cell `c`'s integrals (the means).
    static void integrate(WindowQpCell& c, const Level& l, int64_t ns) {
        c.wrs_ns += static_cast<double>(l.wrs) * static_cast<double>(ns);
        c.bytes_ns += static_cast<double>(l.bytes) * static_cast<double>(ns);
    }
    void hold_recv(QpId q, const Level& l, int64_t to);
};

// The per-sample path (outstanding.h samples at each post and completion instant), inline where it is called.

inline TimeWindows::QpSeries* TimeWindows::series_at(QpId q, int64_t ts) {
    if (ts < 0 || ts >= kMaxTs) return nullptr;
    QpSeries* s = series(q);
    if (s != nullptr && (s->cell == nullptr || index(ts) != s->window)) enter(*s, q, ts);
    return s;
}

inline void TimeWindows::hold_send(QpId q, const Level& l, int64_t to, int64_t to_window, WindowQpCell* at_to) {
    if (l.since < 0 || to <= l.since || (l.wrs == 0 && l.bytes == 0)) return;
    if (at_to != nullptr && index(l.since) == to_window) {   // the common case: both samples in one window
        integrate(*at_to, l, to - l.since);
        return;
    }
    hold_send_across(q, l, to);
}

[[gnu::always_inline]] inline bool TimeWindows::sample_send(QpSeries& s, QpId q, int64_t ts, uint32_t wrs, uint64_t bytes) {
    if (ts < 0 || ts >= kMaxTs) return false;
    // A window that holds the series' cell exists: only a sample in another window needs covering.
    if (s.cell == nullptr || index(ts) != s.window) [[unlikely]]
        enter(s, q, ts);
    WindowQpCell* c = s.cell;
    if (s.send_here) {   // the common case: the previous send sample is in this window too
        if (ts > s.send.since) integrate(*c, s.send, ts - s.send.since);
    } else {
        hold_send(q, s.send, ts, s.window, c);
    }
    s.send = {ts, wrs, bytes};
    s.send_here = true;
    if (ts > latest_ts_) latest_ts_ = ts;
    c->max_wrs = std::max(c->max_wrs, wrs);
    c->max_bytes = std::max(c->max_bytes, bytes);
    c->bytes.add(bytes);
    return true;
}

}  // namespace sigmatrace::analyzer
