// What most watcher tests start from: a FakeProducer's ring, learned by a registry (with its doorbell record, or
// as a DBR-less queue), and a Watcher over it, with a TraceCapture created first so that it sees every event.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <thread>

#include "fake_producer.h"
#include "gpumem/watcher.h"
#include "trace_capture.h"

namespace sigmatrace::gpumem::test {

struct WatchedRing {
    enum class Kind { DoorbellRecord, DbrLess };
    WatchedRing(uint32_t wqebbs, uint32_t qpn, const WatcherConfig& config, Kind kind = Kind::DoorbellRecord,
                MemoryReader* reader = nullptr)
        : prod(wqebbs, qpn), w(reg, reader ? *reader : mem, config) {
        reg.add_send_queue(kind == Kind::DbrLess ? prod.dbr_less_queue() : prod.queue());
    }
    TraceCapture trace;
    FakeProducer prod;
    QueueRegistry reg;
    ProcessMemoryReader mem;
    Watcher w;
};

// Checks that `w` is the WQE FakeProducer::post_write(seq) wrote.
inline void expect_write(const Wqe& w, uint64_t seq, uint32_t qpn) {
    EXPECT_EQ(w.qpn, qpn);
    EXPECT_EQ(w.index, static_cast<uint16_t>(seq));
    EXPECT_EQ(w.opcode, mlx5::op::RDMA_WRITE);
    EXPECT_EQ(w.raddr, 0x100000000ull + seq * 64);
    EXPECT_EQ(w.rkey, FakeProducer::rkey_for(seq));
    EXPECT_EQ(w.bytes, FakeProducer::bytes_for(seq));
}

// For writers that post FakeProducer::post_write(seq) for seq = 0, 1, 2...: every decoded WQE is exactly the one
// written at its index (each carries its sequence in raddr), and they come in order.
inline void expect_exact_and_in_order(const std::vector<Wqe>& wqes) {
    uint64_t last_seq = 0;
    bool first = true;
    for (const auto& x : wqes) {
        const uint64_t seq = (x.raddr - 0x100000000ull) / 64;
        ASSERT_EQ(x.raddr, 0x100000000ull + seq * 64);
        ASSERT_EQ(x.index, static_cast<uint16_t>(seq));
        ASSERT_EQ(x.rkey, FakeProducer::rkey_for(seq));
        ASSERT_EQ(x.bytes, FakeProducer::bytes_for(seq));
        ASSERT_TRUE(first || seq > last_seq) << "out of order";
        last_seq = seq;
        first = false;
    }
}

// A writer thread that posts for 300 ms in bursts of 1 to 64 WQEs (`post(seq)` for seq = 0, 1, 2...), sleeping
// `pause(rng)` between bursts, while the caller's watcher thread sweeps. Returns how many it posted.
template <typename Post, typename Pause> uint64_t run_bursty_writer(uint32_t seed, Post post, Pause pause) {
    uint64_t total = 0;
    std::thread writer([&] {
        std::mt19937 rng(seed);
        const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        while (std::chrono::steady_clock::now() < end) {
            const uint32_t burst = 1 + rng() % 64;
            for (uint32_t i = 0; i < burst; ++i) post(total++);
            std::this_thread::sleep_for(pause(rng));
        }
    });
    writer.join();
    return total;
}

}  // namespace sigmatrace::gpumem::test
