// libsigmatrace.so's exports of the GPU runtime calls that map doorbell pages and rings into a GPU, and of
// cuGetProcAddress, through which the CUDA runtime and NVSHMEM reach the driver. None of them needs CUDA or ROCm
// to load: each resolves the real function only when called, which only a process that uses that runtime does.
// The driver and HIP/HSA libraries export unversioned (or per-release) symbols, so these exports are listed in
// no version node of libsigmatrace.map: an unversioned definition binds for any caller.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gpumem/cuda_driver.h"
#include "gpumem/cuda_proc_hooks.h"
#include "gpumem/gpumem_runtime.h"
#include "interpose/hooks/export.h"
#include "interpose/state/hook_scope.h"

using namespace sigmatrace::gpumem;
using sigmatrace::interpose::HookScope;
using sigmatrace::interpose::missing_real_errno;
using sigmatrace::interpose::RealFunction;
using sigmatrace::interpose::WrappedLibrary;

namespace {

constexpr int kCudaErrorNotFound = 500;  // CUDA_ERROR_NOT_FOUND: what we return when the driver is absent
constexpr int kHipErrorNotInitialized = 3;
constexpr int kHsaStatusError = 0x1000;
constexpr unsigned kHipHostRegisterIoMemory = 0x4;  // hipHostRegisterIoMemory

void note_registration(const void* p, size_t size, bool io, int rc) {
    const int saved = errno;
    GpuMemRuntime::instance().observer().host_registered(uptr(p), size, io, rc);
    errno = saved;
}

}  // namespace

// ------------------------------------------------------------------------------------------ CUDA driver

using CuGetProcAddressV1 = int (*)(const char*, void**, int, unsigned long long);
using CuGetProcAddressV2 = int (*)(const char*, void**, int, unsigned long long, int*);

ST_EXPORT int cuGetProcAddress(const char*, void**, int, unsigned long long);
ST_EXPORT int cuGetProcAddress_v2(const char*, void**, int, unsigned long long, int*);

// cuGetProcAddress("cuGetProcAddress") must return our own wrappers too, or later lookups escape us.
static void* replace_proc(const char* symbol, void* real, int cuda_version) {
    if (symbol && std::strcmp(symbol, "cuGetProcAddress") == 0 && real)
        return cuda_version >= 12000 ? reinterpret_cast<void*>(&cuGetProcAddress_v2)
                                     : reinterpret_cast<void*>(&cuGetProcAddress);
    return hook_cuda_proc(symbol, real);
}

ST_EXPORT int cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, unsigned long long flags) {
    static RealFunction<CuGetProcAddressV1> real{"cuGetProcAddress", nullptr, WrappedLibrary::cuda};
    auto fn = real.get();
    if (!fn) return missing_real_errno<int>("cuGetProcAddress", nullptr, ENOSYS, kCudaErrorNotFound);
    const int rc = fn(symbol, pfn, cuda_version, flags);
    if (rc == 0 && pfn) *pfn = replace_proc(symbol, *pfn, cuda_version);
    return rc;
}

ST_EXPORT int cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, unsigned long long flags,
                                  int* status) {
    static RealFunction<CuGetProcAddressV2> real{"cuGetProcAddress_v2", nullptr, WrappedLibrary::cuda};
    auto fn = real.get();
    if (!fn) return missing_real_errno<int>("cuGetProcAddress_v2", nullptr, ENOSYS, kCudaErrorNotFound);
    const int rc = fn(symbol, pfn, cuda_version, flags, status);
    if (rc == 0 && pfn) *pfn = replace_proc(symbol, *pfn, cuda_version);
    return rc;
}

