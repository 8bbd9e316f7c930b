// Memory readers for watcher tests: one that refuses everything, and one that tears a copy on demand.
#pragma once

#include <functional>
#include <utility>

#include "gpumem/memory_reader.h"

namespace sigmatrace::gpumem::test {

// A reader that refuses everything: GPU memory without a driver, or unmapped memory.
class FailingReader final : public MemoryReader {
public:
    bool read(void*, uint64_t, size_t, MemType) override { return false; }
    bool read_be32_acquire(uint64_t, MemType, uint32_t&) override { return false; }
};

// Copies the first `at` bytes of a ring read (16 unless armed otherwise), lets a "writer" run, then copies the
// rest: a torn copy on demand.
class InterferingReader final : public MemoryReader {
public:
    InterferingReader() = default;
    explicit InterferingReader(std::function<void()> writer) : writer_(std::move(writer)) {}
    // Tears the next read of 64 bytes or more with `writer`, after its first `at` bytes.
    void arm(std::function<void()> writer, size_t at = 16) {
        writer_ = std::move(writer);
        at_ = at;
    }
    bool read(void* dst, uint64_t addr, size_t len, MemType mem) override {
        if (len < 64 || !writer_) return inner_.read(dst, addr, len, mem);
        inner_.read(dst, addr, at_, mem);
        auto w = std::move(writer_);
        writer_ = nullptr;
        w();
        return inner_.read(static_cast<uint8_t*>(dst) + at_, addr + at_, len - at_, mem);
    }
    bool read_be32_acquire(uint64_t addr, MemType mem, uint32_t& v) override {
        return inner_.read_be32_acquire(addr, mem, v);
    }

private:
    ProcessMemoryReader inner_;
    std::function<void()> writer_;
    size_t at_ = 16;
};

// Lets `action` run just before the first read of `addr`: the producer and the NIC moving on between two reads of
// one sweep (a watcher preempted mid-sweep).
class ActBeforeReadOf final : public MemoryReader {
public:
    ActBeforeReadOf(uint64_t addr, std::function<void()> action) : addr_(addr), action_(std::move(action)) {}
    bool read(void* dst, uint64_t addr, size_t len, MemType mem) override {
        if (addr == addr_ && action_) std::exchange(action_, nullptr)();
        return inner_.read(dst, addr, len, mem);
    }
    bool read_be32_acquire(uint64_t addr, MemType mem, uint32_t& v) override {
        return inner_.read_be32_acquire(addr, mem, v);
    }

private:
    ProcessMemoryReader inner_;
    uint64_t addr_;
    std::function<void()> action_;
};

}  // namespace sigmatrace::gpumem::test
