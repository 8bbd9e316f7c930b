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
#include <memory>
#include <mutex>
#include <vector>

#include "interpose/capture/deferred_ring.h"
#include "interpose/state/state_index.h"
#include <sigmatrace/schema.h>

namespace sigmatrace::interpose {

// One work request built with the ibv_wr_* API, recorded between wr_start and wr_complete. The layout of a
// deferred post_send entry: a deferred list is copied into the ring as it is.
using WrRecord = deferred::SendEntry;

// The provider's ibv_qp_ex function pointers that the wrappers replace (qp_ex_wrappers.cpp). The ones every
// posted message calls come first, in one cache line (QpState places this struct at its second line).
struct QpExOriginals {
    decltype(ibv_qp_ex::wr_complete) wr_complete;
    decltype(ibv_qp_ex::wr_send) wr_send;
    decltype(ibv_qp_ex::wr_send_imm) wr_send_imm;
    decltype(ibv_qp_ex::wr_rdma_write) wr_rdma_write;
    decltype(ibv_qp_ex::wr_rdma_write_imm) wr_rdma_write_imm;
    decltype(ibv_qp_ex::wr_set_sge) wr_set_sge;
    decltype(ibv_qp_ex::wr_set_inline_data) wr_set_inline_data;
    decltype(ibv_qp_ex::wr_rdma_read) wr_rdma_read;
    // The rest.
    decltype(ibv_qp_ex::wr_atomic_cmp_swp) wr_atomic_cmp_swp;
    decltype(ibv_qp_ex::wr_atomic_fetch_add) wr_atomic_fetch_add;
    decltype(ibv_qp_ex::wr_atomic_write) wr_atomic_write;
    decltype(ibv_qp_ex::wr_bind_mw) wr_bind_mw;
    decltype(ibv_qp_ex::wr_local_inv) wr_local_inv;
    decltype(ibv_qp_ex::wr_send_inv) wr_send_inv;
    decltype(ibv_qp_ex::wr_send_tso) wr_send_tso;
    decltype(ibv_qp_ex::wr_set_ud_addr) wr_set_ud_addr;
    decltype(ibv_qp_ex::wr_set_xrc_srqn) wr_set_xrc_srqn;
    decltype(ibv_qp_ex::wr_set_inline_data_list) wr_set_inline_data_list;
    decltype(ibv_qp_ex::wr_set_sge_list) wr_set_sge_list;
    decltype(ibv_qp_ex::wr_abort) wr_abort;
};

// The ibv_wr_* list being built on a QP, from its first WR to wr_complete (wr_abort). Touched only by the thread
// inside the provider's wr_start..wr_complete window, which the provider serialises per QP (wr_start takes the
// send-queue lock; the wrappers are not called before it). A fixed buffer rather than a std::vector: appending
// is then a bounds test and a store, with no growth path for the compiler to keep registers for (the setters
// inline it).
struct WrList {
    static constexpr uint8_t kClosed = 0;  // `mode` with no list open; the other modes: qp_ex_wrappers.cpp

    WrRecord* wrs = nullptr;  // `capacity` entries (QpState::wr_storage); a full list is emitted early
    uint32_t size = 0;
    uint32_t capacity = 0;
    uint32_t emitted = 0;     // WRs of this list already emitted (lists longer than the buffer)
    uint32_t count = 0;       // counters mode: WRs built so far
    uint64_t bytes = 0;       // counters mode: bytes of the WRs built so far
    uint8_t mode = kClosed;   // closed, recording, counting or nothing recorded

