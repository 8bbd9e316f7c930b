// Outstanding work per queue pair (docs/analyzer.md, "Outstanding work"): the send queue's work requests and
// bytes posted and not yet completed, sampled at each post and each completion instant (max, and the p99 of
// the bytes over the samples), and the receive queue's posted depth (receives posted and not yet consumed: its max,
// and its min right after a consumption, the credit left), with the RNR events of the QP's sends.
//
// A queue completes in the order it was posted, and reconstruction hands over a queue's operations in that
// order: when an operation arrives, the earlier ones that completed before its post are gone from the queue
// (each leaves a completion sample), and it joins the rest (a post sample). A queue holds at most its depth of
// entries (bounded by kMaxTracked against corrupt times); nothing is allocated per operation once a queue has
// reached its depth. The same samples go to the time windows (time_windows.h), for the per-window series.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "analyzer/analyses/int_histogram.h"
#include "analyzer/analyses/fifo_ring.h"
#include "analyzer/analyses/model.h"
#include "analyzer/analyses/time_windows.h"

namespace sigmatrace::analyzer {

struct QpOutstanding {
    uint64_t send_ops = 0;        // send-queue operations seen
    uint32_t max_wrs = 0;
    uint64_t max_bytes = 0;
    IntHistogram bytes;           // samples of outstanding bytes (post and completion)
    uint64_t recv_ops = 0;        // receives consumed (or left posted)
    uint32_t recv_max_posted = 0;
    uint32_t recv_min_posted = 0; // after a consumption; meaningful when recv_consumed > 0
    uint64_t recv_consumed = 0;
    uint64_t rnr_events = 0;      // sends that failed with IBV_WC_RNR_RETRY_EXC_ERR
};

class Outstanding {
public:
    static constexpr std::size_t kMaxTracked = 1u << 16;

    // `windows`, when set, gets every sample too, at its time (each QP's series per window).
    explicit Outstanding(TimeWindows* windows = nullptr) : windows_(windows) {}

    [[gnu::always_inline]] void add(const Operation& op) {
        // The hot path, inline: a send on the previous operation's QP that did not fail for want of a receive.
        if (op.qp == last_qp_ && !op.is_recv() && op.wc_status != kWcRnrRetryExceeded) [[likely]] {
            add_send(op, *last_, last_series_);
            return;
        }
        add_slow(op);
    }
    // A run of completed sends of one QP, in post order (data_link.h, SendRun): add() for each, the QP found once.
    void add_run(std::span<const Operation> ops) {
        add(ops.front());
        const bool found = ops.front().qp == last_qp_;   // not for an operation without a QP
        for (const Operation& op : ops.subspan(1)) {
            if (found) add_send(op, *last_, last_series_);
            else add(op);
        }
    }
    // Completes what is still queued, and gathers each QP's samples from the windows (call once, at the end,
    // before the windows' finish).
    void finish();
    // QP q's queues and figures as `owner`, the share of the trace that read its data events, has them
    // (analysis.h, merge_share; the windows merge on their own). Before finish().
    void take(QpId q, const Outstanding& owner) {
        if (q >= owner.qps_.size()) return;
        if (q >= qps_.size()) qps_.resize(q + 1);
        qps_[q] = owner.qps_[q];
        last_qp_ = UINT64_MAX;   // qps_ may have moved
        last_ = nullptr;
        last_series_ = nullptr;
    }
    // nullptr when the QP had no operation.
    // A share in bytes (share_codec.cpp): what take() takes, each QP's queues and figures.
    template <class Archive> void serialize(Archive& ar) {
        ar(qps_);
        last_qp_ = UINT64_MAX;
        last_ = nullptr;
        last_series_ = nullptr;
    }
    const QpOutstanding* of(QpId q) const {
        return q < qps_.size() && (qps_[q].out.send_ops || qps_[q].out.recv_ops) ? &qps_[q].out : nullptr;
    }

private:
    struct Entry {
        int64_t done_ts;
        uint64_t bytes;
        template <class Archive> void serialize(Archive& ar) { ar(done_ts, bytes); }
    };
    // The outstanding work of one direction, oldest first, with its bytes.
    struct Queue {
        FifoRing<Entry> ring;
        uint64_t bytes = 0;
        std::size_t size() const { return ring.size(); }
        const Entry& front() const { return ring.front(); }
        void pop() {
            bytes -= ring.front().bytes;
            ring.pop_front();
        }
        void push(Entry e) {
            ring.push_back(e);
            bytes += e.bytes;
        }
    };
    struct State {
        Queue send, recv;
        QpOutstanding out;
        template <class Archive> void serialize(Archive& ar) {
            ar(send.ring, send.bytes, recv.ring, recv.bytes, out.send_ops, out.max_wrs, out.max_bytes, out.bytes,
               out.recv_ops, out.recv_max_posted, out.recv_min_posted, out.recv_consumed, out.rnr_events);
        }
    };
    // `series`: the QP's series in the windows (nullptr: none), taken once per operation.
    [[gnu::always_inline]] void sample_send(QpId q, State& s, TimeWindows::QpSeries* series, int64_t ts) {
        // A sample a window holds joins the QP's histogram at the end (finish), from the windows' cells.
        if (series == nullptr || !windows_->sample_send(*series, q, ts, static_cast<uint32_t>(s.send.size()), s.send.bytes))
            s.out.bytes.add(s.send.bytes);
    }
    [[gnu::always_inline]] void drain_until(QpId q, State& s, TimeWindows::QpSeries* series, int64_t ts) {
        while (s.send.size() > 0 && s.send.front().done_ts <= ts) {
            // WRs that completed at one instant (a signaled completion retires the unsignaled WRs before it)
            // leave one sample, the queue after them all: the levels in between never held for any time.
            const int64_t done = s.send.front().done_ts;
            do s.send.pop();
            while (s.send.size() > 0 && s.send.front().done_ts == done);
            sample_send(q, s, series, done);
        }
    }
    void drain_recv_until(QpId q, State& s, int64_t ts);
    [[gnu::always_inline]] void add_send(const Operation& op, State& s, TimeWindows::QpSeries* series) {
        ++s.out.send_ops;
        drain_until(op.qp, s, series, op.post_ts);
        if (s.send.size() >= kMaxTracked) s.send.pop();
        s.send.push({op.outcome == OpOutcome::InFlight ? INT64_MAX : op.done_ts, op.bytes});
        s.out.max_wrs = std::max(s.out.max_wrs, static_cast<uint32_t>(s.send.size()));
        s.out.max_bytes = std::max(s.out.max_bytes, s.send.bytes);
        sample_send(op.qp, s, series, op.post_ts);
    }
    void add_slow(const Operation& op);

    static constexpr uint8_t kWcRnrRetryExceeded = 13;   // IBV_WC_RNR_RETRY_EXC_ERR

    std::vector<State> qps_;
    TimeWindows* windows_;
    // The previous operation's QP (no QP until one is set: wider than QpId, so that no QpId matches), its state
    // and its series in the windows, for the inline path: set by add_slow(), the only place where qps_ and the
    // windows' series grow.
    uint64_t last_qp_ = UINT64_MAX;
    State* last_ = nullptr;
    TimeWindows::QpSeries* last_series_ = nullptr;
};

}  // namespace sigmatrace::analyzer
