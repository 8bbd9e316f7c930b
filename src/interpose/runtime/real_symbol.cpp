#include "interpose/runtime/real_symbol.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "interpose/runtime/elf_symbols.h"

// Set by the bootstrap below; read by the dlsym/dlvsym entry stubs (dl_hooks.cpp), which jump to them.
extern "C" {
__attribute__((visibility("hidden"))) void* sigmatrace_libc_dlsym = nullptr;
__attribute__((visibility("hidden"))) void* sigmatrace_libc_dlvsym = nullptr;
__attribute__((visibility("hidden"))) void sigmatrace_bootstrap_libc_dl() noexcept;
}

namespace sigmatrace::interpose {
namespace {

using DlsymFn = void* (*)(void*, const char*);
using DlvsymFn = void* (*)(void*, const char*, const char*);

// Writes a message with write(2): usable before libc's stdio is initialised and from the dlsym bootstrap.
void write_stderr(const char* msg) noexcept {
    const size_t len = string_length(msg);
    ssize_t ignored = ::write(STDERR_FILENO, msg, len);
    (void)ignored;
}

// Finds libc's dlsym and dlvsym by reading symbol tables, because both names resolve to libsigmatrace.so's
// own exports. Walks the objects of our namespace in load order, skipping the object this code is in, and
// takes the first that defines both with a version (glibc: dlsym@@GLIBC_2.34, or libdl's GLIBC_2.2.5 before
// 2.34). Sanitizer runtimes intercept dlopen but never define dlsym, so they are skipped naturally.
void bootstrap() noexcept {
    const link_map* self = link_map_containing(reinterpret_cast<const void*>(&bootstrap));
    if (self == nullptr) {
        write_stderr("sigmatrace: fatal: cannot find the object containing libsigmatrace's code (dladdr1 failed)\n");
        _exit(127);
    }
    const link_map* first = self;
    while (first->l_prev != nullptr) first = first->l_prev;
    for (const link_map* m = first; m != nullptr; m = m->l_next) {
        if (m == self) continue;
        DynamicSymbolTable table;
        if (!table.init(m)) continue;
        if (table.default_version("dlsym") == nullptr) continue;  // our own unversioned interposer, or none
        void* s = table.find("dlsym", nullptr);
        void* v = table.find("dlvsym", nullptr);
        if (s == nullptr || v == nullptr) continue;
        __atomic_store_n(&sigmatrace_libc_dlvsym, v, __ATOMIC_RELEASE);
        __atomic_store_n(&sigmatrace_libc_dlsym, s, __ATOMIC_RELEASE);
        return;
    }
    write_stderr("sigmatrace: fatal: cannot find libc's dlsym/dlvsym in any loaded object; "
                 "libsigmatrace.so needs glibc's dynamic loader interface\n");
    _exit(127);
}

struct LibraryNames {
    WrappedLibrary lib;
    const char* file_prefix;   // what the loaded object's file name starts with
    const char* sonames[4];    // tried in order with RTLD_NOLOAD
};

constexpr LibraryNames kLibraries[] = {
    {WrappedLibrary::ibverbs, "libibverbs.so", {"libibverbs.so.1", "libibverbs.so", nullptr, nullptr}},
    {WrappedLibrary::mlx5, "libmlx5.so", {"libmlx5.so.1", "libmlx5.so", nullptr, nullptr}},
    {WrappedLibrary::cuda, "libcuda.so", {"libcuda.so.1", "libcuda.so", nullptr, nullptr}},
    {WrappedLibrary::cudart, "libcudart.so", {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"}},
    {WrappedLibrary::hip, "libamdhip64.so", {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so", nullptr}},
    {WrappedLibrary::hsa, "libhsa-runtime64.so", {"libhsa-runtime64.so.1", "libhsa-runtime64.so", nullptr, nullptr}},
};


bool in_object(const void* address, const link_map* object) {
    return object != nullptr && link_map_containing(address) == object;
}

}  // namespace

}  // namespace sigmatrace::interpose

extern "C" void sigmatrace_bootstrap_libc_dl() noexcept {
    if (__atomic_load_n(&sigmatrace_libc_dlsym, __ATOMIC_ACQUIRE) == nullptr) sigmatrace::interpose::bootstrap();
}

namespace sigmatrace::interpose {

void* real_dlsym(void* handle, const char* name) noexcept {
    sigmatrace_bootstrap_libc_dl();
    return reinterpret_cast<DlsymFn>(__atomic_load_n(&sigmatrace_libc_dlsym, __ATOMIC_ACQUIRE))(handle, name);
}

void* real_dlvsym(void* handle, const char* name, const char* version) noexcept {
    sigmatrace_bootstrap_libc_dl();
    return reinterpret_cast<DlvsymFn>(__atomic_load_n(&sigmatrace_libc_dlvsym, __ATOMIC_ACQUIRE))(handle, name, version);
}

bool is_wrapped_library_path(const char* path) noexcept {
    if (path == nullptr) return false;
    const char* base = after_last_slash(path);
    for (const auto& l : kLibraries)
        if (starts_with(base, l.file_prefix)) return true;
    return false;
}

void* find_real_symbol(const char* name, const char* version, WrappedLibrary lib) noexcept {
    const link_map* self = link_map_containing(reinterpret_cast<const void*>(&find_real_symbol));
    void* fn = version != nullptr ? real_dlvsym(RTLD_NEXT, name, version) : real_dlsym(RTLD_NEXT, name);
    if (fn != nullptr && !in_object(fn, self)) return fn;
    for (const auto& l : kLibraries) {
        if (l.lib != lib) continue;
        for (const char* soname : l.sonames) {
            if (soname == nullptr) break;
            // RTLD_NOLOAD finds a library loaded RTLD_LOCAL too, and never loads one; the reference it takes
            // is dropped right away (the caller holds its own).
            void* handle = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
            if (handle == nullptr) continue;
            fn = version != nullptr ? real_dlvsym(handle, name, version) : real_dlsym(handle, name);
            dlclose(handle);
            if (fn != nullptr && !in_object(fn, self)) return fn;
        }
    }
    return nullptr;
}

void report_missing_real(const char* name, const char* version) noexcept {
    // Once per name: a program probing for an absent library must not flood stderr. A short fixed table is
    // enough (a handful of wrappers can ever be missing at once); beyond it messages repeat, which is harmless.
    static std::mutex mutex;
    static const char* reported[64];
    static unsigned count = 0;
    {
        std::lock_guard<std::mutex> lock(mutex);
        for (unsigned i = 0; i < count; ++i)
            if (reported[i] == name) return;
        if (count < 64) reported[count++] = name;
    }
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "sigmatrace: cannot find the real %s%s%s (is its library loaded?); the call fails with ENOSYS\n",
                  name, version != nullptr ? "@" : "", version != nullptr ? version : "");
    write_stderr(msg);
}

}  // namespace sigmatrace::interpose
