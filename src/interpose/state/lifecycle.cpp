#include "interpose/state/lifecycle.h"

#include <endian.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "interpose/runtime/activation.h"
#include "interpose/runtime/config.h"
#include "interpose/datapath/context_ops.h"
#include "interpose/capture/counters_emitter.h"
#include "interpose/datapath/cq_ex_wrappers.h"
#include "interpose/capture/deferred_capture.h"
#include "interpose/hooks/gpumem_hooks.h"
#include "interpose/state/object_state.h"
#include "interpose/state/process_identity.h"
#include "interpose/datapath/qp_ex_wrappers.h"
#include "interpose/runtime/real_symbol.h"
#include "provider/trace.h"

namespace sigmatrace::interpose {
namespace {

// GIDs looked at per port for port_info: RoCE tables hold up to 256 entries, almost all empty; the ones in
// use sit at the start.
constexpr int kMaxGidsPerPort = 16;

// ------------------------------------------------------------------ the libibverbs queries we need

int real_query_device(ibv_context* ctx, ibv_device_attr* attr) {
    static RealFunction<int (*)(ibv_context*, ibv_device_attr*)> fn{"ibv_query_device", "IBVERBS_1.1",
                                                                      WrappedLibrary::ibverbs};
    auto f = fn.get();
    return f != nullptr ? f(ctx, attr) : ENOSYS;
}

int real_query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
    // What the inline ibv_query_port does: the extended entry point when the provider has one (it fills the
    // whole structure), else the exported compatibility function (which fills the older prefix of it).
    std::memset(attr, 0, sizeof *attr);
    if (verbs_context* v = extended_context(ctx, offsetof(verbs_context, query_port)); v != nullptr && v->query_port)
        return v->query_port(ctx, port, attr, sizeof *attr);
    static RealFunction<int (*)(ibv_context*, uint8_t, ibv_port_attr*)> fn{"ibv_query_port", "IBVERBS_1.1",
                                                                             WrappedLibrary::ibverbs};
    auto f = fn.get();
    return f != nullptr ? f(ctx, port, attr) : ENOSYS;
}

int real_query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
    static RealFunction<int (*)(ibv_context*, uint8_t, int, ibv_gid*)> fn{"ibv_query_gid", "IBVERBS_1.1",
                                                                            WrappedLibrary::ibverbs};
    auto f = fn.get();
    return f != nullptr ? f(ctx, port, index, gid) : ENOSYS;
}

ibv_qp_ex* real_qp_to_qp_ex(ibv_qp* qp) {
    static RealFunction<ibv_qp_ex* (*)(ibv_qp*)> fn{"ibv_qp_to_qp_ex", "IBVERBS_1.6", WrappedLibrary::ibverbs};
    auto f = fn.get();
    return f != nullptr ? f(qp) : nullptr;
}

constexpr VerbsQueries kRealQueries{&real_query_device, &real_query_port, &real_query_gid, &real_qp_to_qp_ex};
std::atomic<const VerbsQueries*> g_queries{&kRealQueries};

const VerbsQueries& queries() {
    return *g_queries.load(std::memory_order_acquire);
}

// ------------------------------------------------------------------ helpers

// Contexts the tracer has seen (and wrapped). Under the registry mutex.
std::unordered_set<const ibv_context*>& known_contexts() {
    static auto* s = new std::unordered_set<const ibv_context*>();
    return *s;
}

// SIGMATRACE_DEBUG=1: one line per decision, "sigmatrace: <what> context=<ptr> device=<name>".
void debug(const char* what, const void* ctx, const char* device) {
    if (!config().debug) return;
    char msg[256];
    const int n = std::snprintf(msg, sizeof msg, "sigmatrace: %s context=%p device=%s\n", what, ctx, device);
    if (n > 0) {
        ssize_t ignored = ::write(STDERR_FILENO, msg, static_cast<size_t>(n));
        (void)ignored;
    }
}

void gid_halves(const ibv_gid& gid, uint64_t* prefix, uint64_t* iid) {
    uint64_t a, b;
    std::memcpy(&a, gid.raw, 8);
    std::memcpy(&b, gid.raw + 8, 8);
    *prefix = be64toh(a);
    *iid = be64toh(b);
}

bool gid_is_zero(const ibv_gid& gid) {
    for (uint8_t byte : gid.raw)
        if (byte != 0) return false;
    return true;
}

