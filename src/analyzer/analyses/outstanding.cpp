#include "analyzer/analyses/outstanding.h"

#include <algorithm>

namespace sigmatrace::analyzer {

void Outstanding::drain_recv_until(QpId q, State& s, int64_t ts) {
    while (s.recv.size() > 0 && s.recv.front().done_ts <= ts) {
        const int64_t done = s.recv.front().done_ts;
        s.recv.pop();
        const auto left = static_cast<uint32_t>(s.recv.size());
        s.out.recv_min_posted = s.out.recv_consumed == 0 ? left : std::min(s.out.recv_min_posted, left);
        ++s.out.recv_consumed;
        if (windows_ != nullptr) windows_->sample_recv(q, done, left, true);
    }
}

void Outstanding::add_slow(const Operation& op) {
    if (op.qp == kNoId) return;
    if (op.qp >= qps_.size()) qps_.resize(op.qp + 1);
    State& s = qps_[op.qp];
    TimeWindows::QpSeries* series = windows_ != nullptr ? windows_->series(op.qp) : nullptr;
    last_qp_ = op.qp;
    last_ = &s;
    last_series_ = series;
    if (op.is_recv()) {
        ++s.out.recv_ops;
        drain_recv_until(op.qp, s, op.post_ts);
        if (s.recv.size() >= kMaxTracked) s.recv.pop();
        // A receive never consumed stays posted to the end.
        s.recv.push({op.outcome == OpOutcome::InFlight ? INT64_MAX : op.done_ts, 0});
        s.out.recv_max_posted = std::max(s.out.recv_max_posted, static_cast<uint32_t>(s.recv.size()));
        if (windows_ != nullptr) windows_->sample_recv(op.qp, op.post_ts, static_cast<uint32_t>(s.recv.size()), false);
        return;
    }
    if (op.wc_status == kWcRnrRetryExceeded) {
        ++s.out.rnr_events;
        if (windows_ != nullptr) windows_->rnr(op.qp, op.done_ts);
    }
    add_send(op, s, series);
}

void Outstanding::finish() {
    for (QpId q = 0; q < qps_.size(); ++q) {
        drain_until(q, qps_[q], windows_ != nullptr ? windows_->series(q) : nullptr, INT64_MAX);
        drain_recv_until(q, qps_[q], INT64_MAX - 1);   // the last consumptions; receives never consumed are none
    }
    if (windows_ == nullptr) return;
    for (const Window& w : windows_->windows())
        for (const auto& [q, cell] : w.qps)
            if (q < qps_.size()) qps_[q].out.bytes.merge(cell.bytes);
}

}  // namespace sigmatrace::analyzer
