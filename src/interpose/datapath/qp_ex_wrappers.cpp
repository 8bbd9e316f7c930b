#include "interpose/datapath/qp_ex_wrappers.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "interpose/runtime/config.h"
#include "interpose/capture/data_events.h"
#include "interpose/capture/deferred_capture.h"
#include "provider/trace.h"

namespace sigmatrace::interpose {
namespace {

// A QP's list state (WrList::mode). A list opens at its first WR, not at wr_start, which is not wrapped: the
// provider's wr_start is called directly, and what the list records is decided when its first opcode setter
// (or, for an empty list, wr_complete) comes. Every list a message posts saves a wrapped call that way.
// wr_complete and wr_abort close the list. A second wr_start without either leaves the first one's WRs in the
// next list's record, which is what the hardware gets too where a provider allows it (mlx5 without locking:
// its wr_start keeps the WQEs already written, and the next doorbell covers them).
constexpr uint8_t kListClosed = WrList::kClosed;  // no list, or one whose first WR has not come yet
constexpr uint8_t kBuildRecording = 1;
constexpr uint8_t kBuildCounting = 2;
constexpr uint8_t kBuildNothing = 3;

// What a list opening now records (one flags load; the tracepoint's own "enabled" load when tracing).
inline uint8_t opening_mode() noexcept {
    const uint32_t f = data_path_flags();
    if ((f & kFlagSendEvents) && ST_TRACE_ENABLED(post_send)) return kBuildRecording;
    return (f & kFlagCounting) ? kBuildCounting : kBuildNothing;
}

// Whether the open list records or counts what its data setters add.
inline bool builds(const WrList& l) noexcept {
    return l.mode == kBuildRecording || l.mode == kBuildCounting;
}
// wr_complete copies at most this many WRs of a list out of the QP's state (one event's worth, on the stack).
constexpr size_t kWrTailCopy = SIGMATRACE_MAX_BATCH;

// The wrappers find their QP's state in the thread's one-entry cache (object_state.h). On a miss they call
// this instead, with their own arguments (a tail call): the lookup, out of line, then the wrapper again, which
// now hits. So a wrapper's hit path makes no call before its tail call to the provider, and keeps no frame or
// saved registers for the lookup (message_footprint.sh counts the difference).
template <auto kWrapper, typename... A> __attribute__((noinline)) auto after_lookup(ibv_qp_ex* q, A... a) {
    if (qp_state_lookup(q) == nullptr) fatal_missing_state("ibv_wr_* call", "QP", q);
    return kWrapper(q, a...);
}

inline QpState* cached_state(const ibv_qp_ex* q) noexcept {
    QpState* s = tls_last_qp;
    return (s != nullptr && s->qp.load(std::memory_order_relaxed) == reinterpret_cast<const void*>(q)) ? s : nullptr;
}

// The opening of every wrapper below: `s`, the QP's state, from the thread's cache; on a miss the wrapper
// returns what re-entering it after the lookup returns (after_lookup, with the arguments it was given).
#define ST_STATE_OR_REENTER(self, ...)                                                          \
    QpState* const state_ = cached_state(q);                                                   \
    if (state_ == nullptr) [[unlikely]] return after_lookup<self>(q __VA_OPT__(, ) __VA_ARGS__); \
    QpState& s = *state_

// Emits the first `n` WRs of the list being built, reported with ret 0 (the list's last event, at wr_complete,
// carries its real result): all of them when the list outgrows its buffer (more WRs between wr_start and
// wr_complete than the send queue depth: the provider will fail the list, but the record must not allocate),
// and at wr_complete all but the last part that wr_complete copies out.
__attribute__((noinline)) void flush_early(QpState& s, uint32_t n) noexcept {
    WrList& l = s.list;
    if (data_path_flags() & kFlagDefer) defer_wr_list(capture_ticks(), s, l.wrs, n, l.emitted, 0);
    else emit_wr_list(s, l.wrs, n, l.emitted, 0);
    l.emitted += n;
    std::copy(l.wrs + n, l.wrs + l.size, l.wrs);
    l.size -= n;
}

// Inline in every opcode setter: recording, a bounds test and the entry's stores (a full buffer is emitted
// first, out of line); counting, an increment; nothing, one compare.
inline void begin_wr(QpState& s, const ibv_qp_ex* q, ibv_wr_opcode opcode, uint32_t rkey, uint64_t raddr, uint32_t imm) {
    WrList& l = s.list;
    if (l.mode == kListClosed) l.mode = opening_mode();  // the list's first WR
    if (l.mode == kBuildRecording) {
        if (l.size == l.capacity) [[unlikely]] flush_early(s, l.size);
        // Data setters fill num_sge and bytes; wr_set_ud_addr the address handle and remote QPN.
        l.wrs[l.size++] = WrRecord{q->wr_id, raddr, 0, q->wr_flags, 0, rkey, imm, 0, 0, static_cast<uint8_t>(opcode), 0};
    } else if (l.mode == kBuildCounting) {
        ++l.count;
    }
}

inline WrRecord* current_wr(QpState& s) {
    WrList& l = s.list;
    return (l.mode == kBuildRecording && l.size != 0) ? &l.wrs[l.size - 1] : nullptr;
}

inline void add_data(QpState& s, uint16_t num_sge, uint64_t bytes, bool inline_data) {
    if (WrRecord* r = current_wr(s)) {
        r->num_sge = num_sge;
        r->bytes = static_cast<uint32_t>(bytes);
        if (inline_data) r->send_flags |= IBV_SEND_INLINE;
    } else if (s.list.mode == kBuildCounting) {
        s.list.bytes += bytes;
    }
}

// A list of inline buffers or SGEs (both have `length`): its count and its total length, summed only when the
// list is being built.
template <typename Item> inline void add_data_list(QpState& s, size_t n, const Item* items, bool inline_data) {
    if (!builds(s.list)) return;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; ++i) bytes += items[i].length;
    add_data(s, static_cast<uint16_t>(n), bytes, inline_data);
}

// ------------------------------------------------------------------ opcode setters

void w_atomic_cmp_swp(ibv_qp_ex* q, uint32_t rkey, uint64_t raddr, uint64_t compare, uint64_t swap) {
    ST_STATE_OR_REENTER(w_atomic_cmp_swp, rkey, raddr, compare, swap);
    begin_wr(s, q, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, raddr, 0);
    s.orig.wr_atomic_cmp_swp(q, rkey, raddr, compare, swap);
}
void w_atomic_fetch_add(ibv_qp_ex* q, uint32_t rkey, uint64_t raddr, uint64_t add) {
    ST_STATE_OR_REENTER(w_atomic_fetch_add, rkey, raddr, add);
    begin_wr(s, q, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, raddr, 0);
    s.orig.wr_atomic_fetch_add(q, rkey, raddr, add);
}
void w_bind_mw(ibv_qp_ex* q, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
    ST_STATE_OR_REENTER(w_bind_mw, mw, rkey, info);
    begin_wr(s, q, IBV_WR_BIND_MW, rkey, 0, 0);
    s.orig.wr_bind_mw(q, mw, rkey, info);
}
void w_local_inv(ibv_qp_ex* q, uint32_t rkey) {
    ST_STATE_OR_REENTER(w_local_inv, rkey);
    begin_wr(s, q, IBV_WR_LOCAL_INV, rkey, 0, 0);
    s.orig.wr_local_inv(q, rkey);
}
void w_rdma_read(ibv_qp_ex* q, uint32_t rkey, uint64_t raddr) {
    ST_STATE_OR_REENTER(w_rdma_read, rkey, raddr);
    begin_wr(s, q, IBV_WR_RDMA_READ, rkey, raddr, 0);
    s.orig.wr_rdma_read(q, rkey, raddr);
}
void w_rdma_write(ibv_qp_ex* q, uint32_t rkey, uint64_t raddr) {
    ST_STATE_OR_REENTER(w_rdma_write, rkey, raddr);
    begin_wr(s, q, IBV_WR_RDMA_WRITE, rkey, raddr, 0);
    s.orig.wr_rdma_write(q, rkey, raddr);
}
void w_rdma_write_imm(ibv_qp_ex* q, uint32_t rkey, uint64_t raddr, __be32 imm) {
    ST_STATE_OR_REENTER(w_rdma_write_imm, rkey, raddr, imm);
    begin_wr(s, q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, raddr, imm);
    s.orig.wr_rdma_write_imm(q, rkey, raddr, imm);
}
void w_send(ibv_qp_ex* q) {
    ST_STATE_OR_REENTER(w_send);
    begin_wr(s, q, IBV_WR_SEND, 0, 0, 0);
    s.orig.wr_send(q);
}
void w_send_imm(ibv_qp_ex* q, __be32 imm) {
    ST_STATE_OR_REENTER(w_send_imm, imm);
    begin_wr(s, q, IBV_WR_SEND_WITH_IMM, 0, 0, imm);
    s.orig.wr_send_imm(q, imm);
}
void w_send_inv(ibv_qp_ex* q, uint32_t rkey) {
    ST_STATE_OR_REENTER(w_send_inv, rkey);
    begin_wr(s, q, IBV_WR_SEND_WITH_INV, rkey, 0, 0);
    s.orig.wr_send_inv(q, rkey);
}
void w_send_tso(ibv_qp_ex* q, void* hdr, uint16_t hdr_sz, uint16_t mss) {
    ST_STATE_OR_REENTER(w_send_tso, hdr, hdr_sz, mss);
    begin_wr(s, q, IBV_WR_TSO, 0, 0, 0);
    s.orig.wr_send_tso(q, hdr, hdr_sz, mss);
}
void w_atomic_write(ibv_qp_ex* q, uint32_t rkey, uint64_t raddr, const void* data) {
    ST_STATE_OR_REENTER(w_atomic_write, rkey, raddr, data);
    begin_wr(s, q, IBV_WR_ATOMIC_WRITE, rkey, raddr, 0);
    add_data(s, 0, 8, false);  // an atomic write carries 8 bytes inline, no SGE
    s.orig.wr_atomic_write(q, rkey, raddr, data);
}

// ------------------------------------------------------------------ data setters

void w_set_ud_addr(ibv_qp_ex* q, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
    ST_STATE_OR_REENTER(w_set_ud_addr, ah, remote_qpn, remote_qkey);
    if (WrRecord* r = current_wr(s)) {
        r->ah = reinterpret_cast<uint64_t>(ah);
        r->remote_qpn = remote_qpn;
    }
    s.orig.wr_set_ud_addr(q, ah, remote_qpn, remote_qkey);
}
void w_set_xrc_srqn(ibv_qp_ex* q, uint32_t srqn) {
    ST_STATE_OR_REENTER(w_set_xrc_srqn, srqn);
    s.orig.wr_set_xrc_srqn(q, srqn);
}
void w_set_inline_data(ibv_qp_ex* q, void* addr, size_t length) {
    ST_STATE_OR_REENTER(w_set_inline_data, addr, length);
    add_data(s, 1, length, true);
    s.orig.wr_set_inline_data(q, addr, length);
}
void w_set_inline_data_list(ibv_qp_ex* q, size_t n, const ibv_data_buf* bufs) {
    ST_STATE_OR_REENTER(w_set_inline_data_list, n, bufs);
    add_data_list(s, n, bufs, true);
    s.orig.wr_set_inline_data_list(q, n, bufs);
}
void w_set_sge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) {
    ST_STATE_OR_REENTER(w_set_sge, lkey, addr, length);
    add_data(s, 1, length, false);
    s.orig.wr_set_sge(q, lkey, addr, length);
}
void w_set_sge_list(ibv_qp_ex* q, size_t n, const ibv_sge* sgl) {
    ST_STATE_OR_REENTER(w_set_sge_list, n, sgl);
    add_data_list(s, n, sgl, false);
    s.orig.wr_set_sge_list(q, n, sgl);
}

