#include "interpose/datapath/context_ops.h"

#include <cerrno>
#include <array>
#include <cstddef>
#include <utility>

#include "interpose/runtime/config.h"
#include "interpose/capture/data_events.h"
#include "interpose/capture/deferred_capture.h"
#include "interpose/state/hook_scope.h"
#include "interpose/state/lifecycle.h"
#include "provider/trace.h"

namespace sigmatrace::interpose {
namespace {

// The originals of each slot. A slot is filled once (under the registry mutex) before any context points at
// its wrappers, and never changes afterwards, so the wrappers read it without synchronisation of their own:
// the application cannot call a context's entry points before ibv_open_device has returned it.
ProviderEntryPoints g_slots[kProviderSlots];
int g_slots_used = 0;

// ------------------------------------------------------------------ the wrappers, one instantiation per slot
//
// Cost when nothing is traced: one relaxed load of the flags word and a test (plus the tracepoint's own
// "enabled" load where a category is on) before the original call. Measured in bench/interpose.
//
// Traced posts, deferred (the default): the time before the real call, the record captured after it
// (deferred_capture.h). Immediate (SIGMATRACE_DEFER=0): the same record, written as an event after the call
// (data_events.h).

// The posts' recording and counting paths are out of line, reached by a tail call: the wrapper that records
// nothing is then its flag tests and a tail call to the provider, with no frame of its own (inline, the
// recording path's saved registers and stack frame would be paid by every untraced post; message_footprint.sh
// counts them). One template serves the three posts: `Post` is the slot's entry point, `Defer`, `Emit` and
// `Count` what records or counts the call.
template <int S, auto Post, auto Defer, auto Emit, typename Handle, typename Wr>
__attribute__((noinline)) int post_recorded(Handle* h, Wr* wr, Wr** bad_wr, uint32_t f) {
    if (f & kFlagDefer) {
        const uint64_t ts = capture_ticks();
        return Defer(ts, h, wr, (g_slots[S].*Post)(h, wr, bad_wr), bad_wr);  // returns ret: a tail call
    }
    const int ret = (g_slots[S].*Post)(h, wr, bad_wr);
    Emit(h, wr, ret, bad_wr);
    return ret;
}

template <int S, auto Post, auto Count, typename Wr>
__attribute__((noinline)) int post_counted(ibv_qp* qp, Wr* wr, Wr** bad_wr) {
    const int ret = (g_slots[S].*Post)(qp, wr, bad_wr);
    Count(qp, wr, ret, bad_wr);
    return ret;
}

template <int S> int w_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    constexpr auto kPost = &ProviderEntryPoints::post_send;
    const uint32_t f = data_path_flags();
    if ((f & kFlagSendEvents) && ST_TRACE_ENABLED(post_send)) [[unlikely]]
        return post_recorded<S, kPost, defer_post_send, emit_post_send>(qp, wr, bad_wr, f);
    if (f & kFlagCounting) [[unlikely]] return post_counted<S, kPost, count_post_send>(qp, wr, bad_wr);
    return g_slots[S].post_send(qp, wr, bad_wr);
}

template <int S> int w_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    constexpr auto kPost = &ProviderEntryPoints::post_recv;
    const uint32_t f = data_path_flags();
    if ((f & kFlagRecvEvents) && ST_TRACE_ENABLED(post_recv)) [[unlikely]]
        return post_recorded<S, kPost, defer_post_recv, emit_post_recv>(qp, wr, bad_wr, f);
    if (f & kFlagCounting) [[unlikely]] return post_counted<S, kPost, count_post_recv>(qp, wr, bad_wr);
    return g_slots[S].post_recv(qp, wr, bad_wr);
}

template <int S> int w_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    // Counters are per QP and an SRQ receive belongs to no QP until it completes: counted at completion.
    const uint32_t f = data_path_flags();
    if ((f & kFlagRecvEvents) && ST_TRACE_ENABLED(post_srq_recv)) [[unlikely]]
        return post_recorded<S, &ProviderEntryPoints::post_srq_recv, defer_post_srq_recv, emit_post_srq_recv>(
            srq, wr, bad_wr, f);
    return g_slots[S].post_srq_recv(srq, wr, bad_wr);
}

