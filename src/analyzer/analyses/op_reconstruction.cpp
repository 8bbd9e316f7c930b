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
constexpr uint8_t kMlx5CqeReqErr = 13;
constexpr uint8_t kMlx5CqeRespErr = 14;
constexpr uint8_t kMlx5CqeReq = 0;

// Queue models hold at most this many times the granted depth (and at least kMinQueueLimit) before the
// oldest entries are given up as lost: a real queue cannot hold more, so more means missed completions.
constexpr std::size_t kDepthFactor = 4;
constexpr std::size_t kMinQueueLimit = 4096;

std::size_t queue_limit(uint32_t depth) {
    return std::max<std::size_t>(kMinQueueLimit, kDepthFactor * static_cast<std::size_t>(depth));
}

constexpr int32_t kQpsReset = 0;            // enum ibv_qp_state
constexpr int32_t kQpsInit = 1;
constexpr int32_t kQpsErr = 6;

// A flush after the owner's own teardown of the QP is that teardown's, not an error.
OpOutcome outcome_of(uint8_t status, bool torn_down) {
    if (status == kWcSuccess) return OpOutcome::Completed;
    if (status != kWcFlushErr) return OpOutcome::Failed;
    return torn_down ? OpOutcome::FlushedAtTeardown : OpOutcome::Flushed;
}

// mlx5 CQE error syndromes (the PRM's table) to enum ibv_wc_status, as the verbs provider reports them.
uint8_t wc_status_from_syndrome(uint8_t syndrome) {
    switch (syndrome) {
    case 0x01: return 1;   // LOCAL_LENGTH_ERR -> LOC_LEN_ERR
    case 0x02: return 2;   // LOCAL_QP_OP_ERR
    case 0x04: return 4;   // LOCAL_PROT_ERR
    case 0x05: return 5;   // WR_FLUSH_ERR
    case 0x06: return 6;   // MW_BIND_ERR
    case 0x10: return 7;   // BAD_RESP_ERR
    case 0x11: return 8;   // LOCAL_ACCESS_ERR
    case 0x12: return 9;   // REMOTE_INVAL_REQ_ERR
    case 0x13: return 10;  // REMOTE_ACCESS_ERR
    case 0x14: return 11;  // REMOTE_OP_ERR
    case 0x15: return 12;  // TRANSPORT_RETRY_CNT_ERR -> RETRY_EXC_ERR
    case 0x16: return 13;  // RNR_RETRY_CNT_ERR
    case 0x22: return 16;  // ABORTED_ERR -> REM_ABORT_ERR
    default: return 21;    // GENERAL_ERR
    }
}

}  // namespace

void OpReconstruction::emit(ProcId p, QpId q, const PendingWr& wr, OpOutcome outcome, uint8_t status, int64_t done_ts,
                            bool implied, bool gpu, uint8_t opcode_override, uint64_t bytes_override) {
    Operation op;
    op.proc = p;
    op.qp = q;
    op.opcode = opcode_override ? opcode_override : wr.opcode;
    op.gpu = gpu;
    op.signaled = wr.signaled;
    op.implied = implied;
    op.outcome = outcome;
    op.wc_status = status;
    op.post_ts = wr.post_ts;
    op.done_ts = std::max(done_ts, wr.post_ts);
    op.bytes = bytes_override != UINT64_MAX ? bytes_override : wr.bytes;
    op.wr_id = wr.wr_id;
    op.raddr = wr.raddr;
    op.rkey = wr.rkey;
    const Qp& qp = topo_.qp(q);
    if (qp.type == kIbvQptUd && !op.is_recv()) {
        op.ud_ah = wr.ah;
        op.ud_qpn = wr.remote_qpn;
        op.peer = topo_.resolve_ud_peer(p, wr.ah, wr.remote_qpn);
    } else
        op.peer = topo_.resolve_peer(q);
    out_.on_operation(op);
}

void OpReconstruction::bound_queue(ProcId p, QpId q, std::deque<PendingWr>& queue, std::size_t limit, bool gpu_sq) {
    while (queue.size() > limit) {
        const PendingWr wr = queue.front();
        queue.pop_front();
        if (gpu_sq && !topo_.qp(q).gpu_cqe_seen) {
            // The ring wrapped: the GPU posted it and the watcher cannot see its CQE; it did move data.
            emit(p, q, wr, OpOutcome::Observed, 0, wr.post_ts, false, true);
        } else {
            ++topo_.anomalies().lost_wrs;
            emit(p, q, wr, OpOutcome::Lost, 0, wr.post_ts, false, gpu_sq);
        }
    }
}

