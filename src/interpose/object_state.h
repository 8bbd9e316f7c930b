// Per-object wrapper state (queue pairs, extended CQs) and the registry that owns it.
//
// Everything here is allocated when the object is created (a set-up call, under the registry mutex) and only
// read or updated in place on the data path. States are recycled through a free list instead of freed, so a
// data-path reader that races with a destroy never touches freed memory (see state_index.h); the app posting
// on a QP while destroying it is undefined behaviour anyway, and the worst that can happen here is a counter
// attributed to the wrong QP.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "interpose/state_index.h"
#include <sigmatrace/schema.h>

namespace sigmatrace::interpose {

// One work request built with the ibv_wr_* API, recorded between wr_start and wr_complete.
struct WrRecord {
    uint64_t wr_id;
    uint64_t raddr;
    uint64_t ah;
    uint32_t rkey;
    uint32_t imm;
    uint32_t bytes;
    uint32_t remote_qpn;
    uint32_t send_flags;
    uint16_t num_sge;
    uint8_t opcode;
};

// The provider's ibv_qp_ex function pointers that the wrappers replace (qp_ex_wrappers.cpp).
struct QpExOriginals {
    decltype(ibv_qp_ex::wr_atomic_cmp_swp) wr_atomic_cmp_swp;
    decltype(ibv_qp_ex::wr_atomic_fetch_add) wr_atomic_fetch_add;
    decltype(ibv_qp_ex::wr_bind_mw) wr_bind_mw;
    decltype(ibv_qp_ex::wr_local_inv) wr_local_inv;
    decltype(ibv_qp_ex::wr_rdma_read) wr_rdma_read;
    decltype(ibv_qp_ex::wr_rdma_write) wr_rdma_write;
    decltype(ibv_qp_ex::wr_rdma_write_imm) wr_rdma_write_imm;
    decltype(ibv_qp_ex::wr_send) wr_send;
    decltype(ibv_qp_ex::wr_send_imm) wr_send_imm;
    decltype(ibv_qp_ex::wr_send_inv) wr_send_inv;
    decltype(ibv_qp_ex::wr_send_tso) wr_send_tso;
    decltype(ibv_qp_ex::wr_set_ud_addr) wr_set_ud_addr;
    decltype(ibv_qp_ex::wr_set_xrc_srqn) wr_set_xrc_srqn;
    decltype(ibv_qp_ex::wr_set_inline_data) wr_set_inline_data;
    decltype(ibv_qp_ex::wr_set_inline_data_list) wr_set_inline_data_list;
    decltype(ibv_qp_ex::wr_set_sge) wr_set_sge;
    decltype(ibv_qp_ex::wr_set_sge_list) wr_set_sge_list;
    decltype(ibv_qp_ex::wr_start) wr_start;
    decltype(ibv_qp_ex::wr_complete) wr_complete;
    decltype(ibv_qp_ex::wr_abort) wr_abort;
    decltype(ibv_qp_ex::wr_atomic_write) wr_atomic_write;
};

// Counters mode totals of one QP. Relaxed atomics: a QP is normally posted to by one thread at a time (the
// provider serialises its send queue), while completions for it may be polled by another thread.
struct QpCounters {
    std::atomic<uint64_t> posted_wrs{0};
    std::atomic<uint64_t> posted_bytes{0};
    std::atomic<uint64_t> recv_wrs{0};
    std::atomic<uint64_t> completions{0};
    std::atomic<uint64_t> error_completions{0};
    std::atomic<uint64_t> post_errors{0};
};

struct QpCountersSnapshot {
    uint64_t posted_wrs = 0, posted_bytes = 0, recv_wrs = 0, completions = 0, error_completions = 0, post_errors = 0;
    bool operator==(const QpCountersSnapshot&) const = default;
};

struct QpState {
    // Keys, read by lock-free lookups (cleared when the state is released).
    std::atomic<ibv_qp*> qp{nullptr};
    std::atomic<ibv_context*> ctx{nullptr};
    std::atomic<uint32_t> qp_num{0};
    uint32_t qp_type = 0;

    QpCounters counters;
    // Owned by the counters emitter (under the registry mutex): what the last qp_counters event covered.
    QpCountersSnapshot emitted;
    uint64_t emitted_at_ns = 0;

