#include "interpose/capture/deferred_capture.h"

#include <algorithm>
#include <cstring>

#include "interpose/runtime/config.h"
#include "interpose/capture/record_builder.h"
#include "interpose/datapath/wr_fields.h"

namespace sigmatrace::interpose {
namespace {

using namespace deferred;
using namespace record_builder;
constexpr uint64_t kEverything = UINT64_MAX;

// The producer's estimate of its ring's oldest record (capture time); its age decides when the data path
// drains its own ring (a busy thread that never idles still gets its events out within the bound).
__thread uint64_t tls_oldest_hint __attribute__((tls_model("initial-exec"))) = 0;

// Room for one record in the calling thread's ring. Full: the thread drains its own ring (the data path pays,
// rarely: a ring holds thousands of records). nullptr only without memory for a ring (counted).
__attribute__((noinline)) RecordHeader* reserve_slow(Ring* r, uint32_t size) noexcept {
    if (r == nullptr) r = ring_for_this_thread();
    if (r == nullptr) {
        note_dropped_record();
        return nullptr;
    }
    RecordHeader* h = r->reserve(size);
    if (h == nullptr) {
        drain_own(kEverything, UINT32_MAX, Wait::briefly);
        h = r->reserve(size);
        tls_oldest_hint = 0;
    }
    if (h == nullptr) note_dropped_record();
    return h;
}

// Room in the calling thread's ring without a call: nullptr when it has no ring yet or the ring is full. The
// one-entry fast paths below use it and hand every other case to their general path with a tail call, so they
// make no call of their own (no registers to save, no frame: message_footprint.sh counts the difference).
inline RecordHeader* try_reserve(uint32_t size) noexcept {
    Ring* r = tls_ring;
    return r != nullptr ? r->reserve_fast(size) : nullptr;
}

inline RecordHeader* reserve(uint32_t size) noexcept {
    Ring* r = tls_ring;
    RecordHeader* h = r != nullptr ? r->reserve(size) : nullptr;
    return h != nullptr ? h : reserve_slow(r, size);
}

// The oldest record may be older than the bound: look, and drain if so (unless another consumer is at it).
__attribute__((noinline)) void age_check(uint64_t now) noexcept {
    Ring* r = tls_ring;
    uint64_t oldest = r->oldest_ts();
    if (oldest != 0 && now > oldest && now - oldest > defer_max_age_ticks()) {
        drain_own(kEverything, UINT32_MAX, Wait::no);
        oldest = r->oldest_ts();
    }
    tls_oldest_hint = oldest != 0 ? oldest : now;
}

inline void commit(RecordHeader* h) noexcept {
    tls_ring->commit(h);
    if (h->ts - tls_oldest_hint > defer_max_age_ticks()) [[unlikely]] age_check(h->ts);
}

// The builder's target (record_builder.h): the calling thread's ring.
struct ToRing {
    RecordHeader* begin(uint32_t size) const noexcept { return reserve(size); }
    void commit(RecordHeader* h) const noexcept { interpose::commit(h); }
};

// A one-entry record in the ring's free space, or nullptr (then the caller takes its general path).
template <typename Fixed, typename Entry> RecordHeader* try_begin_one(RecordKind kind, uint64_t ts) noexcept {
    constexpr uint32_t kSize = record_size<Fixed, Entry>(1);
    RecordHeader* h = try_reserve(kSize);
    if (h != nullptr) set_header(h, kSize, kind, 1, ts);
    return h;
}

// Chains of any length (and the empty one): a record per SIGMATRACE_MAX_BATCH WRs. Also a one-WR chain that
// the fast path below could not reserve for (no ring yet, or a full one). The fast path's own arguments, so
// that it reaches here by a tail call.
template <RecordKind kKind, typename Handle>
__attribute__((noinline)) int defer_recv_chain_long(uint64_t ts, Handle* handle, const ibv_recv_wr* wr, int ret,
                                                    ibv_recv_wr* const* bad_wr) noexcept {
    return build_post_recv<kKind>(ToRing{}, ts, handle, wr, ret, bad_wr);
}

// The common case, one WR, straight-line: in a latency-bound program the repost is on the message's path, and
// the chain loop's bookkeeping (and the registers it saves) cost about as much as the copy itself.
template <RecordKind kKind, typename Handle>
inline int defer_recv_chain(uint64_t ts, Handle* handle, const ibv_recv_wr* wr, int ret,
                             ibv_recv_wr* const* bad_wr) noexcept {
    RecordHeader* h = nullptr;
    if (wr == nullptr || wr->next != nullptr || (h = try_begin_one<RecvFixed, RecvEntry>(kKind, ts)) == nullptr)
        [[unlikely]] return defer_recv_chain_long<kKind>(ts, handle, wr, ret, bad_wr);
    *fixed_part<RecvFixed>(h) =
        RecvFixed{reinterpret_cast<uint64_t>(handle), recv_qp_num(handle), ret, bad_index_of(wr, ret, bad_wr), 0};
    copy_recv_entry(*entries<RecvFixed, RecvEntry>(h), *wr);
    commit(h);
    return ret;
}

}  // namespace

__thread uint32_t tls_idle_polls __attribute__((tls_model("initial-exec"))) = 0;

int defer_post_send(uint64_t ts, ibv_qp* qp, const ibv_send_wr* wr, int ret, ibv_send_wr* const* bad_wr) noexcept {
    return build_post_send(ToRing{}, ts, QpOf{qp}, wr, ret, bad_wr);
}

int defer_post_recv(uint64_t ts, ibv_qp* qp, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept {
    return defer_recv_chain<RecordKind::post_recv>(ts, qp, wr, ret, bad_wr);
}

int defer_post_srq_recv(uint64_t ts, ibv_srq* srq, const ibv_recv_wr* wr, int ret,
                        ibv_recv_wr* const* bad_wr) noexcept {
    return defer_recv_chain<RecordKind::post_srq_recv>(ts, srq, wr, ret, bad_wr);
}

namespace {

inline SendFixed wr_list_fixed(const QpState& s, int ret, uint32_t batch_offset) noexcept {
    return record_builder::wr_list_fixed(reinterpret_cast<uint64_t>(s.qp.load(std::memory_order_relaxed)),
                                         s.qp_num.load(std::memory_order_relaxed), ret, batch_offset);
}

// Lists of any length, and a one-WR list the fast path could not reserve for.
__attribute__((noinline)) void defer_wr_list_general(uint64_t ts, const QpState& s, const WrRecord* records,
                                                     uint32_t n_total, uint32_t first_index, int ret) noexcept {
    build_wr_list(ToRing{}, ts, reinterpret_cast<uint64_t>(s.qp.load(std::memory_order_relaxed)),
                  s.qp_num.load(std::memory_order_relaxed), records, n_total, first_index, ret);
}

}  // namespace

void defer_wr_list(uint64_t ts, const QpState& s, const WrRecord* records, uint32_t n_total, uint32_t first_index,
                   int ret) noexcept {
    // One WR: its entry copied as a struct (a memcpy of a variable size is a call).
    RecordHeader* h = nullptr;
    if (n_total != 1 || (h = try_begin_one<SendFixed, SendEntry>(RecordKind::post_send, ts)) == nullptr) [[unlikely]]
        return defer_wr_list_general(ts, s, records, n_total, first_index, ret);
    *fixed_part<SendFixed>(h) = wr_list_fixed(s, ret, first_index);
    *entries<SendFixed, SendEntry>(h) = records[0];
    commit(h);
}

RecordHeader* defer_wr_one_begin(uint64_t ts, const QpState& s, const WrRecord& wr, uint32_t first_index) noexcept {
    RecordHeader* h = try_begin_one<SendFixed, SendEntry>(RecordKind::post_send, ts);
    if (h == nullptr) [[unlikely]] return nullptr;
    *fixed_part<SendFixed>(h) = wr_list_fixed(s, 0, first_index);  // a success until finish says otherwise
    *entries<SendFixed, SendEntry>(h) = wr;
    // No age check here (finish does it): a drain now would delay the doorbell. Not published when another
    // record of this thread is unfinished (a wr_complete inside a provider's wr_complete): then the space is
    // simply reserved again by the next record, and the caller records after the call.
    return tls_ring->commit_unfinished(h) ? h : nullptr;
}

void defer_wr_one_finish(RecordHeader* h, uint64_t ts, int ret) noexcept {
    if (ret != 0) [[unlikely]] {  // only a failure touches the record again (its lines left L1 in the call)
        SendFixed* f = fixed_part<SendFixed>(h);
        f->ret = ret;
        f->bad_index = 0;
    }
    tls_ring->finish();
    if (ts - tls_oldest_hint > defer_max_age_ticks()) [[unlikely]] age_check(ts);
}

namespace {

// Polls of several completions (or none, or a failed poll): a record per SIGMATRACE_MAX_BATCH completions. Also
// a one-completion poll that the fast path could not record without a call (the clock or the ring).
__attribute__((noinline)) int defer_poll_cq_general(ibv_cq* cq, const ibv_wc* wc, int ret) noexcept {
    return build_poll_cq(ToRing{}, capture_ticks(), handle_of(cq), wc, ret);
}

}  // namespace

int defer_poll_cq(ibv_cq* cq, const ibv_wc* wc, int ret) noexcept {
    // One completion, straight-line (as defer_recv_chain's one WR): the poll that returns a message's receive.
    uint64_t ts = 0;
    RecordHeader* h = nullptr;
    if (ret != 1 || !capture_clock::now_ticks_without_call(ts) ||
        (h = try_begin_one<PollFixed, CompletionEntry>(RecordKind::poll_cq, ts)) == nullptr) [[unlikely]]
        return defer_poll_cq_general(cq, wc, ret);
    *fixed_part<PollFixed>(h) = PollFixed{reinterpret_cast<uint64_t>(cq), 1, kApiPollCq};
    copy_completion(*entries<PollFixed, CompletionEntry>(h), wc[0]);
    commit(h);
    return ret;
}

void defer_completion_batch(uint64_t ts, const void* cq, const CompletionBatch& b) noexcept {
    build_completion_batch(ToRing{}, ts, handle_of(cq), b);
}

void deferred_idle_drain() noexcept {
    // Reached once per kIdleAgeCheckEvery empty polls with records waiting (deferred_idle): is the oldest half
    // the age bound old?
    const uint64_t now = capture_ticks();
    if (now - tls_oldest_hint < defer_max_age_ticks() / 2) return;
    deferred_idle_drain_all(now);
}

void deferred_idle_drain_all(uint64_t now) noexcept {
    drain_own(kEverything, UINT32_MAX, Wait::no);
    // Emptied: the next record will be the oldest, and it is captured after now.
    if (!tls_ring->has_pending()) tls_oldest_hint = now != 0 ? now : capture_ticks();
}

void deferred_flush_own() noexcept {
    if (tls_ring == nullptr) return;
    drain_own(kEverything, UINT32_MAX, Wait::yes);
}

}  // namespace sigmatrace::interpose
