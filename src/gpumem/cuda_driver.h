// The CUDA driver, reached only if the process has already loaded it (dlopen with RTLD_NOLOAD): SigmaTrace never
// brings libcuda into a process, so nothing here needs a GPU, a driver, or the CUDA toolkit to build or load.
// Used to classify the memory a queue lives in, and to copy rings that live in GPU memory to the host on a
// private non-blocking stream (never the legacy default stream, so application work is never serialized
// behind it). The types below are the driver ABI's (cuda.h), declared here so the build needs no CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "gpumem/queue_types.h"

namespace sigmatrace::gpumem {

namespace cu {
using Result = int;            // CUresult; 0 = CUDA_SUCCESS
using DevicePtr = unsigned long long;
using Context = void*;
using Stream = void*;
inline constexpr int kPointerAttributeContext = 1;     // CU_POINTER_ATTRIBUTE_CONTEXT
inline constexpr int kPointerAttributeMemoryType = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
inline constexpr int kPointerAttributeIsManaged = 8;   // CU_POINTER_ATTRIBUTE_IS_MANAGED
inline constexpr unsigned kMemoryTypeHost = 1;
inline constexpr unsigned kMemoryTypeDevice = 2;
inline constexpr unsigned kMemoryTypeUnified = 4;
inline constexpr unsigned kStreamNonBlocking = 1;
inline constexpr unsigned kHostRegisterIoMemory = 0x04;  // CU_MEMHOSTREGISTER_IOMEMORY = cudaHostRegisterIoMemory
inline constexpr int kRangeHandleTypeDmaBufFd = 1;       // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
}  // namespace cu

class CudaDriver {
public:
    // The driver when libcuda.so.1 is already in the process and exports what we use, else nullptr. Cheap after
    // the first call that finds it.
    static CudaDriver* if_loaded();

    // Host, HostMapped (registered/pinned host memory), Device (device or managed memory). Memory the driver
    // does not know is plain host memory.
    MemType classify(uint64_t addr);

    // Copies device memory to the host through a private non-blocking stream of the context that owns `src`;
    // restores the calling thread's current context. Serialized internally.
    bool copy_to_host(void* dst, uint64_t src, size_t len);

    uint64_t copies() const { return copies_; }
    uint64_t failures() const { return failures_; }

private:
    CudaDriver() = default;
    bool resolve(void* handle);

    using PointerGetAttributeFn = cu::Result (*)(void*, int, cu::DevicePtr);
    using CtxGetCurrentFn = cu::Result (*)(cu::Context*);
    using CtxSetCurrentFn = cu::Result (*)(cu::Context);
    using StreamCreateFn = cu::Result (*)(cu::Stream*, unsigned);
    using MemcpyDtoHAsyncFn = cu::Result (*)(void*, cu::DevicePtr, size_t, cu::Stream);
    using StreamSynchronizeFn = cu::Result (*)(cu::Stream);
    PointerGetAttributeFn pointer_get_attribute_ = nullptr;
    CtxGetCurrentFn ctx_get_current_ = nullptr;
    CtxSetCurrentFn ctx_set_current_ = nullptr;
    StreamCreateFn stream_create_ = nullptr;
    MemcpyDtoHAsyncFn memcpy_dtoh_async_ = nullptr;
    StreamSynchronizeFn stream_synchronize_ = nullptr;

    std::mutex mu_;  // one copy at a time (the watcher, or a thread retiring a queue)
    struct CtxStream {
        cu::Context ctx;
        cu::Stream stream;
    };
    std::vector<CtxStream> streams_;
    uint64_t copies_ = 0;
    uint64_t failures_ = 0;
};

}  // namespace sigmatrace::gpumem
