// Completion queues: a ring in this process's arena (shared_objects.h) that the local send engine and remote
// senders push into; poll_cq also progresses the send queues that complete here, so a polling application
// drives its own operations without waiting for the engine thread.
#include <bit>
#include <cerrno>
#include <cstdio>
#include <new>

#include "core/clock.h"
#include "core/fabric_objects.h"
#include "provider/command_channel.h"
#include "mlx5/frontend.h"
#include "provider/objects.h"

namespace softfabric::provider {
namespace {

constexpr uint64_t kSupportedWcFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                                       IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                                       IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                       IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

CqObject* make_cq(ibv_context* ctx, int cqe, ibv_comp_channel* channel, uint32_t comp_vector) {
    // A completion vector names one of the context's event queues (num_comp_vectors of them, as the kernel checks).
    if (cqe < 1 || cqe > (1 << 22) - 1 || comp_vector >= static_cast<uint32_t>(ctx->num_comp_vectors)) {
        errno = EINVAL;
        return nullptr;
    }
    if (int err = allocation_refusal("MLX_CQ_ALLOC_TYPE")) {
        errno = err;
        return nullptr;
    }
    ensure_sigpipe_handler();
    int event_fd = -1;
    if (channel) {
        event_fd = channel_event_fd(channel->fd);
        if (event_fd < 0) {
            std::fprintf(stderr, "softfabric: ibv_create_cq: completion channel fd %d was not created on a fabric "
                                 "device\n", channel->fd);
            errno = EINVAL;
            return nullptr;
        }
    }
    Runtime& rt = *context_of(ctx).rt;
    auto impl = std::make_unique<CqImpl>();
    auto obj = std::make_unique<CqObject>();
    ArenaBlock block = create_shared_cq(rt, static_cast<uint32_t>(cqe), event_fd,
                                        reinterpret_cast<uint64_t>(&obj->vcq.cq));
    if (!block.offset) {
        errno = ENOMEM;
        return nullptr;
    }
    impl->rt = &rt;
    impl->offset = block.offset;
    impl->bytes = block.bytes;
    SharedCq* s = rt.arena().at<SharedCq>(block.offset);
    impl->shared = s;
    impl->has_channel = channel != nullptr;
    if (channel) rt.add_event_cq(s);
    obj->impl = impl.release();
    obj->vcq.cq.cqe = static_cast<int>(s->capacity - 1);
    return obj.release();
}

// ---- extended CQ: one completion at a time, read through the ibv_wc_read_* pointers
CqImpl& ex(ibv_cq_ex* cq) { return cq_of(cq); }

int load_next(ibv_cq_ex* cq) {
    CqImpl& c = ex(cq);
    if (c.shared->pop(1, &c.current, &c.current_ts) != 1) return ENOENT;
    cq->wr_id = c.current.wr_id;
    cq->status = c.current.status;
    return 0;
}

int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr*) {
    CqImpl& c = ex(cq);
    c.poll_lock.lock();
    uint64_t now = now_ns();
    for (engine::QueuePair* qp : c.senders) {
        qp->note_app_progress(now);
        if (qp->next_due() > now) continue;
        std::unique_lock sq(qp->sq_lock(), std::try_to_lock);
        if (sq.owns_lock()) qp->progress(now);
    }
    int err = load_next(cq);
    if (err) c.poll_lock.unlock();  // ENOENT: no poll is in progress, end_poll must not be called
    return err;
}
int next_poll(ibv_cq_ex* cq) { return load_next(cq); }
void end_poll(ibv_cq_ex* cq) { ex(cq).poll_lock.unlock(); }
ibv_wc_opcode read_opcode(ibv_cq_ex* cq) { return ex(cq).current.opcode; }
uint32_t read_vendor_err(ibv_cq_ex* cq) { return ex(cq).current.vendor_err; }
uint32_t read_byte_len(ibv_cq_ex* cq) { return ex(cq).current.byte_len; }
__be32 read_imm_data(ibv_cq_ex* cq) { return ex(cq).current.imm_data; }
uint32_t read_qp_num(ibv_cq_ex* cq) { return ex(cq).current.qp_num; }
uint32_t read_src_qp(ibv_cq_ex* cq) { return ex(cq).current.src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* cq) { return ex(cq).current.wc_flags; }
uint32_t read_slid(ibv_cq_ex* cq) { return ex(cq).current.slid; }
uint8_t read_sl(ibv_cq_ex* cq) { return ex(cq).current.sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex* cq) { return ex(cq).current.dlid_path_bits; }
uint64_t read_completion_ts(ibv_cq_ex* cq) { return ex(cq).current_ts; }
uint64_t read_completion_wallclock_ns(ibv_cq_ex* cq) {
    // CQE timestamps are CLOCK_MONOTONIC; convert with the current offset to CLOCK_REALTIME.
    timespec rt{}, mono{};
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    int64_t offset = (static_cast<int64_t>(rt.tv_sec) - mono.tv_sec) * 1'000'000'000ll + (rt.tv_nsec - mono.tv_nsec);
    return static_cast<uint64_t>(static_cast<int64_t>(ex(cq).current_ts) + offset);
}

}  // namespace

