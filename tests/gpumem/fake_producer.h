// A CPU stand-in for a GPU thread posting to a send queue in host memory: writes each WQE into the ring (8-byte
// relaxed atomic stores, like a GPU's relaxed stores and visible to ThreadSanitizer as such), then publishes the
// producer index in the doorbell record with a release store -- the NVSHMEM/rocSHMEM order (WQE, fence, DBR).
// For DBR-less queues (DOCA's GPU_SM_NO_DBR) the record is never written: the doorbell is an MMIO write a host
// cannot see, so these tests just do not ring (`ring_doorbell = false`).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpumem/queue_types.h"
#include "wqe_builder.h"

namespace sigmatrace::gpumem::test {

class FakeProducer {
public:
    FakeProducer(uint32_t wqebbs, uint32_t qpn) : wqebbs_(wqebbs), qpn_(qpn) {
        ring_ = static_cast<uint8_t*>(std::aligned_alloc(64, size_t{wqebbs} * 64));
        std::memset(ring_, 0, size_t{wqebbs} * 64);
        dbr_ = static_cast<uint32_t*>(std::aligned_alloc(64, 64));
        std::memset(dbr_, 0, 64);
    }
    ~FakeProducer() {
        std::free(ring_);
        std::free(dbr_);
    }
    FakeProducer(const FakeProducer&) = delete;
    FakeProducer& operator=(const FakeProducer&) = delete;

    // The send queue as the set-up hooks would have learned it.
    SendQueue queue(uint64_t key = 1) const {
        SendQueue q;
        q.key = key;
        q.qpn = qpn_;
        q.ring_addr = reinterpret_cast<uint64_t>(ring_);
        q.wqebbs = wqebbs_;
        q.dbr_addr = reinterpret_cast<uint64_t>(&dbr_[1]);
        return q;
    }

    // The same queue as a DBR-less one (send_dbr_mode = NO_DBR): no doorbell record to read.
    SendQueue dbr_less_queue(uint64_t key = 1) const {
        SendQueue q = queue(key);
        q.dbr_addr = 0;
        q.dbr_less = true;
        return q;
    }

    // The order a producer's stores land in: the control segment's first 8 bytes (index, QP number) first or last.
    enum class CtrlOrder { First, Last };

    // Writes WQE `img` (built with index = pi()) at the producer index, advances it, and (unless told not to)
    // publishes it in the doorbell record.
    void post(WqeImage img, bool ring_doorbell = true, CtrlOrder order = CtrlOrder::First) {
        const auto& bytes = img.finish();
        const uint32_t blocks = img.wqebbs();
        std::vector<uint8_t> padded(size_t{blocks} * 64, 0);
        std::memcpy(padded.data(), bytes.data(), bytes.size());
        const uint32_t words = blocks * 8;
        for (uint32_t k = 0; k < words; ++k) {
            const uint32_t i = order == CtrlOrder::First ? k : (k + 1) % words;  // Last: word 0 at the end
            store_word(pi_ + i / 8, i % 8, &padded[size_t{i} * 8]);
        }
        pi_ += blocks;
        if (ring_doorbell) ring();
    }
    // Only the first `words` 8-byte words of WQE `img` at the producer index (the control segment first), without
    // advancing: a WQE caught half-written. post() of the same image completes it.
    void write_partially(WqeImage img, uint32_t words) {
        const auto& bytes = img.finish();
        std::vector<uint8_t> padded(size_t{img.wqebbs()} * 64, 0);
        std::memcpy(padded.data(), bytes.data(), bytes.size());
        for (uint32_t i = 0; i < words && i < padded.size() / 8; ++i) store_word(pi_ + i / 8, i % 8, &padded[size_t{i} * 8]);
    }
    // An RDMA WRITE whose fields are functions of its index, so any decoded WQE can be checked exactly.
    void post_write(uint64_t seq, bool ring_doorbell = true, CtrlOrder order = CtrlOrder::First) {
        post(write_image(seq), ring_doorbell, order);
    }
    WqeImage write_image(uint64_t seq) const {
        return WqeImage(0x08, static_cast<uint16_t>(pi_), qpn_).raddr(0x100000000ull + seq * 64, rkey_for(seq))
            .data(bytes_for(seq), 0x77, 0x2000 + seq);
    }
    static uint32_t rkey_for(uint64_t seq) { return static_cast<uint32_t>(seq * 2654435761u) | 1; }
    static uint32_t bytes_for(uint64_t seq) { return static_cast<uint32_t>(seq % 65536) + 1; }

    // Publishes the producer index: DBR[1] = htobe32(pi & 0xffff), release.
    void ring() { __atomic_store_n(&dbr_[1], __builtin_bswap32(pi_ & 0xffff), __ATOMIC_RELEASE); }

    uint64_t pi() const { return pi_; }
    uint8_t* ring_bytes() { return ring_; }

private:
    void store_word(uint64_t block, uint32_t word, const uint8_t* src) {
        uint64_t v;
        std::memcpy(&v, src, 8);
        uint8_t* dst = ring_ + size_t{block % wqebbs_} * 64;
        __atomic_store_n(reinterpret_cast<uint64_t*>(dst) + word, v, __ATOMIC_RELAXED);
    }

    uint32_t wqebbs_;
    uint32_t qpn_;
    uint8_t* ring_;
    uint32_t* dbr_;
    uint64_t pi_ = 0;
};

}  // namespace sigmatrace::gpumem::test