QpId OpReconstruction::qp_for_post(ProcId p, uint64_t handle, uint32_t qpn) {
    QpId q = topo_.find_qp_by_handle(p, handle);
    if (q == kNoId) q = topo_.find_qp_for_completion(p, 0, qpn);
    if (q == kNoId) q = topo_.implicit_qp(p, handle, qpn, false);
    return q;
}

QpId OpReconstruction::qp_of_post(ProcId p, uint64_t handle, uint32_t qpn) {
    if (post_cache_.proc == p && post_cache_.key == handle && post_cache_.qpn == qpn) return post_cache_.qp;
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

void OpReconstruction::on_send(const DataElement& e, ProcId p) {
    const QpId q = qp_of_post(p, e.handle, e.qp_num);
    // On an error, *bad_wr and the WRs after it were not posted (all of them when bad_wr is unknown).
    if (e.rejected) {
        ++topo_.anomalies().post_errors;
        return;
    }
    Qp& qp = topo_.qp(q);
    PendingWr wr;
    wr.wr_id = e.wr_id;
    wr.post_ts = e.ts_ns;
    wr.opcode = e.opcode;
    wr.signaled = qp.sig_all || (e.send_flags & kIbvSendSignaled) != 0;
    wr.bytes = e.bytes;
    wr.raddr = e.raddr;
    wr.rkey = e.rkey;
    wr.remote_qpn = e.remote_qpn;
    wr.ah = e.ah;
    qp.sq.push_back(wr);
    bound_queue(p, q, qp.sq, queue_limit(qp.max_send_wr), false);
}

void OpReconstruction::on_recv(const DataElement& e, ProcId p) {
    const QpId q = qp_of_post(p, e.handle, e.qp_num);
    if (e.rejected) {
        ++topo_.anomalies().post_errors;
        return;
    }
    Qp& qp = topo_.qp(q);
    PendingWr wr;
    wr.wr_id = e.wr_id;
    wr.post_ts = e.ts_ns;
    wr.opcode = kOpRecv;
    wr.signaled = true;
    wr.bytes = e.bytes;
    qp.rq.push_back(wr);
    while (qp.rq.size() > queue_limit(qp.max_recv_wr)) {
        qp.rq.pop_front();
        ++topo_.anomalies().lost_wrs;
    }
}

void OpReconstruction::on_srq_recv(const DataElement& e, ProcId p) {
    if (e.rejected) {
        ++topo_.anomalies().post_errors;
        return;
    }
    Process& pr = topo_.proc(p);
    auto& queue = pr.srq_pending[e.handle];
    PendingWr wr;
    wr.wr_id = e.wr_id;
    wr.post_ts = e.ts_ns;
    wr.opcode = kOpRecv;
    wr.signaled = true;
    wr.bytes = e.bytes;
    queue.push_back(wr);
    auto depth = pr.srq_depth.find(e.handle);
    const std::size_t limit = queue_limit(depth == pr.srq_depth.end() ? 0 : depth->second);
    while (queue.size() > limit) {
        queue.pop_front();
        ++topo_.anomalies().lost_wrs;
    }
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
    for (std::size_t i = 0; i < j; ++i) emit(p, q, sq[i], OpOutcome::Completed, kWcSuccess, ts, true, false);
    emit(p, q, sq[j], outcome_of(status, topo_.qp(q).torn_down), status, ts, false, false);
    sq.erase(sq.begin(), sq.begin() + static_cast<std::ptrdiff_t>(j + 1));
    return true;
}

bool OpReconstruction::complete_recv(ProcId p, QpId q, uint64_t wr_id, uint8_t status, uint8_t wc_opcode,
                                     uint32_t byte_len, int64_t ts) {
    Qp& qp = topo_.qp(q);
    std::deque<PendingWr>* queue = &qp.rq;
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
        emit(p, q, (*queue)[i], outcome_of(status, qp.torn_down), status, ts, false, false, opcode,
             status == kWcSuccess ? byte_len : 0);
        queue->erase(queue->begin() + static_cast<std::ptrdiff_t>(i));
        return true;
    }
    return false;
}

void OpReconstruction::on_completion(const DataElement& e, ProcId p) {
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
    if (e.status != kWcSuccess)  // the opcode of an error completion is undefined: try both queues
        matched = complete_send(p, q, e.wr_id, e.status, e.ts_ns) || complete_recv(p, q, e.wr_id, e.status, kOpRecv, e.bytes, e.ts_ns);
    else if (e.opcode >= kOpRecv)
        matched = complete_recv(p, q, e.wr_id, e.status, e.opcode, e.bytes, e.ts_ns);
    else
        matched = complete_send(p, q, e.wr_id, e.status, e.ts_ns);
    if (!matched) ++topo_.anomalies().unmatched_completions;
}

