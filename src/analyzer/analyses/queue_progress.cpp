#include "analyzer/analyses/queue_progress.h"

#include <sigmatrace/opcodes.h>

#include <algorithm>

namespace sigmatrace::analyzer {

QpProgress& QueueProgress::at(QpId q) {
    if (q >= qps_.size()) {
        qps_.resize(q + 1);
        procs_.resize(q + 1, kNoId);
        used_.resize(q + 1, false);
        last_qp_ = UINT64_MAX;   // qps_ moved
    }
    used_[q] = true;
    return qps_[q];
}

void QueueProgress::take(QpId q, const QueueProgress& owner) {
    if (const QpProgress* p = owner.of(q)) {
        at(q) = *p;
        procs_[q] = owner.procs_[q];
    } else if (q < used_.size()) {
        qps_[q] = QpProgress{};
        procs_[q] = kNoId;
        used_[q] = false;
    }
}

void QueueProgress::note_state(QpProgress& p, int32_t state, int64_t ts, QpStateChange::Source source) {
    // A query confirming the known state, or a second error completion of a QP in ERR, says nothing new. The first
    // error completion is kept after a query that said ERR: it is the cause, read by the watcher after the owner's
    // query when the owner polled first.
    if (!p.states.empty() && p.states.back().state == state &&
        (source == QpStateChange::Source::query_qp ||
         (source == QpStateChange::Source::error_completion && p.states.back().source == source)))
        return;
    if (p.states.size() < kMaxStates) p.states.push_back({ts, state, source});
}

void QueueProgress::add(const Operation& op) {
    if (op.is_recv() || op.qp == kNoId) return;
    if (op.qp != last_qp_) {
        last_ = &at(op.qp);
        procs_[op.qp] = op.proc;   // a QP's process never changes
        last_qp_ = op.qp;
    }
    QpProgress& p = *last_;
    ++p.posted;
    auto unacknowledged = [&] {
        if (!p.first_unacknowledged) p.first_unacknowledged = op;
        ++p.unacknowledged;
    };
    switch (op.outcome) {
    case OpOutcome::Completed:
        ++p.completed;
        // Progress: what was not acknowledged before it was (a queue completes in order).
        p.last_completed = op;
        p.first_unacknowledged.reset();
        p.unacknowledged = 0;
        p.stuck = 0;
        p.first_flush_ts = -1;
        break;
    case OpOutcome::Failed:
        ++p.failed;
        p.last_error = op;
        unacknowledged();
        ++p.stuck;
        // An RC QP that completes with an error goes to ERR (the verbs specification).
        note_state(p, ibv_qps::ERR, op.done_ts, QpStateChange::Source::error_completion);
        break;
    case OpOutcome::Flushed:
        ++p.flushed;
        if (p.first_flush_ts < 0) p.first_flush_ts = op.done_ts;
        unacknowledged();
        break;
    case OpOutcome::InFlight:
        ++p.in_flight;
        unacknowledged();
        ++p.stuck;
        break;
    default: ++p.other; break;
    }
}

void QueueProgress::add_run(std::span<const Operation> ops) {
    // A run that completed whole (a signaled completion and the unsignaled WRs before it) leaves what its last
    // operation leaves, with its count: each success resets what the ones before it set.
    const Operation& last = ops.back();
    if (last.outcome == OpOutcome::Completed &&
        std::all_of(ops.begin(), ops.end() - 1, [](const Operation& o) { return o.outcome == OpOutcome::Completed; })) {
        add(last);
        if (last.is_recv() || last.qp == kNoId) return;
        last_->posted += ops.size() - 1;
        last_->completed += ops.size() - 1;
        return;
    }
    for (const Operation& op : ops) add(op);
}

void QueueProgress::on_owner_state(QpId q, int32_t state, int64_t ts) {
    QpProgress& p = at(q);
    note_state(p, state, ts, QpStateChange::Source::modify_qp);
    if (state == ibv_qps::RESET || state == ibv_qps::ERR) p.owner_teardown_ts = ts;
}

void QueueProgress::on_owner_destroy(QpId q, int64_t ts) { at(q).owner_teardown_ts = ts; }

void QueueProgress::on_query(QpId q, const NicQuery& n) {
    QpProgress& p = at(q);
    p.nic = n;
    if (n.state >= 0) note_state(p, n.state, n.ts, QpStateChange::Source::query_qp);
}

std::vector<StalledQueue> QueueProgress::stalled(int64_t end_ts, int64_t stall_ns) const {
    std::vector<StalledQueue> out;
    for (QpId q = 0; q < qps_.size(); ++q) {
        const QpProgress& p = qps_[q];
        if (!used_[q] || p.stuck == 0 || !p.first_unacknowledged) continue;
        int64_t since = p.first_unacknowledged->post_ts;
        if (p.last_completed) since = std::max(since, p.last_completed->done_ts);
        // Its owner reset, moved to ERR or destroyed it after the work stopped: the stall, if any, ended there
        // (an error handled at once is none; a hung job killed later, whose exit destroyed the QP, was one).
        const int64_t until = p.owner_teardown_ts >= since ? p.owner_teardown_ts : end_ts;
        if (until - since < stall_ns) continue;
        out.push_back({q, since, until - since, until != end_ts});
    }
    return out;
}

std::vector<QpId> QueueProgress::flushed_companions(QpId q, ProcId proc) const {
    std::vector<QpId> out;
    for (QpId o = 0; o < qps_.size(); ++o)
        if (o != q && used_[o] && procs_[o] == proc && qps_[o].first_flush_ts >= 0) out.push_back(o);
    return out;
}

}  // namespace sigmatrace::analyzer