template <int S> int w_poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
    const int ret = g_slots[S].poll_cq(cq, num_entries, wc);
    const uint32_t f = data_path_flags();
    if (ret != 0) {
        if ((f & kFlagPollEvents) && ST_TRACE_ENABLED(poll_cq)) [[unlikely]] {
            if (f & kFlagDefer) return defer_poll_cq(cq, wc, ret);  // returns ret: a tail call
            emit_poll_cq(cq, wc, ret);
        } else if ((f & kFlagCounting) && ret > 0) [[unlikely]] {
            count_completions(cq->context, wc, ret);
        }
    } else if (f & kFlagDefer) {
        // Empty polls (busy-poll loops) are not events. They are where this thread is idle: the moment to turn
        // a few of its captured records into events (a TLS load and two compares when there are none).
        deferred_idle();
    }
    return ret;
}

template <int S> int w_req_notify_cq(ibv_cq* cq, int solicited_only) {
    const int ret = g_slots[S].req_notify_cq(cq, solicited_only);
    if ((data_path_flags() & kFlagNotifyEvents) && ST_TRACE_ENABLED(req_notify_cq)) [[unlikely]] {
        const int saved = errno;
        st_req_notify_cq_rec r{};
        r.cq = reinterpret_cast<uint64_t>(cq);
        r.solicited_only = static_cast<uint32_t>(solicited_only);
        r.ret = ret;
        ST_TRACE_EMIT(req_notify_cq, &r);
        errno = saved;
    }
    return ret;
}

// Inside another hook (mlx5dv_create_qp / mlx5dv_create_cq on a fabric device, whose implementation creates the
// object through these ops) the outer hook records the object: recording it here too would register it twice
// and wrap its poll / wr functions over their own wrappers.
template <int S> ibv_qp* w_create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
    ibv_qp* qp = g_slots[S].create_qp_ex(ctx, attr);
    if (inside_hook()) return qp;
    const int saved = errno;
    on_qp_created_ex(ctx, qp, attr, CreateKind::extended, qp == nullptr ? saved : 0);
    errno = saved;
    return qp;
}

template <int S> ibv_cq_ex* w_create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
    ibv_cq_ex* cq = g_slots[S].create_cq_ex(ctx, attr);
    if (inside_hook()) return cq;
    const int saved = errno;
    on_cq_ex_created(ctx, cq, attr, CreateKind::extended, cq == nullptr ? saved : 0);
    errno = saved;
    return cq;
}

template <int S> ibv_srq* w_create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* attr) {
    ibv_srq* srq = g_slots[S].create_srq_ex(ctx, attr);
    const int saved = errno;
    on_srq_created(ctx, srq, attr != nullptr ? attr->attr.max_wr : 0, srq == nullptr ? saved : 0);
    errno = saved;
    return srq;
}

template <int S> constexpr ProviderEntryPoints wrappers_of_slot() {
    ProviderEntryPoints w;
    w.post_send = &w_post_send<S>;
    w.post_recv = &w_post_recv<S>;
    w.post_srq_recv = &w_post_srq_recv<S>;
    w.poll_cq = &w_poll_cq<S>;
    w.req_notify_cq = &w_req_notify_cq<S>;
    w.create_qp_ex = &w_create_qp_ex<S>;
    w.create_cq_ex = &w_create_cq_ex<S>;
    w.create_srq_ex = &w_create_srq_ex<S>;
    return w;
}

template <size_t... I> constexpr auto make_wrapper_table(std::index_sequence<I...>) {
    return std::array<ProviderEntryPoints, sizeof...(I)>{wrappers_of_slot<static_cast<int>(I)>()...};
}

constexpr auto kWrappers = make_wrapper_table(std::make_index_sequence<kProviderSlots>{});