// ------------------------------------------------------------------ list boundaries

// The end of a recorded list, once its WRs are copied out of the QP's state: resets that state and returns the
// index of the copied WRs' first one in the list.
inline uint32_t release_list(QpState& s) noexcept {
    const uint32_t first_index = s.list.emitted;
    s.list.close();
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
    emit_wr_list(s, wrs, n, first_index, ret);
    return ret;
}

// wr_complete of a recorded list of any length but one (w_complete copies a one-WR list itself).
__attribute__((noinline)) int complete_list(QpState& s, ibv_qp_ex* q) {
    WrList& l = s.list;
    if (l.size > kWrTailCopy) {
        // Everything but the last kWrTailCopy WRs, reported now (ret 0; the tail's event carries the result).
        const uint32_t keep = l.size % kWrTailCopy == 0 ? kWrTailCopy : l.size % kWrTailCopy;
        flush_early(s, l.size - keep);
    }
    WrRecord tail[kWrTailCopy];
    const uint32_t n = l.size;
    std::copy_n(l.wrs, n, tail);
    const uint32_t first_index = release_list(s);
    return complete_and_record(s, q, tail, n, first_index);
}

// wr_complete of a list that was recorded or counted. Out of line: its frame and saved registers are then
// not paid by wr_complete when nothing is recorded (the compiler set them up before the mode test).
__attribute__((noinline)) int complete_built(QpState& s, ibv_qp_ex* q) {
    if (s.list.mode == kListClosed) {  // a list without WRs: recorded (or counted) as one, if anything is
        s.list.mode = opening_mode();
        if (s.list.mode == kBuildNothing) {
            s.list.close();
            return s.orig.wr_complete(q);
        }
    }
    // The provider's wr_complete releases the send queue's lock: from then on another thread may start a list
    // on this QP. So everything is taken out of the QP's list state before the call: the list's last (or only)
    // part is copied out (longer lists have their earlier parts emitted first, as when a list outgrows its
    // buffer, flush_early), and the state is reset.
    if (s.list.mode == kBuildCounting) {
        const uint32_t count = s.list.count;
        const uint64_t bytes = s.list.bytes;
        s.list.close();
        const int ret = s.orig.wr_complete(q);
        if (ret == 0) s.counters.add_posted(count, bytes, 0, 0);
        else s.counters.add_posted(0, 0, 0, 1);
        return ret;
    }
    if (s.list.size != 1) [[unlikely]] return complete_list(s, q);
    // One WR, every message's list in a latency-bound program and every WRITE of ib_write_bw: deferred, its
    // record is written into the ring before the doorbell and finished with the result after it
    // (deferred_capture.h says why).
    if (data_path_flags() & kFlagDefer) [[likely]] {
        const uint64_t ts = capture_ticks();
        if (deferred::RecordHeader* h = defer_wr_one_begin(ts, s, s.list.wrs[0], s.list.emitted)) [[likely]] {
            s.list.close();
            const int ret = s.orig.wr_complete(q);
            defer_wr_one_finish(h, ts, ret);
            return ret;
        }
    }
    // Otherwise copied as one struct, in a small frame (complete_list's copy of up to 32 WRs is a memmove call
    // in a 1.5 KiB frame, before the doorbell), and recorded after the call.
    const WrRecord one = s.list.wrs[0];
    const uint32_t first_index = release_list(s);
    return complete_and_record(s, q, &one, 1, first_index);
}

