#include "gpumem/cuda_driver.h"

#include <dlfcn.h>

#include <atomic>

namespace sigmatrace::gpumem {
namespace {

template <typename Fn> bool lookup(void* handle, const char* name, Fn& fn) {
    fn = reinterpret_cast<Fn>(dlsym(handle, name));
    return fn != nullptr;
}

}  // namespace

bool CudaDriver::resolve(void* handle) {
    return lookup(handle, "cuPointerGetAttribute", pointer_get_attribute_) &&
           lookup(handle, "cuCtxGetCurrent", ctx_get_current_) && lookup(handle, "cuCtxSetCurrent", ctx_set_current_) &&
           lookup(handle, "cuStreamCreate", stream_create_) &&
           lookup(handle, "cuMemcpyDtoHAsync_v2", memcpy_dtoh_async_) &&
           lookup(handle, "cuStreamSynchronize", stream_synchronize_);
}

CudaDriver* CudaDriver::if_loaded() {
    // Once found, the driver stays (libcuda is never unloaded in practice); until then every call re-checks,
    // because the application may load CUDA after its first RDMA set-up call. Set-up calls only: cold path.
    static std::atomic<CudaDriver*> found{nullptr};
    if (auto* d = found.load(std::memory_order_acquire)) return d;
    static std::mutex mu;
    std::lock_guard lk(mu);
    if (auto* d = found.load(std::memory_order_acquire)) return d;
    void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!handle) return nullptr;
    auto* d = new CudaDriver();  // process lifetime: the watcher may use it until exit
    if (!d->resolve(handle)) {
        delete d;
        dlclose(handle);
        return nullptr;
    }
    found.store(d, std::memory_order_release);
    return d;
}

MemType CudaDriver::classify(uint64_t addr) {
    unsigned type = 0;
    if (pointer_get_attribute_(&type, cu::kPointerAttributeMemoryType, addr) != 0) return MemType::Host;
    unsigned managed = 0;
    if (pointer_get_attribute_(&managed, cu::kPointerAttributeIsManaged, addr) == 0 && managed)
        return MemType::Device;  // CPU reads would migrate pages under the application: copy instead
    switch (type) {
    case cu::kMemoryTypeHost: return MemType::HostMapped;
    case cu::kMemoryTypeDevice:
    case cu::kMemoryTypeUnified: return MemType::Device;
    default: return MemType::Unknown;
    }
}

bool CudaDriver::copy_to_host(void* dst, uint64_t src, size_t len) {
    std::lock_guard lk(mu_);
    cu::Context owner = nullptr;
    if (pointer_get_attribute_(&owner, cu::kPointerAttributeContext, src) != 0 || !owner) {
        ++failures_;
        return false;
    }
    cu::Context previous = nullptr;
    ctx_get_current_(&previous);
    if (previous != owner && ctx_set_current_(owner) != 0) {
        ++failures_;
        return false;
    }
    cu::Stream stream = nullptr;
    for (const auto& cs : streams_)
        if (cs.ctx == owner) stream = cs.stream;
    bool ok = true;
    if (!stream) {
        // Once per context: not on the steady-state path.
        ok = stream_create_(&stream, cu::kStreamNonBlocking) == 0;
        if (ok) streams_.push_back({owner, stream});
    }
    ok = ok && memcpy_dtoh_async_(dst, src, len, stream) == 0 && stream_synchronize_(stream) == 0;
    if (previous != owner) ctx_set_current_(previous);
    ok ? ++copies_ : ++failures_;
    return ok;
}

}  // namespace sigmatrace::gpumem