uint32_t redact_key(uint32_t key) {
    return (config().redact & kRedactKeys) ? 0 : key;
}
uint64_t redact_address(uint64_t addr) {
    return (config().redact & kRedactAddresses) ? 0 : addr;
}

void emit_device(ibv_context* ctx, OpenVia via) {
    if (!ST_TRACE_ENABLED(device_open) && !ST_TRACE_ENABLED(port_info)) return;
    const VerbsQueries& q = queries();
    ibv_device_attr attr{};
    const bool have_attr = q.query_device(ctx, &attr) == 0;
    st_device_open_rec d{};
    d.ctx = reinterpret_cast<uint64_t>(ctx);
    d.device = ctx->device != nullptr ? ctx->device->name : "";
    d.node_guid = have_attr ? be64toh(attr.node_guid) : 0;
    d.vendor_id = have_attr ? attr.vendor_id : 0;
    d.vendor_part_id = have_attr ? attr.vendor_part_id : 0;
    d.phys_port_cnt = have_attr ? attr.phys_port_cnt : 0;
    d.via = static_cast<uint32_t>(via);
    ST_TRACE(device_open, &d);
    if (!have_attr) return;
    for (uint32_t port = 1; port <= attr.phys_port_cnt; ++port) {
        ibv_port_attr pa{};
        if (q.query_port(ctx, static_cast<uint8_t>(port), &pa) != 0) continue;
        const int gids = pa.gid_tbl_len < kMaxGidsPerPort ? pa.gid_tbl_len : kMaxGidsPerPort;
        for (int index = 0; index < (gids > 0 ? gids : 1); ++index) {
            ibv_gid gid{};
            const bool have_gid = gids > 0 && q.query_gid(ctx, static_cast<uint8_t>(port), index, &gid) == 0;
            // Every port reports at least index 0 (its LID and state), then each GID in use.
            if (index > 0 && (!have_gid || gid_is_zero(gid))) continue;
            st_port_info_rec p{};
            p.ctx = reinterpret_cast<uint64_t>(ctx);
            p.port = port;
            p.gid_index = static_cast<uint32_t>(index);
            if (have_gid) gid_halves(gid, &p.gid_prefix, &p.gid_iid);
            p.lid = pa.lid;
            p.state = pa.state;
            p.link_layer = pa.link_layer;
            p.active_mtu = pa.active_mtu;
            ST_TRACE(port_info, &p);
        }
    }
}

// Registers ctx and wraps its entry points; returns false when it was already known. Under the mutex.
bool adopt_context_locked(ibv_context* ctx) {
    if (!known_contexts().insert(ctx).second) return false;
    switch (wrap_context_entry_points(ctx)) {
    case WrapResult::wrapped: debug("wrapped", ctx, ctx->device ? ctx->device->name : "?"); break;
    case WrapResult::already_wrapped: break;
    case WrapResult::no_slot_left: {
        char msg[200];
        const int n = std::snprintf(msg, sizeof msg,
                                    "sigmatrace: context %p uses a %dth distinct provider table; its posts and "
                                    "polls are NOT traced (raise kProviderSlots)\n",
                                    static_cast<void*>(ctx), kProviderSlots + 1);
        if (n > 0) {
            ssize_t ignored = ::write(STDERR_FILENO, msg, static_cast<size_t>(n));
            (void)ignored;
        }
        break;
    }
    }
    return true;
}

bool tracing_off() {
    return config().mode == Mode::off;
}

template <typename Attr> void emit_qp_create(ibv_context* ctx, ibv_qp* qp, const Attr* attr, CreateKind kind, int err) {
    st_qp_create_rec r{};
    r.ctx = reinterpret_cast<uint64_t>(ctx);
    r.qp = reinterpret_cast<uint64_t>(qp);
    r.qp_num = qp != nullptr ? qp->qp_num : 0;
    r.qp_type = qp != nullptr ? qp->qp_type : (attr != nullptr ? attr->qp_type : 0);
    if (attr != nullptr) {
        r.send_cq = reinterpret_cast<uint64_t>(attr->send_cq);
        r.recv_cq = reinterpret_cast<uint64_t>(attr->recv_cq);
        r.srq = reinterpret_cast<uint64_t>(attr->srq);
        r.max_send_wr = attr->cap.max_send_wr;
        r.max_recv_wr = attr->cap.max_recv_wr;
        r.max_inline_data = attr->cap.max_inline_data;
        r.sq_sig_all = attr->sq_sig_all != 0;
    }
    r.kind = static_cast<uint32_t>(kind);
    r.err = err;
    ST_TRACE(qp_create, &r);
}

