// The data path of deferred emission (SIGMATRACE_DEFER=1, the default): what the wrappers of ibv_post_send,
// ibv_post_recv, ibv_post_srq_recv, ibv_poll_cq, ibv_wr_complete and the extended-CQ poll pass do instead of
// emitting an event: read the capture clock (capture_clock.h) — before the real call for posts (a post's time then
// always precedes its completion's, even when another thread polls the completion), after it for polls — and
// copy the record's values (the application may reuse its WRs and completions at once) into the calling
// thread's ring (deferred_ring.h), through the builder immediate emission uses too (record_builder.h). No lock,
// no allocation after the thread's first capture, errno kept. The events come out later (deferred_rings.h says
// when), holding the same records as immediate emission's plus their capture times.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "interpose/capture/capture_clock.h"
#include "interpose/capture/deferred_rings.h"
#include "interpose/state/object_state.h"

namespace sigmatrace::interpose {

// The capture time of a record (capture_clock.h: TSC ticks where invariant).
inline uint64_t capture_ticks() noexcept {
    return capture_clock::now_ticks();
}

// Posts: `ts` taken before the real call; the rest after it (ret, bad_wr). They return `ret` (as the polls do),
// so that a wrapper ends with a tail call to them.
int defer_post_send(uint64_t ts, ibv_qp* qp, const ibv_send_wr* wr, int ret, ibv_send_wr* const* bad_wr) noexcept;
int defer_post_recv(uint64_t ts, ibv_qp* qp, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept;
int defer_post_srq_recv(uint64_t ts, ibv_srq* srq, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept;
// An ibv_wr_* list at ibv_wr_complete (`ts` before the provider's wr_complete), or a part of a list that
// outgrew its buffer.
void defer_wr_list(uint64_t ts, const QpState& s, const WrRecord* records, uint32_t n, uint32_t first_index,
                   int ret) noexcept;
// A one-WR ibv_wr_* list in two steps around the provider's wr_complete (`ts` taken before the call):
// defer_wr_one_begin writes the record before the doorbell, while the list's lines are still in the caches, and
// publishes it unfinished (deferred_ring.h); defer_wr_one_finish adds the call's result. Why: after the doorbell
// the fabric's send has copied the message (a large one evicts the L1 cache), and building the record there
// from a copy costs more than the two steps do (docs/PERFORMANCE.md, "Why the tracer is built this way"). begin
// returns nullptr when it cannot reserve without a call (no ring yet, a full ring): the caller then takes the
// record-after-the-call path (defer_wr_list).
deferred::RecordHeader* defer_wr_one_begin(uint64_t ts, const QpState& s, const WrRecord& wr, uint32_t first_index) noexcept;
void defer_wr_one_finish(deferred::RecordHeader* h, uint64_t ts, int ret) noexcept;
// Polls: a non-empty ibv_poll_cq (ts taken here, after the call), an extended-CQ pass (`ts` taken when
// start_poll returned its first completion).
int defer_poll_cq(ibv_cq* cq, const ibv_wc* wc, int ret) noexcept;
void defer_completion_batch(uint64_t ts, const void* cq, const CompletionBatch& b) noexcept;

// Idle points of the calling thread: an empty poll. The ring is drained (all of it) once kIdleDrainBytes
// wait, or once the oldest record is half the age bound old (looked at every kIdleAgeCheckEvery empty polls:
// the clock read is the costly part). Why so rarely: a message that arrives while its thread drains waits
// for the drain, so a few long drains disturb few messages of a latency-bound program (a round trip of
// ib_send_lat captures a few hundred bytes) where a drain at every idle point would delay most of them a little; the ring's used part
// stays in L1 (it rewinds when emptied); and long runs of records share few events (deferred_records_writer.h).
// The common empty poll costs a TLS load, two loads of the ring's positions and a counter.
inline constexpr uint64_t kIdleDrainBytes = 16384;
inline constexpr uint32_t kIdleAgeCheckEvery = 64;
extern __thread uint32_t tls_idle_polls __attribute__((tls_model("initial-exec")));
void deferred_idle_drain() noexcept;
void deferred_idle_drain_all(uint64_t now = 0) noexcept;
inline void deferred_idle() noexcept {
    const deferred::Ring* r = deferred::tls_ring;
    const uint64_t pending = r != nullptr ? r->pending_bytes() : 0;
    if (pending == 0) return;
    if (pending >= kIdleDrainBytes) [[unlikely]] {
        deferred_idle_drain_all();
        return;
    }
    if (++tls_idle_polls % kIdleAgeCheckEvery == 0) [[unlikely]] deferred_idle_drain();
}

// The calling thread is about to block (ibv_get_cq_event) or to tear an object down: all of its records.
void deferred_flush_own() noexcept;

}  // namespace sigmatrace::interpose
