// A lock-free index from a key (an object pointer, or a (context, QP number) pair) to per-object wrapper
// state, for the data path: lookups take no lock and allocate nothing; inserts and erases happen at object
// creation/destruction under the caller's set-up mutex.
//
// Open addressing over slots holding State pointers. Keys are not stored in the table: a slot's state is
// compared with Traits::matches(state, key), which reads the state's own (atomic) key fields. That is safe
// because states are type-stable (never freed, only recycled by the owner's pool): a reader racing with an
// erase sees either the old state (whose key no longer matches once cleared) or a tombstone.
//
// Growth replaces the table; old tables are retired, never freed, because a reader may still be probing one.
// Their memory is bounded by the largest table (the sum of a doubling series).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace sigmatrace::interpose {

template <typename State, typename Key, typename Traits> class StateIndex {
public:
    StateIndex() = default;
    // Only for indexes with a scope (tests): the process-wide registry is never destroyed, because readers on
    // other threads may still be probing its tables while the process exits.
    ~StateIndex() {
        for (Table* t : retired_) ::operator delete(t);
        ::operator delete(table_.load(std::memory_order_relaxed));
    }
    StateIndex(const StateIndex&) = delete;
    StateIndex& operator=(const StateIndex&) = delete;

    // Lock-free. nullptr when absent.
    State* find(const Key& key) const noexcept {
        const Table* t = table_.load(std::memory_order_acquire);
        if (t == nullptr) return nullptr;
        size_t i = Traits::hash(key) & t->mask;
        for (;;) {
            State* s = t->slots[i].load(std::memory_order_acquire);
            if (s == nullptr) return nullptr;
            if (s != tombstone() && Traits::matches(s, key)) return s;
            i = (i + 1) & t->mask;
        }
    }

    // Caller holds the set-up mutex. `s` must already carry its key.
    void insert(State* s) {
        Table* t = table_.load(std::memory_order_relaxed);
        if (t == nullptr || (used_ + 1) * 2 > t->mask + 1) t = grow(t);
        place(t, s);
        ++used_;
        ++live_;
    }

    // Caller holds the set-up mutex. Must be called before the state's key fields are cleared.
    void erase(State* s) noexcept {
        Table* t = table_.load(std::memory_order_relaxed);
        if (t == nullptr) return;
        size_t i = Traits::hash(Traits::key_of(s)) & t->mask;
        for (;;) {
            State* cur = t->slots[i].load(std::memory_order_relaxed);
            if (cur == nullptr) return;
            if (cur == s) {
                t->slots[i].store(tombstone(), std::memory_order_release);
                --live_;
                return;
            }
            i = (i + 1) & t->mask;
        }
    }

    size_t size() const noexcept { return live_; }

private:
    struct Table {
        size_t mask;
        std::atomic<State*> slots[1];  // really mask + 1 entries
    };

    static State* tombstone() noexcept { return reinterpret_cast<State*>(uintptr_t{1}); }

    static Table* allocate(size_t capacity) {
        const size_t bytes = sizeof(Table) + (capacity - 1) * sizeof(std::atomic<State*>);
        void* mem = ::operator new(bytes);
        auto* t = static_cast<Table*>(mem);
        t->mask = capacity - 1;
        for (size_t i = 0; i < capacity; ++i) new (&t->slots[i]) std::atomic<State*>(nullptr);
        return t;
    }

    static void place(Table* t, State* s) noexcept {
        size_t i = Traits::hash(Traits::key_of(s)) & t->mask;
        for (;;) {
            State* cur = t->slots[i].load(std::memory_order_relaxed);
            if (cur == nullptr) {
                t->slots[i].store(s, std::memory_order_release);
                return;
            }
            i = (i + 1) & t->mask;
        }
    }

    // Rebuilds into a table at least twice the live count (tombstones dropped) and publishes it.
    Table* grow(Table* old) {
        size_t capacity = 64;
        while (capacity < (live_ + 1) * 4) capacity *= 2;
        Table* t = allocate(capacity);
        if (old != nullptr) {
            for (size_t i = 0; i <= old->mask; ++i) {
                State* s = old->slots[i].load(std::memory_order_relaxed);
                if (s != nullptr && s != tombstone()) place(t, s);
            }
            retired_.push_back(old);
        }
        used_ = live_;
        table_.store(t, std::memory_order_release);
        return t;
    }

    std::atomic<Table*> table_{nullptr};
    size_t used_ = 0;  // live + tombstones in the current table
    size_t live_ = 0;
    std::vector<Table*> retired_;  // kept alive for readers still probing them
};

// Pointer hashing: objects are at least 8-byte aligned; mix the high bits down.
inline size_t hash_pointer(const void* p) noexcept {
    auto v = reinterpret_cast<uintptr_t>(p);
    v ^= v >> 17;
    return static_cast<size_t>(v * 0x9e3779b97f4a7c15ull >> 16);
}

}  // namespace sigmatrace::interpose