QpState* register_qp_locked(ibv_context* ctx, ibv_qp* qp) {
    QpState* s = Registry::instance().add_qp(qp, ctx, qp->qp_num, qp->qp_type);
    counters_note_qp_added(*s);
    return s;
}

}  // namespace

// ------------------------------------------------------------------ contexts

void on_context_opened(ibv_context* ctx, OpenVia via) {
    activate_tracing();
    if (ctx == nullptr || tracing_off()) return;
    {
        std::lock_guard<std::mutex> lock(Registry::instance().mutex());
        if (!adopt_context_locked(ctx)) return;
    }
    emit_device(ctx, via);
}

void ensure_context_known(ibv_context* ctx) {
    if (ctx == nullptr || tracing_off()) return;
    activate_tracing();
    {
        std::lock_guard<std::mutex> lock(Registry::instance().mutex());
        if (!adopt_context_locked(ctx)) return;
    }
    debug("wrapped a context opened through an unhooked path", ctx, ctx->device ? ctx->device->name : "?");
    emit_device(ctx, OpenVia::discovered);
}

void on_context_closed(ibv_context* ctx, int ret) {
    if (ctx == nullptr || tracing_off()) return;
    if (ret == 0) {
        std::lock_guard<std::mutex> lock(Registry::instance().mutex());
        known_contexts().erase(ctx);
    }
    st_device_close_rec r{};
    r.ctx = reinterpret_cast<uint64_t>(ctx);
    r.err = ret;
    ST_TRACE(device_close, &r);
}

// ------------------------------------------------------------------ queue pairs

void on_qp_created(ibv_context* ctx, ibv_qp* qp, const ibv_qp_init_attr* attr, CreateKind kind, int err) {
    activate_tracing();
    if (tracing_off()) return;
    ensure_context_known(ctx);
    if (qp != nullptr) {
        std::lock_guard<std::mutex> lock(Registry::instance().mutex());
        register_qp_locked(ctx, qp);
    }
    emit_qp_create(ctx, qp, attr, kind, err);
}

