#include "interpose/deferred_capture.h"

#include <algorithm>
#include <cstring>

#include "interpose/config.h"
#include "interpose/wr_fields.h"

namespace sigmatrace::interpose {
namespace {

using namespace deferred;

constexpr uint32_t kBatch = SIGMATRACE_MAX_BATCH;
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
        drain_own(kEverything, UINT32_MAX, Wait::yes);
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

inline void set_header(RecordHeader* h, uint32_t size, RecordKind kind, uint32_t n, uint64_t ts) noexcept {
    h->size = size;
    h->kind = kind;
    h->n = static_cast<uint16_t>(n);
    h->ts = ts;
}

template <typename Fixed, typename Entry>
RecordHeader* begin_record(RecordKind kind, uint32_t n, uint64_t ts) noexcept {
    const uint32_t size = record_size<Fixed, Entry>(n);
    RecordHeader* h = reserve(size);
    if (h != nullptr) set_header(h, size, kind, n, ts);
    return h;
}

// A one-entry record in the ring's free space, or nullptr (then the caller takes its general path).
template <typename Fixed, typename Entry> RecordHeader* try_begin_one(RecordKind kind, uint64_t ts) noexcept {
    constexpr uint32_t kSize = record_size<Fixed, Entry>(1);
    RecordHeader* h = try_reserve(kSize);
    if (h != nullptr) set_header(h, kSize, kind, 1, ts);
    return h;
}

template <typename Wr> uint32_t chain_length(const Wr* wr) noexcept {
    uint32_t n = 0;
    for (const Wr* w = wr; w != nullptr; w = w->next) ++n;
    return n;
}

inline void copy_recv_entry(RecvEntry& e, const ibv_recv_wr& w) noexcept {
    e.wr_id = w.wr_id;
    e.bytes = sge_bytes(w.sg_list, w.num_sge);
    e.num_sge = static_cast<uint16_t>(w.num_sge);
    e.pad = 0;
}

// The QP number a receive record carries: an SRQ's receives belong to no QP until they complete.
inline uint32_t recv_qp_num(const ibv_qp* qp) noexcept { return qp->qp_num; }
inline uint32_t recv_qp_num(const ibv_srq*) noexcept { return 0; }

// Chains of any length (and the empty one): a record per SIGMATRACE_MAX_BATCH WRs. Also a one-WR chain that
// the fast path below could not reserve for (no ring yet, or a full one). The fast path's own arguments, so
// that it reaches here by a tail call.
template <RecordKind kKind, typename Handle>
__attribute__((noinline)) int defer_recv_chain_long(uint64_t ts, Handle* handle, const ibv_recv_wr* wr, int ret,
                                                    ibv_recv_wr* const* bad_wr) noexcept {
    const uint32_t qp_num = recv_qp_num(handle);
    const uint32_t total = chain_length(wr);
    const int32_t bad_index = bad_index_of(wr, ret, bad_wr);
    const ibv_recv_wr* w = wr;
    uint32_t offset = 0;
    do {  // one record per SIGMATRACE_MAX_BATCH WRs; an empty chain is one record of n = 0, as when immediate
        const uint32_t n = std::min(total - offset, kBatch);
        RecordHeader* h = begin_record<RecvFixed, RecvEntry>(kKind, n, ts);
        if (h == nullptr) return ret;
        *fixed_part<RecvFixed>(h) = RecvFixed{reinterpret_cast<uint64_t>(handle), qp_num, ret, bad_index, offset};
        RecvEntry* e = entries<RecvFixed, RecvEntry>(h);
        for (uint32_t i = 0; i < n; ++i, w = w->next) copy_recv_entry(e[i], *w);
        commit(h);
        offset += n;
    } while (offset < total);
    return ret;
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
    const uint32_t total = chain_length(wr);
    const int32_t bad_index = bad_index_of(wr, ret, bad_wr);
    const bool ud = qp->qp_type == IBV_QPT_UD;
    const ibv_send_wr* w = wr;
    uint32_t offset = 0;
    do {
        const uint32_t n = std::min(total - offset, kBatch);
        RecordHeader* h = begin_record<SendFixed, SendEntry>(RecordKind::post_send, n, ts);
        if (h == nullptr) return ret;
        *fixed_part<SendFixed>(h) = SendFixed{reinterpret_cast<uint64_t>(qp), qp->qp_num, ret, bad_index, 0, offset, 0};
        SendEntry* e = entries<SendFixed, SendEntry>(h);
        for (uint32_t i = 0; i < n; ++i, w = w->next) {
            const RemoteTarget target = remote_target(*w, ud);
            e[i].wr_id = w->wr_id;
            e[i].raddr = target.raddr;
            e[i].ah = ud ? reinterpret_cast<uint64_t>(w->wr.ud.ah) : 0;
            e[i].send_flags = w->send_flags;
            e[i].bytes = sge_bytes(w->sg_list, w->num_sge);
            e[i].rkey = target.rkey;
            e[i].imm = has_imm(w->opcode) ? w->imm_data : 0;
            e[i].remote_qpn = ud ? w->wr.ud.remote_qpn : 0;
            e[i].num_sge = static_cast<uint16_t>(w->num_sge);
            e[i].opcode = static_cast<uint8_t>(w->opcode);
            e[i].pad = 0;
        }
        commit(h);
        offset += n;
    } while (offset < total);
    return ret;
}

int defer_post_recv(uint64_t ts, ibv_qp* qp, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept {
    return defer_recv_chain<RecordKind::post_recv>(ts, qp, wr, ret, bad_wr);
}

int defer_post_srq_recv(uint64_t ts, ibv_srq* srq, const ibv_recv_wr* wr, int ret,
                        ibv_recv_wr* const* bad_wr) noexcept {
    return defer_recv_chain<RecordKind::post_srq_recv>(ts, srq, wr, ret, bad_wr);
}

namespace {

// An ibv_wr_* list's fixed part; wr_complete posts all WRs of the list or none: on failure the first one is
// where it stopped.
inline SendFixed wr_list_fixed(const QpState& s, int ret, uint32_t batch_offset) noexcept {
    return SendFixed{reinterpret_cast<uint64_t>(s.qp.load(std::memory_order_relaxed)),
                     s.qp_num.load(std::memory_order_relaxed), ret, ret != 0 ? 0 : -1, 1, batch_offset, 0};
}

// Lists of any length, and a one-WR list the fast path could not reserve for.
__attribute__((noinline)) void defer_wr_list_general(uint64_t ts, const QpState& s, const WrRecord* records,
                                                     uint32_t n_total, uint32_t first_index, int ret) noexcept {
    uint32_t done = 0;
    do {
        const uint32_t n = std::min(n_total - done, kBatch);
        RecordHeader* h = begin_record<SendFixed, SendEntry>(RecordKind::post_send, n, ts);
        if (h == nullptr) return;
        *fixed_part<SendFixed>(h) = wr_list_fixed(s, ret, first_index + done);
        std::memcpy(entries<SendFixed, SendEntry>(h), records + done, n * sizeof(SendEntry));
        commit(h);
        done += n;
    } while (done < n_total);
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

inline void copy_completion(CompletionEntry& e, const ibv_wc& c) noexcept {
    e = CompletionEntry{};
    e.wr_id = c.wr_id;
    e.vendor_err = c.vendor_err;
    e.byte_len = c.byte_len;
    e.qp_num = c.qp_num;
    e.src_qp = c.src_qp;
    e.wc_flags = c.wc_flags;
    e.imm = (c.wc_flags & IBV_WC_WITH_IMM) ? c.imm_data : 0;
    e.status = static_cast<uint8_t>(c.status);
    e.opcode = static_cast<uint8_t>(c.opcode);
}

// Polls of several completions (or none, or a failed poll): a record per SIGMATRACE_MAX_BATCH completions. Also
// a one-completion poll that the fast path could not record without a call (the clock or the ring).
__attribute__((noinline)) int defer_poll_cq_general(ibv_cq* cq, const ibv_wc* wc, int ret) noexcept {
    const uint64_t ts = capture_ticks();
    const int total = ret > 0 ? ret : 0;
    int done = 0;
    do {  // a failed poll (ret < 0) is one record of n = 0, as when immediate
        const uint32_t n = static_cast<uint32_t>(std::min(total - done, static_cast<int>(kBatch)));
        RecordHeader* h = begin_record<PollFixed, CompletionEntry>(RecordKind::poll_cq, n, ts);
        if (h == nullptr) return ret;
        *fixed_part<PollFixed>(h) = PollFixed{reinterpret_cast<uint64_t>(cq), ret, 0};
        CompletionEntry* e = entries<PollFixed, CompletionEntry>(h);
        for (uint32_t i = 0; i < n; ++i) copy_completion(e[i], wc[done + static_cast<int>(i)]);
        commit(h);
        done += static_cast<int>(n);
    } while (done < total);
    return ret;
}

}  // namespace

int defer_poll_cq(ibv_cq* cq, const ibv_wc* wc, int ret) noexcept {
    // One completion, straight-line (as defer_recv_chain's one WR): the poll that returns a message's receive.
    uint64_t ts = 0;
    RecordHeader* h = nullptr;
    if (ret != 1 || !capture_clock::now_ticks_without_call(ts) ||
        (h = try_begin_one<PollFixed, CompletionEntry>(RecordKind::poll_cq, ts)) == nullptr) [[unlikely]]
        return defer_poll_cq_general(cq, wc, ret);
    *fixed_part<PollFixed>(h) = PollFixed{reinterpret_cast<uint64_t>(cq), 1, 0};
    copy_completion(*entries<PollFixed, CompletionEntry>(h), wc[0]);
    commit(h);
    return ret;
}

void defer_completion_batch(uint64_t ts, const void* cq, const CompletionBatch& b) noexcept {
    const uint32_t n = std::min(b.n, kBatch);
    RecordHeader* h = begin_record<PollFixed, CompletionEntry>(RecordKind::poll_cq, n, ts);
    if (h == nullptr) return;
    *fixed_part<PollFixed>(h) = PollFixed{reinterpret_cast<uint64_t>(cq), static_cast<int32_t>(n), 1};
    CompletionEntry* e = entries<PollFixed, CompletionEntry>(h);
    for (uint32_t i = 0; i < n; ++i) {
        e[i] = CompletionEntry{};
        e[i].wr_id = b.wr_id[i];
        e[i].hw_ts = b.hw_ts[i];
        e[i].vendor_err = b.vendor_err[i];
        e[i].byte_len = b.byte_len[i];
        e[i].qp_num = b.qp_num[i];
        e[i].src_qp = b.src_qp[i];
        e[i].wc_flags = b.wc_flags[i];
        e[i].imm = b.imm[i];
        e[i].status = b.status[i];
        e[i].opcode = b.opcode[i];
    }
    commit(h);
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
