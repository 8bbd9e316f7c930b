// See general_commands.h. Field offsets are the PRM's (mlx5_ifc: cmd_hca_cap, atomic_caps, query_hca_cap_out),
// in bits, as prm::Field takes them. Every value is the one ibv_query_device / ibv_query_port give for the same
// device (provider/device_info.cpp), so that a program sees one device whichever way it asks.
#include "mlx5/general_commands.h"

#include <bit>
#include <cerrno>
#include <cstring>

#include "core/engine.h"
#include "core/fabric_region.h"
#include "core/shared_objects.h"
#include "mlx5_format/prm_commands.h"

namespace softfabric::mlx5 {
namespace {

namespace prm = sigmatrace::gpumem::prm;
using prm::Field;

constexpr uint16_t kQueryHcaCap = 0x100;
constexpr size_t kQueryHcaCapOutBytes = 0x1010;  // header (16 bytes) + one 4 KiB capability page
constexpr uint32_t kCap = 0x80;                  // the page's first bit in query_hca_cap_out

// The general page (cmd_hca_cap).
namespace general {
constexpr Field log_max_srq_sz{kCap + 0x80, 8};
constexpr Field log_max_qp_sz{kCap + 0x88, 8};
constexpr Field log_max_qp{kCap + 0x9b, 5};
constexpr Field log_max_srq{kCap + 0xab, 5};
constexpr Field log_max_cq_sz{kCap + 0xc8, 8};
constexpr Field log_max_cq{kCap + 0xdb, 5};
constexpr Field log_max_mkey{kCap + 0xea, 6};
constexpr Field log_max_ra_req_dc{kCap + 0x12a, 6};
constexpr Field log_max_ra_res_dc{kCap + 0x13a, 6};
constexpr Field log_max_ra_req_qp{kCap + 0x14a, 6};
constexpr Field log_max_ra_res_qp{kCap + 0x15a, 6};
constexpr Field port_type{kCap + 0x1b6, 2};  // 0: InfiniBand
constexpr Field num_ports{kCap + 0x1b8, 8};
constexpr Field log_max_msg{kCap + 0x1c3, 5};
constexpr Field cqe_version{kCap + 0x1fc, 4};
constexpr Field umr_modify_atomic_disabled{kCap + 0x208, 1};
constexpr Field dct{kCap + 0x21a, 1};
constexpr Field atomic{kCap + 0x21e, 1};
constexpr Field log_max_pd{kCap + 0x32b, 5};
}  // namespace general

// The atomic page (atomic_caps).
namespace atomic {
constexpr Field req_8b_endianness_mode{kCap + 0x40, 2};
constexpr Field supported_8b_endianness_mode_1{kCap + 0x46, 1};
constexpr Field operations{kCap + 0x90, 16};
constexpr Field size_qp{kCap + 0xb0, 16};
constexpr Field size_dc{kCap + 0xd0, 16};
}  // namespace atomic

constexpr uint32_t kAtomicOpCompareSwap = 1u << 0;
constexpr uint32_t kAtomicOpFetchAdd = 1u << 1;
constexpr uint32_t kAtomicSize8 = 8;            // the sizes fields are masks of operand sizes in bytes
constexpr uint32_t kEndiannessHost = 1;         // 8-byte atomics act on memory in host byte order
constexpr uint32_t kLogMaxMessage = 30;         // 1 GiB: ibv_query_port's max_msg_sz
constexpr uint32_t kLogMaxReadAtomic = 4;       // 16: max_qp_rd_atom, max_qp_init_rd_atom

// floor(log2(n)): a log_max_* field promises 2^field objects, never more than verbs reports.
constexpr uint32_t log2_floor(uint64_t n) { return static_cast<uint32_t>(std::bit_width(n) - 1); }

void fill_general(void* out, size_t len) {
    auto set = [&](Field f, uint64_t v) { prm::set_field(out, len, f, v); };
    set(general::log_max_srq_sz, log2_floor(engine::kMaxQueueDepth));
    set(general::log_max_qp_sz, log2_floor(engine::kMaxQueueDepth));
    set(general::log_max_qp, log2_floor(kQpSlots - 2));
    set(general::log_max_srq, 16);
    set(general::log_max_cq_sz, 22);  // max_cqe 2^22 - 1, as an mlx5 device derives it
    set(general::log_max_cq, 16);
    set(general::log_max_mkey, log2_floor(kMrSlots - 1));
    set(general::log_max_ra_req_dc, kLogMaxReadAtomic);
    set(general::log_max_ra_res_dc, kLogMaxReadAtomic);
    set(general::log_max_ra_req_qp, kLogMaxReadAtomic);
    set(general::log_max_ra_res_qp, kLogMaxReadAtomic);
    set(general::port_type, 0);
    set(general::num_ports, 1);
    set(general::log_max_msg, kLogMaxMessage);
    set(general::cqe_version, 1);
    // No UMR: indirect mkeys cannot carry atomics (and there is no KSM, fixed_buffer_size 0).
    set(general::umr_modify_atomic_disabled, 1);
    set(general::dct, 1);
    set(general::atomic, 1);
    set(general::log_max_pd, 24);
    // Everything else 0: no ODP (pg), LAG, RMP/XRQ (log_max_rmp), tag matching, striding RQ, CQE compression,
    // compact address vectors, out-of-order SLs, relaxed ordering, device memory.
}

void fill_atomic(void* out, size_t len) {
    auto set = [&](Field f, uint64_t v) { prm::set_field(out, len, f, v); };
    set(atomic::req_8b_endianness_mode, kEndiannessHost);
    set(atomic::supported_8b_endianness_mode_1, 1);
    set(atomic::operations, kAtomicOpCompareSwap | kAtomicOpFetchAdd);  // no masked ones
    set(atomic::size_qp, kAtomicSize8);
    set(atomic::size_dc, kAtomicSize8);
    // No PCI atomics (fetch_add/swap/compare_swap_pci_atomic 0).
}

int fail(int err) {
    errno = err;
    return err;
}

int refuse(void* out, size_t outlen, uint8_t status, uint32_t syndrome) {
    if (out && outlen >= 8) {
        std::memset(out, 0, std::min<size_t>(outlen, 16));
        prm::set_field(out, outlen, prm::f::out_status, status);
        prm::set_field(out, outlen, prm::f::out_syndrome, syndrome);
    }
    return fail(EOPNOTSUPP);
}

}  // namespace

int general_command(const void* in, size_t inlen, void* out, size_t outlen) {
    const prm::Mailbox box(in, inlen);
    const auto opcode = box.get(prm::f::opcode);
    if (!opcode || !out || outlen < 16) return fail(EINVAL);
    // The syndrome says what was refused: the opcode, and for a capability page the op_mod that named it.
    if (*opcode != kQueryHcaCap) return refuse(out, outlen, kCmdStatusBadOp, static_cast<uint32_t>(*opcode) << 16);
    const auto op_mod = box.get(prm::f::op_mod);
    if (!op_mod) return fail(EINVAL);
    const uint16_t page = static_cast<uint16_t>(*op_mod >> 1);  // current (bit 0) and maximum values are the same
    if (page != kCapGeneral && page != kCapOdp && page != kCapAtomic && page != kCapDeviceMemory)
        return refuse(out, outlen, kCmdStatusBadParam, static_cast<uint32_t>(kQueryHcaCap) << 16 | *op_mod);
    std::memset(out, 0, std::min(outlen, kQueryHcaCapOutBytes));  // status 0; ODP and device memory: all zero
    if (page == kCapGeneral) fill_general(out, outlen);
    if (page == kCapAtomic) fill_atomic(out, outlen);
    return 0;
}

}  // namespace softfabric::mlx5
