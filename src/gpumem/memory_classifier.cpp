#include "gpumem/memory_classifier.h"

#include <dlfcn.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "gpumem/cuda_driver.h"

namespace sigmatrace::gpumem {
namespace {

// hsa_amd_pointer_info_t, its stable leading members (ROCr grows the struct and honours `size`, so the runtime
// writes no further than what we declare). Values of hsa_amd_pointer_type_t.
struct HsaPointerInfo {
    uint32_t size;
    int type;
    void* agent_base_address;
    void* host_base_address;
    size_t size_in_bytes;
};
constexpr int kHsaPointerUnknown = 0;  // not known to ROCr: ordinary (unlocked) host memory
constexpr int kHsaPointerLocked = 2;   // host memory locked for GPU access: CPU-readable
using HsaPointerInfoFn = int (*)(const void*, HsaPointerInfo*, void* (*)(size_t), uint32_t*, void**);

HsaPointerInfoFn hsa_pointer_info() {
    static std::atomic<HsaPointerInfoFn> fn{nullptr};
    if (auto f = fn.load(std::memory_order_acquire)) return f;
    void* handle = dlopen("libhsa-runtime64.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!handle) return nullptr;
    auto f = reinterpret_cast<HsaPointerInfoFn>(dlsym(handle, "hsa_amd_pointer_info"));
    fn.store(f, std::memory_order_release);
    return f;
}

// True when the CPU can read `addr` (one byte, through the kernel, so an inaccessible page is an error, not a
// fault): device memory behind a large BAR is readable, device memory without one is not.
bool cpu_readable(uint64_t addr) {
    uint8_t byte;
    iovec local{&byte, 1};
    iovec remote{reinterpret_cast<void*>(addr), 1};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == 1;
}

}  // namespace

bool classify_with_hsa(uint64_t addr, MemType& out) {
    const HsaPointerInfoFn fn = hsa_pointer_info();
    if (!fn) return false;
    HsaPointerInfo info{};
    info.size = sizeof info;
    if (fn(reinterpret_cast<const void*>(addr), &info, nullptr, nullptr, nullptr) != 0) return false;
    if (info.type == kHsaPointerUnknown) out = MemType::Host;
    else if (info.type == kHsaPointerLocked) out = MemType::HostMapped;
    else out = cpu_readable(addr) ? MemType::HostMapped : MemType::Device;  // hipHostMalloc'd vs VRAM
    return true;
}

MemType MemoryClassifier::classify(uint64_t addr) {
    if (addr == 0) return MemType::Unknown;
    if (auto* cuda = CudaDriver::if_loaded()) {
        const MemType m = cuda->classify(addr);
        if (m != MemType::Host) return m;
    }
    MemType amd;
    if (classify_with_hsa(addr, amd) && amd != MemType::Host) return amd;
    return in_registered_range(addr) ? MemType::HostMapped : MemType::Host;
}

void MemoryClassifier::note_host_registration(uint64_t addr, uint64_t len) {
    std::lock_guard lk(mu_);
    registered_.push_back({addr, len});
}

void MemoryClassifier::forget_host_registration(uint64_t addr) {
    std::lock_guard lk(mu_);
    std::erase_if(registered_, [&](const Range& r) { return r.addr == addr; });
}

bool MemoryClassifier::in_registered_range(uint64_t addr) {
    std::lock_guard lk(mu_);
    return std::any_of(registered_.begin(), registered_.end(),
                       [&](const Range& r) { return addr >= r.addr && addr < r.addr + r.len; });
}

}  // namespace sigmatrace::gpumem
