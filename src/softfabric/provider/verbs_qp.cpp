// Queue pairs: creation (as verbs_qp with VERBS_QP_EX, so that ibv_qp_to_qp_ex() and the ibv_wr_* API work),
// the state machine, query and destruction. The transport lives in core/engine.h.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "core/clock.h"
#include "mlx5/frontend.h"
#include "provider/objects.h"
#include "provider/qp_state_machine.h"

namespace softfabric::provider {
namespace {

constexpr uint64_t kSupportedSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                       IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                                       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

ibv_qp* make_qp(ibv_context* ctx, ibv_pd* pd, ibv_qp_init_attr_ex* attr, DcRole dc = DcRole::None,
               uint64_t dc_key = 0) {
    const bool dc_ok = attr->qp_type == IBV_QPT_DRIVER && dc != DcRole::None;
    if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC && attr->qp_type != IBV_QPT_UD && !dc_ok) {
        errno = EOPNOTSUPP;
        return nullptr;
    }
    if (dc == DcRole::Target && !attr->srq) {  // a DCT receives into an SRQ only
        errno = EINVAL;
        return nullptr;
    }
    if (int err = allocation_refusal("MLX_QP_ALLOC_TYPE")) {
        errno = err;
        return nullptr;
    }
    if (dc == DcRole::Initiator) {  // a DCI has no receive side
        attr->srq = nullptr;
        attr->cap.max_recv_wr = 0;
        attr->cap.max_recv_sge = 0;
    }
    if (!attr->send_cq || !attr->recv_cq) {
        errno = EINVAL;
        return nullptr;
    }
    ibv_qp_cap& cap = attr->cap;
    if (cap.max_send_wr > engine::kMaxQueueDepth || cap.max_send_sge > engine::kMaxSge ||
        cap.max_inline_data > engine::kMaxInline ||
        (!attr->srq && (cap.max_recv_wr > engine::kMaxQueueDepth || cap.max_recv_sge > engine::kMaxSge))) {
        errno = EINVAL;
        return nullptr;
    }
    Runtime& rt = *context_of(ctx).rt;
    CqImpl& scq = cq_of(attr->send_cq);
    CqImpl& rcq = cq_of(attr->recv_cq);
    SrqImpl* srq = attr->srq ? &srq_of(attr->srq) : nullptr;

    engine::QueuePairConfig cfg;
    cfg.type = attr->qp_type;
    cfg.nic = context_of(ctx).nic;
    cfg.pd_id = pd_of(pd).id;
    cfg.sq_depth = std::max(cap.max_send_wr, 1u);
    cfg.max_send_sge = std::max(cap.max_send_sge, 1u);
    cfg.max_inline = cap.max_inline_data;
    cfg.rq_depth = srq || dc == DcRole::Initiator ? 0 : std::max(cap.max_recv_wr, 1u);
    cfg.max_recv_sge = std::max(cap.max_recv_sge, 1u);
    cfg.srq_offset = srq ? srq->offset : 0;
    cfg.recv_cq_offset = rcq.offset;
    cfg.send_cq = scq.shared;
    cfg.dc_role = dc;
    if (dc == DcRole::Target) cfg.sq_depth = 1;  // nothing is ever posted to a DCT

    QpImpl* impl = nullptr;
    try {
        impl = new QpImpl(rt, cfg);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "softfabric: %s\n", e.what());
        errno = ENOMEM;
        return nullptr;
    }
    auto* obj = new QpObject{};
    obj->impl = impl;
    impl->send_cq = &scq;
    impl->recv_cq = &rcq;
    impl->srq = srq;
    impl->send_ops_flags = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? attr->send_ops_flags : 0;
    impl->dc_role = dc;
    if (dc == DcRole::Target) impl->engine.shared().qkey.store(static_cast<uint32_t>(dc_key));
    // Report what was really allocated.
    cap.max_send_wr = impl->engine.sq_depth();
    cap.max_send_sge = cfg.max_send_sge;
    if (!srq && impl->engine.receive_ring()) {
        cap.max_recv_wr = impl->engine.receive_ring()->capacity;
        cap.max_recv_sge = impl->engine.receive_ring()->max_sge;
    }
    impl->cap = cap;
    impl->engine.transport().sq_sig_all = attr->sq_sig_all != 0;
    impl->attr.cap = cap;
    impl->attr.qp_state = IBV_QPS_RESET;
    impl->attr.path_mtu = IBV_MTU_4096;
    impl->attr.port_num = 1;

