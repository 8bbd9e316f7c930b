// Finding the REAL function behind a wrapper that libsigmatrace.so exports under the same name (and version).
//
// Every wrapper in libsigmatrace.so (verbs, mlx5dv, DevX, CUDA, fork, ...) is an exported function with the
// name, and the symbol version, of the function it wraps. Callers reach it three ways, all covered:
//   - PLT calls and dlsym(RTLD_DEFAULT/RTLD_NEXT): the preloaded library comes first in the global scope;
//   - dlvsym(..., "IBVERBS_1.1"): the version script gives the wrapper that exact version node;
//   - dlopen("libibverbs.so[.1]"/"libmlx5.so[.1]") + dlsym/dlvsym(handle, ...), which bypasses LD_PRELOAD:
//     dl_hooks.cpp interposes dlsym/dlvsym and hands out the wrapper whenever the lookup resolves, in one of
//     the WrappedLibrary objects below, to a name@version that libsigmatrace.so also exports. Nothing needs
//     registering: exporting the wrapper (and listing it in libsigmatrace.map) is enough.
//
// A wrapper then calls the real function through a RealFunction, which looks in the global scope after
// libsigmatrace.so (RTLD_NEXT, which also respects another interposer loaded after us), and falls back to
// the wrapped library's own handle (dlopen(soname, RTLD_NOLOAD)) because a library dlopen'ed RTLD_LOCAL —
// NCCL and NVSHMEM load libibverbs that way — is invisible to RTLD_NEXT.
//
//   ST_EXPORT int mlx5dv_devx_obj_destroy(struct mlx5dv_devx_obj* obj) {
//       static RealFunction<decltype(&mlx5dv_devx_obj_destroy)> real{"mlx5dv_devx_obj_destroy", "MLX5_1.7",
//                                                                    WrappedLibrary::mlx5};
//       auto fn = real.get();
//       if (fn == nullptr) return missing_real_errno("mlx5dv_devx_obj_destroy", "MLX5_1.7", ENOSYS);
//       ...
//   }
//
// Never call a wrapped library's function directly from libsigmatrace.so: the reference would bind to our
// own export (the library is linked with --no-undefined and without libibverbs to catch that).
#pragma once

#include <atomic>
#include <cstdint>

namespace sigmatrace::interpose {

// The libraries whose functions libsigmatrace.so may wrap. Their objects are recognised by the file name of
// the loaded object (libibverbs.so.1, /opt/x/libibverbs.so, ...).
enum class WrappedLibrary : uint8_t {
    libc,     // fork, daemon, ... (found with RTLD_NEXT only)
    ibverbs,  // libibverbs.so.1
    mlx5,     // libmlx5.so.1 (mlx5dv_*)
    cuda,     // libcuda.so.1 (driver API)
    cudart,   // libcudart.so.* (runtime API, when linked dynamically)
    hip,      // libamdhip64.so.*
    hsa,      // libhsa-runtime64.so.*
};

// libc's dlsym and dlvsym, never libsigmatrace.so's own exports of those names. RTLD_NEXT passed to them is
// relative to libsigmatrace.so (the caller). Safe to call before any constructor has run.
void* real_dlsym(void* handle, const char* name) noexcept;
void* real_dlvsym(void* handle, const char* name, const char* version) noexcept;

// The definition of name (version == nullptr: its default version) that libsigmatrace.so's export hides:
// RTLD_NEXT first, then the handle of an already loaded `lib` (RTLD_NOLOAD). nullptr when neither has it.
void* find_real_symbol(const char* name, const char* version, WrappedLibrary lib) noexcept;

// True when `path` (a loaded object's file name) is one of the WrappedLibrary objects other than libc.
bool is_wrapped_library_path(const char* path) noexcept;

// Prints, once per name, that the real function cannot be found, sets errno = err and returns `value`: what a
// wrapper returns when its library is not loaded (never crash, never pretend success).
void report_missing_real(const char* name, const char* version) noexcept;
template <typename T> T missing_real_errno(const char* name, const char* version, int err, T value = T{}) noexcept;

// The real function behind one wrapper, resolved on first use and cached. constexpr-constructible, so a
// function-local `static RealFunction` needs no guard variable and is usable from the earliest constructors.
template <typename Fn> class RealFunction {
public:
    constexpr RealFunction(const char* name, const char* version, WrappedLibrary lib) noexcept
        : name_(name), version_(version), lib_(lib) {}

    // The real function, or nullptr while the library that defines it is not loaded.
    Fn get() noexcept {
        Fn fn = fn_.load(std::memory_order_acquire);
        if (fn != nullptr) return fn;
        fn = reinterpret_cast<Fn>(find_real_symbol(name_, version_, lib_));
        if (fn != nullptr) fn_.store(fn, std::memory_order_release);
        return fn;
    }
    const char* name() const noexcept { return name_; }
    const char* version() const noexcept { return version_; }

private:
    std::atomic<Fn> fn_{nullptr};
    const char* name_;
    const char* version_;
    WrappedLibrary lib_;
};

}  // namespace sigmatrace::interpose

// --------------------------------------------------------------------------------------------- inline
#include <cerrno>

template <typename T>
T sigmatrace::interpose::missing_real_errno(const char* name, const char* version, int err, T value) noexcept {
    report_missing_real(name, version);
    errno = err;
    return value;
}