void on_qp_created_ex(ibv_context* ctx, ibv_qp* qp, const ibv_qp_init_attr_ex* attr, CreateKind kind, int err) {
    activate_tracing();
    if (tracing_off()) return;
    ensure_context_known(ctx);
    if (qp != nullptr) {
        std::lock_guard<std::mutex> lock(Registry::instance().mutex());
        QpState* s = register_qp_locked(ctx, qp);
        if (attr != nullptr && (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0) {
            ibv_qp_ex* qpx = queries().qp_to_qp_ex(qp);
            wrap_qp_ex(*s, qpx, attr->send_ops_flags, attr->cap.max_send_wr);
        }
    }
    emit_qp_create(ctx, qp, attr, kind, err);
}

void on_qp_ex_obtained(ibv_qp* qp, ibv_qp_ex* qpx) {
    if (qp == nullptr || qpx == nullptr || tracing_off()) return;
    ensure_context_known(qp->context);
    std::lock_guard<std::mutex> lock(Registry::instance().mutex());
    QpState* s = Registry::instance().qp_by_pointer(qp);
    if (s == nullptr) s = register_qp_locked(qp->context, qp);  // created through a path no hook saw
    // Created without IBV_QP_INIT_ATTR_SEND_OPS_FLAGS seen by us: wrap the setters every rdma-core has.
    const uint64_t ops = s->qpx != nullptr ? s->wrapped_send_ops : kClassicSendOps;
    wrap_qp_ex(*s, qpx, ops, 0);
}

void on_qp_modified(ibv_qp* qp, const ibv_qp_attr* attr, int attr_mask, int ret) {
    if (qp == nullptr || tracing_off()) return;
    {
        // The provider may have replaced some ibv_wr_* pointers (mlx5: wr_complete on RTS/RESET).
        std::lock_guard<std::mutex> lock(Registry::instance().mutex());
        if (QpState* s = Registry::instance().qp_by_pointer(qp)) rewrap_qp_ex(*s);
    }
    if (!ST_TRACE_ENABLED(qp_modify)) return;
    st_qp_modify_rec r{};
    r.qp = reinterpret_cast<uint64_t>(qp);
    r.qp_num = qp->qp_num;
    r.attr_mask = static_cast<uint32_t>(attr_mask);
    r.qp_state = (attr != nullptr && (attr_mask & IBV_QP_STATE)) ? static_cast<int32_t>(attr->qp_state) : -1;
    if (attr != nullptr) {
        if (attr_mask & IBV_QP_DEST_QPN) r.dest_qp_num = attr->dest_qp_num;
        if (attr_mask & IBV_QP_AV) {
            r.dlid = attr->ah_attr.dlid;
            r.is_global = attr->ah_attr.is_global != 0;
            if (r.is_global) {
                gid_halves(attr->ah_attr.grh.dgid, &r.dgid_prefix, &r.dgid_iid);
                r.sgid_index = attr->ah_attr.grh.sgid_index;
            }
            r.port_num = attr->ah_attr.port_num;
        }
        if (attr_mask & IBV_QP_PORT) r.port_num = attr->port_num;
        if (attr_mask & IBV_QP_TIMEOUT) r.timeout = attr->timeout;
        if (attr_mask & IBV_QP_RETRY_CNT) r.retry_cnt = attr->retry_cnt;
        if (attr_mask & IBV_QP_RNR_RETRY) r.rnr_retry = attr->rnr_retry;
    }
    r.err = ret;
    ST_TRACE_EMIT(qp_modify, &r);
}

int destroy_qp(ibv_qp* qp, int (*real)(ibv_qp*)) {
    if (qp == nullptr || tracing_off()) return real(qp);
    before_blocking();
    const uint32_t qp_num = qp->qp_num;
    if (sigmatrace_gpumem_before_destroy_qp != nullptr) sigmatrace_gpumem_before_destroy_qp(qp);
    int ret;
    {
        // The real destroy runs under the registry mutex, so no other thread can register a new QP at the
        // same address before this one's state is gone.
        Registry& reg = Registry::instance();
        std::lock_guard<std::mutex> lock(reg.mutex());
        QpState* s = reg.qp_by_pointer(qp);
        if (s != nullptr) counters_flush_qp(*s);
        ret = real(qp);
        if (ret == 0 && s != nullptr) reg.remove_qp(s);
    }
    const int saved = errno;
    st_qp_destroy_rec r{};
    r.qp = reinterpret_cast<uint64_t>(qp);
    r.qp_num = qp_num;
    r.err = ret;
    ST_TRACE(qp_destroy, &r);
    errno = saved;
    return ret;
}

// ------------------------------------------------------------------ completion queues

void on_cq_created(ibv_context* ctx, ibv_cq* cq, int cqe, ibv_comp_channel* channel, int err) {
    activate_tracing();
    if (tracing_off()) return;
    ensure_context_known(ctx);
    st_cq_create_rec r{};
    r.ctx = reinterpret_cast<uint64_t>(ctx);
    r.cq = reinterpret_cast<uint64_t>(cq);
    r.cqe = static_cast<uint32_t>(cq != nullptr ? cq->cqe : cqe);
    r.channel = reinterpret_cast<uint64_t>(channel);
    r.kind = static_cast<uint32_t>(CreateKind::verbs);
    r.err = err;
    ST_TRACE(cq_create, &r);
}

void on_cq_ex_created(ibv_context* ctx, ibv_cq_ex* cq, const ibv_cq_init_attr_ex* attr, CreateKind kind, int err) {
    activate_tracing();
    if (tracing_off()) return;
    ensure_context_known(ctx);
    if (cq != nullptr) {
        std::lock_guard<std::mutex> lock(Registry::instance().mutex());
        CqState* s = Registry::instance().add_cq(cq);
        wrap_cq_ex(*s, cq, attr != nullptr ? attr->wc_flags : ~uint64_t{0});
    }
    st_cq_create_rec r{};
    r.ctx = reinterpret_cast<uint64_t>(ctx);
    r.cq = reinterpret_cast<uint64_t>(cq);
    r.cqe = cq != nullptr ? static_cast<uint32_t>(cq->cqe) : (attr != nullptr ? attr->cqe : 0);
    r.channel = attr != nullptr ? reinterpret_cast<uint64_t>(attr->channel) : 0;
    r.kind = static_cast<uint32_t>(kind);
    r.err = err;
    ST_TRACE(cq_create, &r);
}

int destroy_cq(ibv_cq* cq, int (*real)(ibv_cq*)) {
    if (cq == nullptr || tracing_off()) return real(cq);
    before_blocking();
    if (sigmatrace_gpumem_before_destroy_cq != nullptr) sigmatrace_gpumem_before_destroy_cq(cq);
    int ret;
    {
        Registry& reg = Registry::instance();
        std::lock_guard<std::mutex> lock(reg.mutex());
        CqState* s = reg.cq_by_pointer(cq);
        ret = real(cq);
        if (ret == 0 && s != nullptr) reg.remove_cq(s);
    }
    const int saved = errno;
    st_cq_destroy_rec r{};
    r.cq = reinterpret_cast<uint64_t>(cq);
    r.err = ret;
    ST_TRACE(cq_destroy, &r);
    errno = saved;
    return ret;
}

// ------------------------------------------------------------------ SRQ, MR, AH, events

void on_srq_created(ibv_context* ctx, ibv_srq* srq, uint32_t max_wr, int err) {
    activate_tracing();
    if (tracing_off()) return;
    ensure_context_known(ctx);
    st_srq_create_rec r{};
    r.ctx = reinterpret_cast<uint64_t>(ctx);
    r.srq = reinterpret_cast<uint64_t>(srq);
    r.max_wr = max_wr;
    r.err = err;
    ST_TRACE(srq_create, &r);
}

void on_srq_destroyed(ibv_srq* srq, int ret) {
    if (tracing_off()) return;
    st_srq_destroy_rec r{};
    r.srq = reinterpret_cast<uint64_t>(srq);
    r.err = ret;
    ST_TRACE(srq_destroy, &r);
}

void on_mr_registered(ibv_pd* pd, ibv_mr* mr, uint64_t addr, uint64_t length, uint64_t iova, uint32_t access,
                      MrKind kind, int err) {
    activate_tracing();
    if (tracing_off()) return;
    ibv_context* ctx = pd != nullptr ? pd->context : nullptr;
    ensure_context_known(ctx);
    st_mr_reg_rec r{};
    r.ctx = reinterpret_cast<uint64_t>(ctx);
    r.mr = reinterpret_cast<uint64_t>(mr);
    r.addr = redact_address(addr);
    r.length = length;
    r.iova = redact_address(iova);
    r.lkey = mr != nullptr ? redact_key(mr->lkey) : 0;
    r.rkey = mr != nullptr ? redact_key(mr->rkey) : 0;
    r.access = access;
    r.kind = static_cast<uint32_t>(kind);
    r.err = err;
    ST_TRACE(mr_reg, &r);
}

void on_mr_deregistered(ibv_mr* mr, int ret) {
    if (tracing_off()) return;
    st_mr_dereg_rec r{};
    r.mr = reinterpret_cast<uint64_t>(mr);
    r.err = ret;
    ST_TRACE(mr_dereg, &r);
}

void on_ah_created(ibv_pd* pd, ibv_ah* ah, const ibv_ah_attr* attr, int err) {
    activate_tracing();
    if (tracing_off()) return;
    ibv_context* ctx = pd != nullptr ? pd->context : nullptr;
    ensure_context_known(ctx);
    st_ah_create_rec r{};
    r.ctx = reinterpret_cast<uint64_t>(ctx);
    r.ah = reinterpret_cast<uint64_t>(ah);
    if (attr != nullptr) {
        r.dlid = attr->dlid;
        r.is_global = attr->is_global != 0;
        if (r.is_global) gid_halves(attr->grh.dgid, &r.dgid_prefix, &r.dgid_iid);
        r.port_num = attr->port_num;
    }
    r.err = err;
    ST_TRACE(ah_create, &r);
}

void on_cq_event(ibv_comp_channel* channel, ibv_cq* cq, int ret) {
    if (tracing_off() || (data_path_flags() & kFlagNotifyEvents) == 0) return;
    st_cq_event_rec r{};
    r.channel = reinterpret_cast<uint64_t>(channel);
    r.cq = ret == 0 ? reinterpret_cast<uint64_t>(cq) : 0;
    r.ret = ret;
    ST_TRACE(cq_event, &r);
}

void before_blocking() noexcept {
    if (data_path_flags() & kFlagDefer) deferred_flush_own();
}

void set_verbs_queries(const VerbsQueries* q) noexcept {
    g_queries.store(q != nullptr ? q : &kRealQueries, std::memory_order_release);
}

void reset_lifecycle_for_testing() {
    Registry& reg = Registry::instance();
    std::lock_guard<std::mutex> lock(reg.mutex());
    known_contexts().clear();
    while (!reg.live_qps().empty()) reg.remove_qp(reg.live_qps().back());
    while (!reg.live_cqs().empty()) reg.remove_cq(reg.live_cqs().back());
}

}  // namespace sigmatrace::interpose