    {
        std::lock_guard lock(scq.poll_lock);
        scq.senders.push_back(&impl->engine);
        ++scq.attached_qps;
    }
    if (&rcq != &scq) {
        std::lock_guard lock(rcq.poll_lock);
        ++rcq.attached_qps;
    }
    if (srq) {
        std::lock_guard lock(srq->post_lock);
        ++srq->attached_qps;
    }

    ibv_qp& q = obj->vqp.qp;
    q.context = ctx;
    q.qp_context = attr->qp_context;
    q.pd = pd;
    q.send_cq = attr->send_cq;
    q.recv_cq = attr->recv_cq;
    q.srq = attr->srq;
    q.handle = impl->engine.qpn();
    q.qp_num = impl->engine.qpn();
    q.state = IBV_QPS_RESET;
    q.qp_type = attr->qp_type;
    pthread_mutex_init(&q.mutex, nullptr);
    pthread_cond_init(&q.cond, nullptr);
    q.events_completed = 0;
    // Every fabric QP is an extended QP: ibv_qp_to_qp_ex() works on it, and the ibv_wr_* API is available.
    obj->vqp.comp_mask = pabi::VERBS_QP_EX;
    obj->vqp.qp_ex.comp_mask = 0;
    install_qp_ex_ops(&obj->vqp.qp_ex);
    return &q;
}

}  // namespace

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
    ibv_qp_init_attr_ex ex{};
    ex.qp_context = attr->qp_context;
    ex.send_cq = attr->send_cq;
    ex.recv_cq = attr->recv_cq;
    ex.srq = attr->srq;
    ex.cap = attr->cap;
    ex.qp_type = attr->qp_type;
    ex.sq_sig_all = attr->sq_sig_all;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    ibv_qp* qp = make_qp(pd->context, pd, &ex);
    if (qp) attr->cap = ex.cap;
    return qp;
}

ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
    // CREATE_FLAGS is accepted with no flag set (rdma-core's tests pass it so; a real device does too); any flag
    // asks for something the fabric does not do.
    constexpr uint32_t kSupportedMask =
        IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || (attr->comp_mask & ~kSupportedMask) ||
        ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (attr->send_ops_flags & ~kSupportedSendOps)) ||
        ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags != 0)) {
        errno = EOPNOTSUPP;
        return nullptr;
    }
    return make_qp(ctx, attr->pd, attr);
}

ibv_qp* create_dc_qp(ibv_context* ctx, ibv_qp_init_attr_ex* attr, DcRole role, uint64_t access_key) {
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || role == DcRole::None) {
        errno = EINVAL;
        return nullptr;
    }
    return make_qp(ctx, attr->pd, attr, role, access_key);
}

