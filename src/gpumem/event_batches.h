// The watcher's per-sweep records: the WQEs it decoded from one send queue (a ring_post record) and the CQEs it read
// from one CQ (a poll_cq record of api kApiRingCompletion), each at most SIGMATRACE_MAX_BATCH entries, built on the
// sweeping thread's stack and emitted at once as a `deferred_records` event through the wire encoder every
// data-path record goes through (<sigmatrace/deferred_records.h>, <sigmatrace/deferred_records_wire.h>), so the
// analyzer reads them as it reads the tracer's posts and polls. A sweep allocates nothing and takes no lock. Shared
// by the doorbell-record path (watcher.cpp) and the index scanner of DBR-less queues (index_scanner.cpp).
//
// Capture time 0: the event's own timestamp, which is when the watcher read them (as for immediate emission).
#pragma once

#include <sigmatrace/deferred_records.h>
#include <sigmatrace/deferred_records_wire.h>
#include <sigmatrace/opcodes.h>

#include <cstddef>
#include <cstdint>

#include "mlx5_format/mlx5_layout.h"
#include "mlx5_format/wqe_decoder.h"
#include "provider/trace.h"

namespace sigmatrace::gpumem {

// Whether a session records the watcher's records (checked before reading rings).
inline bool records_enabled() { return ST_TRACE_ENABLED(deferred_records); }

namespace batch_detail {

// One record and the event that carries it.
template <typename Fixed, typename Entry> struct RecordEvent {
    alignas(16) std::byte record[records::record_size<Fixed, Entry>(SIGMATRACE_MAX_BATCH)];
    records::EventWords<records::max_encoded_size(records::kMaxRecordSize) + 8> words;

    records::RecordHeader* header() { return reinterpret_cast<records::RecordHeader*>(record); }
    Fixed* fixed() { return records::fixed_part<Fixed>(header()); }
    Entry* entry() { return records::entries<Fixed, Entry>(header()); }
    // Emits the record with `n` entries as one deferred_records event.
    void emit(records::RecordKind kind, uint32_t n, const records::EncodeOptions& opt) {
        records::RecordHeader* h = header();
        h->size = records::record_size<Fixed, Entry>(n);
        h->kind = kind;
        h->n = static_cast<uint16_t>(n);
        h->ts = 0;
        words.reset();
        words.add(*h, 0, opt);
        uint32_t n_words = 0;
        st_deferred_records_rec r{};
        r.layout = records::kLayout;
        r.words = words.finish(&n_words);
        r.n = n_words;
        ST_TRACE_EMIT(deferred_records, &r);
    }
};

}  // namespace batch_detail

// The send_flags bits (records::kRing*) of a decoded WQE.
inline uint8_t ring_send_flags(const DecodedWqe& w) {
    uint8_t f = 0;
    if (w.fm_ce_se & mlx5::kCtrlFence) f |= records::kRingFence;
    if (w.fm_ce_se & mlx5::kCtrlCqUpdate) f |= records::kRingSignaled;
    if (w.fm_ce_se & mlx5::kCtrlSolicited) f |= records::kRingSolicited;
    if (w.has_inline) f |= records::kRingInline;
    return f;
}

// One ring_post record's worth of decoded WQEs of one queue.
class WqeBatch {
public:
    // `queue`: the queue's key (ibv_qp for init_obj, the DevX object), `qpn`, who posts to it.
    WqeBatch(uint64_t queue, uint32_t qpn, records::Poster poster, bool redact_addr, bool redact_keys)
        : opt_{redact_addr, redact_keys} {
        *ev_.fixed() = records::RingPostFixed{queue, qpn, static_cast<uint8_t>(poster), {}};
    }
    ~WqeBatch() { flush(); }
    WqeBatch(const WqeBatch&) = delete;
    WqeBatch& operator=(const WqeBatch&) = delete;

