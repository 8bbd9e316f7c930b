#include "gpumem/memory_reader.h"

#include <cstring>

#include "gpumem/cuda_driver.h"
#include "mlx5_format/mlx5_layout.h"

namespace sigmatrace::gpumem {

void copy_from_shared_host(void* dst, const void* src, size_t len) {
    auto* out = static_cast<uint8_t*>(dst);
    const auto* in = static_cast<const uint8_t*>(src);
    if ((reinterpret_cast<uintptr_t>(in) & 7) == 0) {
        const auto* words = reinterpret_cast<const uint64_t*>(in);
        const size_t n = len / 8;
        for (size_t i = 0; i < n; ++i) {
            const uint64_t w = __atomic_load_n(words + i, __ATOMIC_RELAXED);
            std::memcpy(out + i * 8, &w, 8);
        }
        out += n * 8;
        in += n * 8;
        len -= n * 8;
    }
    for (size_t i = 0; i < len; ++i) out[i] = __atomic_load_n(in + i, __ATOMIC_RELAXED);
}

bool ProcessMemoryReader::read(void* dst, uint64_t addr, size_t len, MemType mem) {
    if (host_readable(mem)) {
        copy_from_shared_host(dst, reinterpret_cast<const void*>(addr), len);
        return true;
    }
    if (mem == MemType::Device) {
        if (auto* cuda = CudaDriver::if_loaded(); cuda && cuda->copy_to_host(dst, addr, len)) return true;
    }
    ++failures_;
    return false;
}

bool ProcessMemoryReader::read_be32_acquire(uint64_t addr, MemType mem, uint32_t& value) {
    if (host_readable(mem)) {
        const uint32_t raw = __atomic_load_n(reinterpret_cast<const uint32_t*>(addr), __ATOMIC_ACQUIRE);
        value = __builtin_bswap32(raw);
        return true;
    }
    uint8_t buf[4];
    if (!read(buf, addr, sizeof buf, mem)) return false;
    value = mlx5::load_be32(buf);
    return true;
}

}  // namespace sigmatrace::gpumem