    // No list open (wr_complete, wr_abort, a reused state).
    void close() noexcept {
        size = 0;
        emitted = 0;
        count = 0;
        bytes = 0;
        mode = kClosed;
    }
};

// Counters mode totals of one QP.
//
// Two roles update them: the posting thread (WRs, bytes, receives, post errors) and the polling thread
// (completions). For each role the first thread that counts becomes its owner and adds with a plain load and
// store on its own cache line (~1 ns); any other thread — several threads posting to one QP, pollers sharing a
// CQ — adds atomically to a shared block. No update is ever lost and the common case takes no locked
// instruction (a lock-prefixed add costs ~7 ns here, which alone would break the counters-mode budget).
enum Counter : uint32_t { kPostedWrs, kPostedBytes, kRecvWrs, kCompletions, kErrorCompletions, kPostErrors, kCounterCount };

struct alignas(64) CounterBlock {
    std::atomic<uint64_t> v[kCounterCount];
};

// A nonzero id unique to the calling thread (initial-exec TLS, assigned on first use).
uint32_t this_thread_token() noexcept;

class QpCounters {
public:
    // Posting role: WRs and bytes posted, receives posted, failed post calls.
    void add_posted(uint64_t wrs, uint64_t bytes, uint64_t recvs, uint64_t errors) noexcept {
        CounterBlock& b = block(post_owner_, post_owned_);
        if (&b == &shared_) {
            if (wrs) shared_.v[kPostedWrs].fetch_add(wrs, std::memory_order_relaxed);
            if (bytes) shared_.v[kPostedBytes].fetch_add(bytes, std::memory_order_relaxed);
            if (recvs) shared_.v[kRecvWrs].fetch_add(recvs, std::memory_order_relaxed);
            if (errors) shared_.v[kPostErrors].fetch_add(errors, std::memory_order_relaxed);
            return;
        }
        bump(b.v[kPostedWrs], wrs);
        bump(b.v[kPostedBytes], bytes);
        bump(b.v[kRecvWrs], recvs);
        bump(b.v[kPostErrors], errors);
    }
    // Polling role.
    void add_completions(uint64_t total, uint64_t errors) noexcept {
        CounterBlock& b = block(poll_owner_, poll_owned_);
        if (&b == &shared_) {
            shared_.v[kCompletions].fetch_add(total, std::memory_order_relaxed);
            if (errors) shared_.v[kErrorCompletions].fetch_add(errors, std::memory_order_relaxed);
            return;
        }
        bump(b.v[kCompletions], total);
        bump(b.v[kErrorCompletions], errors);
    }
    uint64_t total(Counter c) const noexcept {
        return post_owned_.v[c].load(std::memory_order_relaxed) + poll_owned_.v[c].load(std::memory_order_relaxed) +
               shared_.v[c].load(std::memory_order_relaxed);
    }
    // Set-up path only (the QP is new: no thread counts on it yet).
    void reset() noexcept {
        for (CounterBlock* b : {&post_owned_, &poll_owned_, &shared_})
            for (auto& v : b->v) v.store(0, std::memory_order_relaxed);
        post_owner_.store(0, std::memory_order_relaxed);
        poll_owner_.store(0, std::memory_order_relaxed);
    }

private:
    // The owner's block when the calling thread owns (or now claims) the role, else the shared one.
    CounterBlock& block(std::atomic<uint32_t>& owner, CounterBlock& owned) noexcept {
        const uint32_t me = this_thread_token();
        uint32_t o = owner.load(std::memory_order_relaxed);
        if (o == me) return owned;
        if (o == 0 && owner.compare_exchange_strong(o, me, std::memory_order_relaxed)) return owned;
        return shared_;
    }
    // Only the owner writes an owned counter: a plain add, published with a relaxed store.
    static void bump(std::atomic<uint64_t>& c, uint64_t n) noexcept {
        if (n != 0) c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }

    CounterBlock post_owned_{};
    CounterBlock poll_owned_{};
    CounterBlock shared_{};
    std::atomic<uint32_t> post_owner_{0};
    std::atomic<uint32_t> poll_owner_{0};
};

struct QpCountersSnapshot {
    uint64_t posted_wrs = 0, posted_bytes = 0, recv_wrs = 0, completions = 0, error_completions = 0, post_errors = 0;
    bool operator==(const QpCountersSnapshot&) const = default;
};

// What a posted message touches comes first: the key and the list (first cache line), then the provider's
// entry points (the second holds the ones every message calls). message_footprint.sh counts the lines.
struct QpState {
    // Keys, read by lock-free lookups (cleared when the state is released).
    std::atomic<ibv_qp*> qp{nullptr};
    std::atomic<ibv_context*> ctx{nullptr};
    std::atomic<uint32_t> qp_num{0};
    uint32_t qp_type = 0;

    // The ibv_wr_* API (set when the QP has an ibv_qp_ex whose pointers we replaced).
    WrList list;
    QpExOriginals orig{};
    ibv_qp_ex* qpx = nullptr;
    uint64_t wrapped_send_ops = 0;  // IBV_QP_EX_WITH_* flags whose setters are wrapped
    std::unique_ptr<WrRecord[]> wr_storage;  // list.wrs; kept when the state is reused

    QpCounters counters;
    // Owned by the counters emitter (under the registry mutex): what the last qp_counters event covered.
    QpCountersSnapshot emitted;
    uint64_t emitted_at_ns = 0;
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
    uint64_t ts = 0;  // deferred emission: when start_poll returned the pass's first completion
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
// The hit is inline (a TLS load and a compare: every ibv_wr_* wrapper pays it); a miss probes the index.
extern __thread QpState* tls_last_qp __attribute__((tls_model("initial-exec")));
extern __thread CqState* tls_last_cq __attribute__((tls_model("initial-exec")));
QpState* qp_state_lookup(const void* qp) noexcept;  // the miss: probes the index, refills the cache
CqState* cq_state_lookup(const void* cq) noexcept;

// What a wrapper does when it finds no state for its object: it is only installed on objects that have state, and
// the state lives until the object is destroyed, so the application used the object after destroying it. Says
// so on stderr ("sigmatrace: fatal: CALL on OBJECT P, ...") and aborts.
[[noreturn]] __attribute__((noinline, cold)) void fatal_missing_state(const char* call, const char* object,
                                                                     const void* p) noexcept;

inline QpState* qp_state_cached(const void* qp) noexcept {
    QpState* s = tls_last_qp;
    if (s != nullptr && s->qp.load(std::memory_order_relaxed) == qp) [[likely]] return s;
    return qp_state_lookup(qp);
}
inline CqState* cq_state_cached(const void* cq) noexcept {
    CqState* s = tls_last_cq;
    if (s != nullptr && s->cq.load(std::memory_order_relaxed) == cq) [[likely]] return s;
    return cq_state_lookup(cq);
}

}  // namespace sigmatrace::interpose
