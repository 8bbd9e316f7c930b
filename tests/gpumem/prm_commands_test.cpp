// The PRM command parser against mailboxes built bit by bit at the PRM's documented offsets.
#include <gtest/gtest.h>

#include "mlx5_format/prm_bits.h"
#include "mlx5_format/prm_commands.h"
#include "prm_test_util.h"

namespace sigmatrace::gpumem::prm {
namespace {

TEST(PrmBits, ReadsBigEndianBitNumbering) {
    std::vector<uint8_t> buf(16, 0);
    test::set_bits(buf, 0x09, 4, 0xb);      // straddles bytes 1..2 of word 0
    test::set_bits(buf, 0x28, 24, 0xabcdef);
    test::set_bits(buf, 0x40, 64, 0x0102030405060708ull);
    const Mailbox m(buf.data(), buf.size());
    EXPECT_EQ(m.get(Field{0x09, 4}), 0xbu);
    EXPECT_EQ(m.get(Field{0x28, 24}), 0xabcdefu);
    EXPECT_EQ(m.get(Field{0x20, 8}), 0u);
    EXPECT_EQ(m.get(Field{0x40, 64}), 0x0102030405060708ull);
    EXPECT_EQ(m.get(Field{0x40, 32}), 0x01020304u);
}

TEST(PrmBits, RefusesFieldsOutsideTheBufferOrMalformed) {
    std::vector<uint8_t> buf(8, 0xff);
    const Mailbox m(buf.data(), buf.size());
    EXPECT_FALSE(m.get(Field{0x40, 8}));    // byte 8: past the end
    EXPECT_FALSE(m.get(Field{0x20, 64}));   // 64-bit field not 64-bit aligned
    EXPECT_TRUE(m.get(Field{0x00, 64}));    // exactly 8 bytes: fine...
    EXPECT_FALSE(Mailbox(buf.data(), 7).get(Field{0x00, 64}));  // ...but not in 7
    EXPECT_FALSE(m.get(Field{0x1C, 8}));    // straddles a 32-bit word
    EXPECT_FALSE(m.get(Field{0x00, 0}));
    EXPECT_FALSE(Mailbox(nullptr, 100).get(Field{0, 8}));
    EXPECT_EQ(m.get_or(Field{0x40, 8}, 77), 77u);
}

TEST(PrmBits, WriterRoundTripsThroughTheReader) {
    std::vector<uint8_t> buf(48, 0);
    ASSERT_TRUE(set_field(buf.data(), buf.size(), Field{0x111, 4}, 0xa));
    ASSERT_TRUE(set_field(buf.data(), buf.size(), Field{0x80, 64}, 0x1122334455667788ull));
    EXPECT_FALSE(set_field(buf.data(), buf.size(), Field{0x180, 8}, 1));  // past the end
    std::vector<uint8_t> expect(48, 0);
    test::set_bits(expect, 0x111, 4, 0xa);
    test::set_bits(expect, 0x80, 64, 0x1122334455667788ull);
    EXPECT_EQ(buf, expect);
}

TEST(PrmCreateQp, NvshmemStyleRcQpOnUmem) {
    test::CreateQpSpec spec;
    const auto in = test::build_create_qp(spec);
    CreateQp q;
    ParseError err;
    ASSERT_TRUE(parse_create_qp(Mailbox(in.data(), in.size()), q, err)) << err.what;
    EXPECT_EQ(q.st, st::RC);
    EXPECT_EQ(q.pd, 0x12u);
    EXPECT_EQ(q.log_sq_size, 10u);
    EXPECT_EQ(q.sq_wqebbs(), 1024u);
    EXPECT_EQ(q.rq_type, 1u);
    EXPECT_EQ(q.rq_bytes(), 0u);  // SRQ: no RQ in the WQ buffer
    EXPECT_EQ(q.sq_umem_offset(), 0x10000u);
    EXPECT_EQ(q.uar_page, 0x33u);
    EXPECT_EQ(q.cqn_snd, 0x401u);
    EXPECT_EQ(q.cqn_rcv, 0x402u);
    EXPECT_TRUE(q.dbr_umem_valid);
    EXPECT_EQ(q.dbr_umem_id, 7u);
    EXPECT_EQ(q.dbr_addr, 0x40u);
    EXPECT_EQ(q.send_dbr_umem_offset(), 0x44u);  // DBR[1]
    EXPECT_TRUE(q.wq_umem_valid);
    EXPECT_EQ(q.wq_umem_id, 8u);
    EXPECT_EQ(q.ts_format, 1u);
    EXPECT_EQ(q.user_index, 0x99u);
    EXPECT_EQ(q.send_dbr_mode, 0u);
}

TEST(PrmCreateQp, MoriStyleRegularRqComesBeforeTheSq) {
    test::CreateQpSpec spec;
    spec.rq_type = 0;
    spec.log_rq_size = 8;    // 256 receive WQEs
    spec.log_rq_stride = 2;  // of 2^(2+4) = 64 bytes
    spec.wq_umem_offset = 0;
    const auto in = test::build_create_qp(spec);
    CreateQp q;
    ParseError err;
    ASSERT_TRUE(parse_create_qp(Mailbox(in.data(), in.size()), q, err));
    EXPECT_EQ(q.rq_bytes(), 256u * 64);
    EXPECT_EQ(q.sq_umem_offset(), 16384u);
}

TEST(PrmCreateQp, DocaDbrLessDciAndTooShortMailbox) {
    test::CreateQpSpec spec;
    spec.st = 5;  // DCI
    spec.send_dbr_mode = 1;
    const auto in = test::build_create_qp(spec);
    CreateQp q;
    ParseError err;
    ASSERT_TRUE(parse_create_qp(Mailbox(in.data(), in.size()), q, err));
    EXPECT_EQ(q.st, st::DCI);
    EXPECT_EQ(q.send_dbr_mode, kSendDbrModeNoDbr);

    EXPECT_FALSE(parse_create_qp(Mailbox(in.data(), 200), q, err));
    EXPECT_STREQ(err.what, "command mailbox too short");
    EXPECT_EQ(err.need, 272u);  // through wq_umem_valid (bit 0x860)
    EXPECT_EQ(err.have, 200u);

    const auto cq = test::build_create_cq({});
    EXPECT_FALSE(parse_create_qp(Mailbox(cq.data(), cq.size()), q, err));
    EXPECT_STREQ(err.what, "unexpected command opcode");
}

TEST(PrmCreateCq, CollapsedAndNormal) {
    const auto in = test::build_create_cq({});
    CreateCq c;
    ParseError err;
    ASSERT_TRUE(parse_create_cq(Mailbox(in.data(), in.size()), c, err)) << err.what;
    EXPECT_TRUE(c.collapsed);
    EXPECT_TRUE(c.overrun_ignore);
    EXPECT_EQ(c.ncqe(), 1u);
    EXPECT_EQ(c.cqe_bytes(), 64u);
    EXPECT_EQ(c.uar_page, 0x34u);
    EXPECT_EQ(c.c_eqn, 5u);
    EXPECT_TRUE(c.dbr_umem_valid);
    EXPECT_EQ(c.dbr_umem_id, 9u);
    EXPECT_TRUE(c.cq_umem_valid);
    EXPECT_EQ(c.cq_umem_id, 10u);
    EXPECT_EQ(c.cq_umem_offset, 0x200u);

    test::CreateCqSpec normal;
    normal.collapsed = false;
    normal.cqe_sz = 1;
    normal.log_cq_size = 12;
    normal.dbr_addr = 0x80;
    const auto in2 = test::build_create_cq(normal);
    ASSERT_TRUE(parse_create_cq(Mailbox(in2.data(), in2.size()), c, err));
    EXPECT_FALSE(c.collapsed);
    EXPECT_FALSE(c.overrun_ignore);
    EXPECT_EQ(c.ncqe(), 4096u);
    EXPECT_EQ(c.cqe_bytes(), 128u);
    EXPECT_EQ(c.dbr_addr, 0x80u);

    EXPECT_FALSE(parse_create_cq(Mailbox(in2.data(), 90), c, err));
    EXPECT_EQ(err.need, 96u);  // through cq_umem_valid (bit 0x2E0)
}

TEST(PrmCreateDct, NvshmemStyleDctAndTooShortMailbox) {
    test::CreateDctSpec spec;
    spec.rre = false;
    const auto in = test::build_create_dct(spec);
    CreateDct d;
    ParseError err;
    ASSERT_TRUE(parse_create_dct(Mailbox(in.data(), in.size()), d, err)) << err.what;
    EXPECT_EQ(d.pd, 0x12u);
    EXPECT_EQ(d.cqn, 0x345u);
    EXPECT_EQ(d.srqn, 0u);
    EXPECT_EQ(d.dc_access_key, 0x5623CEAFu);
    EXPECT_FALSE(d.remote_read);
    EXPECT_TRUE(d.remote_write);
    EXPECT_TRUE(d.remote_atomic);
    EXPECT_EQ(d.mtu, 5u);
    EXPECT_EQ(d.port, 1u);

    EXPECT_FALSE(parse_create_dct(Mailbox(in.data(), 40), d, err));
    EXPECT_EQ(err.need, 60u);  // through dctc.port (bits 0x1C8..0x1CF), in whole 32-bit words
    const auto cq = test::build_create_cq({});
    EXPECT_FALSE(parse_create_dct(Mailbox(cq.data(), cq.size()), d, err));
    EXPECT_STREQ(err.what, "unexpected command opcode");
}

TEST(PrmModifyQp, Init2RtrCarriesThePeer) {
    const uint8_t gid[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
    const auto in = test::build_init2rtr(0x1234, 0x5678, 0x42, gid);
    ModifyQp m;
    ParseError err;
    ASSERT_TRUE(parse_modify_qp(Mailbox(in.data(), in.size()), m, err)) << err.what;
    EXPECT_EQ(m.opcode, cmd::INIT2RTR_QP);
    EXPECT_EQ(m.qpn, 0x1234u);
    EXPECT_EQ(m.remote_qpn, 0x5678u);
    EXPECT_EQ(m.rlid, 0x42u);
    EXPECT_EQ(m.mtu, 5u);
    EXPECT_TRUE(m.grh);
    EXPECT_EQ(m.rgid_prefix(), 0xfe80000000000000ull);
    EXPECT_EQ(m.rgid_iid(), 0x021122fffe334455ull);
    EXPECT_STREQ(command_name(m.opcode), "INIT2RTR_QP");
}

TEST(PrmModifyQp, OtherTransitionsAndShortForms) {
    ModifyQp m;
    ParseError err;
    for (uint16_t opc : {cmd::RST2INIT_QP, cmd::RTR2RTS_QP, cmd::RTS2RTS_QP, cmd::SQERR2RTS_QP, cmd::QP_2ERR,
                         cmd::QP_2RST, cmd::SQD_RTS_QP, cmd::INIT2INIT_QP}) {
        SCOPED_TRACE(command_name(opc));
        const auto in = test::build_qp_command(opc, 0xabc, 16);  // the short 2ERR/2RST layout
        ASSERT_TRUE(parse_modify_qp(Mailbox(in.data(), in.size()), m, err));
        EXPECT_EQ(m.opcode, opc);
        EXPECT_EQ(m.qpn, 0xabcu);
        EXPECT_EQ(m.remote_qpn, 0u);
    }
    const auto destroy = test::build_qp_command(cmd::DESTROY_QP, 1);
    EXPECT_FALSE(parse_modify_qp(Mailbox(destroy.data(), destroy.size()), m, err));
    EXPECT_STREQ(err.what, "not a QP state transition command");
    EXPECT_FALSE(parse_modify_qp(Mailbox(destroy.data(), 8), m, err));
}

TEST(PrmModifyQp, AccessBitsAndRetryPolicy) {
    auto in = test::build_qp_command(cmd::RST2INIT_QP, 0x10);
    test::set_bits(in, 0x550, 1, 1);  // rre
    test::set_bits(in, 0x552, 1, 1);  // rae
    ModifyQp m;
    ParseError err;
    ASSERT_TRUE(parse_modify_qp(Mailbox(in.data(), in.size()), m, err));
    EXPECT_TRUE(m.remote_read);
    EXPECT_FALSE(m.remote_write);
    EXPECT_TRUE(m.remote_atomic);
    auto rts = test::build_qp_command(cmd::RTR2RTS_QP, 0x10);
    test::set_bits(rts, 0x1C0, 5, 14);  // primary_address_path.ack_timeout
    test::set_bits(rts, 0x44D, 3, 7);   // retry_count
    test::set_bits(rts, 0x450, 3, 6);   // rnr_retry
    test::set_bits(rts, 0x563, 5, 12);  // min_rnr_nak
    ASSERT_TRUE(parse_modify_qp(Mailbox(rts.data(), rts.size()), m, err));
    EXPECT_EQ(m.ack_timeout, 14u);
    EXPECT_EQ(m.retry_count, 7u);
    EXPECT_EQ(m.rnr_retry, 6u);
    EXPECT_EQ(m.min_rnr_nak, 12u);
}

TEST(PrmOut, CreateOutputAndQueryQp) {
    uint32_t n = 0;
    ParseError err;
    auto out = test::build_create_out(0x2a2a2a);
    ASSERT_TRUE(parse_create_out(Mailbox(out.data(), out.size()), n, err));
    EXPECT_EQ(n, 0x2a2a2au);
    out = test::build_create_out(0x2a, 3);
    EXPECT_FALSE(parse_create_out(Mailbox(out.data(), out.size()), n, err));
    EXPECT_STREQ(err.what, "create command failed (status != 0)");
    EXPECT_FALSE(parse_create_out(Mailbox(out.data(), 8), n, err));

    std::vector<uint8_t> q(0x110, 0);
    test::set_bits(q, 0x660, 16, 1000);
    test::set_bits(q, 0x670, 16, 1024);
    QueryQpOut qo;
    ASSERT_TRUE(parse_query_qp_out(Mailbox(q.data(), q.size()), qo, err));
    EXPECT_EQ(qo.hw_sq_wqebb_counter, 1000u);
    EXPECT_EQ(qo.sw_sq_wqebb_counter, 1024u);
    EXPECT_FALSE(parse_query_qp_out(Mailbox(q.data(), 100), qo, err));
}

TEST(PrmNames, EveryKnownCommandHasAName) {
    for (uint16_t opc : {cmd::CREATE_CQ, cmd::DESTROY_CQ, cmd::QUERY_CQ, cmd::CREATE_QP, cmd::DESTROY_QP,
                         cmd::QUERY_QP, cmd::CREATE_DCT, cmd::DESTROY_DCT})
        EXPECT_STRNE(command_name(opc), "UNKNOWN");
    EXPECT_STREQ(command_name(0x999), "UNKNOWN");
    EXPECT_FALSE(is_qp_transition(cmd::CREATE_QP));
}

}  // namespace
}  // namespace sigmatrace::gpumem::prm
