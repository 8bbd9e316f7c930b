// The per-context entry points of the data path: ibv_context_ops (what the inline ibv_post_send,
// ibv_post_recv, ibv_post_srq_recv, ibv_poll_cq and ibv_req_notify_cq call) and the verbs_context entries
// that create objects whose own tables need wrapping (create_qp_ex, create_cq_ex, create_srq_ex).
//
// Providers fill these tables with the same functions for every context they open, so the originals are
// kept in a few "provider slots" rather than per context: each slot has its own instantiation of the
// wrappers (templates on the slot number) that calls that slot's originals directly. A wrapped post or poll
// therefore needs no lookup at all — one load of the original pointer and one of the data-path flags.
#pragma once

#include <infiniband/verbs.h>

namespace sigmatrace::interpose {

struct ProviderEntryPoints {
    decltype(ibv_context_ops::post_send) post_send = nullptr;
    decltype(ibv_context_ops::post_recv) post_recv = nullptr;
    decltype(ibv_context_ops::post_srq_recv) post_srq_recv = nullptr;
    decltype(ibv_context_ops::poll_cq) poll_cq = nullptr;
    decltype(ibv_context_ops::req_notify_cq) req_notify_cq = nullptr;
    decltype(verbs_context::create_qp_ex) create_qp_ex = nullptr;
    decltype(verbs_context::create_cq_ex) create_cq_ex = nullptr;
    decltype(verbs_context::create_srq_ex) create_srq_ex = nullptr;

    bool operator==(const ProviderEntryPoints&) const = default;
};

inline constexpr int kProviderSlots = 8;

enum class WrapResult { wrapped, already_wrapped, no_slot_left };

// Replaces ctx's entry points with the wrappers of a slot holding its originals. Call under the registry
// mutex, before the context is handed to the application.
WrapResult wrap_context_entry_points(ibv_context* ctx);

// True when ctx's entry points are ours.
bool context_entry_points_wrapped(const ibv_context* ctx) noexcept;

// The provider's originals for a wrapped context (nullptr when not wrapped). For tests and diagnostics.
const ProviderEntryPoints* context_originals(const ibv_context* ctx) noexcept;

// The verbs_context of ctx if the provider has one that includes member `offset` (verbs_get_ctx_op's rule:
// the extended context "grows up", and its `sz` says how far down it reaches).
verbs_context* extended_context(ibv_context* ctx, size_t member_offset) noexcept;

}  // namespace sigmatrace::interpose
