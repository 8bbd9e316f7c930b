// DevX general commands on a fabric device (src/softfabric/mlx5/general_commands.h): the capability fields UCX
// 1.13's DevX memory domain reads (uct_ib_mlx5_devx_md_open, uct_ib_mlx5_devx_check_odp), decoded here with the
// PRM's bit offsets written out independently of the implementation, and the refusals with their status.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mlx5_format/prm_bits.h"
#include "mlx5/general_commands.h"

namespace softfabric::mlx5 {
namespace {

namespace prm = sigmatrace::gpumem::prm;

constexpr size_t kOutBytes = 0x1010;  // query_hca_cap_out: 16-byte header + 4 KiB page
constexpr uint32_t kPage = 0x80;      // bit offset of the page in query_hca_cap_out

std::vector<uint8_t> query_in(uint16_t opcode, uint16_t op_mod) {
    std::vector<uint8_t> in(16, 0);
    prm::set_field(in.data(), in.size(), {0x00, 16}, opcode);
    prm::set_field(in.data(), in.size(), {0x30, 16}, op_mod);
    return in;
}

struct Answer {
    int rc;
    int err;
    std::vector<uint8_t> out;
    uint64_t at(uint32_t bit, uint32_t width) const {
        return prm::Mailbox(out.data(), out.size()).get_or({bit, width}, ~0ull);
    }
    uint64_t cap(uint32_t bit, uint32_t width) const { return at(kPage + bit, width); }
};

Answer ask(uint16_t opcode, uint16_t op_mod, size_t outlen = kOutBytes) {
    const auto in = query_in(opcode, op_mod);
    Answer a{0, 0, std::vector<uint8_t>(outlen, 0xee)};
    errno = 0;
    a.rc = general_command(in.data(), in.size(), a.out.data(), a.out.size());
    a.err = errno;
    return a;
}

constexpr uint16_t kQueryHcaCap = 0x100;
constexpr uint16_t kCurrent = 1;

TEST(GeneralCommands, GeneralCapabilitiesAreTheOnesUcxNeedsForItsDevxDomain) {
    for (uint16_t cur : {uint16_t{0}, kCurrent}) {
        const Answer a = ask(kQueryHcaCap, static_cast<uint16_t>(kCapGeneral << 1 | cur));
        ASSERT_EQ(a.rc, 0);
        EXPECT_EQ(a.at(0x00, 8), 0u);            // status
        EXPECT_EQ(a.cap(0x1c3, 5), 30u);         // log_max_msg: UCX requires exactly 30
        EXPECT_EQ(a.cap(0x21a, 1), 1u);          // dct
        EXPECT_EQ(a.cap(0x276, 2), 0u);          // lag_dct
        EXPECT_EQ(a.cap(0x27c, 4), 0u);          // num_lag_ports
        EXPECT_EQ(a.cap(0x12a, 6), 4u);          // log_max_ra_req_dc: 16, as max_qp_rd_atom
        EXPECT_EQ(a.cap(0x1fc, 4), 1u);          // cqe_version
        EXPECT_EQ(a.cap(0x21e, 1), 1u);          // atomic
        EXPECT_EQ(a.cap(0x1b8, 8), 1u);          // num_ports
        EXPECT_EQ(a.cap(0x1b6, 2), 0u);          // port_type: InfiniBand
        EXPECT_EQ(a.cap(0x88, 8), 14u);          // log_max_qp_sz: 16384 = max_qp_wr
        EXPECT_EQ(a.cap(0x80, 8), 14u);          // log_max_srq_sz
        EXPECT_EQ(a.cap(0xc8, 8), 22u);          // log_max_cq_sz: max_cqe 2^22 - 1
        EXPECT_EQ(a.cap(0x32b, 5), 24u);         // log_max_pd
        // Cleared so that UCX never asks the fabric for what it does not execute.
        EXPECT_EQ(a.cap(0x208, 1), 1u);          // umr_modify_atomic_disabled: no indirect atomic mkeys
        EXPECT_EQ(a.cap(0x108, 1), 0u);          // fixed_buffer_size: no KSM mkeys
        EXPECT_EQ(a.cap(0x383, 5), 0u);          // log_max_rmp: no RMP (UCX's cyclic SRQ)
        EXPECT_EQ(a.cap(0x227, 1), 0u);          // pg: no ODP
        EXPECT_EQ(a.cap(0x200, 1), 0u);          // compact_address_vector
        EXPECT_EQ(a.cap(0x3a0, 1), 0u);          // ext_stride_num_range: no striding RQ
        EXPECT_EQ(a.cap(0x5be, 1), 0u);          // cqe_compression_128b
        EXPECT_EQ(a.cap(0x5bf, 1), 0u);          // cqe_compression
        EXPECT_EQ(a.cap(0x5f2, 1), 0u);          // rndv_offload_dc: no tag matching
        EXPECT_EQ(a.cap(0x138, 1), 0u);          // ooo_sl_mask
        EXPECT_EQ(a.cap(0x1f8, 1), 0u);          // init2_lag_tx_port_affinity
        EXPECT_EQ(a.cap(0x27b, 1), 0u);          // lag_master
        EXPECT_EQ(a.cap(0x241, 1), 0u);          // dci_no_rdma_wr_optimized_performance
        EXPECT_EQ(a.cap(0x225, 1), 0u);          // ib_striding_wq_cq_first_indication
    }
}

TEST(GeneralCommands, AtomicCapabilitiesAreEightByteCasAndFetchAddInHostOrder) {
    const Answer a = ask(kQueryHcaCap, static_cast<uint16_t>(kCapAtomic << 1 | kCurrent));
    ASSERT_EQ(a.rc, 0);
    EXPECT_EQ(a.cap(0x40, 2), 1u);    // atomic_req_8B_endianness_mode: host
    EXPECT_EQ(a.cap(0x90, 16), 3u);   // atomic_operations: compare-swap, fetch-add; no masked ones
    EXPECT_EQ(a.cap(0xb0, 16), 8u);   // atomic_size_qp: 8 bytes
    EXPECT_EQ(a.cap(0xd0, 16), 8u);   // atomic_size_dc
    EXPECT_EQ(a.cap(0x280, 16), 0u);  // fetch_add_pci_atomic
    EXPECT_EQ(a.cap(0x2a0, 16), 0u);  // compare_swap_pci_atomic
}

TEST(GeneralCommands, OdpAndDeviceMemoryPagesAreAllZero) {
    for (uint16_t page : {kCapOdp, kCapDeviceMemory}) {
        const Answer a = ask(kQueryHcaCap, static_cast<uint16_t>(page << 1 | kCurrent));
        ASSERT_EQ(a.rc, 0) << page;
        for (size_t i = 0; i < kOutBytes; ++i) ASSERT_EQ(a.out[i], 0) << "page " << page << " byte " << i;
    }
}

TEST(GeneralCommands, CommandsTheDeviceLacksAreRefusedWithBadOp) {
    for (uint16_t opcode : {uint16_t{0x842} /* QUERY_LAG */, uint16_t{0x762} /* QUERY_HCA_VPORT_CONTEXT */,
                            uint16_t{0x754} /* QUERY_NIC_VPORT_CONTEXT */, uint16_t{0x800} /* ALLOC_PD */}) {
        const Answer a = ask(opcode, 0, 64);
        EXPECT_EQ(a.rc, EOPNOTSUPP) << opcode;
        EXPECT_EQ(a.err, EOPNOTSUPP);
        EXPECT_EQ(a.at(0x00, 8), kCmdStatusBadOp);
        EXPECT_EQ(a.at(0x20, 32), uint64_t{opcode} << 16);  // syndrome: the opcode
        EXPECT_EQ(a.out[20], 0xee);                           // nothing beyond the header written
    }
}

TEST(GeneralCommands, CapabilityPagesTheDeviceLacksAreRefusedWithBadParam) {
    for (uint16_t page : {uint16_t{0x1} /* Ethernet offloads */, uint16_t{0x4} /* RoCE */,
                          uint16_t{0x20} /* general 2 */}) {
        const Answer a = ask(kQueryHcaCap, static_cast<uint16_t>(page << 1 | kCurrent), 64);
        EXPECT_EQ(a.rc, EOPNOTSUPP) << page;
        EXPECT_EQ(a.at(0x00, 8), kCmdStatusBadParam);
        EXPECT_EQ(a.at(0x20, 32), (uint64_t{kQueryHcaCap} << 16) | (page << 1 | kCurrent));
    }
}

TEST(GeneralCommands, MailboxesTooShortAreInvalid) {
    const auto in = query_in(kQueryHcaCap, static_cast<uint16_t>(kCapGeneral << 1));
    std::vector<uint8_t> out(8, 0xee);
    EXPECT_EQ(general_command(in.data(), in.size(), out.data(), out.size()), EINVAL);
    EXPECT_EQ(out[0], 0xee);
    std::vector<uint8_t> big(kOutBytes);
    EXPECT_EQ(general_command(in.data(), 2, big.data(), big.size()), EINVAL);       // no whole opcode word
    EXPECT_EQ(general_command(in.data(), 4, big.data(), big.size()), EINVAL);       // no op_mod
    EXPECT_EQ(general_command(nullptr, 16, big.data(), big.size()), EINVAL);
}

}  // namespace
}  // namespace softfabric::mlx5