    // `pi` is the extended WQEBB index of the WQE; `pi_new` what the producer had reached when it was read (the
    // doorbell record, or the scanner's frontier): not recorded, kept for callers' symmetry.
    void add(uint64_t pi, const DecodedWqe& w, uint64_t /*pi_new*/) {
        records::RingWqeEntry& e = ev_.entry()[n_];
        e.pi = pi;
        e.raddr = w.raddr;
        e.atomic_arg = w.atomic_arg;
        e.dgid_prefix = w.av_gid_prefix;
        e.dgid_iid = w.av_gid_iid;
        e.bytes = w.bytes;
        e.rkey = w.rkey;
        e.imm = w.imm;
        e.dest_qpn = w.remote_qpn;
        e.ctrl = uint32_t{w.opcode} | uint32_t{w.opmod} << 8 | uint32_t{w.fm_ce_se} << 16;
        e.dlid = w.av_rlid;
        const int op = wr_opcode_from_mlx5(w.opcode);
        e.opcode = op < 0 ? records::kNoWrOpcode : static_cast<uint8_t>(op);
        e.send_flags = ring_send_flags(w);
        if (++n_ == SIGMATRACE_MAX_BATCH) flush();
    }
    void flush() {
        if (n_ == 0) return;
        ev_.emit(records::RecordKind::ring_post, n_, opt_);
        n_ = 0;
    }

private:
    records::EncodeOptions opt_;
    uint32_t n_ = 0;
    batch_detail::RecordEvent<records::RingPostFixed, records::RingWqeEntry> ev_;
};

// The enum ibv_wc_opcode of a CQE: a requester's from the WQE opcode it carries, a responder's from its kind.
inline uint8_t wc_opcode_of(const mlx5::Cqe64& e) {
    switch (e.opcode()) {
    case mlx5::cqe_op::REQ:
    case mlx5::cqe_op::REQ_ERR:
        switch (e.wqe_opcode()) {
        case mlx5op::RDMA_WRITE:
        case mlx5op::RDMA_WRITE_IMM: return 1;  // IBV_WC_RDMA_WRITE
        case mlx5op::RDMA_READ: return 2;
        case mlx5op::ATOMIC_CS:
        case mlx5op::ATOMIC_MASKED_CS: return 3;
        case mlx5op::ATOMIC_FA:
        case mlx5op::ATOMIC_MASKED_FA: return 4;
        default: return 0;  // IBV_WC_SEND (and NOPs)
        }
    case mlx5::cqe_op::RESP_WR_IMM: return 129;  // IBV_WC_RECV_RDMA_WITH_IMM
    default: return 128;                         // IBV_WC_RECV
    }
}

// One poll_cq record's worth of CQEs of one CQ.
class CqeBatch {
public:
    // `cq`: the CQ's key (ibv_cq for init_obj, the DevX object).
    explicit CqeBatch(uint64_t cq) { *ev_.fixed() = records::PollFixed{cq, 0, records::kApiRingCompletion}; }
    ~CqeBatch() { flush(); }
    CqeBatch(const CqeBatch&) = delete;
    CqeBatch& operator=(const CqeBatch&) = delete;

    void add(const mlx5::Cqe64& c) {
        records::CompletionEntry& e = ev_.entry()[n_];
        e = records::CompletionEntry{};
        const bool error = c.opcode() == mlx5::cqe_op::REQ_ERR || c.opcode() == mlx5::cqe_op::RESP_ERR;
        e.wr_id = c.wqe_index();
        e.hw_ts = error ? 0 : c.hw_timestamp();
        e.vendor_err = error ? (uint32_t{c.syndrome()} | uint32_t{c.vendor_syndrome()} << 8) : 0;
        e.byte_len = c.bytes();
        e.qp_num = c.qpn();
        e.status = error ? wc_status_from_mlx5_syndrome(c.syndrome()) : 0;
        e.opcode = wc_opcode_of(c);
        if (++n_ == SIGMATRACE_MAX_BATCH) flush();
    }
    void flush() {
        if (n_ == 0) return;
        ev_.fixed()->ret = static_cast<int32_t>(n_);
        ev_.emit(records::RecordKind::poll_cq, n_, {});
        n_ = 0;
    }

private:
    uint32_t n_ = 0;
    batch_detail::RecordEvent<records::PollFixed, records::CompletionEntry> ev_;
};

}  // namespace sigmatrace::gpumem
