// The CQEs the fabric writes for its mlx5 consumers (src/softfabric/mlx5/cqe_ring.h), read back through
// rdma-core's own struct mlx5_cqe64 (<infiniband/mlx5dv.h>): what UCX, rocSHMEM and libmlx5 read at each offset.
#include <endian.h>
#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>

#include <cstring>
#include <vector>

#include "mlx5/cqe_ring.h"

namespace {

using softfabric::mlx5::CqeRing;

TEST(CqeRing, AResponderCqeCarriesTheSendersLidQpnSlAndGrhWhereMlx5ReadsThem) {
    std::vector<uint8_t> buf(4 * 64);
    CqeRing ring(0x400, buf.data(), 4, 64, false);
    ring.invalidate_all();
    CqeRing::Responder r;
    r.wqe_counter = 0x1234;
    r.opcode = IBV_WC_RECV;
    r.qpn = 0xabcdef;
    r.byte_cnt = 4096;
    r.imm_raw = htobe32(0x10004);  // UCX's DC flow-control request carries its DCT number here
    r.with_imm = true;
    r.src_qpn = 0x123456;
    r.slid = 9;
    r.sl = 3;
    r.grh = true;
    ring.responder(r);
    mlx5_cqe64 cqe;
    std::memcpy(&cqe, buf.data(), sizeof cqe);
    EXPECT_EQ(be16toh(cqe.slid), 9);
    EXPECT_EQ(be32toh(cqe.flags_rqpn) & 0xffffff, 0x123456u);
    EXPECT_EQ((be32toh(cqe.flags_rqpn) >> 24) & 0xf, 3u);
    EXPECT_EQ((be32toh(cqe.flags_rqpn) >> 28) & 0x3, 1u);   // GRH in the receive buffer
    EXPECT_EQ(be32toh(cqe.imm_inval_pkey), 0x10004u);
    EXPECT_EQ(be32toh(cqe.byte_cnt), 4096u);
    EXPECT_EQ(be32toh(cqe.sop_drop_qpn) & 0xffffff, 0xabcdefu);
    EXPECT_EQ(be16toh(cqe.wqe_counter), 0x1234);
    EXPECT_EQ(cqe.op_own >> 4, MLX5_CQE_RESP_SEND_IMM);
    EXPECT_EQ(cqe.op_own & 1, 0);   // first pass
}

TEST(CqeRing, ARequesterCqeAndAnErrorCqeReadAsMlx5Defines) {
    std::vector<uint8_t> buf(2 * 128);
    CqeRing ring(0x401, buf.data(), 2, 128, false);   // 128-byte CQEs: the 64-byte CQE is the second half
    ring.invalidate_all();
    ring.requester({.wqe_counter = 7, .wqe_opcode = MLX5_OPCODE_RDMA_WRITE, .qpn = 0x1a2b3c, .byte_cnt = 65536,
                    .ts_ns = 123456789});
    ring.requester({.wqe_counter = 8, .wqe_opcode = MLX5_OPCODE_ATOMIC_FA, .qpn = 0x1a2b3c, .byte_cnt = 8,
                    .status = IBV_WC_RETRY_EXC_ERR, .vendor_err = 0x81});
    mlx5_cqe64 ok, err;
    std::memcpy(&ok, buf.data() + 64, sizeof ok);
    std::memcpy(&err, buf.data() + 128 + 64, sizeof err);
    EXPECT_EQ(ok.op_own >> 4, MLX5_CQE_REQ);
    EXPECT_EQ(be32toh(ok.sop_drop_qpn) >> 24, uint32_t{MLX5_OPCODE_RDMA_WRITE});
    EXPECT_EQ(be32toh(ok.sop_drop_qpn) & 0xffffff, 0x1a2b3cu);
    EXPECT_EQ(be16toh(ok.wqe_counter), 7);
    EXPECT_EQ(be32toh(ok.byte_cnt), 65536u);
    EXPECT_EQ(be64toh(ok.timestamp), 123456789u);
    EXPECT_EQ(err.op_own >> 4, MLX5_CQE_REQ_ERR);
    mlx5_err_cqe e;
    std::memcpy(&e, &err, sizeof e);
    EXPECT_EQ(e.syndrome, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
    EXPECT_EQ(e.vendor_err_synd, 0x81);
    EXPECT_EQ(be16toh(e.wqe_counter), 8);
}

// UCX's DevX DCIs carry their index as the QP's user index (qpc.user_index = htonl(index) >> 8) and UCX reads it
// back as `cqe->srqn_uidx >> 8`, without a byte swap: the 24-bit field must sit big-endian in bytes 33..35.
TEST(CqeRing, ACqeCarriesItsQpsUserIndexWhereUcxFindsItsDci) {
    std::vector<uint8_t> buf(4 * 64);
    CqeRing ring(0x402, buf.data(), 4, 64, false);
    ring.invalidate_all();
    std::size_t slot = 0;
    for (uint32_t dci : {0u, 1u, 5u, 63u}) {
        const uint32_t user_index = htobe32(dci) >> 8;   // what UCX puts in the qpc
        ring.requester({.wqe_counter = static_cast<uint16_t>(dci), .wqe_opcode = MLX5_OPCODE_SEND, .qpn = 0x200 + dci,
                        .user_index = user_index});
        mlx5_cqe64 cqe;
        std::memcpy(&cqe, buf.data() + slot++ * 64, sizeof cqe);
        EXPECT_EQ(cqe.srqn_uidx >> 8, dci);
        EXPECT_EQ(be32toh(cqe.srqn_uidx), user_index);
        EXPECT_EQ(be32toh(cqe.sop_drop_qpn) & 0xffffff, 0x200 + dci);
    }
    CqeRing::Responder r;
    r.qpn = 0x300;
    r.user_index = 0x123456;
    ring.responder(r);
    mlx5_cqe64 resp;
    std::memcpy(&resp, buf.data(), sizeof resp);   // the fifth CQE, back at slot 0
    EXPECT_EQ(be32toh(resp.srqn_uidx), 0x123456u);
}

}  // namespace
