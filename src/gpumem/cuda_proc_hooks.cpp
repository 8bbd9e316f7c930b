#include "gpumem/cuda_proc_hooks.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "gpumem/cuda_driver.h"
#include "gpumem/gpumem_runtime.h"

namespace sigmatrace::gpumem {
namespace {

constexpr int kSlots = 4;

// One slot per distinct real function; a slot is claimed once and never released (driver entry points live as
// long as the process).
template <typename Fn> struct Slots {
    std::atomic<Fn> real[kSlots] = {};

    int claim(Fn fn) {
        for (int i = 0; i < kSlots; ++i) {
            Fn cur = real[i].load(std::memory_order_acquire);
            if (cur == fn) return i;
            if (cur == nullptr) {
                Fn expected = nullptr;
                if (real[i].compare_exchange_strong(expected, fn, std::memory_order_acq_rel) || expected == fn) return i;
            }
        }
        return -1;
    }
};

Slots<CuMemHostRegisterFn> g_register;    // process-wide: the driver's function table is process-wide
Slots<CuMemHostUnregisterFn> g_unregister;
Slots<CuMemGetHandleForAddressRangeFn> g_get_handle;

template <int I> int register_wrapper(void* p, size_t bytes, unsigned int flags) {
    return observed_cu_mem_host_register(g_register.real[I].load(std::memory_order_acquire), p, bytes, flags);
}
template <int I> int unregister_wrapper(void* p) {
    return observed_cu_mem_host_unregister(g_unregister.real[I].load(std::memory_order_acquire), p);
}
template <int I>
int get_handle_wrapper(void* handle, unsigned long long dptr, size_t size, int type, unsigned long long flags) {
    return observed_cu_mem_get_handle_for_address_range(g_get_handle.real[I].load(std::memory_order_acquire), handle,
                                                        dptr, size, type, flags);
}

template <template <int> class W, typename Fn, size_t... I> Fn wrapper_at(int slot, std::index_sequence<I...>) {
    Fn table[] = {W<I>::fn...};
    return table[slot];
}
template <int I> struct RegisterW {
    static constexpr CuMemHostRegisterFn fn = &register_wrapper<I>;
};
template <int I> struct UnregisterW {
    static constexpr CuMemHostUnregisterFn fn = &unregister_wrapper<I>;
};
template <int I> struct GetHandleW {
    static constexpr CuMemGetHandleForAddressRangeFn fn = &get_handle_wrapper<I>;
};

// "cuMemHostRegister", "cuMemHostRegister_v2", "cuMemHostRegister_v2_ptds"... all name `base`.
bool names(const char* symbol, const char* base) {
    const size_t n = std::strlen(base);
    return std::strncmp(symbol, base, n) == 0 && (symbol[n] == '\0' || symbol[n] == '_');
}

template <template <int> class W, typename Fn> void* hook(Slots<Fn>& slots, void* real) {
    const int slot = slots.claim(reinterpret_cast<Fn>(real));
    if (slot < 0) return real;  // more distinct functions than slots: leave this one unobserved
    return reinterpret_cast<void*>(wrapper_at<W, Fn>(slot, std::make_index_sequence<kSlots>{}));
}

}  // namespace

void* hook_cuda_proc(const char* symbol, void* real) {
    if (!symbol || !real) return real;
    if (names(symbol, "cuMemHostRegister")) return hook<RegisterW>(g_register, real);
    if (names(symbol, "cuMemHostUnregister")) return hook<UnregisterW>(g_unregister, real);
    if (names(symbol, "cuMemGetHandleForAddressRange")) return hook<GetHandleW>(g_get_handle, real);
    return real;
}

int observed_cu_mem_host_register(CuMemHostRegisterFn real, void* p, size_t bytes, unsigned int flags) {
    if (!real) return 1;  // CUDA_ERROR_INVALID_VALUE: cannot happen for a claimed slot
    const int rc = real(p, bytes, flags);
    const int saved = errno;
    GpuMemRuntime::instance().observer().host_registered(reinterpret_cast<uint64_t>(p), bytes,
                                                         (flags & cu::kHostRegisterIoMemory) != 0, rc);
    errno = saved;
    return rc;
}

int observed_cu_mem_host_unregister(CuMemHostUnregisterFn real, void* p) {
    if (!real) return 1;
    GpuMemRuntime::instance().observer().host_unregistered(reinterpret_cast<uint64_t>(p));
    return real(p);
}

int observed_cu_mem_get_handle_for_address_range(CuMemGetHandleForAddressRangeFn real, void* handle,
                                                 unsigned long long dptr, size_t size, int type,
                                                 unsigned long long flags) {
    if (!real) return 1;
    const int rc = real(handle, dptr, size, type, flags);
    if (rc == 0 && handle && type == cu::kRangeHandleTypeDmaBufFd) {
        const int saved = errno;
        int fd;
        std::memcpy(&fd, handle, sizeof fd);
        GpuMemRuntime::instance().observer().dmabuf_exported(fd, dptr, size);
        errno = saved;
    }
    return rc;
}

}  // namespace sigmatrace::gpumem
