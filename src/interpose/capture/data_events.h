// Immediate emission (SIGMATRACE_DEFER=0) of the data-path calls, and their counters-mode equivalents.
//
// Immediate: the call's records (record_builder.h, the builder deferred capture uses too) written as
// `deferred_records` events inside the call, one per record, with capture time 0 (the event's own timestamp).
// These run only after the wrapper's cheap check said "a session wants this event"; they allocate nothing (the
// record and its event live on the stack) and preserve errno.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "interpose/state/object_state.h"

namespace sigmatrace::interpose {

// `bad_wr` is the call's out-parameter (read only when ret != 0).
void emit_post_send(ibv_qp* qp, const ibv_send_wr* wr, int ret, ibv_send_wr* const* bad_wr) noexcept;
void emit_post_recv(ibv_qp* qp, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept;
void emit_post_srq_recv(ibv_srq* srq, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept;

// The WRs recorded for an ibv_wr_* list (`records[0..n)`, the list's WRs starting at `first_index`).
void emit_wr_list(const QpState& s, const WrRecord* records, uint32_t n, uint32_t first_index, int ret) noexcept;

// ibv_poll_cq's result: `ret` completions in wc[], or a negative error (a record of none).
void emit_poll_cq(ibv_cq* cq, const ibv_wc* wc, int ret) noexcept;
// Completions gathered during an extended-CQ poll pass.
void emit_completion_batch(const void* cq, const CompletionBatch& b) noexcept;

// Counters mode.
void count_post_send(ibv_qp* qp, const ibv_send_wr* wr, int ret, ibv_send_wr* const* bad_wr) noexcept;
void count_post_recv(ibv_qp* qp, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept;
void count_completions(const ibv_context* ctx, const ibv_wc* wc, int n) noexcept;
void count_completion(const ibv_context* ctx, uint32_t qp_num, bool error) noexcept;

}  // namespace sigmatrace::interpose