void install_cq_ex_ops(ibv_cq_ex* cq, uint64_t wc_flags) {
    cq->start_poll = start_poll;
    cq->next_poll = next_poll;
    cq->end_poll = end_poll;
    cq->read_opcode = read_opcode;
    cq->read_vendor_err = read_vendor_err;
    cq->read_wc_flags = read_wc_flags;
    // As on hardware, a reader exists only for what was asked for at creation.
    if (wc_flags & IBV_WC_EX_WITH_BYTE_LEN) cq->read_byte_len = read_byte_len;
    if (wc_flags & IBV_WC_EX_WITH_IMM) cq->read_imm_data = read_imm_data;
    if (wc_flags & IBV_WC_EX_WITH_QP_NUM) cq->read_qp_num = read_qp_num;
    if (wc_flags & IBV_WC_EX_WITH_SRC_QP) cq->read_src_qp = read_src_qp;
    if (wc_flags & IBV_WC_EX_WITH_SLID) cq->read_slid = read_slid;
    if (wc_flags & IBV_WC_EX_WITH_SL) cq->read_sl = read_sl;
    if (wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS) cq->read_dlid_path_bits = read_dlid_path_bits;
    if (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) cq->read_completion_ts = read_completion_ts;
    if (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
        cq->read_completion_wallclock_ns = read_completion_wallclock_ns;
}

ibv_cq* create_cq(ibv_context* ctx, int cqe, ibv_comp_channel* channel, int comp_vector) {
    CqObject* obj = make_cq(ctx, cqe, channel, static_cast<uint32_t>(comp_vector));
    return obj ? &obj->vcq.cq : nullptr;
}

ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
    if ((attr->wc_flags & ~kSupportedWcFlags) || (attr->comp_mask & ~uint32_t{IBV_CQ_INIT_ATTR_MASK_FLAGS})) {
        errno = EOPNOTSUPP;
        return nullptr;
    }
    CqObject* obj = make_cq(ctx, static_cast<int>(attr->cqe), attr->channel, attr->comp_vector);
    if (!obj) return nullptr;
    install_cq_ex_ops(&obj->vcq.cq_ex, attr->wc_flags);
    return &obj->vcq.cq_ex;
}

int destroy_cq(ibv_cq* cq) {
    CqImpl* c = &cq_of(cq);
    {
        std::lock_guard lock(c->poll_lock);
        if (c->attached_qps > 0) return EBUSY;
    }
    mlx5::forget_verbs_cq(cq);  // a CQE ring exported with mlx5dv_init_obj goes with it
    if (c->has_channel) c->rt->remove_event_cq(c->shared);
    c->rt->arena().release(c->offset, c->bytes);
    delete reinterpret_cast<CqObject*>(cq);
    delete c;
    return 0;
}

int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
    CqImpl& c = cq_of(cq);
    std::lock_guard lock(c.poll_lock);
    uint64_t now = now_ns();
    for (engine::QueuePair* qp : c.senders) {
        qp->note_app_progress(now);
        if (qp->next_due() > now) continue;
        std::unique_lock sq(qp->sq_lock(), std::try_to_lock);
        if (sq.owns_lock()) qp->progress(now);
    }
    int got = c.shared->pop(n, wc);
    if (got == 0 && c.shared->overflow.load(std::memory_order_acquire)) {
        static bool reported = false;
        if (!reported) {
            reported = true;
            std::fprintf(stderr, "softfabric: CQ overrun: a completion was dropped because the CQ (%d entries) "
                                 "was full; create it larger\n", cq->cqe);
        }
        return -1;
    }
    return got;
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
    cq_of(cq).shared->armed.store(solicited_only ? 2 : 1, std::memory_order_release);
    return 0;
}

void cq_event(ibv_cq*) {}

int resize_cq(ibv_cq*, int) {
    // Refused with what libibverbs answers for a provider without resize: a CQ's ring is addressed by its arena
    // offset from every process that completes into it, so it cannot be reallocated under them.
    return EOPNOTSUPP;
}

}  // namespace softfabric::provider