#define ST_VCTX_OFFSET(member) offsetof(verbs_context, member)

ProviderEntryPoints read_entry_points(ibv_context* ctx) {
    ProviderEntryPoints p;
    p.post_send = ctx->ops.post_send;
    p.post_recv = ctx->ops.post_recv;
    p.post_srq_recv = ctx->ops.post_srq_recv;
    p.poll_cq = ctx->ops.poll_cq;
    p.req_notify_cq = ctx->ops.req_notify_cq;
    if (verbs_context* v = extended_context(ctx, ST_VCTX_OFFSET(create_qp_ex))) p.create_qp_ex = v->create_qp_ex;
    if (verbs_context* v = extended_context(ctx, ST_VCTX_OFFSET(create_cq_ex))) p.create_cq_ex = v->create_cq_ex;
    if (verbs_context* v = extended_context(ctx, ST_VCTX_OFFSET(create_srq_ex))) p.create_srq_ex = v->create_srq_ex;
    return p;
}

int slot_of_wrapper(decltype(ibv_context_ops::poll_cq) fn) noexcept {
    for (int s = 0; s < kProviderSlots; ++s)
        if (kWrappers[static_cast<size_t>(s)].poll_cq == fn) return s;
    return -1;
}

}  // namespace

verbs_context* extended_context(ibv_context* ctx, size_t member_offset) noexcept {
    if (ctx == nullptr || ctx->abi_compat != __VERBS_ABI_IS_EXTENDED) return nullptr;
    auto* v = reinterpret_cast<verbs_context*>(reinterpret_cast<uint8_t*>(ctx) - offsetof(verbs_context, context));
    if (v->sz < sizeof(verbs_context) - member_offset) return nullptr;
    return v;
}

WrapResult wrap_context_entry_points(ibv_context* ctx) {
    if (context_entry_points_wrapped(ctx)) return WrapResult::already_wrapped;
    const ProviderEntryPoints orig = read_entry_points(ctx);
    int slot = -1;
    for (int s = 0; s < g_slots_used; ++s)
        if (g_slots[s] == orig) slot = s;
    if (slot < 0) {
        if (g_slots_used == kProviderSlots) return WrapResult::no_slot_left;
        slot = g_slots_used++;
        g_slots[slot] = orig;
    }
    const ProviderEntryPoints& w = kWrappers[static_cast<size_t>(slot)];
    // Entries the provider left NULL stay NULL: the application sees the same "not supported" behaviour.
    if (orig.post_send) ctx->ops.post_send = w.post_send;
    if (orig.post_recv) ctx->ops.post_recv = w.post_recv;
    if (orig.post_srq_recv) ctx->ops.post_srq_recv = w.post_srq_recv;
    if (orig.req_notify_cq) ctx->ops.req_notify_cq = w.req_notify_cq;
    if (orig.create_qp_ex) extended_context(ctx, ST_VCTX_OFFSET(create_qp_ex))->create_qp_ex = w.create_qp_ex;
    if (orig.create_cq_ex) extended_context(ctx, ST_VCTX_OFFSET(create_cq_ex))->create_cq_ex = w.create_cq_ex;
    if (orig.create_srq_ex) extended_context(ctx, ST_VCTX_OFFSET(create_srq_ex))->create_srq_ex = w.create_srq_ex;
    // poll_cq last: it is what context_entry_points_wrapped() checks.
    if (orig.poll_cq) ctx->ops.poll_cq = w.poll_cq;
    return WrapResult::wrapped;
}

bool context_entry_points_wrapped(const ibv_context* ctx) noexcept {
    return ctx != nullptr && slot_of_wrapper(ctx->ops.poll_cq) >= 0;
}

const ProviderEntryPoints* context_originals(const ibv_context* ctx) noexcept {
    if (ctx == nullptr) return nullptr;
    const int s = slot_of_wrapper(ctx->ops.poll_cq);
    return s >= 0 ? &g_slots[s] : nullptr;
}

}  // namespace sigmatrace::interpose
