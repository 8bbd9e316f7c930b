// Builds PRM command mailboxes for tests with a bit-serial writer of the PRM's big-endian bit numbering (bit k is
// bit 7 - k % 8 of byte k / 8), an implementation independent of src/mlx5_format/prm_bits.h, at bit offsets written
// as literals from the PRM tables (the mlx5_ifc layout), not through src/gpumem's constants.
#pragma once

#include <cstdint>
#include <vector>

namespace sigmatrace::gpumem::test {

inline void set_bits(std::vector<uint8_t>& buf, uint32_t bit_offset, uint32_t width, uint64_t value) {
    for (uint32_t i = 0; i < width; ++i) {
        const uint32_t bit = bit_offset + i;  // i-th bit from the field's most significant one
        const bool one = (value >> (width - 1 - i)) & 1;
        uint8_t& byte = buf.at(bit / 8);
        const uint8_t mask = static_cast<uint8_t>(0x80u >> (bit % 8));
        byte = one ? (byte | mask) : (byte & static_cast<uint8_t>(~mask));
    }
}

// CREATE_QP as NVSHMEM IBGDA issues it (RC, SRQ, zero-size RQ) with the given geometry.
struct CreateQpSpec {
    uint32_t st = 0;              // RC
    uint32_t pd = 0x12;
    uint32_t log_sq_size = 10;
    uint32_t rq_type = 1;         // SRQ
    uint32_t log_rq_size = 0;
    uint32_t log_rq_stride = 0;
    uint32_t uar_page = 0x33;
    uint32_t cqn_snd = 0x401;
    uint32_t cqn_rcv = 0x402;
    uint32_t send_dbr_mode = 0;
    uint32_t dbr_umem_id = 7;
    uint64_t dbr_addr = 0x40;     // byte offset in the DBR umem
    uint32_t wq_umem_id = 8;
    uint64_t wq_umem_offset = 0x10000;
    uint32_t ts_format = 1;
    uint32_t user_index = 0x99;
};

inline std::vector<uint8_t> build_create_qp(const CreateQpSpec& s, size_t len = 0x110) {
    std::vector<uint8_t> in(len, 0);
    set_bits(in, 0x00, 16, 0x500);
    set_bits(in, 0xC8, 8, s.st);
    set_bits(in, 0xE8, 24, s.pd);
    set_bits(in, 0x109, 4, s.log_rq_size);
    set_bits(in, 0x10D, 3, s.log_rq_stride);
    set_bits(in, 0x111, 4, s.log_sq_size);
    set_bits(in, 0x118, 2, s.ts_format);
    set_bits(in, 0x128, 24, s.uar_page);
    set_bits(in, 0x140, 2, s.send_dbr_mode);
    set_bits(in, 0x148, 24, s.user_index);
    set_bits(in, 0x4A8, 24, s.cqn_snd);
    set_bits(in, 0x5A8, 24, s.cqn_rcv);
    set_bits(in, 0x5C0, 64, s.dbr_addr);
    set_bits(in, 0x625, 3, s.rq_type);
    set_bits(in, 0x743, 1, 1);  // dbr_umem_valid
    set_bits(in, 0x7E0, 32, s.dbr_umem_id);
    set_bits(in, 0x800, 64, s.wq_umem_offset);
    set_bits(in, 0x840, 32, s.wq_umem_id);
    set_bits(in, 0x860, 1, 1);  // wq_umem_valid
    return in;
}

// CREATE_CQ as NVSHMEM issues it (collapsed, overrun-ignore) or as a normal ring.
struct CreateCqSpec {
    bool collapsed = true;
    uint32_t cqe_sz = 0;
    uint32_t log_cq_size = 0;
    uint32_t uar_page = 0x34;
    uint32_t c_eqn = 5;
    uint32_t dbr_umem_id = 9;
    uint64_t dbr_addr = 0;
    uint32_t cq_umem_id = 10;
    uint64_t cq_umem_offset = 0x200;
};

inline std::vector<uint8_t> build_create_cq(const CreateCqSpec& s, size_t len = 0x110) {
    std::vector<uint8_t> in(len, 0);
    set_bits(in, 0x00, 16, 0x400);
    set_bits(in, 0x86, 1, 1);  // dbr_umem_valid
    set_bits(in, 0x88, 3, s.cqe_sz);
    set_bits(in, 0x8B, 1, s.collapsed ? 1 : 0);
    set_bits(in, 0x8E, 1, s.collapsed ? 1 : 0);  // oi
    set_bits(in, 0xA0, 32, s.dbr_umem_id);
    set_bits(in, 0xE3, 5, s.log_cq_size);
    set_bits(in, 0xE8, 24, s.uar_page);
    set_bits(in, 0x138, 8, s.c_eqn);
    set_bits(in, 0x240, 64, s.dbr_addr);
    set_bits(in, 0x280, 64, s.cq_umem_offset);
    set_bits(in, 0x2C0, 32, s.cq_umem_id);
    set_bits(in, 0x2E0, 1, 1);  // cq_umem_valid
    return in;
}

// CREATE_DCT as NVSHMEM's ibgda_create_dct_shared_objects builds it: PD, CQ, remote access, access key, MTU, port.
struct CreateDctSpec {
    uint32_t pd = 0x12, cqn = 0x345, srqn = 0;
    uint64_t key = 0x5623CEAF;
    bool rre = true, rwe = true, rae = true;
};
inline std::vector<uint8_t> build_create_dct(const CreateDctSpec& s, size_t len = 0x110) {
    std::vector<uint8_t> in(len, 0);
    set_bits(in, 0x00, 16, 0x710);
    set_bits(in, 0xC8, 24, s.cqn);           // dctc (bit 0x80) + 0x48
    set_bits(in, 0xEC, 1, s.rre ? 1 : 0);
    set_bits(in, 0xED, 1, s.rwe ? 1 : 0);
    set_bits(in, 0xEE, 1, s.rae ? 1 : 0);
    set_bits(in, 0x128, 24, s.srqn);
    set_bits(in, 0x148, 24, s.pd);
    set_bits(in, 0x180, 64, s.key);
    set_bits(in, 0x1C5, 3, 5);                // mtu 4096
    set_bits(in, 0x1C8, 8, 1);                // port
    return in;
}

// INIT2RTR with the peer's QPN, LID and GID.
inline std::vector<uint8_t> build_init2rtr(uint32_t qpn, uint32_t remote_qpn, uint32_t rlid, const uint8_t (&rgid)[16],
                                           size_t len = 0x110) {
    std::vector<uint8_t> in(len, 0);
    set_bits(in, 0x00, 16, 0x503);
    set_bits(in, 0x48, 24, qpn);
    set_bits(in, 0x100, 3, 5);  // mtu 4096
    set_bits(in, 0x168, 24, remote_qpn);
    set_bits(in, 0x1A8, 1, 1);  // grh
    set_bits(in, 0x1B0, 16, rlid);
    for (int i = 0; i < 16; ++i) set_bits(in, 0x200 + 8 * i, 8, rgid[i]);
    return in;
}

inline std::vector<uint8_t> build_qp_command(uint16_t opcode, uint32_t qpn, size_t len = 0x110) {
    std::vector<uint8_t> in(len, 0);
    set_bits(in, 0x00, 16, opcode);
    set_bits(in, 0x48, 24, qpn);
    return in;
}

// A create command's `out`: status, then the object number at 0x48.
inline std::vector<uint8_t> build_create_out(uint32_t number, uint8_t status = 0) {
    std::vector<uint8_t> out(16, 0);
    set_bits(out, 0x00, 8, status);
    set_bits(out, 0x48, 24, number);
    return out;
}

}  // namespace sigmatrace::gpumem::test
