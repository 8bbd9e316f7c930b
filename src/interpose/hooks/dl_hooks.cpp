// dlsym and dlvsym as libsigmatrace.so exports them: how programs that dlopen a wrapped library and look its
// functions up by handle (NCCL: dlopen("libibverbs.so") + dlvsym(h, name, "IBVERBS_1.1"); NVSHMEM:
// dlopen("libibverbs.so.1") + dlsym; rocSHMEM/DOCA: dlopen("libmlx5.so") + dlsym) still get our wrappers.
// A lookup by handle searches only that library and its dependencies, never the preloaded objects, so it
// would otherwise return the unwrapped function (docs/interpose.md compares this with LD_AUDIT and a shim
// under libibverbs' own soname).
//
// The rule is generic: when a lookup by handle resolves name[@version] to a definition inside a wrapped
// library (real_symbol.h: libibverbs, libmlx5, libcuda, ...) and libsigmatrace.so exports the same
// name@version, the caller gets our export. Every other lookup is passed through untouched.
//
// "Untouched" includes the caller's identity: glibc's dlsym reads its return address to resolve RTLD_NEXT
// (and RTLD_DEFAULT in dlmopen namespaces) relative to the calling object. So the exported entry points are
// tiny assembler stubs that ask the C++ hook for a replacement and otherwise *jump* to libc's dlsym with the
// caller's return address still on the stack; a C++ wrapper calling dlsym would make every RTLD_NEXT lookup
// relative to libsigmatrace.so (and send, e.g., a malloc interposer's dlsym(RTLD_NEXT, "malloc") back to
// itself).
//
// These exports are unversioned (the base version): an unversioned definition satisfies a program's
// dlsym@GLIBC_2.34 and dlsym@GLIBC_2.2.5 references alike (glibc elf/dl-lookup.c check_match).
#include <dlfcn.h>

#include <cstring>

#include "interpose/runtime/elf_symbols.h"
#include "interpose/runtime/real_symbol.h"

extern "C" {
extern void* sigmatrace_libc_dlsym;
extern void* sigmatrace_libc_dlvsym;
void sigmatrace_bootstrap_libc_dl() noexcept;
__attribute__((visibility("hidden"))) void* sigmatrace_dlsym_hook(void* handle, const char* name) noexcept;
__attribute__((visibility("hidden"))) void* sigmatrace_dlvsym_hook(void* handle, const char* name,
                                                                   const char* version) noexcept;
}

namespace sigmatrace::interpose {
namespace {

// libsigmatrace.so's own dynamic symbol table: "do we export name@version?" without searching our
// dependencies. Built on first use (a thread-safe static); the object never changes after load.
const DynamicSymbolTable& own_exports() noexcept {
    static const DynamicSymbolTable table = [] {
        DynamicSymbolTable t;
        t.init(link_map_containing(reinterpret_cast<const void*>(&own_exports)));
        return t;
    }();
    return table;
}

// The replacement for a lookup by a real handle, or nullptr to pass it through.
void* replacement(void* handle, const char* name, const char* version) noexcept {
    if (handle == RTLD_DEFAULT || handle == RTLD_NEXT || name == nullptr) return nullptr;
    // Cheap filter first: most lookups (MPI components, plugins) are for names we do not export at all.
    if (!own_exports().defines(name)) return nullptr;
    void* theirs = version != nullptr ? real_dlvsym(handle, name, version) : real_dlsym(handle, name);
    if (theirs == nullptr) return nullptr;
    const link_map* their_object = link_map_containing(theirs);
    if (their_object == nullptr) return nullptr;
    DynamicSymbolTable their_table;
    if (!their_table.init(their_object)) return nullptr;
    // By soname first: libibverbs loads libmlx5 as its provider plugin (libmlx5-rdmav34.so), and a later
    // dlopen("libmlx5.so.1") returns that same object under the plugin's file name.
    if (!is_wrapped_library_path(their_table.soname()) && !is_wrapped_library_path(their_object->l_name)) return nullptr;
    if (version == nullptr) {
        // dlsym returns the default version; hand out ours only for that same version, so a library newer
        // than this tracer (an ABI change under a new version) is never given a wrapper of the old ABI.
        const char* their_version = their_table.default_version(name);
        return their_version != nullptr ? own_exports().find(name, their_version) : own_exports().find(name, nullptr);
    }
    return own_exports().find(name, version);
}

}  // namespace
}  // namespace sigmatrace::interpose

extern "C" void* sigmatrace_dlsym_hook(void* handle, const char* name) noexcept {
    sigmatrace_bootstrap_libc_dl();  // the stub jumps to sigmatrace_libc_dlsym when we return nullptr
    return sigmatrace::interpose::replacement(handle, name, nullptr);
}

extern "C" void* sigmatrace_dlvsym_hook(void* handle, const char* name, const char* version) noexcept {
    sigmatrace_bootstrap_libc_dl();
    return sigmatrace::interpose::replacement(handle, name, version);
}

// The exported entry points. On x86-64: save the argument registers, ask the hook, and either return its
// replacement or restore the arguments and tail-jump to libc with the caller's return address in place.
#if defined(__x86_64__)
__asm__(R"(
    .text
    .globl dlsym
    .type dlsym, @function
    .p2align 4
dlsym:
    .cfi_startproc
    endbr64
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call sigmatrace_dlsym_hook
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rax, %rax
    jnz 1f
    jmpq *sigmatrace_libc_dlsym(%rip)
1:
    ret
    .cfi_endproc
    .size dlsym, .-dlsym

    .globl dlvsym
    .type dlvsym, @function
    .p2align 4
dlvsym:
    .cfi_startproc
    endbr64
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    pushq %rdx
    .cfi_adjust_cfa_offset 8
    call sigmatrace_dlvsym_hook
    popq %rdx
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rax, %rax
    jnz 1f
    jmpq *sigmatrace_libc_dlvsym(%rip)
1:
    ret
    .cfi_endproc
    .size dlvsym, .-dlvsym
)");
#else
// Other architectures: plain C++ wrappers. Lookups by handle are still redirected, but RTLD_NEXT lookups made
// through them resolve relative to libsigmatrace.so instead of the caller (documented in docs/interpose.md).
extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) noexcept {
    if (void* r = sigmatrace_dlsym_hook(handle, name)) return r;
    return sigmatrace::interpose::real_dlsym(handle, name);
}
extern "C" __attribute__((visibility("default"))) void* dlvsym(void* handle, const char* name,
                                                               const char* version) noexcept {
    if (void* r = sigmatrace_dlvsym_hook(handle, name, version)) return r;
    return sigmatrace::interpose::real_dlvsym(handle, name, version);
}
#endif
