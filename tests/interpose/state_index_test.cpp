// The lock-free state index: lookups while another thread inserts, erases and grows it.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "interpose/state/state_index.h"

namespace sigmatrace::testing {
namespace {

struct Item {
    std::atomic<const void*> key{nullptr};
};
struct ByKey {
    static size_t hash(const void* k) noexcept { return interpose::hash_pointer(k); }
    static bool matches(const Item* s, const void* k) noexcept { return s->key.load(std::memory_order_relaxed) == k; }
    static const void* key_of(const Item* s) noexcept { return s->key.load(std::memory_order_relaxed); }
};
using Index = interpose::StateIndex<Item, const void*, ByKey>;

const void* key(size_t i) {
    return reinterpret_cast<const void*>(0x10000 + i * 64);
}

TEST(StateIndex, InsertFindEraseAcrossGrowth) {
    Index index;
    std::vector<Item> items(5000);
    for (size_t i = 0; i < items.size(); ++i) {
        items[i].key = key(i);
        index.insert(&items[i]);
    }
    EXPECT_EQ(index.size(), items.size());
    for (size_t i = 0; i < items.size(); ++i) ASSERT_EQ(index.find(key(i)), &items[i]) << i;
    EXPECT_EQ(index.find(key(items.size())), nullptr);
    for (size_t i = 0; i < items.size(); i += 2) index.erase(&items[i]);
    for (size_t i = 0; i < items.size(); ++i) ASSERT_EQ(index.find(key(i)), i % 2 ? &items[i] : nullptr) << i;
    // Re-inserting after erases reuses the table (tombstones count towards growth).
    for (size_t i = 0; i < items.size(); i += 2) index.insert(&items[i]);
    for (size_t i = 0; i < items.size(); ++i) ASSERT_EQ(index.find(key(i)), &items[i]) << i;
}

TEST(StateIndex, ReadersNeverMissALiveEntryWhileAWriterChurns) {
    Index index;
    // Entries 0..99 stay; the writer inserts and erases others, forcing growth and tombstones.
    std::vector<Item> stable(100), churn(4000);
    for (size_t i = 0; i < stable.size(); ++i) {
        stable[i].key = key(i);
        index.insert(&stable[i]);
    }
    std::atomic<bool> stop{false};
    std::atomic<long> misses{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 2; ++t)
        readers.emplace_back([&] {
            while (!stop.load(std::memory_order_relaxed))
                for (size_t i = 0; i < stable.size(); ++i)
                    if (index.find(key(i)) != &stable[i]) misses.fetch_add(1);
        });
    for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < churn.size(); ++i) {
            churn[i].key = key(1000 + i);
            index.insert(&churn[i]);
        }
        for (size_t i = 0; i < churn.size(); ++i) index.erase(&churn[i]);
    }
    stop = true;
    for (auto& r : readers) r.join();
    EXPECT_EQ(misses.load(), 0);
}

}  // namespace
}  // namespace sigmatrace::testing
