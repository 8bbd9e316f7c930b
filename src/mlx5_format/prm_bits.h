// Reads fields of ConnectX PRM command mailboxes (the `in`/`out` buffers of mlx5dv_devx_obj_create & co).
// The PRM numbers bits big-endian: a field at bit offset `off` of width `w` lives in the 32-bit big-endian word
// off / 32, occupying its bits from (31 - off % 32) downwards -- the DEVX_GET convention. Fields never straddle
// a 32-bit word, except 64-bit fields, which are 64-bit aligned. Every read is bounds-checked against the
// buffer length the caller passed, because that length comes from the application.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "mlx5_format/mlx5_layout.h"

namespace sigmatrace::gpumem::prm {

// A PRM field: bit offset and width, as the PRM tables give them.
struct Field {
    uint32_t bit_offset;
    uint32_t width;
    // Bytes a buffer must have for this field to be inside it.
    constexpr size_t bytes_needed() const {
        return width == 64 ? (bit_offset + 64) / 8 : (bit_offset / 32 + 1) * 4;
    }
};

class Mailbox {
public:
    Mailbox(const void* data, size_t len) : data_(static_cast<const uint8_t*>(data)), len_(data ? len : 0) {}

    bool has(Field f) const { return f.bytes_needed() <= len_; }

    // The field's value, or nullopt when the buffer is too short to hold it (or the field is malformed).
    std::optional<uint64_t> get(Field f) const {
        if (!has(f)) return std::nullopt;
        if (f.width == 64) {
            if (f.bit_offset % 64 != 0) return std::nullopt;
            return mlx5::load_be64(data_ + f.bit_offset / 8);
        }
        if (f.width == 0 || f.width > 32 || f.bit_offset % 32 + f.width > 32) return std::nullopt;
        const uint32_t word = mlx5::load_be32(data_ + f.bit_offset / 32 * 4);
        const uint32_t shift = 32 - f.bit_offset % 32 - f.width;
        const uint32_t mask = f.width == 32 ? 0xffffffffu : ((1u << f.width) - 1);
        return (word >> shift) & mask;
    }
    // The value, or `fallback` when absent.
    uint64_t get_or(Field f, uint64_t fallback) const { return get(f).value_or(fallback); }

    // Raw bytes of a byte-aligned field (GIDs), when present.
    const uint8_t* bytes(uint32_t bit_offset, size_t count) const {
        if (bit_offset % 8 != 0 || bit_offset / 8 + count > len_) return nullptr;
        return data_ + bit_offset / 8;
    }
    size_t size() const { return len_; }

private:
    const uint8_t* data_;
    size_t len_;
};

// Writes a field (the software fabric's stand-in and the tests build commands with it; never used on memory
// an application or the NIC owns).
inline bool set_field(void* buf, size_t len, Field f, uint64_t value) {
    auto* p = static_cast<uint8_t*>(buf);
    if (f.bytes_needed() > len) return false;
    if (f.width == 64) {
        if (f.bit_offset % 64 != 0) return false;
        mlx5::store_be64(p + f.bit_offset / 8, value);
        return true;
    }
    if (f.width == 0 || f.width > 32 || f.bit_offset % 32 + f.width > 32) return false;
    uint8_t* w = p + f.bit_offset / 32 * 4;
    const uint32_t shift = 32 - f.bit_offset % 32 - f.width;
    const uint32_t mask = (f.width == 32 ? 0xffffffffu : ((1u << f.width) - 1)) << shift;
    const uint32_t word = (mlx5::load_be32(w) & ~mask) | ((static_cast<uint32_t>(value) << shift) & mask);
    mlx5::store_be32(w, word);
    return true;
}

}  // namespace sigmatrace::gpumem::prm
