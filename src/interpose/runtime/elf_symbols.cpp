#include "interpose/runtime/elf_symbols.h"

#include <dlfcn.h>


namespace sigmatrace::interpose {
namespace {

// Dynamic-section pointers are absolute on most targets (the dynamic linker relocates .dynamic in place), but
// stay relative where .dynamic is read-only (RISC-V, MIPS, some vDSOs). A value below the load base can only
// be relative.
ElfW(Addr) absolute(ElfW(Addr) base, ElfW(Addr) ptr) {
    return ptr < base ? ptr + base : ptr;
}

// st_info packs binding (high nibble) and type (low nibble) the same way in 32- and 64-bit ELF.
unsigned symbol_type(unsigned char info) { return info & 0xfu; }
unsigned symbol_bind(unsigned char info) { return info >> 4; }

// Number of .dynsym entries from a GNU hash table: one past the highest symbol index any chain reaches.
uint32_t gnu_hash_symbol_count(const uint32_t* table) {
    const uint32_t nbuckets = table[0];
    const uint32_t symoffset = table[1];
    const uint32_t bloom_words = table[2];
    const auto* bloom = reinterpret_cast<const ElfW(Addr)*>(table + 4);
    const auto* buckets = reinterpret_cast<const uint32_t*>(bloom + bloom_words);
    const uint32_t* chains = buckets + nbuckets;
    uint32_t last = 0;
    for (uint32_t i = 0; i < nbuckets; ++i)
        if (buckets[i] > last) last = buckets[i];
    if (last < symoffset) return symoffset;
    while ((chains[last - symoffset] & 1u) == 0) ++last;
    return last + 1;
}

}  // namespace

bool DynamicSymbolTable::init(const link_map* map) noexcept {
    *this = DynamicSymbolTable{};
    if (map == nullptr || map->l_ld == nullptr) return false;
    const ElfW(Addr) base = map->l_addr;
    const uint32_t* sysv_hash = nullptr;
    const uint32_t* gnu_hash = nullptr;
    const ElfW(Sym)* symtab = nullptr;
    const char* strtab = nullptr;
    ElfW(Xword) soname_offset = 0;
    bool have_soname = false;
    for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(absolute(base, d->d_un.d_ptr)); break;
        case DT_STRTAB: strtab = reinterpret_cast<const char*>(absolute(base, d->d_un.d_ptr)); break;
        case DT_HASH: sysv_hash = reinterpret_cast<const uint32_t*>(absolute(base, d->d_un.d_ptr)); break;
        case DT_GNU_HASH: gnu_hash = reinterpret_cast<const uint32_t*>(absolute(base, d->d_un.d_ptr)); break;
        case DT_VERSYM: versym_ = reinterpret_cast<const ElfW(Half)*>(absolute(base, d->d_un.d_ptr)); break;
        case DT_VERDEF: verdef_ = reinterpret_cast<const ElfW(Verdef)*>(absolute(base, d->d_un.d_ptr)); break;
        case DT_VERDEFNUM: verdef_count_ = static_cast<uint32_t>(d->d_un.d_val); break;
        case DT_SONAME:
            soname_offset = d->d_un.d_val;
            have_soname = true;
            break;
        default: break;
        }
    }
    if (symtab == nullptr || strtab == nullptr || (sysv_hash == nullptr && gnu_hash == nullptr)) {
        *this = DynamicSymbolTable{};
        return false;
    }
    base_ = base;
    symtab_ = symtab;
    strtab_ = strtab;
    symbol_count_ = sysv_hash != nullptr ? sysv_hash[1] : gnu_hash_symbol_count(gnu_hash);
    soname_ = have_soname ? strtab + soname_offset : nullptr;
    return true;
}

const char* DynamicSymbolTable::version_name(uint16_t ndx) const noexcept {
    if (verdef_ == nullptr || ndx <= 1) return nullptr;  // 0 local, 1 base (unversioned global)
    const auto* def = verdef_;
    for (uint32_t i = 0; i < verdef_count_; ++i) {
        if ((def->vd_flags & VER_FLG_BASE) == 0 && def->vd_ndx == ndx) {
            const auto* aux = reinterpret_cast<const ElfW(Verdaux)*>(reinterpret_cast<const char*>(def) + def->vd_aux);
            return strtab_ + aux->vda_name;
        }
        if (def->vd_next == 0) break;
        def = reinterpret_cast<const ElfW(Verdef)*>(reinterpret_cast<const char*>(def) + def->vd_next);
    }
    return nullptr;
}

template <typename Accept> long DynamicSymbolTable::lookup(const char* name, Accept accept) const noexcept {
    if (symtab_ == nullptr || name == nullptr) return -1;
    // A linear scan: this runs at set-up time only (bootstrap, dlsym of wrapped names), over at most a few
    // thousand entries.
    for (uint32_t i = 1; i < symbol_count_; ++i) {
        const ElfW(Sym)& s = symtab_[i];
        if (s.st_shndx == SHN_UNDEF || s.st_value == 0) continue;
        const unsigned type = symbol_type(s.st_info);
        if (type != STT_FUNC && type != STT_OBJECT && type != STT_GNU_IFUNC) continue;
        const unsigned bind = symbol_bind(s.st_info);
        if (bind != STB_GLOBAL && bind != STB_WEAK) continue;
        if (!same_string(strtab_ + s.st_name, name)) continue;
        const uint16_t v = versym_ != nullptr ? versym_[i] : 1;
        if (accept(version_name(static_cast<uint16_t>(v & 0x7fff)), (v & 0x8000) != 0)) return static_cast<long>(i);
    }
    return -1;
}

void* DynamicSymbolTable::find(const char* name, const char* version) const noexcept {
    long i;
    if (version == nullptr) {
        i = lookup(name, [](const char*, bool hidden) { return !hidden; });
    } else {
        i = lookup(name, [version](const char* v, bool) { return v != nullptr && same_string(v, version); });
    }
    if (i < 0) return nullptr;
    // IFUNC definitions would need their resolver called; no symbol this table is asked about is one.
    if (symbol_type(symtab_[i].st_info) == STT_GNU_IFUNC) return nullptr;
    return reinterpret_cast<void*>(base_ + symtab_[i].st_value);
}

bool DynamicSymbolTable::defines(const char* name) const noexcept {
    return lookup(name, [](const char*, bool) { return true; }) >= 0;
}

const char* DynamicSymbolTable::default_version(const char* name) const noexcept {
    const long i = lookup(name, [](const char*, bool hidden) { return !hidden; });
    if (i < 0 || versym_ == nullptr) return nullptr;
    return version_name(static_cast<uint16_t>(versym_[i] & 0x7fff));
}

const link_map* link_map_containing(const void* address) noexcept {
    Dl_info info;
    link_map* map = nullptr;
    if (dladdr1(address, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0) return nullptr;
    return map;
}

}  // namespace sigmatrace::interpose