// The same entry points for programs that call the driver directly (PLT) or look them up with dlsym.
#define ST_CUDA_REGISTER_EXPORT(name)                                                                          \
    ST_EXPORT int name(void* p, size_t bytes, unsigned int flags) {                                            \
        static RealFunction<CuMemHostRegisterFn> real{#name, nullptr, WrappedLibrary::cuda};                    \
        auto fn = real.get();                                                                                  \
        if (!fn) return missing_real_errno<int>(#name, nullptr, ENOSYS, kCudaErrorNotFound);                   \
        return observed_cu_mem_host_register(fn, p, bytes, flags);                                             \
    }
ST_CUDA_REGISTER_EXPORT(cuMemHostRegister)
ST_CUDA_REGISTER_EXPORT(cuMemHostRegister_v2)
#undef ST_CUDA_REGISTER_EXPORT

ST_EXPORT int cuMemHostUnregister(void* p) {
    static RealFunction<CuMemHostUnregisterFn> real{"cuMemHostUnregister", nullptr, WrappedLibrary::cuda};
    auto fn = real.get();
    if (!fn) return missing_real_errno<int>("cuMemHostUnregister", nullptr, ENOSYS, kCudaErrorNotFound);
    return observed_cu_mem_host_unregister(fn, p);
}

ST_EXPORT int cuMemGetHandleForAddressRange(void* handle, unsigned long long dptr, size_t size, int type,
                                            unsigned long long flags) {
    static RealFunction<CuMemGetHandleForAddressRangeFn> real{"cuMemGetHandleForAddressRange", nullptr, WrappedLibrary::cuda};
    auto fn = real.get();
    if (!fn) return missing_real_errno<int>("cuMemGetHandleForAddressRange", nullptr, ENOSYS, kCudaErrorNotFound);
    return observed_cu_mem_get_handle_for_address_range(fn, handle, dptr, size, type, flags);
}

// ------------------------------------------------------------------------------------------ CUDA runtime (shared)
// cudaHostRegister of a dynamically linked libcudart; cudart_static reaches the driver through
// cuGetProcAddress instead, which the exports above cover.

ST_EXPORT int cudaHostRegister(void* p, size_t size, unsigned int flags) {
    static RealFunction<int (*)(void*, size_t, unsigned int)> real{"cudaHostRegister", nullptr, WrappedLibrary::cudart};
    auto fn = real.get();
    if (!fn) return missing_real_errno<int>("cudaHostRegister", nullptr, ENOSYS, 3 /* cudaErrorInitializationError */);
    HookScope scope;
    const int rc = fn(p, size, flags);
    if (scope.outermost()) note_registration(p, size, (flags & cu::kHostRegisterIoMemory) != 0, rc);
    return rc;
}

ST_EXPORT int cudaHostUnregister(void* p) {
    static RealFunction<int (*)(void*)> real{"cudaHostUnregister", nullptr, WrappedLibrary::cudart};
    auto fn = real.get();
    if (!fn) return missing_real_errno<int>("cudaHostUnregister", nullptr, ENOSYS, 3);
    HookScope scope;
    if (scope.outermost()) GpuMemRuntime::instance().observer().host_unregistered(uptr(p));
    return fn(p);
}

// ------------------------------------------------------------------------------------------ ROCm
// MORI maps UAR pages with hipHostRegister(IoMemory); rocSHMEM maps the BlueFlame register with
// hsa_amd_memory_lock_to_pool. Both are called directly (PLT).

ST_EXPORT int hipHostRegister(void* p, size_t size, unsigned int flags) {
    static RealFunction<int (*)(void*, size_t, unsigned int)> real{"hipHostRegister", nullptr, WrappedLibrary::hip};
    auto fn = real.get();
    if (!fn) return missing_real_errno<int>("hipHostRegister", nullptr, ENOSYS, kHipErrorNotInitialized);
    HookScope scope;
    const int rc = fn(p, size, flags);
    if (scope.outermost()) note_registration(p, size, (flags & kHipHostRegisterIoMemory) != 0, rc);
    return rc;
}

ST_EXPORT int hipHostUnregister(void* p) {
    static RealFunction<int (*)(void*)> real{"hipHostUnregister", nullptr, WrappedLibrary::hip};
    auto fn = real.get();
    if (!fn) return missing_real_errno<int>("hipHostUnregister", nullptr, ENOSYS, kHipErrorNotInitialized);
    HookScope scope;
    if (scope.outermost()) GpuMemRuntime::instance().observer().host_unregistered(uptr(p));
    return fn(p);
}

// hsa_amd_memory_lock_to_pool(host_ptr, size, agents, num_agent, pool, flags, agent_ptr): hsa_agent_t and
// hsa_amd_memory_pool_t are structs of one uint64_t, passed by value.
struct HsaHandle {
    uint64_t handle;
};
ST_EXPORT int hsa_amd_memory_lock_to_pool(void* host_ptr, size_t size, HsaHandle* agents, int num_agent,
                                          HsaHandle pool, uint32_t flags, void** agent_ptr) {
    using Fn = int (*)(void*, size_t, HsaHandle*, int, HsaHandle, uint32_t, void**);
    static RealFunction<Fn> real{"hsa_amd_memory_lock_to_pool", nullptr, WrappedLibrary::hsa};
    auto fn = real.get();
    if (!fn) return missing_real_errno<int>("hsa_amd_memory_lock_to_pool", nullptr, ENOSYS, kHsaStatusError);
    HookScope scope;
    const int rc = fn(host_ptr, size, agents, num_agent, pool, flags, agent_ptr);
    // Locking maps host memory (or, for rocSHMEM, the doorbell register page) for the GPU: treat it as an
    // IO-memory registration when it covers a UAR page (the registry only marks pages it knows as UARs).
    if (scope.outermost()) note_registration(host_ptr, size, true, rc);
    return rc;
}

ST_EXPORT int hsa_amd_memory_lock(void* host_ptr, size_t size, HsaHandle* agents, int num_agent, void** agent_ptr) {
    using Fn = int (*)(void*, size_t, HsaHandle*, int, void**);
    static RealFunction<Fn> real{"hsa_amd_memory_lock", nullptr, WrappedLibrary::hsa};
    auto fn = real.get();
    if (!fn) return missing_real_errno<int>("hsa_amd_memory_lock", nullptr, ENOSYS, kHsaStatusError);
    HookScope scope;
    const int rc = fn(host_ptr, size, agents, num_agent, agent_ptr);
    if (scope.outermost()) note_registration(host_ptr, size, true, rc);
    return rc;
}

ST_EXPORT int hsa_amd_memory_unlock(void* host_ptr) {
    static RealFunction<int (*)(void*)> real{"hsa_amd_memory_unlock", nullptr, WrappedLibrary::hsa};
    auto fn = real.get();
    if (!fn) return missing_real_errno<int>("hsa_amd_memory_unlock", nullptr, ENOSYS, kHsaStatusError);
    HookScope scope;
    if (scope.outermost()) GpuMemRuntime::instance().observer().host_unregistered(uptr(host_ptr));
    return fn(host_ptr);
}
