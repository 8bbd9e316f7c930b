// The lock-free completion queue in the fabric's shared memory (core/shared_objects.h): when a producer must call
// it full. A spurious overrun came from a producer's stale tail read after the owner had consumed past it
// (tail - head underflowed) and failed ibv_srq_pingpong on a loaded CI machine.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "core/shared_objects.h"

namespace softfabric {
namespace {

struct CqMemory {
    explicit CqMemory(uint32_t capacity)
        : bytes(std::make_unique<uint64_t[]>(SharedCq::bytes_for(capacity) / sizeof(uint64_t))) {
        cq = new (bytes.get()) SharedCq{};
        cq->capacity = capacity;
    }
    std::unique_ptr<uint64_t[]> bytes;  // zeroed, 8-byte aligned; SharedCq's atomics need no more
    SharedCq* cq;
};

TEST(SharedCq, AStaleTailBehindTheHeadIsNotFull) {
    // A producer read tail 100; meanwhile others pushed 100 and 101 and the owner consumed them (head 102).
    EXPECT_FALSE(SharedCq::full(100, 102, 512));
    EXPECT_FALSE(SharedCq::full(101, 102, 4));
    EXPECT_FALSE(SharedCq::full(102, 102, 4));
    EXPECT_FALSE(SharedCq::full(105, 102, 4));
    EXPECT_TRUE(SharedCq::full(106, 102, 4));
    EXPECT_TRUE(SharedCq::full(4, 0, 4));
}

// Many producers and the owner at once, each producer keeping at most one completion outstanding (3 < 4): no
// push may fail, every completion arrives once and in its producer's order. Bounded to a few thousand rounds
// (the spurious-overrun window is nanoseconds wide: the deterministic case above is what pins it).
TEST(SharedCq, ProducersWithinCapacityAllGetThrough) {
    constexpr uint32_t kCapacity = 4;
    constexpr int kProducers = 3;
    constexpr uint64_t kPerProducer = 3000;
    CqMemory mem(kCapacity);
    SharedCq& cq = *mem.cq;
    std::atomic<uint64_t> consumed[kProducers] = {};
    std::atomic<int> failed_pushes{0};

    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p) {
        producers.emplace_back([&, p] {
            for (uint64_t i = 0; i < kPerProducer; ++i) {
                while (consumed[p].load(std::memory_order_acquire) < i) std::this_thread::yield();
                ibv_wc wc{};
                wc.wr_id = uint64_t(p) << 32 | i;
                if (!cq.push(wc, i)) failed_pushes.fetch_add(1);
            }
        });
    }
    uint64_t total = 0, next[kProducers] = {};
    bool in_order = true;
    ibv_wc wc[8];
    while (total < kProducers * kPerProducer && failed_pushes.load() == 0) {
        const int n = cq.pop(8, wc);
        if (n == 0) std::this_thread::yield();
        for (int k = 0; k < n; ++k) {
            const auto p = static_cast<int>(wc[k].wr_id >> 32);
            in_order &= (wc[k].wr_id & 0xffffffffu) == next[p]++;
            consumed[p].fetch_add(1, std::memory_order_release);
        }
        total += static_cast<uint64_t>(n);
    }
    if (failed_pushes.load()) {
        for (auto& c : consumed) c.store(kPerProducer);  // let the producers finish
    }
    for (auto& t : producers) t.join();
    EXPECT_EQ(failed_pushes.load(), 0);
    EXPECT_EQ(cq.overflow.load(), 0u);
    EXPECT_EQ(total, kProducers * kPerProducer);
    EXPECT_TRUE(in_order) << "each producer's completions arrive in its order";
}

TEST(SharedCq, AFullQueueRefusesAndSetsOverflow) {
    CqMemory mem(4);
    ibv_wc wc{};
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(mem.cq->push(wc, 0)) << i;
    EXPECT_FALSE(mem.cq->push(wc, 0));
    EXPECT_EQ(mem.cq->overflow.load(), 1u);
    ibv_wc out[4];
    EXPECT_EQ(mem.cq->pop(4, out), 4);
}

}  // namespace
}  // namespace softfabric