int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
    QpImpl& q = qp_of(qp);
    engine::QueuePair& e = q.engine;
    ibv_qp_state cur = e.state();
    if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) return EINVAL;
    ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
    const bool dc = q.dc_role != DcRole::None;
    if (dc ? !dc_transition_ok(q.dc_role == DcRole::Initiator, cur, next, mask)
           : !transition_ok(qp->qp_type, cur, next, mask))
        return EINVAL;
    // Values the hardware would reject.
    if ((mask & IBV_QP_PORT) && attr->port_num != 1) return EINVAL;
    if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;
    if ((mask & IBV_QP_PATH_MTU) && (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096)) return EINVAL;
    if ((mask & IBV_QP_TIMEOUT) && attr->timeout > 31) return EINVAL;
    if ((mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7) return EINVAL;
    if ((mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7) return EINVAL;
    if ((mask & IBV_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31) return EINVAL;
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > 16) return EINVAL;
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > 16) return EINVAL;
    std::optional<NicId> dest;
    // A DC QP's address vector describes its own port's path only: each DCI WQE names its destination.
    if ((mask & IBV_QP_AV) && !dc) {
        dest = attr->ah_attr.is_global ? nic_from_gid(attr->ah_attr.grh.dgid) : nic_from_lid(attr->ah_attr.dlid);
        if (!dest) {
            std::fprintf(stderr, "softfabric: ibv_modify_qp: the address vector (dlid %u%s) names no fabric NIC\n",
                         attr->ah_attr.dlid, attr->ah_attr.is_global ? ", with GRH" : "");
            return EINVAL;
        }
    }

    SharedQp& s = e.shared();
    engine::TransportAttrs& t = e.transport();
    if (mask & IBV_QP_ACCESS_FLAGS) {
        s.access_flags.store(attr->qp_access_flags, std::memory_order_release);
        q.attr.qp_access_flags = attr->qp_access_flags;
    }
    if (mask & IBV_QP_QKEY) {
        s.qkey.store(attr->qkey, std::memory_order_release);
        q.attr.qkey = attr->qkey;
    }
    if (mask & IBV_QP_PKEY_INDEX) q.attr.pkey_index = attr->pkey_index;
    if (mask & IBV_QP_PORT) q.attr.port_num = attr->port_num;
    if ((mask & IBV_QP_AV) && dc) {
        t.sl = attr->ah_attr.sl;
        q.attr.ah_attr = attr->ah_attr;
    } else if (mask & IBV_QP_AV) {
        t.dest_nic = *dest;
        t.sl = attr->ah_attr.sl;
        t.has_grh = attr->ah_attr.is_global;
        t.dgid = attr->ah_attr.grh.dgid;
        s.remote_nic.store(dest->index());
        q.dest_known = true;
        q.attr.ah_attr = attr->ah_attr;
    }
    if (mask & IBV_QP_PATH_MTU) {
        t.path_mtu = 128u << attr->path_mtu;
        q.attr.path_mtu = attr->path_mtu;
    }
    if (mask & IBV_QP_DEST_QPN) {
        t.dest_qpn = attr->dest_qp_num;
        s.remote_qpn.store(attr->dest_qp_num);
        q.attr.dest_qp_num = attr->dest_qp_num;
    }
    if (mask & IBV_QP_RQ_PSN) q.attr.rq_psn = attr->rq_psn;
    if (mask & IBV_QP_SQ_PSN) q.attr.sq_psn = attr->sq_psn;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) q.attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) q.attr.max_rd_atomic = attr->max_rd_atomic;
    if (mask & IBV_QP_MIN_RNR_TIMER) {
        s.min_rnr_timer.store(attr->min_rnr_timer);
        q.attr.min_rnr_timer = attr->min_rnr_timer;
    }
    if (mask & IBV_QP_TIMEOUT) {
        t.timeout = attr->timeout;
        q.attr.timeout = attr->timeout;
    }
    if (mask & IBV_QP_RETRY_CNT) {
        t.retry_cnt = attr->retry_cnt;
        q.attr.retry_cnt = attr->retry_cnt;
    }
    if (mask & IBV_QP_RNR_RETRY) {
        t.rnr_retry = attr->rnr_retry;
        q.attr.rnr_retry = attr->rnr_retry;
    }
    if (qp->qp_type == IBV_QPT_UD && next == IBV_QPS_RTR) t.path_mtu = port_mtu_bytes(e.runtime());
    if (next != cur || (mask & IBV_QP_STATE)) {
        e.set_state(next);
        q.attr.qp_state = next;
        if (next == IBV_QPS_RESET) mlx5::reset_verbs_qp(qp);
    }
    return 0;
}

int query_qp(ibv_qp* qp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
    QpImpl& q = qp_of(qp);
    *attr = q.attr;
    attr->qp_state = q.engine.state();
    attr->cur_qp_state = attr->qp_state;
    attr->cap = q.cap;
    std::memset(init, 0, sizeof *init);
    init->qp_context = qp->qp_context;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->srq = qp->srq;
    init->cap = q.cap;
    init->qp_type = qp->qp_type;
    init->sq_sig_all = q.engine.transport().sq_sig_all;
    return 0;
}

int destroy_qp(ibv_qp* qp) {
    mlx5::forget_verbs_qp(qp);  // rings exported with mlx5dv_init_obj stop being driven first
    auto* obj = reinterpret_cast<QpObject*>(qp);
    QpImpl* q = obj->impl;
    {
        std::lock_guard lock(q->send_cq->poll_lock);
        auto& v = q->send_cq->senders;
        v.erase(std::remove(v.begin(), v.end(), &q->engine), v.end());
        --q->send_cq->attached_qps;
    }
    if (q->recv_cq != q->send_cq) {
        std::lock_guard lock(q->recv_cq->poll_lock);
        --q->recv_cq->attached_qps;
    }
    if (q->srq) {
        std::lock_guard lock(q->srq->post_lock);
        --q->srq->attached_qps;
    }
    delete q;
    pthread_mutex_destroy(&qp->mutex);
    pthread_cond_destroy(&qp->cond);
    delete obj;
    return 0;
}

int query_qp_data_in_order(ibv_qp*, enum ibv_wr_opcode, uint32_t) {
    // Operations on one QP are executed in order, each one's data complete when it becomes visible.
    return 1;
}

}  // namespace softfabric::provider
