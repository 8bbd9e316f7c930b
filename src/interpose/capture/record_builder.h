// The one builder of a data-path call's record (<sigmatrace/deferred_records.h>) from the application's own
// structures: an ibv_post_send, ibv_post_recv or ibv_post_srq_recv chain, an ibv_wr_* list, ibv_poll_cq's
// completions or an extended-CQ poll pass, a record per SIGMATRACE_MAX_BATCH elements (an empty chain or a
// failed poll is one record of none). Every data-path event carries these records: deferred capture writes them
// into the thread's ring (deferred_capture.cpp), immediate emission into an event written inside the call
// (data_events.cpp), and st-synth into the designed traces it writes, so all three say the same thing of the
// same call.
//
// Where a record goes is a Target, passed by value (the ring's is empty, so it costs no register):
//   RecordHeader* begin(uint32_t size)   room for a record of `size` bytes, or nullptr: the call's remaining
//                                        records are not built (the target has counted the loss)
//   void commit(RecordHeader* h)         the record `h` is complete
// Nothing here allocates, locks or reads configuration: redaction is the encoder's (deferred_records_wire.h).
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <sigmatrace/deferred_records.h>

#include "interpose/datapath/wr_fields.h"

namespace sigmatrace::interpose::record_builder {

using namespace records;

// api values of post_send and poll_cq records.
inline constexpr uint32_t kApiPostSend = 0;
inline constexpr uint32_t kApiWrBuilder = 1;
inline constexpr uint32_t kApiPollCq = 0;
inline constexpr uint32_t kApiCqEx = 1;

inline constexpr uint32_t kBatch = SIGMATRACE_MAX_BATCH;

inline void set_header(RecordHeader* h, uint32_t size, RecordKind kind, uint32_t n, uint64_t ts) noexcept {
    h->size = size;
    h->kind = kind;
    h->n = static_cast<uint16_t>(n);
    h->ts = ts;
}

template <typename Fixed, typename Entry, typename Target>
RecordHeader* begin_record(Target to, RecordKind kind, uint32_t n, uint64_t ts) noexcept {
    const uint32_t size = record_size<Fixed, Entry>(n);
    RecordHeader* h = to.begin(size);
    if (h != nullptr) set_header(h, size, kind, n, ts);
    return h;
}

// ------------------------------------------------------------------ one element

inline void copy_send_entry(SendEntry& e, const ibv_send_wr& w, bool ud) noexcept {
    const RemoteTarget target = remote_target(w, ud);
    e.wr_id = w.wr_id;
    e.raddr = target.raddr;
    e.ah = ud ? reinterpret_cast<uint64_t>(w.wr.ud.ah) : 0;
    e.send_flags = w.send_flags;
    e.bytes = sge_bytes(w.sg_list, w.num_sge);
    e.rkey = target.rkey;
    e.imm = has_imm(w.opcode) ? w.imm_data : 0;
    e.remote_qpn = ud ? w.wr.ud.remote_qpn : 0;
    e.num_sge = static_cast<uint16_t>(w.num_sge);
    e.opcode = static_cast<uint8_t>(w.opcode);
    e.pad = 0;
}

inline void copy_recv_entry(RecvEntry& e, const ibv_recv_wr& w) noexcept {
    e.wr_id = w.wr_id;
    e.bytes = sge_bytes(w.sg_list, w.num_sge);
    e.num_sge = static_cast<uint16_t>(w.num_sge);
    e.pad = 0;
}

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

// The handle a record carries (the application's pointer to its object), and the QP number a receive record
// carries: an SRQ's receives belong to no QP until they complete.
template <typename Object> uint64_t handle_of(const Object* o) noexcept { return reinterpret_cast<uint64_t>(o); }
inline uint32_t recv_qp_num(const ibv_qp* qp) noexcept { return qp->qp_num; }
inline uint32_t recv_qp_num(const ibv_srq*) noexcept { return 0; }

// An ibv_wr_* list's fixed part. wr_complete posts all WRs of the list or none: on failure the first one is
// where it stopped.
inline SendFixed wr_list_fixed(uint64_t qp, uint32_t qp_num, int ret, uint32_t batch_offset) noexcept {
    return SendFixed{qp, qp_num, ret, ret != 0 ? 0 : -1, kApiWrBuilder, batch_offset, 0};
}

template <typename Wr> uint32_t chain_length(const Wr* wr) noexcept {
    uint32_t n = 0;
    for (const Wr* w = wr; w != nullptr; w = w->next) ++n;
    return n;
}

// ------------------------------------------------------------------ whole calls

// The QP of a post_send record: the application's ibv_qp (QpOf), or designed values that name a QP that does not
// exist (QpValues, st-synth). Read where the record is written, as the call's own structures are.
struct QpOf {
    const ibv_qp* qp;
    uint64_t handle() const noexcept { return handle_of(qp); }
    uint32_t qp_num() const noexcept { return qp->qp_num; }
    bool ud() const noexcept { return qp->qp_type == IBV_QPT_UD; }
};
struct QpValues {
    uint64_t qp;
    uint32_t num;
    bool is_ud;
    uint64_t handle() const noexcept { return qp; }
    uint32_t qp_num() const noexcept { return num; }
    bool ud() const noexcept { return is_ud; }
};

// ibv_post_send on `q` (QpOf or QpValues): `ts` the capture time, `ret` and `bad_wr` the call's result.
// Returns `ret`.
template <typename Target, typename Qp>
int build_post_send(Target to, uint64_t ts, const Qp& q, const ibv_send_wr* wr, int ret,
                    ibv_send_wr* const* bad_wr) noexcept {
    const uint32_t total = chain_length(wr);
    const int32_t bad_index = bad_index_of(wr, ret, bad_wr);
    const bool ud = q.ud();
    const ibv_send_wr* w = wr;
    uint32_t offset = 0;
    do {
        const uint32_t n = std::min(total - offset, kBatch);
        RecordHeader* h = begin_record<SendFixed, SendEntry>(to, RecordKind::post_send, n, ts);
        if (h == nullptr) return ret;
        *fixed_part<SendFixed>(h) = SendFixed{q.handle(), q.qp_num(), ret, bad_index, kApiPostSend, offset, 0};
        SendEntry* e = entries<SendFixed, SendEntry>(h);
        for (uint32_t i = 0; i < n; ++i, w = w->next) copy_send_entry(e[i], *w, ud);
        to.commit(h);
        offset += n;
    } while (offset < total);
    return ret;
}

// Receive posts and polls name their object by its handle (handle_of) and, for a receive, the QP number
// (recv_qp_num): both are values, so that a designed trace (st-synth) can name objects that do not exist.
//
// ibv_post_recv (kind post_recv, a QP) and ibv_post_srq_recv (post_srq_recv, an SRQ: qp_num 0). Returns `ret`.
template <RecordKind kKind, typename Target>
int build_post_recv(Target to, uint64_t ts, uint64_t handle, uint32_t qp_num, const ibv_recv_wr* wr, int ret,
                    ibv_recv_wr* const* bad_wr) noexcept {
    const uint32_t total = chain_length(wr);
    const int32_t bad_index = bad_index_of(wr, ret, bad_wr);
    const ibv_recv_wr* w = wr;
    uint32_t offset = 0;
    do {
        const uint32_t n = std::min(total - offset, kBatch);
        RecordHeader* h = begin_record<RecvFixed, RecvEntry>(to, kKind, n, ts);
        if (h == nullptr) return ret;
        *fixed_part<RecvFixed>(h) = RecvFixed{handle, qp_num, ret, bad_index, offset};
        RecvEntry* e = entries<RecvFixed, RecvEntry>(h);
        for (uint32_t i = 0; i < n; ++i, w = w->next) copy_recv_entry(e[i], *w);
        to.commit(h);
        offset += n;
    } while (offset < total);
    return ret;
}

// A receive post on the application's own QP or SRQ.
template <RecordKind kKind, typename Target, typename Object>
int build_post_recv(Target to, uint64_t ts, const Object* o, const ibv_recv_wr* wr, int ret,
                    ibv_recv_wr* const* bad_wr) noexcept {
    return build_post_recv<kKind>(to, ts, handle_of(o), recv_qp_num(o), wr, ret, bad_wr);
}

// The WRs an ibv_wr_* list recorded (`wrs[0..n_total)`, the list's WRs from `first_index` on), with the
// result of its wr_complete.
template <typename Target>
void build_wr_list(Target to, uint64_t ts, uint64_t qp, uint32_t qp_num, const SendEntry* wrs, uint32_t n_total,
                   uint32_t first_index, int ret) noexcept {
    uint32_t done = 0;
    do {
        const uint32_t n = std::min(n_total - done, kBatch);
        RecordHeader* h = begin_record<SendFixed, SendEntry>(to, RecordKind::post_send, n, ts);
        if (h == nullptr) return;
        *fixed_part<SendFixed>(h) = wr_list_fixed(qp, qp_num, ret, first_index + done);
        std::memcpy(entries<SendFixed, SendEntry>(h), wrs + done, n * sizeof(SendEntry));
        to.commit(h);
        done += n;
    } while (done < n_total);
}

// ibv_poll_cq on the CQ `cq` (its handle): `ret` completions in wc[], or a negative error (a record of none).
// Returns `ret`.
template <typename Target>
int build_poll_cq(Target to, uint64_t ts, uint64_t cq, const ibv_wc* wc, int ret) noexcept {
    const int total = ret > 0 ? ret : 0;
    int done = 0;
    do {
        const uint32_t n = static_cast<uint32_t>(std::min(total - done, static_cast<int>(kBatch)));
        RecordHeader* h = begin_record<PollFixed, CompletionEntry>(to, RecordKind::poll_cq, n, ts);
        if (h == nullptr) return ret;
        *fixed_part<PollFixed>(h) = PollFixed{cq, ret, kApiPollCq};
        CompletionEntry* e = entries<PollFixed, CompletionEntry>(h);
        for (uint32_t i = 0; i < n; ++i) copy_completion(e[i], wc[done + static_cast<int>(i)]);
        to.commit(h);
        done += static_cast<int>(n);
    } while (done < total);
    return ret;
}

// The completions an extended-CQ poll pass gathered (`b`: per-field arrays named as CompletionEntry's fields,
// and their count `n`).
template <typename Target, typename Batch>
void build_completion_batch(Target to, uint64_t ts, uint64_t cq, const Batch& b) noexcept {
    const uint32_t n = std::min(b.n, kBatch);
    RecordHeader* h = begin_record<PollFixed, CompletionEntry>(to, RecordKind::poll_cq, n, ts);
    if (h == nullptr) return;
    *fixed_part<PollFixed>(h) = PollFixed{cq, static_cast<int32_t>(n), kApiCqEx};
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
    to.commit(h);
}

}  // namespace sigmatrace::interpose::record_builder
