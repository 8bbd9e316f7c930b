// Shared receive queues: a receive ring in this process's arena that senders to any of its QPs consume.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <new>

#include "core/fabric_objects.h"
#include "mlx5/frontend.h"
#include "provider/objects.h"

namespace softfabric::provider {
namespace {

ibv_srq* make_srq(ibv_context* ctx, ibv_srq_attr& attr) {
    if (attr.max_wr > engine::kMaxQueueDepth || attr.max_sge > engine::kMaxSge) {
        errno = EINVAL;
        return nullptr;
    }
    if (int err = allocation_refusal("MLX_SRQ_ALLOC_TYPE")) {
        errno = err;
        return nullptr;
    }
    // As on a ConnectX, no minimum: an SRQ asked for 0 entries or 0 scatter entries gets the smallest ring.
    attr.max_wr = std::max(attr.max_wr, 1u);
    attr.max_sge = std::max(attr.max_sge, 1u);
    Runtime& rt = *context_of(ctx).rt;
    auto impl = std::make_unique<SrqImpl>();
    ArenaBlock block = create_recv_ring(rt, attr.max_wr, attr.max_sge);
    if (!block.offset) {
        errno = ENOMEM;
        return nullptr;
    }
    impl->rt = &rt;
    impl->offset = block.offset;
    impl->bytes = block.bytes;
    impl->ring = rt.arena().at<RecvRing>(block.offset);
    impl->ring->limit.store(attr.srq_limit);
    impl->max_wr = impl->ring->capacity;
    impl->max_sge = impl->ring->max_sge;
    attr.max_wr = impl->max_wr;
    attr.max_sge = impl->max_sge;
    auto* obj = new SrqObject{};
    obj->impl = impl.release();
    obj->ibv.handle = static_cast<uint32_t>(obj->impl->offset >> 6);
    return &obj->ibv;
}

}  // namespace

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) { return make_srq(pd->context, attr->attr); }

ibv_srq* create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* attr) {
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
                                                      attr->srq_type != IBV_SRQT_BASIC)) {
        errno = EOPNOTSUPP;
        return nullptr;
    }
    ibv_srq* srq = make_srq(ctx, attr->attr);
    if (srq) {
        // ibv_create_srq_ex does not fill these for the provider.
        srq->context = ctx;
        srq->srq_context = attr->srq_context;
        srq->pd = attr->pd;
        srq->events_completed = 0;
        pthread_mutex_init(&srq->mutex, nullptr);
        pthread_cond_init(&srq->cond, nullptr);
    }
    return srq;
}

int modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
    SrqImpl& s = srq_of(srq);
    if (mask & IBV_SRQ_MAX_WR) {
        if (attr->max_wr > s.max_wr) return EINVAL;  // the ring cannot grow in place
    }
    if (mask & IBV_SRQ_LIMIT) {
        if (attr->srq_limit > s.max_wr) return EINVAL;
        s.ring->limit.store(attr->srq_limit);
    }
    return 0;
}

int query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
    SrqImpl& s = srq_of(srq);
    attr->max_wr = s.max_wr;
    attr->max_sge = s.max_sge;
    attr->srq_limit = s.ring->limit.load();
    return 0;
}

int destroy_srq(ibv_srq* srq) {
    SrqImpl* s = &srq_of(srq);
    {
        std::lock_guard lock(s->post_lock);
        if (s->attached_qps > 0) return EBUSY;
    }
    mlx5::forget_verbs_srq(srq);  // a WQE ring exported with mlx5dv_init_obj stops being read first
    s->rt->arena().release(s->offset, s->bytes);
    delete reinterpret_cast<SrqObject*>(srq);
    delete s;
    return 0;
}

}  // namespace softfabric::provider
