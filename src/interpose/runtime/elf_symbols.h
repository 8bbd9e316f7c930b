// A read-only view of one loaded object's dynamic symbol table (.dynsym, .dynstr and the GNU version tables),
// as the dynamic linker mapped it.
//
// Why not dlsym: libsigmatrace.so exports `dlsym` and `dlvsym` itself (dl_hooks.cpp), so it cannot call them to
// find libc's; and "does libsigmatrace.so itself export name@version?" must not search its dependencies,
// which dlsym on our own handle would. Both questions are answered by reading the tables directly.
#pragma once

#include <elf.h>
#include <link.h>

#include <cstdint>

namespace sigmatrace::interpose {

class DynamicSymbolTable {
public:
    // Builds the view of the object `map`. Returns false (and stays empty) when it has no symbol table.
    bool init(const link_map* map) noexcept;

    // Address of the defined function or object `name`:
    //   version == nullptr: the definition dlsym would return (unversioned, or the default "@@" version);
    //   otherwise exactly name@version, as dlvsym matches it (a base-version definition does not match).
    void* find(const char* name, const char* version) const noexcept;

    // The version name of `name`'s default definition, or nullptr when it is unversioned or absent.
    const char* default_version(const char* name) const noexcept;

    // The object's DT_SONAME ("libmlx5.so.1"), or nullptr. A library may be loaded under another file name
    // (libibverbs loads libmlx5 as its provider plugin libmlx5-rdmav34.so, a symlink): the soname names it.
    const char* soname() const noexcept { return soname_; }

    // True when `name` is defined in any version.
    bool defines(const char* name) const noexcept;

    bool valid() const noexcept { return symtab_ != nullptr; }

private:
    // Index of the first defined symbol `name` accepted by `accept(version_name, hidden)`, or -1.
    template <typename Accept> long lookup(const char* name, Accept accept) const noexcept;
    // Version name of version index `ndx`, nullptr for the local/base indices or when unknown.
    const char* version_name(uint16_t ndx) const noexcept;

    ElfW(Addr) base_ = 0;
    const ElfW(Sym)* symtab_ = nullptr;
    const char* strtab_ = nullptr;
    const ElfW(Half)* versym_ = nullptr;
    const ElfW(Verdef)* verdef_ = nullptr;
    uint32_t verdef_count_ = 0;
    uint32_t symbol_count_ = 0;
    const char* soname_ = nullptr;
};

// String helpers for the code that runs before sanitizer runtimes are initialised (the dlsym interposer and
// its bootstrap): libc's strcmp and friends are intercepted by ASan/TSan, and their interceptors crash when
// called before the runtime has resolved the real functions. Plain loops never reach them.
inline bool same_string(const char* a, const char* b) noexcept {
    while (*a != '\0' && *a == *b) {
        ++a;
        ++b;
    }
    return *a == *b;
}
inline bool starts_with(const char* s, const char* prefix) noexcept {
    while (*prefix != '\0') {
        if (*s++ != *prefix++) return false;
    }
    return true;
}
inline const char* after_last_slash(const char* path) noexcept {
    const char* base = path;
    for (const char* p = path; *p != '\0'; ++p)
        if (*p == '/') base = p + 1;
    return base;
}
inline unsigned long string_length(const char* s) noexcept {
    unsigned long n = 0;
    while (s[n] != '\0') ++n;
    return n;
}

// The link map of the loaded object that contains `address`, or nullptr.
const link_map* link_map_containing(const void* address) noexcept;

}  // namespace sigmatrace::interpose