int w_complete(ibv_qp_ex* q) {
    ST_STATE_OR_REENTER(w_complete);
    if (s.list.mode == kBuildNothing) {  // nothing recorded: the list had only to be closed
        s.list.mode = kListClosed;
        return s.orig.wr_complete(q);
    }
    return complete_built(s, q);
}

void w_abort(ibv_qp_ex* q) {
    ST_STATE_OR_REENTER(w_abort);
    s.list.close();
    s.orig.wr_abort(q);
}

#undef ST_STATE_OR_REENTER

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
        // Sized here: the data path only appends up to capacity (flush_early beyond). A reused state keeps a
        // buffer that is large enough.
        const uint32_t capacity = std::clamp<uint32_t>(max_wrs, 32, 8192);
        if (s.list.capacity < capacity) {
            s.wr_storage = std::make_unique<WrRecord[]>(capacity);
            s.list.wrs = s.wr_storage.get();
            s.list.capacity = capacity;
        }
        s.qpx = qpx;
        s.wrapped_send_ops = send_ops_flags;
    }
    apply(s, qpx, s.wrapped_send_ops);
}

void rewrap_qp_ex(QpState& s) {
    if (s.qpx != nullptr) apply(s, s.qpx, s.wrapped_send_ops);
}

}  // namespace sigmatrace::interpose
