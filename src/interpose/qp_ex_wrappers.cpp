#include "interpose/qp_ex_wrappers.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "interpose/config.h"
#include "interpose/data_events.h"
#include "interpose/deferred_capture.h"
#include "provider/trace.h"

namespace sigmatrace::interpose {
namespace {

constexpr uint8_t kBuildNothing = 0;
constexpr uint8_t kBuildRecording = 1;
constexpr uint8_t kBuildCounting = 2;
// wr_complete copies at most this many WRs of a list out of the QP's state (one event's worth, on the stack).
constexpr size_t kWrTailCopy = SIGMATRACE_MAX_BATCH;

// A wrapper always finds its QP's state: it is only installed on QPs that have one, and the state lives until
// the QP is destroyed. Reaching here means the application used a QP after destroying it.
[[noreturn]] __attribute__((noinline, cold)) void missing_state(const void* qpx) {
    char msg[192];
    const int n = std::snprintf(msg, sizeof msg,
                                "sigmatrace: fatal: ibv_wr_* call on QP %p, which is not (or no longer) a live "
                                "queue pair; the application used a destroyed QP\n",
                                qpx);
    if (n > 0) {
        ssize_t ignored = ::write(STDERR_FILENO, msg, static_cast<size_t>(n));
        (void)ignored;
    }
    std::abort();
}

inline QpState& state_of(ibv_qp_ex* q) {
    QpState* s = qp_state_cached(q);
    if (s == nullptr) [[unlikely]] missing_state(q);
    return *s;
}

// Emits the first `n` WRs of the list being built, reported with ret 0 (the list's last event, at wr_complete,
// carries its real result): all of them when the list outgrows its buffer (more WRs between wr_start and
// wr_complete than the send queue depth: the provider will fail the list, but the record must not allocate),
// and at wr_complete all but the last part that wr_complete copies out.
__attribute__((noinline)) void flush_early(QpState& s, size_t n) noexcept {
    const uint32_t k = static_cast<uint32_t>(n);
    if (data_path_flags() & kFlagDefer) defer_wr_list(capture_ticks(), s, s.pending.data(), k, s.pending_emitted, 0);
    else trace_wr_list(s, s.pending.data(), k, s.pending_emitted, 0);
    s.pending_emitted += k;
    s.pending.erase(s.pending.begin(), s.pending.begin() + static_cast<std::ptrdiff_t>(n));
}

inline void begin_wr(QpState& s, const ibv_qp_ex* q, ibv_wr_opcode opcode, uint32_t rkey, uint64_t raddr, uint32_t imm) {
    if (s.build_mode == kBuildRecording) {
        if (s.pending.size() == s.pending.capacity()) flush_early(s, s.pending.size());
        // Data setters fill num_sge and bytes; wr_set_ud_addr the address handle and remote QPN.
        s.pending.push_back(WrRecord{q->wr_id, raddr, 0, q->wr_flags, 0, rkey, imm, 0, 0, static_cast<uint8_t>(opcode), 0});
    } else if (s.build_mode == kBuildCounting) {
        ++s.pending_count;
    }
}

inline WrRecord* current_wr(QpState& s) {
    return (s.build_mode == kBuildRecording && !s.pending.empty()) ? &s.pending.back() : nullptr;
}

inline void add_data(QpState& s, uint16_t num_sge, uint64_t bytes, bool inline_data) {
    if (WrRecord* r = current_wr(s)) {
        r->num_sge = num_sge;
        r->bytes = static_cast<uint32_t>(bytes);
        if (inline_data) r->send_flags |= IBV_SEND_INLINE;
    } else if (s.build_mode == kBuildCounting) {
        s.pending_bytes += bytes;
    }
}

// ------------------------------------------------------------------ opcode setters

void w_atomic_cmp_swp(ibv_qp_ex* q, uint32_t rkey, uint64_t raddr, uint64_t compare, uint64_t swap) {
    QpState& s = state_of(q);
    begin_wr(s, q, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, raddr, 0);
    s.orig.wr_atomic_cmp_swp(q, rkey, raddr, compare, swap);
}
void w_atomic_fetch_add(ibv_qp_ex* q, uint32_t rkey, uint64_t raddr, uint64_t add) {
    QpState& s = state_of(q);
    begin_wr(s, q, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, raddr, 0);
    s.orig.wr_atomic_fetch_add(q, rkey, raddr, add);
}
void w_bind_mw(ibv_qp_ex* q, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
    QpState& s = state_of(q);
    begin_wr(s, q, IBV_WR_BIND_MW, rkey, 0, 0);
    s.orig.wr_bind_mw(q, mw, rkey, info);
}
void w_local_inv(ibv_qp_ex* q, uint32_t rkey) {
    QpState& s = state_of(q);
    begin_wr(s, q, IBV_WR_LOCAL_INV, rkey, 0, 0);
    s.orig.wr_local_inv(q, rkey);
}
void w_rdma_read(ibv_qp_ex* q, uint32_t rkey, uint64_t raddr) {
    QpState& s = state_of(q);
    begin_wr(s, q, IBV_WR_RDMA_READ, rkey, raddr, 0);
    s.orig.wr_rdma_read(q, rkey, raddr);
}
void w_rdma_write(ibv_qp_ex* q, uint32_t rkey, uint64_t raddr) {
    QpState& s = state_of(q);
    begin_wr(s, q, IBV_WR_RDMA_WRITE, rkey, raddr, 0);
    s.orig.wr_rdma_write(q, rkey, raddr);
}
void w_rdma_write_imm(ibv_qp_ex* q, uint32_t rkey, uint64_t raddr, __be32 imm) {
    QpState& s = state_of(q);
    begin_wr(s, q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, raddr, imm);
    s.orig.wr_rdma_write_imm(q, rkey, raddr, imm);
}
void w_send(ibv_qp_ex* q) {
    QpState& s = state_of(q);
    begin_wr(s, q, IBV_WR_SEND, 0, 0, 0);
    s.orig.wr_send(q);
}
void w_send_imm(ibv_qp_ex* q, __be32 imm) {
    QpState& s = state_of(q);
    begin_wr(s, q, IBV_WR_SEND_WITH_IMM, 0, 0, imm);
    s.orig.wr_send_imm(q, imm);
}
void w_send_inv(ibv_qp_ex* q, uint32_t rkey) {
    QpState& s = state_of(q);
    begin_wr(s, q, IBV_WR_SEND_WITH_INV, rkey, 0, 0);
    s.orig.wr_send_inv(q, rkey);
}
void w_send_tso(ibv_qp_ex* q, void* hdr, uint16_t hdr_sz, uint16_t mss) {
    QpState& s = state_of(q);
    begin_wr(s, q, IBV_WR_TSO, 0, 0, 0);
    s.orig.wr_send_tso(q, hdr, hdr_sz, mss);
}
void w_atomic_write(ibv_qp_ex* q, uint32_t rkey, uint64_t raddr, const void* data) {
    QpState& s = state_of(q);
    begin_wr(s, q, IBV_WR_ATOMIC_WRITE, rkey, raddr, 0);
    add_data(s, 0, 8, false);  // an atomic write carries 8 bytes inline, no SGE
    s.orig.wr_atomic_write(q, rkey, raddr, data);
}

// ------------------------------------------------------------------ data setters

void w_set_ud_addr(ibv_qp_ex* q, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
    QpState& s = state_of(q);
    if (WrRecord* r = current_wr(s)) {
        r->ah = reinterpret_cast<uint64_t>(ah);
        r->remote_qpn = remote_qpn;
    }
    s.orig.wr_set_ud_addr(q, ah, remote_qpn, remote_qkey);
}
void w_set_xrc_srqn(ibv_qp_ex* q, uint32_t srqn) {
    state_of(q).orig.wr_set_xrc_srqn(q, srqn);
}
void w_set_inline_data(ibv_qp_ex* q, void* addr, size_t length) {
    QpState& s = state_of(q);
    add_data(s, 1, length, true);
    s.orig.wr_set_inline_data(q, addr, length);
}
void w_set_inline_data_list(ibv_qp_ex* q, size_t n, const ibv_data_buf* bufs) {
    QpState& s = state_of(q);
    if (s.build_mode != kBuildNothing) {
        uint64_t bytes = 0;
        for (size_t i = 0; i < n; ++i) bytes += bufs[i].length;
        add_data(s, static_cast<uint16_t>(n), bytes, true);
    }
    s.orig.wr_set_inline_data_list(q, n, bufs);
}
void w_set_sge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) {
    QpState& s = state_of(q);
    add_data(s, 1, length, false);
    s.orig.wr_set_sge(q, lkey, addr, length);
}
void w_set_sge_list(ibv_qp_ex* q, size_t n, const ibv_sge* sgl) {
    QpState& s = state_of(q);
    if (s.build_mode != kBuildNothing) {
        uint64_t bytes = 0;
        for (size_t i = 0; i < n; ++i) bytes += sgl[i].length;
        add_data(s, static_cast<uint16_t>(n), bytes, false);
    }
    s.orig.wr_set_sge_list(q, n, sgl);
}

// ------------------------------------------------------------------ list boundaries

void w_start(ibv_qp_ex* q) {
    QpState& s = state_of(q);
    const uint32_t f = data_path_flags();
    uint8_t mode = kBuildNothing;
    if ((f & kFlagSendEvents) && ST_TRACE_ENABLED(post_send)) mode = kBuildRecording;
    else if (f & kFlagCounting) mode = kBuildCounting;
    // The provider's wr_start first: it takes the send queue's lock, which serialises lists on one QP, so the
    // list state below is only touched by the thread whose list is open.
    s.orig.wr_start(q);
    if (mode == kBuildNothing && s.build_mode == kBuildNothing) return;  // untraced: nothing to reset
    s.pending.clear();
    s.pending_emitted = 0;
    s.pending_count = 0;
    s.pending_bytes = 0;
    s.build_mode = mode;
}

// The end of a recorded list, once its WRs are copied out of the QP's state: resets that state and returns the
// index of the copied WRs' first one in the list.
inline uint32_t release_list(QpState& s) noexcept {
    const uint32_t first_index = s.pending_emitted;
    s.pending.clear();
    s.build_mode = kBuildNothing;
    return first_index;
}

// Rings the doorbell (the provider's wr_complete) and records the list's copied-out WRs with its result.
inline int complete_and_record(QpState& s, ibv_qp_ex* q, const WrRecord* wrs, uint32_t n, uint32_t first_index) {
    if (data_path_flags() & kFlagDefer) {
        const uint64_t ts = capture_ticks();  // before the doorbell rings (deferred_capture.h)
        const int ret = s.orig.wr_complete(q);
        defer_wr_list(ts, s, wrs, n, first_index, ret);
        return ret;
    }
    const int ret = s.orig.wr_complete(q);
    trace_wr_list(s, wrs, n, first_index, ret);
    return ret;
}

// wr_complete of a recorded list of any length but one (w_complete copies a one-WR list itself).
__attribute__((noinline)) int complete_list(QpState& s, ibv_qp_ex* q) {
    if (s.pending.size() > kWrTailCopy) {
        // Everything but the last kWrTailCopy WRs, reported now (ret 0; the tail's event carries the result).
        const size_t keep = s.pending.size() % kWrTailCopy == 0 ? kWrTailCopy : s.pending.size() % kWrTailCopy;
        flush_early(s, s.pending.size() - keep);
    }
    WrRecord tail[kWrTailCopy];
    const uint32_t n = static_cast<uint32_t>(s.pending.size());
    std::copy_n(s.pending.data(), n, tail);
    const uint32_t first_index = release_list(s);
    return complete_and_record(s, q, tail, n, first_index);
}

int w_complete(ibv_qp_ex* q) {
    QpState& s = state_of(q);
    const uint8_t mode = s.build_mode;
    if (mode == kBuildNothing) return s.orig.wr_complete(q);
    // The provider's wr_complete releases the send queue's lock: from then on another thread may start a list
    // on this QP. So everything is taken out of the QP's list state before the call: the list's last (or only)
    // part is copied out (longer lists have their earlier parts emitted first, as when a list outgrows its
    // buffer, flush_early), and the state is reset.
    if (mode == kBuildCounting) {
        const uint32_t count = s.pending_count;
        const uint64_t bytes = s.pending_bytes;
        s.build_mode = kBuildNothing;
        const int ret = s.orig.wr_complete(q);
        if (ret == 0) s.counters.add_posted(count, bytes, 0, 0);
        else s.counters.add_posted(0, 0, 0, 1);
        return ret;
    }
    if (s.pending.size() != 1) [[unlikely]] return complete_list(s, q);
    // One WR, every message's list in a latency-bound program: copied as one struct, in a small frame
    // (complete_list's copy of up to 32 WRs is a memmove call in a 1.5 KiB frame, before the doorbell).
    const WrRecord one = s.pending.front();
    const uint32_t first_index = release_list(s);
    return complete_and_record(s, q, &one, 1, first_index);
}

void w_abort(ibv_qp_ex* q) {
    QpState& s = state_of(q);
    s.build_mode = kBuildNothing;
    s.pending.clear();
    s.orig.wr_abort(q);
}

// (member, wrapper, IBV_QP_EX_WITH_* flag that makes the member usable; 0 = always present)
#define ST_QPX_MEMBERS(X)                                               \
    X(wr_atomic_cmp_swp, w_atomic_cmp_swp, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP) \
    X(wr_atomic_fetch_add, w_atomic_fetch_add, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) \
    X(wr_bind_mw, w_bind_mw, IBV_QP_EX_WITH_BIND_MW)                    \
    X(wr_local_inv, w_local_inv, IBV_QP_EX_WITH_LOCAL_INV)              \
    X(wr_rdma_read, w_rdma_read, IBV_QP_EX_WITH_RDMA_READ)              \
    X(wr_rdma_write, w_rdma_write, IBV_QP_EX_WITH_RDMA_WRITE)           \
    X(wr_rdma_write_imm, w_rdma_write_imm, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) \
    X(wr_send, w_send, IBV_QP_EX_WITH_SEND)                             \
    X(wr_send_imm, w_send_imm, IBV_QP_EX_WITH_SEND_WITH_IMM)            \
    X(wr_send_inv, w_send_inv, IBV_QP_EX_WITH_SEND_WITH_INV)            \
    X(wr_send_tso, w_send_tso, IBV_QP_EX_WITH_TSO)                      \
    X(wr_atomic_write, w_atomic_write, IBV_QP_EX_WITH_ATOMIC_WRITE)     \
    X(wr_set_ud_addr, w_set_ud_addr, 0)                                 \
    X(wr_set_xrc_srqn, w_set_xrc_srqn, 0)                               \
    X(wr_set_inline_data, w_set_inline_data, 0)                         \
    X(wr_set_inline_data_list, w_set_inline_data_list, 0)               \
    X(wr_set_sge, w_set_sge, 0)                                         \
    X(wr_set_sge_list, w_set_sge_list, 0)                               \
    X(wr_start, w_start, 0)                                             \
    X(wr_complete, w_complete, 0)                                       \
    X(wr_abort, w_abort, 0)

void apply(QpState& s, ibv_qp_ex* qpx, uint64_t ops) {
#define ST_APPLY_(member, wrapper, flag)                                        \
    if (((flag) == 0 || (ops & static_cast<uint64_t>(flag)) != 0) && qpx->member != nullptr && \
        qpx->member != &wrapper) {                                              \
        s.orig.member = qpx->member;                                            \
        qpx->member = &wrapper;                                                 \
    }
    ST_QPX_MEMBERS(ST_APPLY_)
#undef ST_APPLY_
}

}  // namespace

void wrap_qp_ex(QpState& s, ibv_qp_ex* qpx, uint64_t send_ops_flags, uint32_t max_wrs) {
    if (qpx == nullptr) return;
    if (s.qpx == nullptr) {
        // Sized once, here: the data path only appends up to capacity (flush_early beyond).
        s.pending.reserve(std::clamp<uint32_t>(max_wrs, 32, 8192));
        s.qpx = qpx;
        s.wrapped_send_ops = send_ops_flags;
    }
    apply(s, qpx, s.wrapped_send_ops);
}

void rewrap_qp_ex(QpState& s) {
    if (s.qpx != nullptr) apply(s, s.qpx, s.wrapped_send_ops);
}

}  // namespace sigmatrace::interpose
