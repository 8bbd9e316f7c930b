// The per-call record, which every data-path event of the tracer carries: one per data-path call (or per part
// of a chain longer than SIGMATRACE_MAX_BATCH), declared once here for the tracer (src/interpose/
// record_builder.h builds them, in deferred and immediate mode alike) and every reader; the rules for which
// records may be read as one event; and the events they stand for (expand_record). A `deferred_records` event
// carries them encoded: <sigmatrace/deferred_records_wire.h>.
//
// A record is a RecordHeader, a fixed part and `n` entries, padded to a multiple of kAlign bytes (`size` says
// how long). Its `ts` is the capture time: before the call for posts, after it for polls (ring ticks in the
// tracer, CLOCK_MONOTONIC ns once read back from an event); 0 when the event was written inside the call
// (immediate emission), whose own timestamp is then the capture time.
//
// Why records and not per-field events: LTTng-UST writes each field with a call of its own, so an event of
// per-field sequences costs several times what one event of encoded records does, per call
// (docs/PERFORMANCE.md, "Trace size and channel size").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

#include <sigmatrace/schema.h>

namespace sigmatrace::records {

enum class RecordKind : uint16_t { pad = 0, post_send = 1, post_recv = 2, post_srq_recv = 3, poll_cq = 4, ring_post = 5 };

// Who wrote a send WR: the application through the verbs API (the tracer's post_send records), or, for WQEs the
// GPU watcher (src/gpumem) decoded out of a send ring, a CPU thread writing them itself (UCX's rc_mlx5,
// dc_mlx5, ud_mlx5) or a GPU (NVSHMEM IBGDA, rocSHMEM, DOCA GPUNetIO). docs/gpumem.md, "Who posted", says how
// the watcher tells the last two apart.
enum class Poster : uint8_t { verbs = 0, cpu_direct = 1, gpu = 2 };
inline const char* poster_name(Poster p) {
    switch (p) {
    case Poster::verbs: return "verbs";
    case Poster::cpu_direct: return "cpu_direct";
    case Poster::gpu: return "gpu";
    }
    return "?";
}

struct RecordHeader {
    uint32_t size;  // bytes of the whole record (header included), a multiple of kAlign
    RecordKind kind;
    uint16_t n;     // entries after the fixed part
    uint64_t ts;    // capture time: ring ticks in the tracer, CLOCK_MONOTONIC ns in an event
};

// post_send (ibv_post_send and ibv_wr_* lists): the fields of the `post_send` event of the same names.
struct SendFixed {
    uint64_t qp;
    uint32_t qp_num;
    int32_t ret;
    int32_t bad_index;
    uint32_t api;
    uint32_t batch_offset;
    uint32_t pad;
};
struct SendEntry {
    uint64_t wr_id;
    uint64_t raddr;
    uint64_t ah;
    uint32_t send_flags;
    uint32_t bytes;
    uint32_t rkey;
    uint32_t imm;
    uint32_t remote_qpn;
    uint16_t num_sge;
    uint8_t opcode;
    uint8_t pad;
};

// post_recv and post_srq_recv (handle = the QP or the SRQ; qp_num 0 for an SRQ).
struct RecvFixed {
    uint64_t handle;
    uint32_t qp_num;
    int32_t ret;
    int32_t bad_index;
    uint32_t batch_offset;
};
struct RecvEntry {
    uint64_t wr_id;
    uint32_t bytes;
    uint16_t num_sge;
    uint16_t pad;
};

// poll_cq (ibv_poll_cq and extended-CQ passes). `ret` is the call's return (its completions, or a negative
// error with n = 0).
struct PollFixed {
    uint64_t cq;
    int32_t ret;
    uint32_t api;
};
struct CompletionEntry {
    uint64_t wr_id;
    uint64_t hw_ts;
    uint32_t vendor_err;
    uint32_t byte_len;
    uint32_t qp_num;
    uint32_t src_qp;
    uint32_t wc_flags;
    uint32_t imm;
    uint8_t status;
    uint8_t opcode;
    uint8_t pad[6];
};

// ring_post: WQEs the watcher decoded out of one watched send queue after its doorbell record (or, DBR-less, its
// ring) advanced; capture time 0 (the event's timestamp: the watcher emits them when it read them).
// `queue` is the queue's identity at set-up (the ibv_qp for a verbs QP exported with mlx5dv_init_obj, else the
// DevX object), `qp_num` its QPN.
struct RingPostFixed {
    uint64_t queue;
    uint32_t qp_num;
    uint8_t poster;  // Poster: cpu_direct or gpu
    uint8_t pad[3];
};
// Flags of a ring WQE, in the verbs send_flags bits (enum ibv_send_flags) so that one reading serves both.
inline constexpr uint8_t kRingFence = 1, kRingSignaled = 2, kRingSolicited = 4, kRingInline = 8;
// The verbs opcode of a WQE that moves no data (NOP, DUMP, UMR ...): it completes nothing the application asked
// for, but a CQE may name it.
inline constexpr uint8_t kNoWrOpcode = 0xff;
struct RingWqeEntry {
    uint64_t pi;           // the WQE's first WQEBB as an unwrapped producer index (its low 16 bits: the CQE's wqe_counter)
    uint64_t raddr;        // RDMA and atomics, else 0
    uint64_t atomic_arg;   // add value (FA) or swap value (CS)
    uint64_t dgid_prefix;  // UD and DC: the address vector's GID (0 without GRH)
    uint64_t dgid_iid;
    uint32_t bytes;        // gather or inline bytes; the argument size for atomics
    uint32_t rkey;
    uint32_t imm;          // as written (network order)
    uint32_t dest_qpn;     // UD: destination QPN; DC: DCT number; else 0
    uint32_t ctrl;         // mlx5 control segment: opcode | opmod << 8 | fm_ce_se << 16
    uint16_t dlid;         // UD and DC: the address vector's LID
    uint8_t opcode;        // ibv_wr_opcode (wr_opcode_from_mlx5), or kNoWrOpcode
    uint8_t send_flags;    // kRing* bits
};
inline uint8_t ring_mlx5_opcode(const RingWqeEntry& e) { return static_cast<uint8_t>(e.ctrl); }
inline uint8_t ring_opmod(const RingWqeEntry& e) { return static_cast<uint8_t>(e.ctrl >> 8); }
inline uint8_t ring_fm_ce_se(const RingWqeEntry& e) { return static_cast<uint8_t>(e.ctrl >> 16); }

// A poll_cq record's api: 0 ibv_poll_cq, 1 the extended-CQ poll pass, 2 CQEs the watcher read from a watched CQ
// ring. For api 2 the entries say: wr_id = the CQE's wqe_counter, status = enum ibv_wc_status from the syndrome,
// vendor_err = syndrome | vendor syndrome << 8, opcode = enum ibv_wc_opcode (from the requester CQE's WQE opcode,
// or the responder CQE's kind), byte_len, qp_num, src_qp (responder CQEs), imm, hw_ts (the CQE timestamp).
inline constexpr uint32_t kApiRingCompletion = 2;

// The ring's layout, which the tracer's ring code and the wire format's field tables (deferred_records_wire.h) rely on.
static_assert(sizeof(RecordHeader) == 16 && offsetof(RecordHeader, kind) == 4 && offsetof(RecordHeader, ts) == 8);
static_assert(sizeof(SendFixed) == 32 && offsetof(SendFixed, batch_offset) == 24);
static_assert(sizeof(SendEntry) == 48 && offsetof(SendEntry, send_flags) == 24 && offsetof(SendEntry, num_sge) == 44);
static_assert(sizeof(RecvFixed) == 24 && sizeof(RecvEntry) == 16);
static_assert(sizeof(PollFixed) == 16 && sizeof(CompletionEntry) == 48 && offsetof(CompletionEntry, status) == 40);
static_assert(sizeof(RingPostFixed) == 16 && sizeof(RingWqeEntry) == 64 && offsetof(RingWqeEntry, dlid) == 60);

inline constexpr uint32_t kAlign = 16;

constexpr uint32_t align_up(uint32_t v) {
    return (v + kAlign - 1) & ~(kAlign - 1);
}
template <typename Fixed, typename Entry> constexpr uint32_t record_size(uint32_t n) {
    return align_up(static_cast<uint32_t>(sizeof(RecordHeader) + sizeof(Fixed) + n * sizeof(Entry)));
}
inline constexpr uint32_t kMaxRecordSize = record_size<RingPostFixed, RingWqeEntry>(SIGMATRACE_MAX_BATCH);
static_assert(kMaxRecordSize >= record_size<SendFixed, SendEntry>(SIGMATRACE_MAX_BATCH) &&
              kMaxRecordSize >= record_size<PollFixed, CompletionEntry>(SIGMATRACE_MAX_BATCH));

// The size a record of `kind` with `n` entries must have; nullopt for pad and unknown kinds.
constexpr std::optional<uint32_t> expected_size(RecordKind kind, uint32_t n) {
    switch (kind) {
    case RecordKind::post_send: return record_size<SendFixed, SendEntry>(n);
    case RecordKind::post_recv:
    case RecordKind::post_srq_recv: return record_size<RecvFixed, RecvEntry>(n);
    case RecordKind::poll_cq: return record_size<PollFixed, CompletionEntry>(n);
    case RecordKind::ring_post: return record_size<RingPostFixed, RingWqeEntry>(n);
    case RecordKind::pad: return std::nullopt;
    }
    return std::nullopt;
}

template <typename T> T* fixed_part(RecordHeader* h) {
    return reinterpret_cast<T*>(reinterpret_cast<std::byte*>(h) + sizeof(RecordHeader));
}
template <typename T> const T* fixed_part(const RecordHeader* h) {
    return reinterpret_cast<const T*>(reinterpret_cast<const std::byte*>(h) + sizeof(RecordHeader));
}
template <typename Fixed, typename Entry> Entry* entries(RecordHeader* h) {
    return reinterpret_cast<Entry*>(reinterpret_cast<std::byte*>(h) + sizeof(RecordHeader) + sizeof(Fixed));
}
template <typename Fixed, typename Entry> const Entry* entries(const RecordHeader* h) {
    return reinterpret_cast<const Entry*>(reinterpret_cast<const std::byte*>(h) + sizeof(RecordHeader) + sizeof(Fixed));
}

// What decides whether consecutive calls may be read as one event (a reader that merges records, such as the
// analyzer's expander): one whole call that succeeded, on the same object (the QP, SRQ or CQ handle), through
// the same API.
inline bool whole_successful_call(const RecordHeader& h) {
    if (h.n == 0) return false;
    switch (h.kind) {
    case RecordKind::post_send: {
        const SendFixed* f = fixed_part<SendFixed>(&h);
        return f->ret == 0 && f->bad_index < 0 && f->batch_offset == 0;
    }
    case RecordKind::post_recv:
    case RecordKind::post_srq_recv: {
        const RecvFixed* f = fixed_part<RecvFixed>(&h);
        return f->ret == 0 && f->bad_index < 0 && f->batch_offset == 0;
    }
    case RecordKind::poll_cq: return fixed_part<PollFixed>(&h)->ret == static_cast<int32_t>(h.n);
    case RecordKind::ring_post: return true;
    case RecordKind::pad: return false;
    }
    return false;
}
inline uint64_t handle_of(const RecordHeader& h) {
    switch (h.kind) {
    case RecordKind::post_send: return fixed_part<SendFixed>(&h)->qp;
    case RecordKind::post_recv:
    case RecordKind::post_srq_recv: return fixed_part<RecvFixed>(&h)->handle;
    case RecordKind::poll_cq: return fixed_part<PollFixed>(&h)->cq;
    case RecordKind::ring_post: return fixed_part<RingPostFixed>(&h)->queue;
    case RecordKind::pad: return 0;
    }
    return 0;
}
inline uint32_t api_of(const RecordHeader& h) {
    if (h.kind == RecordKind::post_send) return fixed_part<SendFixed>(&h)->api;
    if (h.kind == RecordKind::poll_cq) return fixed_part<PollFixed>(&h)->api;
    return 0;
}


// Per-field arrays that expand_record() points an event record's sequences at.
struct Scratch {
    uint64_t wr_id[SIGMATRACE_MAX_BATCH], raddr[SIGMATRACE_MAX_BATCH], ah[SIGMATRACE_MAX_BATCH];
    uint64_t hw_ts[SIGMATRACE_MAX_BATCH], ts[SIGMATRACE_MAX_BATCH];
    uint32_t send_flags[SIGMATRACE_MAX_BATCH], bytes[SIGMATRACE_MAX_BATCH], rkey[SIGMATRACE_MAX_BATCH];
    uint32_t imm[SIGMATRACE_MAX_BATCH], remote_qpn[SIGMATRACE_MAX_BATCH], vendor_err[SIGMATRACE_MAX_BATCH];
    uint32_t byte_len[SIGMATRACE_MAX_BATCH], qp_num[SIGMATRACE_MAX_BATCH], src_qp[SIGMATRACE_MAX_BATCH];
    uint32_t wc_flags[SIGMATRACE_MAX_BATCH];
    uint16_t num_sge[SIGMATRACE_MAX_BATCH];
    uint8_t opcode[SIGMATRACE_MAX_BATCH], status[SIGMATRACE_MAX_BATCH];
    // ring_post, as gpu_wqe
    uint64_t atomic_arg[SIGMATRACE_MAX_BATCH];
    uint16_t wqe_index[SIGMATRACE_MAX_BATCH];
    uint8_t opmod[SIGMATRACE_MAX_BATCH], fm_ce_se[SIGMATRACE_MAX_BATCH];
};

// Copies the first `count` entries of a record into per-field arrays (members named as the event's sequences),
// from element `at` on (expand_record() into Scratch).
template <typename Columns> void copy_send_entries(const RecordHeader& h, uint32_t count, Columns& c, uint32_t at) {
    const SendEntry* e = entries<SendFixed, SendEntry>(&h);
    for (uint32_t i = 0; i < count; ++i) {
        const uint32_t k = at + i;
        c.wr_id[k] = e[i].wr_id;
        c.raddr[k] = e[i].raddr;
        c.ah[k] = e[i].ah;
        c.send_flags[k] = e[i].send_flags;
        c.bytes[k] = e[i].bytes;
        c.rkey[k] = e[i].rkey;
        c.imm[k] = e[i].imm;
        c.remote_qpn[k] = e[i].remote_qpn;
        c.num_sge[k] = e[i].num_sge;
        c.opcode[k] = e[i].opcode;
    }
}
template <typename Columns> void copy_recv_entries(const RecordHeader& h, uint32_t count, Columns& c, uint32_t at) {
    const RecvEntry* e = entries<RecvFixed, RecvEntry>(&h);
    for (uint32_t i = 0; i < count; ++i) {
        const uint32_t k = at + i;
        c.wr_id[k] = e[i].wr_id;
        c.bytes[k] = e[i].bytes;
        c.num_sge[k] = e[i].num_sge;
    }
}
template <typename Columns>
void copy_completion_entries(const RecordHeader& h, uint32_t count, Columns& c, uint32_t at) {
    const CompletionEntry* e = entries<PollFixed, CompletionEntry>(&h);
    for (uint32_t i = 0; i < count; ++i) {
        const uint32_t k = at + i;
        c.wr_id[k] = e[i].wr_id;
        c.hw_ts[k] = e[i].hw_ts;
        c.vendor_err[k] = e[i].vendor_err;
        c.byte_len[k] = e[i].byte_len;
        c.qp_num[k] = e[i].qp_num;
        c.src_qp[k] = e[i].src_qp;
        c.wc_flags[k] = e[i].wc_flags;
        c.imm[k] = e[i].imm;
        c.status[k] = e[i].status;
        c.opcode[k] = e[i].opcode;
    }
}

// The event a record stands for — the st_post_send_rec, st_post_recv_rec, st_post_srq_recv_rec or st_poll_cq_rec
// that the tracer wrote for the same call before it wrote records (schema minors 1-3), or the st_gpu_wqe_rec the
// watcher wrote for a ring_post before minor 6 (its pi_new, which ring_post does not carry, is 0) — handed to
// `emit` (overloaded for the five). A ring completion (poll_cq, api 2) stands for a poll_cq event.
// Every element's `ts` is the record's. The sequences point into `s`, valid until its next use. `h` must have
// passed walk_records' checks.
template <typename Emit> void expand_record(const RecordHeader& h, Scratch& s, Emit&& emit) {
    const uint32_t n = h.n;
    for (uint32_t i = 0; i < n; ++i) s.ts[i] = h.ts;
    switch (h.kind) {
    case RecordKind::post_send: {
        const SendFixed* f = fixed_part<SendFixed>(&h);
        copy_send_entries(h, n, s, 0);
        st_post_send_rec r{};
        r.qp = f->qp;
        r.qp_num = f->qp_num;
        r.ret = f->ret;
        r.bad_index = f->bad_index;
        r.api = f->api;
        r.batch_offset = f->batch_offset;
        r.n = n;
        r.wr_id = s.wr_id;
        r.opcode = s.opcode;
        r.send_flags = s.send_flags;
        r.num_sge = s.num_sge;
        r.bytes = s.bytes;
        r.raddr = s.raddr;
        r.rkey = s.rkey;
        r.imm = s.imm;
        r.remote_qpn = s.remote_qpn;
        r.ah = s.ah;
        r.ts = s.ts;
        emit(r);
        return;
    }
    case RecordKind::post_recv:
    case RecordKind::post_srq_recv: {
        const RecvFixed* f = fixed_part<RecvFixed>(&h);
        copy_recv_entries(h, n, s, 0);
        // The QP's event and the SRQ's differ only in their handle fields.
        auto fill = [&](auto& r) {
            r.ret = f->ret;
            r.bad_index = f->bad_index;
            r.batch_offset = f->batch_offset;
            r.n = n;
            r.wr_id = s.wr_id;
            r.num_sge = s.num_sge;
            r.bytes = s.bytes;
            r.ts = s.ts;
            emit(r);
        };
        if (h.kind == RecordKind::post_recv) {
            st_post_recv_rec r{};
            r.qp = f->handle;
            r.qp_num = f->qp_num;
            fill(r);
        } else {
            st_post_srq_recv_rec r{};
            r.srq = f->handle;
            fill(r);
        }
        return;
    }
    case RecordKind::poll_cq: {
        const PollFixed* f = fixed_part<PollFixed>(&h);
        copy_completion_entries(h, n, s, 0);
        st_poll_cq_rec r{};
        r.cq = f->cq;
        r.ret = f->ret;
        r.api = f->api;
        r.n = n;
        r.wr_id = s.wr_id;
        r.status = s.status;
        r.opcode = s.opcode;
        r.vendor_err = s.vendor_err;
        r.byte_len = s.byte_len;
        r.qp_num = s.qp_num;
        r.src_qp = s.src_qp;
        r.wc_flags = s.wc_flags;
        r.imm = s.imm;
        r.hw_ts = s.hw_ts;
        r.ts = s.ts;
        emit(r);
        return;
    }
    case RecordKind::ring_post: {
        const RingPostFixed* f = fixed_part<RingPostFixed>(&h);
        const RingWqeEntry* e = entries<RingPostFixed, RingWqeEntry>(&h);
        for (uint32_t i = 0; i < n; ++i) {
            s.wqe_index[i] = static_cast<uint16_t>(e[i].pi);
            s.opcode[i] = ring_mlx5_opcode(e[i]);
            s.opmod[i] = ring_opmod(e[i]);
            s.fm_ce_se[i] = ring_fm_ce_se(e[i]);
            s.bytes[i] = e[i].bytes;
            s.raddr[i] = e[i].raddr;
            s.rkey[i] = e[i].rkey;
            s.imm[i] = e[i].imm;
            s.atomic_arg[i] = e[i].atomic_arg;
        }
        st_gpu_wqe_rec r{};
        r.qpn = f->qp_num;
        r.pi_old = n > 0 ? static_cast<uint32_t>(e[0].pi) : 0;
        r.pi_new = 0;
        r.n = n;
        r.wqe_index = s.wqe_index;
        r.opcode = s.opcode;
        r.opmod = s.opmod;
        r.fm_ce_se = s.fm_ce_se;
        r.bytes = s.bytes;
        r.raddr = s.raddr;
        r.rkey = s.rkey;
        r.imm = s.imm;
        r.atomic_arg = s.atomic_arg;
        emit(r);
        return;
    }
    case RecordKind::pad: return;
    }
}

// Calls integer(name, value) for each integer field of `rec` (one of the five records expand_record() makes)
// and sequence(name, elements) for each sequence, in schema order: what a reader needs to turn it into its
// own representation of the event by name or by field index.
template <typename Rec, typename Integer, typename Sequence>
void visit_fields(const Rec& rec, Integer&& integer, Sequence&& sequence) {
#define ST_VF_INT_(type, name, comment) integer(#name, rec.name);
#define ST_VF_STR_(name, comment)
#define ST_VF_SEQ_(type, name, comment) sequence(#name, rec.name);
    if constexpr (std::is_same_v<Rec, st_post_send_rec>) {
        SIGMATRACE_FIELDS_post_send(ST_VF_INT_, ST_VF_INT_, ST_VF_STR_, ST_VF_SEQ_, ST_VF_SEQ_)
    } else if constexpr (std::is_same_v<Rec, st_post_recv_rec>) {
        SIGMATRACE_FIELDS_post_recv(ST_VF_INT_, ST_VF_INT_, ST_VF_STR_, ST_VF_SEQ_, ST_VF_SEQ_)
    } else if constexpr (std::is_same_v<Rec, st_post_srq_recv_rec>) {
        SIGMATRACE_FIELDS_post_srq_recv(ST_VF_INT_, ST_VF_INT_, ST_VF_STR_, ST_VF_SEQ_, ST_VF_SEQ_)
    } else if constexpr (std::is_same_v<Rec, st_gpu_wqe_rec>) {
        SIGMATRACE_FIELDS_gpu_wqe(ST_VF_INT_, ST_VF_INT_, ST_VF_STR_, ST_VF_SEQ_, ST_VF_SEQ_)
    } else {
        static_assert(std::is_same_v<Rec, st_poll_cq_rec>);
        SIGMATRACE_FIELDS_poll_cq(ST_VF_INT_, ST_VF_INT_, ST_VF_STR_, ST_VF_SEQ_, ST_VF_SEQ_)
    }
#undef ST_VF_SEQ_
#undef ST_VF_STR_
#undef ST_VF_INT_
}

}  // namespace sigmatrace::records
