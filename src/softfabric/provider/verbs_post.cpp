// The data path entry points: ibv_post_send, ibv_post_recv, ibv_post_srq_recv. They translate work requests
// into engine WQEs under the QP's send-queue lock (verbs allow posting from several threads) and progress the
// QP, which executes what is already due: posting never waits for the engine thread.
#include <cerrno>
#include <cstring>

#include "core/clock.h"
#include "provider/objects.h"

namespace softfabric::provider {
namespace {

bool opcode_allowed(ibv_qp_type type, ibv_wr_opcode op) {
    switch (op) {
        case IBV_WR_SEND:
        case IBV_WR_SEND_WITH_IMM: return true;
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM: return type != IBV_QPT_UD;
        case IBV_WR_RDMA_READ:
        case IBV_WR_ATOMIC_CMP_AND_SWP:
        case IBV_WR_ATOMIC_FETCH_AND_ADD: return type == IBV_QPT_RC;
        default: return false;  // memory windows, invalidation, TSO, atomic write: not implemented
    }
}

engine::Opcode engine_opcode(ibv_wr_opcode op) {
    switch (op) {
        case IBV_WR_SEND_WITH_IMM: return engine::Opcode::SendWithImm;
        case IBV_WR_RDMA_WRITE: return engine::Opcode::RdmaWrite;
        case IBV_WR_RDMA_WRITE_WITH_IMM: return engine::Opcode::RdmaWriteWithImm;
        case IBV_WR_RDMA_READ: return engine::Opcode::RdmaRead;
        case IBV_WR_ATOMIC_CMP_AND_SWP: return engine::Opcode::AtomicCmpSwp;
        case IBV_WR_ATOMIC_FETCH_AND_ADD: return engine::Opcode::AtomicFetchAdd;
        default: return engine::Opcode::Send;
    }
}

// Fills a reserved WQE from a work request; returns 0 or the errno post_send reports.
int fill(QpImpl& q, engine::Wqe* w, const ibv_send_wr* wr) {
    const ibv_qp_type type = q.engine.type();
    const auto& cfg = q.engine.config();
    if (!opcode_allowed(type, wr->opcode)) return EINVAL;
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > cfg.max_send_sge) return EINVAL;
    w->id = wr->wr_id;
    w->opcode = engine_opcode(wr->opcode);
    if (wr->send_flags & IBV_SEND_SIGNALED) w->flags |= engine::kSignaled;
    if (wr->send_flags & IBV_SEND_SOLICITED) w->flags |= engine::kSolicited;
    if (wr->send_flags & IBV_SEND_FENCE) w->flags |= engine::kFence;
    w->imm_data = wr->imm_data;
    switch (wr->opcode) {
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
        case IBV_WR_RDMA_READ:
            w->remote_addr = wr->wr.rdma.remote_addr;
            w->rkey = wr->wr.rdma.rkey;
            break;
        case IBV_WR_ATOMIC_CMP_AND_SWP:
        case IBV_WR_ATOMIC_FETCH_AND_ADD:
            if (wr->num_sge != 1 || wr->sg_list[0].length != 8) return EINVAL;
            w->remote_addr = wr->wr.atomic.remote_addr;
            w->rkey = wr->wr.atomic.rkey;
            w->compare_add = wr->wr.atomic.compare_add;
            w->swap = wr->wr.atomic.swap;
            break;
        default:
            break;
    }
    if (type == IBV_QPT_UD) {
        auto* ah = reinterpret_cast<AhObject*>(wr->wr.ud.ah);
        if (!ah || !ah->valid) return EINVAL;
        w->ud = ah->dest;
        w->ud.qpn = wr->wr.ud.remote_qpn;
        w->ud.qkey = wr->wr.ud.remote_qkey;
    } else if (!q.dest_known) {
        return EINVAL;
    }
    bool inline_data = (wr->send_flags & IBV_SEND_INLINE) && wr->opcode != IBV_WR_RDMA_READ &&
                       wr->opcode != IBV_WR_ATOMIC_CMP_AND_SWP && wr->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD;
    if (inline_data) {
        uint64_t total = 0;
        for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
        if (total > cfg.max_inline) return EINVAL;
        unsigned char* dst = w->inline_data(cfg.max_send_sge);
        for (int i = 0; i < wr->num_sge; ++i) {
            std::memcpy(dst, reinterpret_cast<const void*>(wr->sg_list[i].addr), wr->sg_list[i].length);
            dst += wr->sg_list[i].length;
        }
        w->flags |= engine::kInline;
        w->inline_length = static_cast<uint32_t>(total);
    } else {
        w->num_sge = static_cast<uint32_t>(wr->num_sge);
        for (int i = 0; i < wr->num_sge; ++i)
            w->sges()[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    }
    return 0;
}

}  // namespace

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    QpImpl& q = qp_of(qp);
    engine::QueuePair& e = q.engine;
    ibv_qp_state state = e.state();
    // As on hardware: sending needs RTS; a QP in ERROR accepts and flushes.
    if (state != IBV_QPS_RTS && state != IBV_QPS_ERR) {
        *bad_wr = wr;
        return EINVAL;
    }
    std::lock_guard lock(e.sq_lock());
    uint64_t now = now_ns();
    e.note_app_progress(now);
    e.progress(now);  // frees completed slots, executes what is due
    int err = 0;
    for (; wr; wr = wr->next) {
        engine::Wqe* w = e.reserve();
        if (!w) {
            err = ENOMEM;
            break;
        }
        err = fill(q, w, wr);
        if (err) {
            e.abort();
            break;
        }
        e.commit(now);
    }
    if (err) *bad_wr = wr;
    e.progress(now_ns());
    return err;
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    QpImpl& q = qp_of(qp);
    if (q.srq || q.engine.state() == IBV_QPS_RESET) {
        *bad_wr = wr;
        return EINVAL;
    }
    for (; wr; wr = wr->next) {
        if (wr->num_sge < 0) {
            *bad_wr = wr;
            return EINVAL;
        }
        int err = q.engine.post_receive(wr->wr_id, wr->sg_list, static_cast<uint32_t>(wr->num_sge));
        if (err) {
            *bad_wr = wr;
            return err;
        }
    }
    return 0;
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    SrqImpl& s = srq_of(srq);
    std::lock_guard lock(s.post_lock);
    for (; wr; wr = wr->next) {
        int err = wr->num_sge < 0 ? EINVAL
                                  : engine::post_to_ring(s.ring, wr->wr_id, wr->sg_list,
                                                         static_cast<uint32_t>(wr->num_sge));
        if (err) {
            *bad_wr = wr;
            return err;
        }
    }
    return 0;
}

}  // namespace softfabric::provider