    // The ibv_wr_* API (set when the QP has an ibv_qp_ex whose pointers we replaced).
    ibv_qp_ex* qpx = nullptr;
    uint64_t wrapped_send_ops = 0;  // IBV_QP_EX_WITH_* flags whose setters are wrapped
    QpExOriginals orig{};
    // The WR list between wr_start and wr_complete. Touched only by the thread inside that window, which the
    // provider serialises per QP (wr_start takes the send-queue lock).
    std::vector<WrRecord> pending;  // capacity reserved at creation; never grows on the data path
    uint32_t pending_emitted = 0;   // WRs of this list already emitted (lists longer than the buffer)
    uint64_t pending_bytes = 0;     // counters mode: bytes of the WRs built so far
    uint32_t pending_count = 0;     // counters mode: WRs built so far
    uint8_t build_mode = 0;         // 0 nothing, 1 recording events, 2 counting
};

// Extended CQ state: originals and the completions of the poll pass in progress (start_poll..end_poll runs
// under the CQ's lock, so one pass at a time per CQ).
struct CqExOriginals {
    decltype(ibv_cq_ex::start_poll) start_poll;
    decltype(ibv_cq_ex::next_poll) next_poll;
    decltype(ibv_cq_ex::end_poll) end_poll;
};

struct CompletionBatch {
    uint32_t n = 0;
    uint64_t wr_id[SIGMATRACE_MAX_BATCH];
    uint8_t status[SIGMATRACE_MAX_BATCH];
    uint8_t opcode[SIGMATRACE_MAX_BATCH];
    uint32_t vendor_err[SIGMATRACE_MAX_BATCH];
    uint32_t byte_len[SIGMATRACE_MAX_BATCH];
    uint32_t qp_num[SIGMATRACE_MAX_BATCH];
    uint32_t src_qp[SIGMATRACE_MAX_BATCH];
    uint32_t wc_flags[SIGMATRACE_MAX_BATCH];
    uint32_t imm[SIGMATRACE_MAX_BATCH];
    uint64_t hw_ts[SIGMATRACE_MAX_BATCH];
};

struct CqState {
    std::atomic<ibv_cq_ex*> cq{nullptr};
    CqExOriginals orig{};
    uint64_t wc_flags = 0;  // IBV_WC_EX_WITH_* the CQ was created with
    uint8_t pass_mode = 0;  // 0 nothing, 1 recording, 2 counting (set by start_poll)
    CompletionBatch batch;
};

struct QpByPointer {
    static size_t hash(const void* k) noexcept { return hash_pointer(k); }
    static bool matches(const QpState* s, const void* k) noexcept {
        return s->qp.load(std::memory_order_relaxed) == k;
    }
    static const void* key_of(const QpState* s) noexcept { return s->qp.load(std::memory_order_relaxed); }
};

struct QpNumberKey {
    const ibv_context* ctx;
    uint32_t qp_num;
};
struct QpByNumber {
    static size_t hash(const QpNumberKey& k) noexcept { return hash_pointer(k.ctx) ^ (k.qp_num * 0x9e3779b1u); }
    static bool matches(const QpState* s, const QpNumberKey& k) noexcept {
        return s->qp_num.load(std::memory_order_relaxed) == k.qp_num && s->ctx.load(std::memory_order_relaxed) == k.ctx;
    }
    static QpNumberKey key_of(const QpState* s) noexcept {
        return {s->ctx.load(std::memory_order_relaxed), s->qp_num.load(std::memory_order_relaxed)};
    }
};

struct CqByPointer {
    static size_t hash(const void* k) noexcept { return hash_pointer(k); }
    static bool matches(const CqState* s, const void* k) noexcept { return s->cq.load(std::memory_order_relaxed) == k; }
    static const void* key_of(const CqState* s) noexcept { return s->cq.load(std::memory_order_relaxed); }
};

// The owner of all wrapper state. One per process, never destroyed (threads and destructors of the traced
// program may still call wrappers while the process exits).
class Registry {
public:
    static Registry& instance() noexcept;

    // Guards every mutation below. Set-up paths only; forks are made safe by pthread_atfork handlers that
    // hold it across fork() (library_init.cpp).
    std::mutex& mutex() noexcept { return mutex_; }

    // --- under mutex()
    QpState* add_qp(ibv_qp* qp, ibv_context* ctx, uint32_t qp_num, uint32_t qp_type);
    void remove_qp(QpState* s);
    CqState* add_cq(ibv_cq_ex* cq);
    void remove_cq(CqState* s);
    const std::vector<QpState*>& live_qps() const noexcept { return live_qps_; }
    const std::vector<CqState*>& live_cqs() const noexcept { return live_cqs_; }

    // --- lock-free
    QpState* qp_by_pointer(const void* qp) const noexcept { return qps_by_pointer_.find(qp); }
    QpState* qp_by_number(const ibv_context* ctx, uint32_t qp_num) const noexcept {
        return qps_by_number_.find(QpNumberKey{ctx, qp_num});
    }
    CqState* cq_by_pointer(const void* cq) const noexcept { return cqs_.find(cq); }

private:
    Registry() = default;

    std::mutex mutex_;
    StateIndex<QpState, const void*, QpByPointer> qps_by_pointer_;
    StateIndex<QpState, QpNumberKey, QpByNumber> qps_by_number_;
    StateIndex<CqState, const void*, CqByPointer> cqs_;
    std::vector<QpState*> live_qps_;
    std::vector<QpState*> free_qps_;
    std::vector<CqState*> live_cqs_;
    std::vector<CqState*> free_cqs_;
};

// Data-path lookups with a one-entry per-thread cache: the ibv_wr_* and extended-poll calls come in runs on
// one object. Initial-exec TLS: a plain %fs-relative load, no __tls_get_addr call (libsigmatrace.so is
// loaded at start-up, where static TLS is available).
QpState* qp_state_cached(const void* qp) noexcept;
CqState* cq_state_cached(const void* cq) noexcept;

}  // namespace sigmatrace::interpose
