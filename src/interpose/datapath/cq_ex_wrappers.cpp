#include "interpose/datapath/cq_ex_wrappers.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "interpose/runtime/config.h"
#include "interpose/capture/data_events.h"
#include "interpose/capture/deferred_capture.h"
#include "provider/trace.h"

namespace sigmatrace::interpose {
namespace {

constexpr uint8_t kPassNothing = 0;
constexpr uint8_t kPassRecording = 1;
constexpr uint8_t kPassCounting = 2;

inline CqState& state_of(ibv_cq_ex* cq) {
    CqState* s = cq_state_cached(cq);
    if (s == nullptr) [[unlikely]] fatal_missing_state("extended-CQ poll", "CQ", cq);
    return *s;
}

inline bool can_read(const CqState& s, uint64_t flag, const void* fn) {
    return fn != nullptr && (s.wc_flags & flag) != 0;
}

// A full batch or the pass's end: one poll_cq record, emitted now (immediate) or captured (deferred).
void emit_batch(const void* cq, const CompletionBatch& b) noexcept {
    if (data_path_flags() & kFlagDefer) defer_completion_batch(b.ts, cq, b);
    else emit_completion_batch(cq, b);
}

// Reads the completion the provider just stepped to into the pass's batch.
void record_current(CqState& s, ibv_cq_ex* cq) noexcept {
    if (s.pass_mode == kPassCounting) {
        if (cq->read_qp_num != nullptr && (s.wc_flags & IBV_WC_EX_WITH_QP_NUM))
            count_completion(cq->context, cq->read_qp_num(cq), cq->status != IBV_WC_SUCCESS);
        return;
    }
    CompletionBatch& b = s.batch;
    if (b.n == SIGMATRACE_MAX_BATCH) {
        emit_batch(cq, b);
        b.n = 0;
    }
    const uint32_t i = b.n++;
    const bool ok = cq->status == IBV_WC_SUCCESS;
    b.wr_id[i] = cq->wr_id;
    b.status[i] = static_cast<uint8_t>(cq->status);
    // read_opcode, read_vendor_err and read_wc_flags are always provided; the rest only when requested.
    // Verbs defines only wr_id, status, vendor_err and qp_num for error completions.
    b.opcode[i] = (ok && cq->read_opcode != nullptr) ? static_cast<uint8_t>(cq->read_opcode(cq)) : 0;
    b.vendor_err[i] = (!ok && cq->read_vendor_err != nullptr) ? cq->read_vendor_err(cq) : 0;
    const uint32_t wc_flags = (ok && cq->read_wc_flags != nullptr) ? cq->read_wc_flags(cq) : 0;
    b.wc_flags[i] = wc_flags;
    b.byte_len[i] = (ok && can_read(s, IBV_WC_EX_WITH_BYTE_LEN, reinterpret_cast<const void*>(cq->read_byte_len)))
                        ? cq->read_byte_len(cq) : 0;
    b.qp_num[i] = can_read(s, IBV_WC_EX_WITH_QP_NUM, reinterpret_cast<const void*>(cq->read_qp_num))
                      ? cq->read_qp_num(cq) : 0;
    b.src_qp[i] = (ok && can_read(s, IBV_WC_EX_WITH_SRC_QP, reinterpret_cast<const void*>(cq->read_src_qp)))
                      ? cq->read_src_qp(cq) : 0;
    b.imm[i] = (ok && (wc_flags & IBV_WC_WITH_IMM) &&
                can_read(s, IBV_WC_EX_WITH_IMM, reinterpret_cast<const void*>(cq->read_imm_data)))
                   ? cq->read_imm_data(cq) : 0;
    if (can_read(s, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, reinterpret_cast<const void*>(cq->read_completion_ts)))
        b.hw_ts[i] = cq->read_completion_ts(cq);
    else if (can_read(s, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
                      reinterpret_cast<const void*>(cq->read_completion_wallclock_ns)))
        b.hw_ts[i] = cq->read_completion_wallclock_ns(cq);
    else
        b.hw_ts[i] = 0;
}

int w_start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
    CqState& s = state_of(cq);
    const int ret = s.orig.start_poll(cq, attr);
    s.pass_mode = kPassNothing;
    s.batch.n = 0;
    const uint32_t f = data_path_flags();
    if (ret == 0) {  // ENOENT (empty) is the common case in busy-poll loops: nothing more to do
        if ((f & kFlagPollEvents) && ST_TRACE_ENABLED(poll_cq)) s.pass_mode = kPassRecording;
        else if (f & kFlagCounting) s.pass_mode = kPassCounting;
        if (s.pass_mode != kPassNothing) {
            const int saved = errno;
            if (s.pass_mode == kPassRecording && (f & kFlagDefer)) s.batch.ts = capture_ticks();
            record_current(s, cq);
            errno = saved;
        }
    } else if (ret == ENOENT && (f & kFlagDefer)) {
        deferred_idle();  // an empty poll: this thread is idle (context_ops.cpp)
    }
    return ret;
}

int w_next_poll(ibv_cq_ex* cq) {
    CqState& s = state_of(cq);
    const int ret = s.orig.next_poll(cq);
    if (ret == 0 && s.pass_mode != kPassNothing) {
        const int saved = errno;
        record_current(s, cq);
        errno = saved;
    }
    return ret;
}

void w_end_poll(ibv_cq_ex* cq) {
    CqState& s = state_of(cq);
    if (s.pass_mode == kPassRecording && s.batch.n != 0) {
        const int saved = errno;
        emit_batch(cq, s.batch);
        errno = saved;
    }
    s.pass_mode = kPassNothing;
    s.batch.n = 0;
    s.orig.end_poll(cq);
}

}  // namespace

void wrap_cq_ex(CqState& s, ibv_cq_ex* cq, uint64_t wc_flags) {
    if (cq == nullptr) return;
    s.wc_flags = wc_flags;
    if (cq->start_poll != nullptr && cq->start_poll != &w_start_poll) {
        s.orig.start_poll = cq->start_poll;
        cq->start_poll = &w_start_poll;
    }
    if (cq->next_poll != nullptr && cq->next_poll != &w_next_poll) {
        s.orig.next_poll = cq->next_poll;
        cq->next_poll = &w_next_poll;
    }
    if (cq->end_poll != nullptr && cq->end_poll != &w_end_poll) {
        s.orig.end_poll = cq->end_poll;
        cq->end_poll = &w_end_poll;
    }
}

}  // namespace sigmatrace::interpose
