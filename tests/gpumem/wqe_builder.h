// Test-side WQE images: builds mlx5 send WQEs byte by byte from the documented layouts (mlx5dv.h struct
// mlx5_wqe_*_seg offsets, written out here as literal byte offsets rather than through the decoder's structs, so
// a wrong struct in src/mlx5_format/mlx5_layout.h fails the tests), and places them into a ring with wrap-around; and
// 64-byte CQE images.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace sigmatrace::gpumem::test {

inline void put_be16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v >> 8); p[1] = uint8_t(v); }
inline void put_be32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (24 - 8 * i));
}
inline void put_be64(uint8_t* p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (56 - 8 * i));
}

// A WQE under construction: a sequence of 16-byte units; ds is computed at finish().
class WqeImage {
public:
    // Control segment: opmod_idx_opcode at 0, qpn_ds at 4, signature 8, dci stream 9..10, fm_ce_se 11, imm 12.
    WqeImage(uint8_t opcode, uint16_t index, uint32_t qpn, uint8_t fm_ce_se = 0x08, uint8_t opmod = 0,
             uint32_t imm_raw = 0) {
        units_.resize(16);
        put_be32(&units_[0], (uint32_t{opmod} << 24) | (uint32_t{index} << 8) | opcode);
        put_be32(&units_[4], qpn << 8);
        units_[11] = fm_ce_se;
        std::memcpy(&units_[12], &imm_raw, 4);
    }
    // Remote address segment: raddr at 0 (be64), rkey at 8 (be32), reserved 12.
    WqeImage& raddr(uint64_t addr, uint32_t rkey) {
        uint8_t* u = add_units(1);
        put_be64(u, addr);
        put_be32(u + 8, rkey);
        return *this;
    }
    // Data segment: byte_count at 0, lkey at 4, addr at 8.
    WqeImage& data(uint32_t bytes, uint32_t lkey, uint64_t addr) {
        uint8_t* u = add_units(1);
        put_be32(u, bytes);
        put_be32(u + 4, lkey);
        put_be64(u + 8, addr);
        return *this;
    }
    // Inline segment: byte_count | 0x80000000, then the data, padded to 16 bytes.
    WqeImage& inline_data(const void* bytes, uint32_t len) {
        const uint32_t units = (4 + len + 15) / 16;
        uint8_t* u = add_units(units);
        put_be32(u, len | 0x80000000u);
        std::memcpy(u + 4, bytes, len);
        return *this;
    }
    // Atomic segment: swap_add at 0, compare at 8.
    WqeImage& atomic(uint64_t swap_add, uint64_t compare) {
        uint8_t* u = add_units(1);
        put_be64(u, swap_add);
        put_be64(u + 8, compare);
        return *this;
    }
    // Masked atomic arguments: `fields` values of `size` bytes each, padded to 16.
    WqeImage& masked_args(uint32_t size, std::initializer_list<uint64_t> fields) {
        const uint32_t bytes = size * static_cast<uint32_t>(fields.size());
        uint8_t* u = add_units((bytes + 15) / 16);
        uint32_t off = 0;
        for (uint64_t v : fields) {
            if (size == 4) put_be32(u + off, static_cast<uint32_t>(v));
            else put_be64(u + off, v);  // wider fields: value in the first 8 bytes
            off += size;
        }
        return *this;
    }
    // Address vector: key 0..7, dqp_dct 8 (bit 31 = extended), then 16 or 48 bytes in all.
    WqeImage& av(uint32_t remote_qpn, bool extended, uint64_t key = 0x1234) {
        uint8_t* u = add_units(extended ? 3 : 1);
        put_be64(u, key);
        put_be32(u + 8, remote_qpn | (extended ? 0x80000000u : 0));
        return *this;
    }
    // XRC segment: xrc_srqn at 0.
    WqeImage& xrc(uint32_t srqn) {
        put_be32(add_units(1), srqn);
        return *this;
    }
    // Raw units (malformed images).
    WqeImage& raw_unit(const uint8_t (&bytes)[16]) {
        std::memcpy(add_units(1), bytes, 16);
        return *this;
    }
    // Sets ds from the units added (or to `ds_override`) and returns the bytes.
    const std::vector<uint8_t>& finish(int ds_override = -1) {
        const uint32_t ds = ds_override >= 0 ? static_cast<uint32_t>(ds_override) : units() ;
        units_[7] = static_cast<uint8_t>(ds);
        return units_;
    }
    uint32_t units() const { return static_cast<uint32_t>(units_.size() / 16); }
    uint32_t wqebbs() const { return (units() * 16 + 63) / 64; }

private:
    uint8_t* add_units(uint32_t n) {
        const size_t at = units_.size();
        units_.resize(at + 16 * size_t{n});
        return &units_[at];
    }
    std::vector<uint8_t> units_;
};

// Writes a WQE image into a ring of `wqebbs` 64-byte blocks starting at block `slot`, wrapping at 16-byte
// granularity like a producer that computes each segment's address modulo the ring.
inline void place(uint8_t* ring, uint32_t wqebbs, uint32_t slot, const std::vector<uint8_t>& wqe) {
    const size_t ring_bytes = size_t{wqebbs} * 64;
    const size_t start = size_t{slot % wqebbs} * 64;
    for (size_t u = 0; u * 16 < wqe.size(); ++u) std::memcpy(ring + (start + u * 16) % ring_bytes, &wqe[u * 16], 16);
}

// A 64-byte requester CQE (struct mlx5_cqe64): byte_cnt at 44, timestamp at 48 (error CQEs: syndrome at 55),
// sop_drop_qpn at 56 (WQE opcode RDMA_WRITE, QPN), wqe_counter at 60, op_own at 63.
inline void write_cqe(uint8_t* slot, uint8_t opcode, bool owner, uint16_t wqe_counter, uint32_t qpn, uint32_t bytes,
               uint64_t ts, uint8_t syndrome = 0) {
    std::memset(slot, 0, 64);
    put_be32(slot + 44, bytes);
    put_be64(slot + 48, ts);
    if (opcode == 13) slot[55] = syndrome;  // REQ_ERR: struct mlx5_err_cqe's syndrome
    put_be32(slot + 56, (0x08u << 24) | qpn);
    put_be16(slot + 60, wqe_counter);
    slot[63] = static_cast<uint8_t>(opcode << 4 | (owner ? 1 : 0));
}

}  // namespace sigmatrace::gpumem::test