void OpReconstruction::on_gpu_wqe(const DecodedEvent& ev, ProcId p) {
    bool malformed = false;
    const uint32_t n = ev.batch_size(F::gpu_wqe::n, malformed);
    if (malformed) ++topo_.anomalies().malformed_events;
    const auto qpn = static_cast<uint32_t>(ev.u(F::gpu_wqe::qpn));
    QpId q = topo_.find_gpu_qp(p, qpn);
    if (q == kNoId) q = topo_.implicit_qp(p, 0, qpn, true);
    Qp& qp = topo_.qp(q);
    for (uint32_t k = 0; k < n; ++k) {
        const int op = wr_opcode_from_mlx5(static_cast<uint8_t>(ev.at(F::gpu_wqe::opcode, k)));
        if (op < 0) continue;  // NOP, DUMP, UMR...: move no data, complete nothing the application asked for
        PendingWr wr;
        wr.wqe_index = static_cast<uint16_t>(ev.at(F::gpu_wqe::wqe_index, k));
        wr.wr_id = wr.wqe_index;
        wr.post_ts = ev.ts_ns;
        wr.opcode = static_cast<uint8_t>(op);
        wr.signaled = (ev.at(F::gpu_wqe::fm_ce_se, k) & 0x08) != 0;
        wr.bytes = static_cast<uint32_t>(ev.at(F::gpu_wqe::bytes, k));
        wr.raddr = ev.at(F::gpu_wqe::raddr, k);
        wr.rkey = static_cast<uint32_t>(ev.at(F::gpu_wqe::rkey, k));
        qp.sq.push_back(wr);
    }
    // A ring of sq_wqebb basic blocks holds at most that many WQEs: older ones were overwritten.
    bound_queue(p, q, qp.sq, std::max<std::size_t>(qp.max_send_wr, 64), true);
}

void OpReconstruction::on_gpu_cqe(const DecodedEvent& ev, ProcId p) {
    bool malformed = false;
    const uint32_t n = ev.batch_size(F::gpu_cqe::n, malformed);
    if (malformed) ++topo_.anomalies().malformed_events;
    for (uint32_t k = 0; k < n; ++k) {
        const auto cqe_opcode = static_cast<uint8_t>(ev.at(F::gpu_cqe::opcode, k));
        // Responder CQEs (receives on GPU queues) complete nothing the watcher decoded.
        if (cqe_opcode != kMlx5CqeReq && cqe_opcode != kMlx5CqeReqErr && cqe_opcode != kMlx5CqeRespErr) continue;
        const QpId q = topo_.find_gpu_qp(p, static_cast<uint32_t>(ev.at(F::gpu_cqe::qpn, k)));
        if (q == kNoId) {
            ++topo_.anomalies().unmatched_completions;
            continue;
        }
        Qp& qp = topo_.qp(q);
        qp.gpu_cqe_seen = true;
        const auto counter = static_cast<uint16_t>(ev.at(F::gpu_cqe::wqe_counter, k));
        const uint8_t status =
            cqe_opcode == kMlx5CqeReq ? kWcSuccess
                                      : wc_status_from_syndrome(static_cast<uint8_t>(ev.at(F::gpu_cqe::syndrome, k)));
        auto& sq = qp.sq;
        std::size_t j = sq.size();
        for (std::size_t i = 0; i < sq.size(); ++i)
            if (sq[i].wqe_index == counter) {
                j = i;
                break;
            }
        if (j == sq.size()) {
            ++topo_.anomalies().unmatched_completions;
            continue;
        }
        for (std::size_t i = 0; i < j; ++i) emit(p, q, sq[i], OpOutcome::Completed, kWcSuccess, ev.ts_ns, true, true);
        emit(p, q, sq[j], outcome_of(status, qp.torn_down), status, ev.ts_ns, false, true);
        sq.erase(sq.begin(), sq.begin() + static_cast<std::ptrdiff_t>(j + 1));
    }
}

void OpReconstruction::on_qp_state(QpId q, int32_t state) {
    Qp& qp = topo_.qp(q);
    if (state == kQpsErr) {
        qp.torn_down = true;
    } else if (state == kQpsReset) {
        drain_qp(q, true);
        qp.torn_down = true;
    } else if (state == kQpsInit) {
        qp.torn_down = false;
    }
}

void OpReconstruction::drain_qp(QpId q, bool teardown) {
    Qp& qp = topo_.qp(q);
    const bool ended_by_owner = teardown || qp.torn_down;
    for (const PendingWr& wr : qp.sq) {
        const OpOutcome o = qp.gpu && !qp.gpu_cqe_seen ? OpOutcome::Observed
                            : ended_by_owner           ? OpOutcome::Unconfirmed
                                                       : OpOutcome::InFlight;
        emit(qp.proc, q, wr, o, 0, wr.post_ts, false, qp.gpu);
    }
    qp.sq.clear();
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
