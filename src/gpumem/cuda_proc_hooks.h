// CUDA driver entry points are mostly reached through cuGetProcAddress (the CUDA runtime, static or shared, and
// NVSHMEM resolve the driver that way), not through symbols a preload can shadow. libsigmatrace.so's
// cuGetProcAddress export calls the real one and passes each returned pointer through hook_cuda_proc(), which
// substitutes a wrapper for the few entry points the GPU module needs -- the host registrations that map
// doorbell pages and rings into the GPU (cuMemHostRegister[_v2] with IOMEMORY, cuMemHostUnregister) and the
// dmabuf export of device memory (cuMemGetHandleForAddressRange) -- and returns every other pointer unchanged.
//
// A wrapper must call exactly the function the driver returned, and the driver may return different ones
// (per requested CUDA version), so each hooked entry point has a few slots, one wrapper function per slot.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sigmatrace::gpumem {

// The driver ABI's signatures (cuda.h), declared here so nothing needs the CUDA headers.
using CuMemHostRegisterFn = int (*)(void* p, size_t bytes, unsigned int flags);
using CuMemHostUnregisterFn = int (*)(void* p);
using CuMemGetHandleForAddressRangeFn = int (*)(void* handle, unsigned long long dptr, size_t size, int type,
                                                unsigned long long flags);

// Returns the wrapper to hand out instead of `real` for driver symbol `symbol` (as requested from
// cuGetProcAddress: "cuMemHostRegister", or a versioned name such as "cuMemHostRegister_v2"), or `real` itself
// when the symbol is not hooked (or all its slots are taken by other functions).
void* hook_cuda_proc(const char* symbol, void* real);

// The observer calls behind the wrappers (also used by the directly exported cuMemHostRegister & co).
int observed_cu_mem_host_register(CuMemHostRegisterFn real, void* p, size_t bytes, unsigned int flags);
int observed_cu_mem_host_unregister(CuMemHostUnregisterFn real, void* p);
int observed_cu_mem_get_handle_for_address_range(CuMemGetHandleForAddressRangeFn real, void* handle,
                                                 unsigned long long dptr, size_t size, int type,
                                                 unsigned long long flags);

}  // namespace sigmatrace::gpumem
