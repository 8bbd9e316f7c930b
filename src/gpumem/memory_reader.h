// How the watcher reads queue memory it does not own, without ever writing it: host rings with plain loads
// (8-byte relaxed atomic loads, because the producer writes them concurrently), GPU rings through the CUDA
// driver's copy engine (cuda_driver.h). An interface so tests can inject unreadable memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpumem/queue_types.h"

namespace sigmatrace::gpumem {

class MemoryReader {
public:
    virtual ~MemoryReader() = default;
    // Copies [addr, addr + len) into dst; false when that memory cannot be read (GPU memory without a usable
    // driver, an unknown memory type).
    virtual bool read(void* dst, uint64_t addr, size_t len, MemType mem) = 0;
    // A 32-bit big-endian counter (doorbell record) with acquire ordering: reads issued after it see the
    // writes that preceded the producer's release of this value.
    virtual bool read_be32_acquire(uint64_t addr, MemType mem, uint32_t& value) = 0;
};

// The real reader: plain loads for host memory, the CUDA driver for device memory.
class ProcessMemoryReader final : public MemoryReader {
public:
    bool read(void* dst, uint64_t addr, size_t len, MemType mem) override;
    bool read_be32_acquire(uint64_t addr, MemType mem, uint32_t& value) override;
    uint64_t failures() const { return failures_; }

private:
    uint64_t failures_ = 0;
};

// Copies host memory that another thread may be writing, in 8-byte relaxed atomic loads (plain movs on x86),
// so the copy is race-free under the C++ memory model and ThreadSanitizer.
void copy_from_shared_host(void* dst, const void* src, size_t len);

}  // namespace sigmatrace::gpumem
