#include "analyzer/analyses/op_reconstruction.h"

#include <sigmatrace/opcodes.h>

#include <algorithm>

namespace sigmatrace::analyzer {

namespace F = fields;

namespace {

constexpr uint32_t kIbvSendSignaled = 2;   // IBV_SEND_SIGNALED
constexpr uint8_t kWcSuccess = 0;
constexpr uint8_t kWcFlushErr = 5;         // IBV_WC_WR_FLUSH_ERR
constexpr uint32_t kIbvQptUd = 4;          // IBV_QPT_UD

// Queue models hold at most this many times the granted depth (and at least kMinQueueLimit) before the
// oldest entries are given up as lost: a real queue cannot hold more, so more means missed completions.
constexpr std::size_t kDepthFactor = 4;
constexpr std::size_t kMinQueueLimit = 4096;

std::size_t queue_limit(uint32_t depth) {
    return std::max<std::size_t>(kMinQueueLimit, kDepthFactor * static_cast<std::size_t>(depth));
}

// A flush after the owner's own teardown of the QP is that teardown's, not an error.
OpOutcome outcome_of(uint8_t status, bool torn_down) {
    if (status == kWcSuccess) return OpOutcome::Completed;
    if (status != kWcFlushErr) return OpOutcome::Failed;
    return torn_down ? OpOutcome::FlushedAtTeardown : OpOutcome::Flushed;
}

}  // namespace

inline void OpReconstruction::fill_from_wr(Operation& op, const PendingWr& wr, int64_t done_ts, uint8_t opcode_override,
                                           uint64_t bytes_override) {
    op.opcode = opcode_override ? opcode_override : wr.opcode;
    op.poster = wr.poster;
    op.signaled = wr.signaled;
    op.post_ts = wr.post_ts;
    op.done_ts = std::max(done_ts, wr.post_ts);
    op.bytes = bytes_override != UINT64_MAX ? bytes_override : wr.bytes;
    op.wr_id = wr.wr_id;
    op.raddr = wr.raddr;
    op.rkey = wr.rkey;
}

inline bool OpReconstruction::make_op(Operation& op, ProcId p, QpId q, const PendingWr& wr, OpOutcome outcome,
                                      uint8_t status, int64_t done_ts, bool implied, uint8_t opcode_override,
                                      uint64_t bytes_override) {
    if (wr.opcode == records::kNoWrOpcode && opcode_override == 0) return false;
    op = Operation{};
    op.proc = p;
    op.qp = q;
    fill_from_wr(op, wr, done_ts, opcode_override, bytes_override);
    op.implied = implied;
    op.outcome = outcome;
    op.wc_status = status;
    if (status != kWcSuccess && !implied) {
        op.vendor_err = applying_vendor_err_;
        op.cqe_from_ring = applying_ring_cqe_;
    }
    const Qp& qp = topo_.qp(q);
    if (wr.av != kNoId && !op.is_recv()) {
        // A UD or DC WQE decoded from its ring: its address vector names the destination.
        op.ud_qpn = wr.remote_qpn;
        op.av = wr.av;
        op.peer = topo_.resolve_av_peer(wr.av, wr.remote_qpn);
    } else if (qp.type == kIbvQptUd && !op.is_recv()) {
        op.ud_ah = wr.ah;
        op.ud_qpn = wr.remote_qpn;
        op.peer = topo_.resolve_ud_peer(p, wr.ah, wr.remote_qpn);
    } else
        op.peer = topo_.resolve_peer(q);
    return true;
}

void OpReconstruction::emit(ProcId p, QpId q, const PendingWr& wr, OpOutcome outcome, uint8_t status, int64_t done_ts,
                            bool implied, uint8_t opcode_override, uint64_t bytes_override) {
    Operation op;
    if (make_op(op, p, q, wr, outcome, status, done_ts, implied, opcode_override, bytes_override)) out_.on_operation(op);
}

void OpReconstruction::retire_through(ProcId p, QpId q, std::size_t j, uint8_t status, int64_t ts) {
    Qp& qp = topo_.qp(q);
    auto& sq = qp.sq;
    if (j == 0) {
        // A completion of its own WR only (every WR signaled): no run to build.
        forget_pending(qp, sq[0]);
        Operation op;
        const bool moves = make_op(op, p, q, sq[0], outcome_of(status, qp.torn_down), status, ts, false);
        sq.pop_front();
        if (moves) out_.on_operations(std::span<const Operation>(&op, 1));
        return;
    }
    if (run_.size() < j + 1) run_.resize(j + 1);
    std::size_t n = 0;
    retire_implied(p, q, j, ts, n);
    forget_pending(qp, sq[j]);
    n += make_op(run_[n], p, q, sq[j], outcome_of(status, qp.torn_down), status, ts, false);
    sq.drop_front(j + 1);
    if (n > 0) out_.on_operations(std::span<const Operation>(run_.data(), n));
}

void OpReconstruction::retire_implied(ProcId p, QpId q, std::size_t j, int64_t ts, std::size_t& n) {
    Qp& qp = topo_.qp(q);
    // The implied operations share everything but their WR's own fields: one template, copied. A connected QP's
    // peer is the same for all (make_op's last branch), resolved once.
    Operation implied;
    implied.proc = p;
    implied.qp = q;
    implied.implied = true;
    implied.outcome = OpOutcome::Completed;
    implied.wc_status = kWcSuccess;
    const bool connected = qp.type != kIbvQptUd;
    // forget_pending() only lowers counts above zero: a QP seen one way only (both zero) has nothing to forget.
    const bool unpaired = qp.verbs_unindexed > 0 || qp.ring_unclaimed > 0;
    bool have_peer = false;
    for (std::size_t i = 0; i < j; ++i) {
        const PendingWr& wr = qp.sq[i];
        if (unpaired) forget_pending(qp, wr);
        if (wr.av != kNoId || !connected) {
            n += make_op(run_[n], p, q, wr, OpOutcome::Completed, kWcSuccess, ts, true);
            continue;
        }
        if (wr.opcode == records::kNoWrOpcode) continue;
        if (!have_peer) {
            implied.peer = topo_.resolve_peer(q);
            have_peer = true;
        }
        Operation& op = run_[n++];
        op = implied;
        fill_from_wr(op, wr, ts);
    }
}

void OpReconstruction::drop_beyond(ProcId p, QpId q, FifoRing<PendingWr>& queue, std::size_t limit, bool gpu_sq) {
    while (queue.size() > limit) {
        const PendingWr wr = queue.front();
        queue.pop_front();
        forget_pending(topo_.qp(q), wr);
        if (gpu_sq && wr.indexed && !topo_.qp(q).gpu_cqe_seen) {
            // The ring wrapped: it was posted there and the watcher cannot see its CQE; it did move data.
            emit(p, q, wr, OpOutcome::Observed, 0, wr.post_ts, false);
        } else {
            ++topo_.anomalies().lost_wrs;
            emit(p, q, wr, OpOutcome::Lost, 0, wr.post_ts, false);
        }
    }
}

void OpReconstruction::forget_pending(Qp& qp, const PendingWr& wr) {
    if (wr.from_verbs && !wr.indexed && qp.verbs_unindexed > 0) --qp.verbs_unindexed;
    if (!wr.from_verbs && wr.indexed && qp.ring_unclaimed > 0) --qp.ring_unclaimed;
}

// The same WR seen by the verbs wrappers and in the ring: the same operation, posted in the same order, so it is
// the oldest waiting WR of the other view with the same opcode, length, remote address and key; a ring view is
// never older than the verbs call that wrote it (capture times: the verbs post's is taken before the call).
std::size_t OpReconstruction::same_wr(const Qp& qp, const PendingWr& wr, bool want_verbs) const {
    for (std::size_t i = 0; i < qp.sq.size(); ++i) {
        const PendingWr& o = qp.sq[i];
        if (want_verbs ? !(o.from_verbs && !o.indexed) : !(o.indexed && !o.from_verbs && o.post_ts >= wr.post_ts)) continue;
        if (o.opcode == wr.opcode && o.bytes == wr.bytes && o.raddr == wr.raddr && o.rkey == wr.rkey) return i;
    }
    return qp.sq.size();
}

QpId OpReconstruction::qp_for_post(ProcId p, uint64_t handle, uint32_t qpn) {
    QpId q = topo_.find_qp_by_handle(p, handle);
    if (q == kNoId) q = topo_.find_qp_for_completion(p, 0, qpn);
    if (q == kNoId) q = topo_.implicit_qp(p, handle, qpn, false);
    return q;
}

QpId OpReconstruction::qp_of_post_slow(ProcId p, uint64_t handle, uint32_t qpn) {
    const QpId q = qp_for_post(p, handle, qpn);
    post_cache_ = Cached{p, handle, qpn, q};
    return q;
}

void OpReconstruction::on_element(const DataElement& e, ProcId p) {
    switch (e.kind) {
    case ElementKind::send: on_send(e, p); return;
    case ElementKind::recv: on_recv(e, p); return;
    case ElementKind::srq_recv: on_srq_recv(e, p); return;
    case ElementKind::completion: on_completion(e, p); return;
    }
}

void OpReconstruction::on_elements(std::span<const DataElement> es, ProcId p) {
    for (std::size_t i = 0; i < es.size();) {
        // Two verbs posts to one QP at least: a lone one goes the usual way, at no extra cost.
        if (i + 1 < es.size() && es[i].kind == ElementKind::send && !es[i].ring && es[i + 1].kind == ElementKind::send &&
            es[i + 1].handle == es[i].handle)
            if (const std::size_t n = on_verbs_sends(es.subspan(i), p); n > 0) {
                i += n;
                continue;
            }
        on_element(es[i], p);
        ++i;
    }
}

[[gnu::always_inline]] inline void OpReconstruction::pending_of_post(const DataElement& e, const Qp& qp,
                                                                     PendingWr& wr) {
    wr = PendingWr{};
    wr.wr_id = e.wr_id;
    wr.post_ts = e.ts_ns;
    wr.opcode = e.opcode;
    wr.signaled = qp.sig_all || (e.send_flags & kIbvSendSignaled) != 0;
    wr.bytes = e.bytes;
    wr.raddr = e.raddr;
    wr.rkey = e.rkey;
    if (e.extra_index != DataElement::kNoExtra) [[unlikely]] {
        wr.remote_qpn = e.extra().remote_qpn;
        wr.ah = e.extra().ah;
    }
    wr.from_verbs = true;
}

std::size_t OpReconstruction::on_verbs_sends(std::span<const DataElement> es, ProcId p) {
    const DataElement& first = es.front();
    const QpId q = qp_of_post(p, first.handle, first.qp_num);
    Qp& qp = topo_.qp(q);
    if (qp.gpu) return 0;
    const std::size_t limit = queue_limit(qp.max_send_wr);
    std::size_t k = 0;
    for (; k < es.size(); ++k) {
        const DataElement& e = es[k];
        if (e.kind != ElementKind::send || e.ring || e.handle != first.handle || e.qp_num != first.qp_num) break;
        // What on_send() does for a QP whose ring is not watched.
        if (e.rejected) {
            ++topo_.anomalies().post_errors;
            continue;
        }
        pending_of_post(e, qp, qp.sq.emplace_back());
        bound_queue(p, q, qp.sq, limit, false);
    }
    return k;
}

void OpReconstruction::on_send(const DataElement& e, ProcId p) {
    if (e.ring) {
        on_ring_send(e, p);
        return;
    }
    const QpId q = qp_of_post(p, e.handle, e.qp_num);
    // On an error, *bad_wr and the WRs after it were not posted (all of them when bad_wr is unknown).
    if (e.rejected) {
        ++topo_.anomalies().post_errors;
        return;
    }
    Qp& qp = topo_.qp(q);
    PendingWr wr;
    pending_of_post(e, qp, wr);
    if (qp.gpu) {
        // A watched QP: the ring may show this WR too (before this element, when the watcher read it first).
        if (qp.ring_unclaimed > 0) {
            const std::size_t i = same_wr(qp, wr, false);
            if (i < qp.sq.size()) {
                PendingWr& seen = qp.sq[i];
                --qp.ring_unclaimed;
                seen.from_verbs = true;
                seen.poster = records::Poster::verbs;
                seen.wr_id = e.wr_id;
                seen.post_ts = std::min(seen.post_ts, e.ts_ns);
                seen.signaled = seen.signaled || wr.signaled;
                seen.ah = e.extra().ah;
                qp.both_views = true;
                return;
            }
        }
        ++qp.verbs_unindexed;
    }
    qp.sq.push_back(wr);
    bound_queue(p, q, qp.sq, queue_limit(qp.max_send_wr), false);
}

QpId OpReconstruction::qp_of_ring(ProcId p, uint64_t handle, uint32_t qpn) {
    QpId q = topo_.find_gpu_qp(p, qpn);
    if (q == kNoId && handle != 0) q = topo_.find_qp_by_handle(p, handle);
    // A record read in the queue's final sweep, ordered after its destroy (traces of earlier versions).
    if (q == kNoId) q = topo_.find_gpu_qp_or_gone(p, qpn);
    if (q == kNoId) q = topo_.implicit_qp(p, 0, qpn, true);
    return q;
}

void OpReconstruction::on_ring_send(const DataElement& e, ProcId p) {
    const QpId q = qp_of_ring(p, e.handle, e.qp_num);
    Qp& qp = topo_.qp(q);
    qp.poster = e.poster;
    PendingWr wr;
    wr.wqe_index = static_cast<uint16_t>(e.wr_id);
    wr.indexed = true;
    wr.wr_id = e.wr_id;
    wr.post_ts = e.ts_ns;
    wr.opcode = e.opcode;
    wr.poster = e.poster;
    wr.signaled = (e.send_flags & records::kRingSignaled) != 0;
    wr.bytes = e.bytes;
    wr.raddr = e.raddr;
    wr.rkey = e.rkey;
    const ElementExtra& x = e.extra();
    wr.remote_qpn = x.remote_qpn;
    if (x.remote_qpn != 0 || x.dlid != 0 || x.dgid_prefix != 0 || x.dgid_iid != 0)
        wr.av = topo_.intern_av(x.dlid, Gid{x.dgid_prefix, x.dgid_iid});
    if (qp.verbs_unindexed > 0) {
        // The ring shows a WR the application posted through verbs: one operation, the verbs post's.
        const std::size_t i = same_wr(qp, wr, true);
        if (i < qp.sq.size()) {
            PendingWr& posted = qp.sq[i];
            --qp.verbs_unindexed;
            posted.indexed = true;
            posted.wqe_index = wr.wqe_index;
            posted.signaled = posted.signaled || wr.signaled;
            qp.both_views = true;
            return;
        }
    }
    ++qp.ring_unclaimed;
    qp.sq.push_back(wr);
    // A ring of sq_wqebb basic blocks holds at most that many WQEs: older ones were overwritten.
    bound_queue(p, q, qp.sq, std::max<std::size_t>(qp.max_send_wr, 64), true);
}

void OpReconstruction::post_recv(FifoRing<PendingWr>& queue, const DataElement& e, std::size_t limit) {
    PendingWr wr;
    wr.wr_id = e.wr_id;
    wr.post_ts = e.ts_ns;
    wr.opcode = kOpRecv;
    wr.signaled = true;
    wr.bytes = e.bytes;
    queue.push_back(wr);
    while (queue.size() > limit) {
        queue.pop_front();
        ++topo_.anomalies().lost_wrs;
    }
}

void OpReconstruction::on_recv(const DataElement& e, ProcId p) {
    const QpId q = qp_of_post(p, e.handle, e.qp_num);
    if (e.rejected) {
        ++topo_.anomalies().post_errors;
        return;
    }
    Qp& qp = topo_.qp(q);
    post_recv(qp.rq, e, queue_limit(qp.max_recv_wr));
}

void OpReconstruction::on_srq_recv(const DataElement& e, ProcId p) {
    if (e.rejected) {
        ++topo_.anomalies().post_errors;
        return;
    }
    Process& pr = topo_.proc(p);
    auto depth = pr.srq_depth.find(e.handle);
    post_recv(pr.srq_pending[e.handle], e, queue_limit(depth == pr.srq_depth.end() ? 0 : depth->second));
}

bool OpReconstruction::complete_send(ProcId p, QpId q, uint64_t wr_id, uint8_t status, int64_t ts) {
    auto& sq = topo_.qp(q).sq;
    std::size_t j = sq.size();
    for (std::size_t i = 0; i < sq.size(); ++i) {
        if (sq[i].wr_id == wr_id && (sq[i].signaled || status != kWcSuccess)) {
            j = i;
            break;
        }
    }
    if (j == sq.size() && status == kWcSuccess) {
        // A success completion for a WR posted unsignaled: the tracer and the provider disagree on signaling
        // (sq_sig_all set another way); trust the completion.
        for (std::size_t i = 0; i < sq.size(); ++i)
            if (sq[i].wr_id == wr_id) {
                j = i;
                break;
            }
    }
    if (j == sq.size()) return false;
    retire_through(p, q, j, status, ts);
    return true;
}

bool OpReconstruction::complete_recv(ProcId p, QpId q, uint64_t wr_id, uint8_t status, uint8_t wc_opcode,
                                     uint32_t byte_len, int64_t ts) {
    Qp& qp = topo_.qp(q);
    FifoRing<PendingWr>* queue = &qp.rq;
    if (qp.srq != 0) {
        auto& m = topo_.proc(p).srq_pending;
        auto it = m.find(qp.srq);
        if (it == m.end()) return false;
        queue = &it->second;
    }
    for (std::size_t i = 0; i < queue->size(); ++i) {
        if ((*queue)[i].wr_id != wr_id) continue;
        const uint8_t opcode = wc_opcode == kOpRecvRdmaWithImm ? kOpRecvRdmaWithImm : kOpRecv;
        // A receive's size is what arrived (byte_len), not the buffer posted; unknown on errors.
        emit(p, q, (*queue)[i], outcome_of(status, qp.torn_down), status, ts, false, opcode,
             status == kWcSuccess ? byte_len : 0);
        queue->erase(i);
        return true;
    }
    return false;
}

void OpReconstruction::on_ring_completion(const DataElement& e, ProcId p) {
    // Responder CQEs (receives on watched queues) complete nothing the watcher decoded.
    if (e.status == kWcSuccess && e.opcode >= kOpRecv) return;
    // A CQ outlives its QPs: its final sweep can read a completion of a QP already destroyed.
    const QpId q = topo_.find_gpu_qp_or_gone(p, e.qp_num);
    if (q == kNoId) {
        ++topo_.anomalies().unmatched_completions;
        return;
    }
    Qp& qp = topo_.qp(q);
    qp.gpu_cqe_seen = true;
    applying_vendor_err_ = e.extra().vendor_err;
    applying_ring_cqe_ = true;
    const auto counter = static_cast<uint16_t>(e.wr_id);
    auto& sq = qp.sq;
    std::size_t j = sq.size();
    for (std::size_t i = 0; i < sq.size(); ++i)
        if (sq[i].indexed && sq[i].wqe_index == counter) {
            j = i;
            break;
        }
    if (j == sq.size()) {
        // Seen both ways: the verbs poll retired it already.
        if (!qp.both_views) ++topo_.anomalies().unmatched_completions;
        return;
    }
    retire_through(p, q, j, e.status, e.ts_ns);
}

void OpReconstruction::on_completion(const DataElement& e, ProcId p) {
    if (e.ring) {
        on_ring_completion(e, p);
        return;
    }
    QpId q;
    if (completion_cache_.proc == p && completion_cache_.key == e.handle && completion_cache_.qpn == e.qp_num) {
        q = completion_cache_.qp;
    } else {
        q = topo_.find_qp_for_completion(p, e.handle, e.qp_num);
        // Not a miss: a later post may adopt an unknown QP of that number (implicit_qp).
        if (q != kNoId) completion_cache_ = Cached{p, e.handle, e.qp_num, q};
    }
    if (q == kNoId) {
        ++topo_.anomalies().unmatched_completions;
        return;
    }
    bool matched;
    applying_vendor_err_ = e.extra().vendor_err;
    applying_ring_cqe_ = false;
    if (e.status != kWcSuccess)  // the opcode of an error completion is undefined: try both queues
        matched = complete_send(p, q, e.wr_id, e.status, e.ts_ns) || complete_recv(p, q, e.wr_id, e.status, kOpRecv, e.bytes, e.ts_ns);
    else if (e.opcode >= kOpRecv)
        matched = complete_recv(p, q, e.wr_id, e.status, e.opcode, e.bytes, e.ts_ns);
    else
        matched = complete_send(p, q, e.wr_id, e.status, e.ts_ns);
    // On a QP seen both ways, the ring's CQE may have retired the WR first.
    if (!matched && !topo_.qp(q).both_views) ++topo_.anomalies().unmatched_completions;
}

void OpReconstruction::on_qp_state(QpId q, int32_t state) {
    Qp& qp = topo_.qp(q);
    if (state == ibv_qps::ERR) {
        qp.torn_down = true;
    } else if (state == ibv_qps::RESET) {
        drain_qp(q, true);
        qp.torn_down = true;
    } else if (state == ibv_qps::INIT) {
        qp.torn_down = false;
    }
}

void OpReconstruction::drain_qp(QpId q, bool teardown) {
    Qp& qp = topo_.qp(q);
    const bool ended_by_owner = teardown || qp.torn_down;
    qp.sq.for_each([&](const PendingWr& wr) {
        const OpOutcome o = wr.indexed && !qp.gpu_cqe_seen ? OpOutcome::Observed
                            : ended_by_owner               ? OpOutcome::Unconfirmed
                                                           : OpOutcome::InFlight;
        emit(qp.proc, q, wr, o, 0, wr.post_ts, false);
    });
    qp.sq.clear();
    qp.verbs_unindexed = qp.ring_unclaimed = 0;
    unconsumed_receives_ += qp.rq.size();
    qp.rq.clear();
}

void OpReconstruction::drain_process(ProcId p) {
    for (QpId q = 0; q < topo_.qp_count(); ++q)
        if (topo_.qp(q).proc == p) drain_qp(q, false);
    for (auto& [srq, queue] : topo_.proc(p).srq_pending) {
        unconsumed_receives_ += queue.size();
        queue.clear();
    }
}

void OpReconstruction::finish() {
    for (QpId q = 0; q < topo_.qp_count(); ++q) drain_qp(q, false);
    for (ProcId p = 0; p < topo_.process_count(); ++p)
        for (auto& [srq, queue] : topo_.proc(p).srq_pending) {
            unconsumed_receives_ += queue.size();
            queue.clear();
        }
}

}  // namespace sigmatrace::analyzer
