// Verbs objects that peers read and write, laid out in their owner's arena (arena.h). Peers reach them by
// offset, never by pointer. Each structure documents who writes which member:
//   owner  = the process that created the object (post_recv, poll_cq, modify_qp, reg_mr)
//   peer   = any process executing an operation that targets it (consumes receives, pushes completions)
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace softfabric {

// --------------------------------------------------------------------------------------------------------- MRs
// One registered memory region. key == lkey == rkey: slot index << 8 | 8-bit generation, 0 = free.
struct MrEntry {
    std::atomic<uint32_t> key;
    uint32_t access;   // ibv_access_flags
    uint64_t pd_id;    // fabric-unique PD id
    uint64_t addr;     // start, in the owner's address space
    uint64_t length;
    uint64_t iova;     // the address peers use for this region (hca_va; addr unless registered otherwise)
    uint64_t reserved[3];
};
static_assert(sizeof(MrEntry) == 64);
inline constexpr uint32_t kMrSlotBits = 16;
inline constexpr uint32_t kMrSlots = 1u << kMrSlotBits;
inline uint32_t mr_slot_of(uint32_t key) { return (key >> 8) & (kMrSlots - 1); }

// --------------------------------------------------------------------------------------------- receive queues
// A receive queue (a QP's RQ or an SRQ): the owner produces at `tail`, peers consume at `head` with a CAS, so
// many senders (UD, SRQ) can take entries concurrently. An entry is {wr_id, num_sge, sge[max_sge]}.
struct RecvEntry {
    uint64_t wr_id;
    uint32_t num_sge;
    uint32_t reserved;
    ibv_sge sge[1];  // really max_sge entries (stride below)
};

struct RecvRing {
    uint32_t capacity;  // power of two
    uint32_t max_sge;
    uint32_t stride;
    uint32_t reserved0;
    alignas(64) std::atomic<uint64_t> head;  // peers (consumers)
    alignas(64) std::atomic<uint64_t> tail;  // owner (producer)
    alignas(64) std::atomic<uint32_t> limit;  // SRQ limit (0 = not armed)
    uint32_t reserved1;

    static uint32_t stride_for(uint32_t max_sge) { return static_cast<uint32_t>(16 + 16 * (max_sge ? max_sge : 1)); }
    static uint64_t bytes_for(uint32_t capacity, uint32_t max_sge) {
        return sizeof(RecvRing) + static_cast<uint64_t>(capacity) * stride_for(max_sge);
    }
    RecvEntry* entry(uint64_t index) {
        auto* base = reinterpret_cast<unsigned char*>(this + 1);
        return reinterpret_cast<RecvEntry*>(base + (index & (capacity - 1)) * stride);
    }
    // head first: head only grows and never passes tail, so a tail read after it is >= it (the other order can
    // see peers consume past a stale tail and underflow).
    uint64_t size() const {
        const uint64_t h = head.load(std::memory_order_acquire);
        return tail.load(std::memory_order_acquire) - h;
    }

    // Peer side: takes the oldest entry into `out` (which must hold max_sge SGEs). False when empty.
    bool consume(RecvEntry* out) {
        uint64_t h = head.load(std::memory_order_acquire);
        for (;;) {
            if (h >= tail.load(std::memory_order_acquire)) return false;
            std::memcpy(static_cast<void*>(out), entry(h), stride);
            // The copy is only ours if nobody took entry h meanwhile (then the producer may have reused it).
            if (head.compare_exchange_weak(h, h + 1, std::memory_order_acq_rel)) return true;
        }
    }
};
static_assert(sizeof(RecvRing) == 256);

// ------------------------------------------------------------------------------------------ completion queues
// One CQE slot: `seq` = index + 1 once the producer has published it for that lap.
struct CqeSlot {
    std::atomic<uint64_t> seq;
    ibv_wc wc;
    uint64_t timestamp_ns;  // CLOCK_MONOTONIC when the completion was produced
};
static_assert(sizeof(CqeSlot) == 64);

// A completion queue: many producers (the owner's send engine, peers delivering receives) reserve slots with a
// CAS on `tail`; the owner consumes in order at `head`.
struct SharedCq {
    uint32_t capacity;  // power of two
    uint32_t cqn;
    uint32_t member;         // owner member slot
    int32_t channel_wfd;     // owner's end of the completion channel socket, -1 without a channel
    uint64_t owner_token;    // the owner's struct ibv_cq*, written to the channel as the event
    alignas(64) std::atomic<uint64_t> tail;
    alignas(64) std::atomic<uint64_t> head;
    alignas(64) std::atomic<uint32_t> armed;  // 0, 1 = next completion, 2 = next solicited completion
    std::atomic<uint32_t> event_pending;      // a peer completed into an armed CQ: the owner must signal it
    std::atomic<uint32_t> overflow;           // a completion was dropped because the CQ was full
    uint32_t reserved;

    static uint64_t bytes_for(uint32_t capacity) { return sizeof(SharedCq) + uint64_t{capacity} * sizeof(CqeSlot); }
    CqeSlot* slot(uint64_t index) { return reinterpret_cast<CqeSlot*>(this + 1) + (index & (capacity - 1)); }

    // Whether a producer that read `tail_seen` and then `head_seen` must call the CQ full. The tail it read may be
    // older than the head: other producers pushed and the owner consumed after it read it. Then tail - head
    // underflows, which must not read as "full" (a spurious CQ overrun under load, which fails
    // ibv_srq_pingpong); the CAS in push() fails on such a stale tail and refreshes it.
    static bool full(uint64_t tail_seen, uint64_t head_seen, uint32_t capacity) {
        return tail_seen >= head_seen && tail_seen - head_seen >= capacity;
    }
    // Producer side. Returns false (and sets overflow) when the CQ is full.
    bool push(const ibv_wc& wc, uint64_t timestamp_ns) {
        uint64_t t = tail.load(std::memory_order_acquire);
        for (;;) {
            if (full(t, head.load(std::memory_order_acquire), capacity)) {
                overflow.store(1, std::memory_order_release);
                return false;
            }
            if (tail.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) break;
        }
        CqeSlot* s = slot(t);
        s->wc = wc;
        s->timestamp_ns = timestamp_ns;
        s->seq.store(t + 1, std::memory_order_release);
        return true;
    }
    // Consumer side (owner only): copies up to n completions out; returns how many.
    int pop(int n, ibv_wc* out, uint64_t* timestamps = nullptr) {
        uint64_t h = head.load(std::memory_order_relaxed);
        int got = 0;
        while (got < n) {
            CqeSlot* s = slot(h);
            if (s->seq.load(std::memory_order_acquire) != h + 1) break;
            out[got] = s->wc;
            if (timestamps) timestamps[got] = s->timestamp_ns;
            ++got;
            ++h;
        }
        if (got) head.store(h, std::memory_order_release);
        return got;
    }
};
static_assert(sizeof(SharedCq) == 256);

// ---------------------------------------------------------------------------------------------------- QPs
// What peers need to know about a QP to deliver to it.
struct SharedQp {
    std::atomic<uint32_t> state;  // enum ibv_qp_state; owner, and peers moving it to ERROR on responder errors
    uint32_t qpn;
    uint32_t type;       // enum ibv_qp_type
    uint32_t nic;        // NIC index of its port
    uint64_t pd_id;
    std::atomic<uint32_t> qkey;          // UD; a DCT's access key (its low 32 bits)
    std::atomic<uint32_t> access_flags;  // qp_access_flags: which remote operations it accepts
    std::atomic<uint32_t> min_rnr_timer; // encoded IB value, owner sets at RTR
    std::atomic<uint32_t> flush_request; // a peer moved this QP to ERROR: the owner must flush its queues
    std::atomic<uint32_t> remote_qpn;    // RC: the connected peer
    std::atomic<uint32_t> remote_nic;
    uint64_t rq_offset;       // RecvRing in the owner's arena (0 when the QP uses an SRQ)
    uint64_t srq_offset;      // RecvRing of its SRQ, 0 if none
    uint64_t recv_cq_offset;  // SharedCq
    uint32_t member;
    uint32_t dc_role;    // enum DcRole: a DC initiator or target (type IBV_QPT_DRIVER), else 0
    uint32_t reserved[4];
};
static_assert(sizeof(SharedQp) == 96);

// The two halves of a dynamically connected (mlx5 DC) transport: a DCI sends to any DCT named in each WQE's
// address vector, reliably (acknowledged, retried like RC); a DCT receives into its SRQ from any DCI that presents
// its access key (kept in SharedQp::qkey).
enum class DcRole : uint32_t { None = 0, Initiator = 1, Target = 2 };

}  // namespace softfabric
