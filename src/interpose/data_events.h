// Building and emitting the data-path events (post_send, post_recv, post_srq_recv, poll_cq) from the
// application's own structures, and the counters-mode equivalents.
//
// These run only after the wrapper's cheap check said "a session wants this event" (or "counters mode"), so
// they may walk WR chains and completion arrays; they still allocate nothing (sequences live in stack arrays
// of SIGMATRACE_MAX_BATCH entries, longer chains become several events) and preserve errno.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "interpose/object_state.h"

namespace sigmatrace::interpose {

// api value of post_send events.
inline constexpr uint32_t kApiPostSend = 0;
inline constexpr uint32_t kApiWrBuilder = 1;
// api value of poll_cq events.
inline constexpr uint32_t kApiPollCq = 0;
inline constexpr uint32_t kApiCqEx = 1;

// One event per SIGMATRACE_MAX_BATCH WRs of the chain; `bad_wr` is the call's out-parameter (read only when
// ret != 0).
void trace_post_send(ibv_qp* qp, const ibv_send_wr* wr, int ret, ibv_send_wr* const* bad_wr) noexcept;
void trace_post_recv(ibv_qp* qp, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept;
void trace_post_srq_recv(ibv_srq* srq, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept;

// The WRs recorded for an ibv_wr_* list (`records[0..n)`, the list's WRs starting at `first_index`).
void trace_wr_list(const QpState& s, const WrRecord* records, uint32_t n, uint32_t first_index, int ret) noexcept;

// ibv_poll_cq's result: `ret` completions in wc[], or a negative error (an event with n = 0).
void trace_poll_cq(ibv_cq* cq, const ibv_wc* wc, int ret) noexcept;
// Completions gathered during an extended-CQ poll pass.
void trace_completion_batch(const void* cq, const CompletionBatch& b) noexcept;

// Counters mode.
void count_post_send(ibv_qp* qp, const ibv_send_wr* wr, int ret, ibv_send_wr* const* bad_wr) noexcept;
void count_post_recv(ibv_qp* qp, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept;
void count_completions(const ibv_context* ctx, const ibv_wc* wc, int n) noexcept;
void count_completion(const ibv_context* ctx, uint32_t qp_num, bool error) noexcept;

}  // namespace sigmatrace::interpose
