// The WQE decoder against byte images built from the documented mlx5 layouts: every opcode, every segment type,
// wrap-around at the ring end, and every malformation it must report instead of decoding.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "mlx5_format/mlx5_layout.h"
#include "mlx5_format/wqe_decoder.h"
#include "wqe_builder.h"

namespace sigmatrace::gpumem {
namespace {

using test::WqeImage;
namespace op = mlx5::op;

constexpr uint32_t kQpn = 0x1a2b3;

class DecoderTest : public ::testing::Test {
protected:
    static constexpr uint32_t kWqebbs = 16;
    std::vector<uint8_t> ring = std::vector<uint8_t>(kWqebbs * 64, 0);

    WqeStatus decode_at(uint32_t slot, const WqeImage& img, DecodedWqe& out, Transport t = Transport::Rc,
                        int ds_override = -1) {
        WqeImage copy = img;
        test::place(ring.data(), kWqebbs, slot, copy.finish(ds_override));
        return decode_wqe(RingView{ring.data(), kWqebbs}, slot, t, out);
    }
};

TEST_F(DecoderTest, RdmaWriteWithGatherSegment) {
    DecodedWqe w;
    ASSERT_EQ(decode_at(3, WqeImage(op::RDMA_WRITE, 3, kQpn).raddr(0x7f0000001000, 0xabcd1234).data(4096, 0x55, 0x2000),
                        w),
              WqeStatus::Ok);
    EXPECT_EQ(w.opcode, op::RDMA_WRITE);
    EXPECT_EQ(w.wqe_index, 3);
    EXPECT_EQ(w.qpn, kQpn);
    EXPECT_EQ(w.ds, 3);
    EXPECT_EQ(w.wqebbs, 1);
    EXPECT_EQ(w.fm_ce_se, mlx5::kCtrlCqUpdate);
    EXPECT_EQ(w.bytes, 4096u);
    EXPECT_EQ(w.raddr, 0x7f0000001000u);
    EXPECT_EQ(w.rkey, 0xabcd1234u);
    EXPECT_EQ(w.num_sge, 1);
    EXPECT_FALSE(w.has_inline);
    EXPECT_EQ(w.imm, 0u);
}

TEST_F(DecoderTest, RdmaWriteImmKeepsImmediateAsWritten) {
    DecodedWqe w;
    const uint32_t imm_raw = 0x11223344;  // the 4 bytes as they sit in the WQE
    ASSERT_EQ(decode_at(0, WqeImage(op::RDMA_WRITE_IMM, 0, kQpn, 0x08, 0, imm_raw).raddr(0x10, 7).data(8, 1, 2), w),
              WqeStatus::Ok);
    EXPECT_EQ(w.opcode, op::RDMA_WRITE_IMM);
    EXPECT_EQ(w.imm, imm_raw);
    EXPECT_EQ(w.bytes, 8u);
}

TEST_F(DecoderTest, DeepEpFourByteInlineWrite) {
    // ctrl + raddr + inline header with 4 bytes of data: ds = 3, as DeepEP's ibgda_write_rdma_write_inl_wqe.
    DecodedWqe w;
    const uint32_t value = 0xdeadbeef;
    ASSERT_EQ(decode_at(5, WqeImage(op::RDMA_WRITE, 5, kQpn).raddr(0x5000, 0x99).inline_data(&value, 4), w),
              WqeStatus::Ok);
    EXPECT_EQ(w.ds, 3);
    EXPECT_TRUE(w.has_inline);
    EXPECT_EQ(w.num_sge, 0);
    EXPECT_EQ(w.bytes, 4u);
    EXPECT_EQ(w.raddr, 0x5000u);
}

TEST_F(DecoderTest, LongInlineSpansBlocksAndWrapsAroundTheRing) {
    // 200 inline bytes: ds = 1 + 1 + ceil(204/16) = 15 -> 4 WQEBBs, placed in the last two slots so the
    // inline data continues at the ring's start.
    std::vector<uint8_t> payload(200, 0xab);
    DecodedWqe w;
    ASSERT_EQ(decode_at(kWqebbs - 2, WqeImage(op::RDMA_WRITE, kWqebbs - 2, kQpn).raddr(0x9000, 3).inline_data(payload.data(), 200), w),
              WqeStatus::Ok);
    EXPECT_EQ(w.ds, 15);
    EXPECT_EQ(w.wqebbs, 4);
    EXPECT_EQ(w.bytes, 200u);
    EXPECT_TRUE(w.has_inline);
}

TEST_F(DecoderTest, GatherListWrapsAroundTheRing) {
    // ctrl + raddr + 6 data segments = 8 units = 2 WQEBBs at the last slot: the second block is slot 0.
    WqeImage img(op::RDMA_WRITE, 15, kQpn);
    img.raddr(0xabc, 0x42);
    for (uint32_t i = 0; i < 6; ++i) img.data(100 + i, 7, 0x1000 * i);
    DecodedWqe w;
    ASSERT_EQ(decode_at(kWqebbs - 1, img, w), WqeStatus::Ok);
    EXPECT_EQ(w.wqebbs, 2);
    EXPECT_EQ(w.num_sge, 6);
    EXPECT_EQ(w.bytes, 100u + 101 + 102 + 103 + 104 + 105);
    EXPECT_EQ(w.rkey, 0x42u);
}

TEST_F(DecoderTest, InvalidLkeyEndsTheGatherList) {
    DecodedWqe w;
    ASSERT_EQ(decode_at(0, WqeImage(op::SEND, 0, kQpn).data(64, 1, 0).data(0, mlx5::kInvalidLkey, 0).data(999, 1, 0), w),
              WqeStatus::Ok);
    EXPECT_EQ(w.num_sge, 1);
    EXPECT_EQ(w.bytes, 64u);
}

TEST_F(DecoderTest, RdmaRead) {
    DecodedWqe w;
    ASSERT_EQ(decode_at(7, WqeImage(op::RDMA_READ, 7, kQpn, 0).raddr(0xfeed0000, 0x777).data(65536, 3, 0x10), w),
              WqeStatus::Ok);
    EXPECT_EQ(w.opcode, op::RDMA_READ);
    EXPECT_EQ(w.bytes, 65536u);
    EXPECT_EQ(w.raddr, 0xfeed0000u);
    EXPECT_EQ(w.fm_ce_se, 0);  // unsignalled
}

TEST_F(DecoderTest, SendFamily) {
    for (uint8_t opc : {op::SEND, op::SEND_IMM, op::SEND_INVAL}) {
        SCOPED_TRACE(mlx5_opcode_name(opc));
        DecodedWqe w;
        ASSERT_EQ(decode_at(1, WqeImage(opc, 1, kQpn, 0x0a, 0, 0xcafe).data(10, 1, 0).data(20, 1, 0), w), WqeStatus::Ok);
        EXPECT_EQ(w.opcode, opc);
        EXPECT_EQ(w.bytes, 30u);
        EXPECT_EQ(w.num_sge, 2);
        EXPECT_EQ(w.raddr, 0u);
        EXPECT_EQ(w.imm, opc == op::SEND_IMM ? 0xcafeu : 0u);
        EXPECT_EQ(w.fm_ce_se, 0x0a);  // signalled + solicited
    }
}

TEST_F(DecoderTest, CompareAndSwapAndFetchAdd) {
    DecodedWqe w;
    ASSERT_EQ(decode_at(2, WqeImage(op::ATOMIC_CS, 2, kQpn).raddr(0x8000, 5).atomic(0x1111, 0x2222).data(8, 1, 0x40), w),
              WqeStatus::Ok);
    EXPECT_EQ(w.ds, 4);
    EXPECT_EQ(w.bytes, 8u);
    EXPECT_EQ(w.atomic_arg, 0x1111u);
    EXPECT_EQ(w.atomic_compare, 0x2222u);
    EXPECT_EQ(w.raddr, 0x8000u);

    ASSERT_EQ(decode_at(3, WqeImage(op::ATOMIC_FA, 3, kQpn).raddr(0x8008, 6).atomic(42, 0).data(8, 1, 0x48), w),
              WqeStatus::Ok);
    EXPECT_EQ(w.atomic_arg, 42u);
    EXPECT_EQ(w.atomic_compare, 0u);
    EXPECT_EQ(w.rkey, 6u);
}

TEST_F(DecoderTest, DeepEpMaskedFetchAddFourBytes) {
    // MASKED_FA | opmod 0x08: {add_data, field_boundary} 4 bytes each, in a 16-byte segment; ds = 4.
    DecodedWqe w;
    ASSERT_EQ(decode_at(4, WqeImage(op::ATOMIC_MASKED_FA, 4, kQpn, 0x08, 0x08).raddr(0xa000, 9).masked_args(4, {7, 0}).data(4, 1, 0),
                        w),
              WqeStatus::Ok);
    EXPECT_EQ(w.opcode, op::ATOMIC_MASKED_FA);
    EXPECT_EQ(w.opmod, 0x08);
    EXPECT_EQ(w.ds, 4);
    EXPECT_EQ(w.bytes, 4u);
    EXPECT_EQ(w.atomic_arg, 7u);
    EXPECT_EQ(w.raddr, 0xa000u);
}

TEST_F(DecoderTest, MaskedAtomicsOtherSizes) {
    DecodedWqe w;
    // 8-byte extended FA (opmod 0x09): 16 bytes of arguments.
    ASSERT_EQ(decode_at(0, WqeImage(op::ATOMIC_MASKED_FA, 0, kQpn, 0x08, 0x09).raddr(1, 2).masked_args(8, {0x100000001, 0}).data(8, 1, 0), w),
              WqeStatus::Ok);
    EXPECT_EQ(w.bytes, 8u);
    EXPECT_EQ(w.atomic_arg, 0x100000001u);
    // 4-byte masked CS: {swap, compare, swap_mask, compare_mask} = 16 bytes.
    ASSERT_EQ(decode_at(1, WqeImage(op::ATOMIC_MASKED_CS, 1, kQpn, 0x08, 0x08).raddr(1, 2).masked_args(4, {5, 6, ~0u, ~0u}).data(4, 1, 0), w),
              WqeStatus::Ok);
    EXPECT_EQ(w.bytes, 4u);
    EXPECT_EQ(w.atomic_arg, 5u);
    EXPECT_EQ(w.atomic_compare, 6u);
    // Classic (non-extended) masked CS: 8-byte fields, 32 bytes of arguments: ds = 1 + 1 + 2 + 1.
    ASSERT_EQ(decode_at(2, WqeImage(op::ATOMIC_MASKED_CS, 2, kQpn).raddr(1, 2).masked_args(8, {9, 10, ~0ull, ~0ull}).data(8, 1, 0), w),
              WqeStatus::Ok);
    EXPECT_EQ(w.ds, 5);
    EXPECT_EQ(w.bytes, 8u);
    EXPECT_EQ(w.atomic_arg, 9u);
    EXPECT_EQ(w.atomic_compare, 10u);
    // 32-byte extended FA (opmod 0x0b): 64 bytes of arguments, first 8 bytes reported.
    ASSERT_EQ(decode_at(4, WqeImage(op::ATOMIC_MASKED_FA, 4, kQpn, 0x08, 0x0b).raddr(1, 2).masked_args(32, {77, 0}).data(32, 1, 0), w),
              WqeStatus::Ok);
    EXPECT_EQ(w.bytes, 32u);
    EXPECT_EQ(w.atomic_arg, 77u);
}

TEST_F(DecoderTest, ControlOnlyOpcodes) {
    for (uint8_t opc : {op::NOP, op::WAIT, op::TSO, op::FMR, op::LOCAL_INVAL, op::CONFIG_CMD, op::SET_PSV, op::UMR,
                        op::TAG_MATCHING, op::FLOW_TBL_ACCESS, op::MMO}) {
        SCOPED_TRACE(mlx5_opcode_name(opc));
        DecodedWqe w;
        ASSERT_EQ(decode_at(6, WqeImage(opc, 6, kQpn, 0x08, 0, 0x5555).data(123, 1, 0), w), WqeStatus::Ok);
        EXPECT_EQ(w.opcode, opc);
        EXPECT_EQ(w.bytes, 0u);
        EXPECT_EQ(w.raddr, 0u);
        EXPECT_EQ(w.imm, 0u);  // only the *_IMM opcodes carry an immediate
        EXPECT_TRUE(known_send_opcode(opc));
    }
}

TEST_F(DecoderTest, WaitOnDataIsControlOnly) {
    // DOCA GPUNetIO's wait-on-data WQE: ctrl, then a 32-byte wait segment (op, lkey, address, data, mask), opmod 1.
    // Its segment is not a gather list: the decoder must not read its address and key as a data segment.
    DecodedWqe w;
    ASSERT_EQ(decode_at(3, WqeImage(op::WAIT, 3, kQpn, 0x08, 0x01).data(0x1234, 0x77, 0xfeed0000).data(0, 0, 0), w),
              WqeStatus::Ok);
    EXPECT_EQ(w.opcode, op::WAIT);
    EXPECT_EQ(w.opmod, 0x01);
    EXPECT_EQ(w.ds, 3);
    EXPECT_EQ(w.wqebbs, 1);
    EXPECT_EQ(w.bytes, 0u);
    EXPECT_EQ(w.num_sge, 0u);
    EXPECT_STREQ(mlx5_opcode_name(op::WAIT), "WAIT");
}

TEST_F(DecoderTest, NvshmemDumpCarriesItsDataSegment) {
    DecodedWqe w;
    ASSERT_EQ(decode_at(0, WqeImage(op::DUMP, 0, kQpn).data(1, 0x10, 0x20), w), WqeStatus::Ok);
    EXPECT_EQ(w.opcode, op::DUMP);
    EXPECT_EQ(w.bytes, 1u);
    EXPECT_STREQ(mlx5_opcode_name(op::DUMP), "DUMP");
}

TEST_F(DecoderTest, UdSendSkipsTheFullAddressVector) {
    DecodedWqe w;
    ASSERT_EQ(decode_at(8, WqeImage(op::SEND, 8, kQpn).av(0x4321, true).data(256, 1, 0), w, Transport::Ud), WqeStatus::Ok);
    EXPECT_EQ(w.ds, 5);
    EXPECT_EQ(w.bytes, 256u);
    EXPECT_EQ(w.remote_qpn, 0x4321u);
}

TEST_F(DecoderTest, DciWithHalfAndFullAddressVector) {
    DecodedWqe w;
    // NVSHMEM DCI with the 16-byte AV: ds = 4.
    ASSERT_EQ(decode_at(9, WqeImage(op::RDMA_WRITE, 9, kQpn).av(0x777, false).raddr(0xd000, 0x31).data(512, 1, 0), w,
                        Transport::Dci),
              WqeStatus::Ok);
    EXPECT_EQ(w.ds, 4);
    EXPECT_EQ(w.remote_qpn, 0x777u);
    EXPECT_EQ(w.raddr, 0xd000u);
    EXPECT_EQ(w.bytes, 512u);
    // The full AV: ds = 6, the remote address segment starts the second block, which wraps to slot 0.
    ASSERT_EQ(decode_at(kWqebbs - 1, WqeImage(op::RDMA_WRITE, kWqebbs - 1, kQpn).av(0x778, true).raddr(0xe000, 0x32).data(1024, 1, 0), w,
                        Transport::Dci),
              WqeStatus::Ok);
    EXPECT_EQ(w.ds, 6);
    EXPECT_EQ(w.wqebbs, 2);
    EXPECT_EQ(w.remote_qpn, 0x778u);
    EXPECT_EQ(w.raddr, 0xe000u);
    EXPECT_EQ(w.rkey, 0x32u);
    EXPECT_EQ(w.bytes, 1024u);
    // A NOP on a DCI has no AV.
    ASSERT_EQ(decode_at(2, WqeImage(op::NOP, 2, kQpn), w, Transport::Dci), WqeStatus::Ok);
    EXPECT_EQ(w.ds, 1);
}

TEST_F(DecoderTest, XrcSegmentPrecedesTheRemoteAddress) {
    DecodedWqe w;
    ASSERT_EQ(decode_at(10, WqeImage(op::RDMA_WRITE, 10, kQpn).xrc(0x55).raddr(0xf000, 0x66).data(32, 1, 0), w, Transport::Xrc),
              WqeStatus::Ok);
    EXPECT_EQ(w.raddr, 0xf000u);
    EXPECT_EQ(w.rkey, 0x66u);
    EXPECT_EQ(w.bytes, 32u);
}

TEST_F(DecoderTest, FenceAndSolicitedBitsArePreserved) {
    DecodedWqe w;
    const uint8_t bits = mlx5::kCtrlFence | mlx5::kCtrlCqUpdate | mlx5::kCtrlSolicited;
    ASSERT_EQ(decode_at(0, WqeImage(op::SEND, 0, kQpn, bits).data(1, 1, 1), w), WqeStatus::Ok);
    EXPECT_EQ(w.fm_ce_se, bits);
}

TEST_F(DecoderTest, PayloadCarriesSegmentsInlineBytesAndAtomicMasks) {
    DecodedWqe w;
    WqePayload p;
    WqeImage img(op::SEND, 14, kQpn);
    img.data(10, 0x11, 0x1000).data(20, 0x22, 0x2000);
    std::vector<uint8_t> text(100);
    for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<uint8_t>(i * 7);
    img.inline_data(text.data(), 100);  // after 3 units: wraps past the ring's end (slot 14 of 16)
    test::place(ring.data(), kWqebbs, 14, img.finish());
    ASSERT_EQ(decode_wqe(RingView{ring.data(), kWqebbs}, 14, Transport::Rc, w, &p), WqeStatus::Ok);
    ASSERT_EQ(p.num_segments, 2u);
    EXPECT_EQ(p.segments[0].addr, 0x1000u);
    EXPECT_EQ(p.segments[0].length, 10u);
    EXPECT_EQ(p.segments[0].lkey, 0x11u);
    EXPECT_EQ(p.segments[1].addr, 0x2000u);
    ASSERT_EQ(p.inline_length, 100u);
    EXPECT_EQ(std::vector<uint8_t>(p.inline_bytes, p.inline_bytes + 100), text);
    EXPECT_EQ(w.bytes, 130u);

    ASSERT_EQ(decode_at(0, WqeImage(op::ATOMIC_MASKED_CS, 0, kQpn, 0x08, 0x09).raddr(1, 2).masked_args(8, {1, 2, 0xff00, 0x00ff}).data(8, 1, 0), w),
              WqeStatus::Ok);
    ASSERT_EQ(decode_wqe(RingView{ring.data(), kWqebbs}, 0, Transport::Rc, w, &p), WqeStatus::Ok);
    EXPECT_EQ(p.atomic_swap_mask, 0xff00u);
    EXPECT_EQ(p.atomic_compare_mask, 0x00ffu);
    ASSERT_EQ(decode_at(1, WqeImage(op::ATOMIC_MASKED_FA, 1, kQpn, 0x08, 0x08).raddr(1, 2).masked_args(4, {5, 0x80000000}).data(4, 1, 0), w),
              WqeStatus::Ok);
    ASSERT_EQ(decode_wqe(RingView{ring.data(), kWqebbs}, 1, Transport::Rc, w, &p), WqeStatus::Ok);
    EXPECT_EQ(p.atomic_field_boundary, 0x80000000u);
    EXPECT_EQ(p.num_segments, 1u);
}

// ------------------------------------------------------------------------------------------ malformed

TEST_F(DecoderTest, ZeroAndOversizedDsAreReported) {
    DecodedWqe w;
    EXPECT_EQ(decode_at(0, WqeImage(op::RDMA_WRITE, 0, kQpn).raddr(1, 1).data(1, 1, 1), w, Transport::Rc, 0),
              WqeStatus::BadDs);
    EXPECT_EQ(decode_at(0, WqeImage(op::RDMA_WRITE, 0, kQpn).raddr(1, 1).data(1, 1, 1), w, Transport::Rc, 65),
              WqeStatus::BadDs);
    EXPECT_EQ(decode_at(0, WqeImage(op::RDMA_WRITE, 0, kQpn).raddr(1, 1).data(1, 1, 1), w, Transport::Rc, 0xff),
              WqeStatus::BadDs);
    // ds that fits the 1 KiB limit but not a 2-block ring.
    std::vector<uint8_t> small(2 * 64, 0);
    WqeImage img(op::SEND, 0, kQpn);
    test::place(small.data(), 2, 0, img.finish(9));
    EXPECT_EQ(decode_wqe(RingView{small.data(), 2}, 0, Transport::Rc, w), WqeStatus::BadDs);
}

TEST_F(DecoderTest, UnknownOpcodeIsReported) {
    DecodedWqe w;
    EXPECT_EQ(decode_at(0, WqeImage(0x07, 0, kQpn).data(1, 1, 1), w), WqeStatus::UnknownOpcode);
    EXPECT_EQ(w.opcode, 0x07);
    EXPECT_FALSE(known_send_opcode(0x07));
    EXPECT_STREQ(mlx5_opcode_name(0x07), "UNKNOWN");
}

TEST_F(DecoderTest, MissingMandatorySegmentsAreReported) {
    DecodedWqe w;
    EXPECT_EQ(decode_at(0, WqeImage(op::RDMA_WRITE, 0, kQpn), w), WqeStatus::Truncated);           // no raddr
    EXPECT_EQ(decode_at(0, WqeImage(op::ATOMIC_FA, 0, kQpn).raddr(1, 1), w), WqeStatus::Truncated);  // no args
    EXPECT_EQ(decode_at(0, WqeImage(op::ATOMIC_MASKED_CS, 0, kQpn).raddr(1, 1).atomic(1, 1), w),
              WqeStatus::Truncated);  // 8-byte masked CS needs 32 bytes of arguments
    EXPECT_EQ(decode_at(0, WqeImage(op::SEND, 0, kQpn), w, Transport::Dci), WqeStatus::Truncated);  // no AV
    EXPECT_EQ(decode_at(0, WqeImage(op::SEND, 0, kQpn).av(1, false), w, Transport::Ud),
              WqeStatus::Truncated);  // UD needs the 48-byte AV
}

TEST_F(DecoderTest, InlineLengthPastTheWqeIsReported) {
    DecodedWqe w;
    uint8_t bad[16] = {};
    test::put_be32(bad, 0x80000000u | 500);  // 500 inline bytes announced in a 1-unit segment
    EXPECT_EQ(decode_at(0, WqeImage(op::RDMA_WRITE, 0, kQpn).raddr(1, 1).raw_unit(bad), w), WqeStatus::BadInline);
    test::put_be32(bad, 0xffffffffu);  // every length bit set
    EXPECT_EQ(decode_at(0, WqeImage(op::SEND, 0, kQpn).raw_unit(bad), w), WqeStatus::BadInline);
}

TEST_F(DecoderTest, UndefinedMaskedAtomicSizeIsReported) {
    DecodedWqe w;
    EXPECT_EQ(decode_at(0, WqeImage(op::ATOMIC_MASKED_FA, 0, kQpn, 0x08, 0x0c).raddr(1, 1).masked_args(8, {1, 2, 3, 4, 5, 6, 7, 8}), w),
              WqeStatus::BadAtomicSize);
}

TEST(DecoderRing, UnusableRingViewsAreReported) {
    DecodedWqe w;
    std::vector<uint8_t> ring(3 * 64, 0);
    EXPECT_EQ(decode_wqe(RingView{ring.data(), 3}, 0, Transport::Rc, w), WqeStatus::BadRing);
    EXPECT_EQ(decode_wqe(RingView{nullptr, 4}, 0, Transport::Rc, w), WqeStatus::BadRing);
    EXPECT_EQ(decode_wqe(RingView{ring.data(), 0}, 0, Transport::Rc, w), WqeStatus::BadRing);
    EXPECT_STRNE(wqe_status_name(WqeStatus::BadRing), "?");
}

TEST(DecoderRing, RandomBytesNeverCrashAndStayInsideTheRing) {
    // Random rings of every size and every transport: the decoder may report anything but must not read outside
    // the ring (ASan checks that: the ring is an exact-size allocation) nor report more bytes than the WQE holds.
    std::mt19937_64 rng(12345);
    for (uint32_t log = 0; log <= 6; ++log) {
        const uint32_t n = 1u << log;
        std::vector<uint8_t> ring(size_t{n} * 64);
        for (int iter = 0; iter < 3000; ++iter) {
            for (auto& b : ring) b = static_cast<uint8_t>(rng());
            if (iter % 3 == 0) ring[7] = static_cast<uint8_t>(1 + rng() % 16);  // plausible ds more often
            DecodedWqe w;
            const auto t = static_cast<Transport>(rng() % 5);
            const WqeStatus st = decode_wqe(RingView{ring.data(), n}, static_cast<uint32_t>(rng()), t, w);
            if (st == WqeStatus::Ok) {
                EXPECT_GE(w.ds, 1);
                EXPECT_LE(w.ds, mlx5::kMaxDs);
                EXPECT_LE(uint32_t{w.wqebbs} * 64, n * 64u);
                EXPECT_TRUE(known_send_opcode(w.opcode));
            }
        }
    }
}

}  // namespace
}  // namespace sigmatrace::gpumem
