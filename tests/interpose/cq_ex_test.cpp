// Extended CQs: ibv_create_cq_ex through the wrapped verbs_context, and poll passes with the inline
// ibv_start_poll / ibv_next_poll / ibv_end_poll and ibv_wc_read_*.
#include <cerrno>
#include <vector>

#include "support/shim_fixture.h"

namespace sigmatrace::testing {
namespace {

class CqExTest : public ShimTest {
protected:
    ibv_cq_ex* create_cq_ex(FakeDevice& dev, uint64_t wc_flags) {
        ibv_cq_init_attr_ex attr{};
        attr.cqe = 128;
        attr.wc_flags = wc_flags;
        ibv_cq_ex* cq = ibv_create_cq_ex(dev.ctx(), &attr);
        EXPECT_NE(cq, nullptr);
        return cq;
    }
};

TEST_F(CqExTest, CreationIsRecorded) {
    FakeDevice dev;
    open(dev);
    clear_events();
    ibv_cq_ex* cq = create_cq_ex(dev, IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.cq_create.size(), 1u);
    EXPECT_EQ(ev.cq_create[0].cq, reinterpret_cast<uint64_t>(cq));
    EXPECT_EQ(ev.cq_create[0].kind, 1u);
    EXPECT_EQ(ev.cq_create[0].cqe, 128u);
}

TEST_F(CqExTest, APollPassIsRecordedWithTheRequestedFieldsOnly) {
    FakeDevice dev;
    open(dev);
    ibv_cq_ex* cq = create_cq_ex(dev, IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_IMM);
    FakeCq* fc = fake_cq(ibv_cq_ex_to_cq(cq));
    for (uint32_t i = 0; i < 40; ++i) {
        FakeCompletion c;
        c.wr_id = 100 + i;
        c.opcode = IBV_WC_RECV;
        c.byte_len = 10 + i;
        c.qp_num = 0x321;
        c.src_qp = 0x999;  // not requested: must not be read
        c.wc_flags = i == 0 ? IBV_WC_WITH_IMM : 0;
        c.imm = htobe32(5);
        if (i == 39) {
            c.status = IBV_WC_WR_FLUSH_ERR;
            c.vendor_err = 0x44;
        }
        fc->push(c);
    }
    clear_events();
    ibv_poll_cq_attr pattr{};
    int n = 0;
    uint64_t sum_ids = 0;
    errno = 0;
    if (ibv_start_poll(cq, &pattr) == 0) {
        do {
            sum_ids += cq->wr_id;
            ++n;
        } while (ibv_next_poll(cq) == 0);
        ibv_end_poll(cq);
    }
    EXPECT_EQ(n, 40);
    EXPECT_EQ(sum_ids, 40u * 100u + 39u * 40u / 2u);
    EXPECT_EQ(fc->optional_reads.load(), 0) << "an accessor the CQ was not created with was called";
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.poll_cq.size(), 2u);
    const cap_poll_cq& a = ev.poll_cq[0];
    const cap_poll_cq& b = ev.poll_cq[1];
    EXPECT_EQ(a.api, 1u);
    EXPECT_EQ(a.n, 32u);
    EXPECT_EQ(b.n, 8u);
    EXPECT_EQ(a.wr_id[0], 100u);
    EXPECT_EQ(b.wr_id[7], 139u);
    EXPECT_EQ(a.opcode[0], IBV_WC_RECV);
    EXPECT_EQ(a.byte_len[3], 13u);
    EXPECT_EQ(a.qp_num[0], 0x321u);
    EXPECT_EQ(a.src_qp[0], 0u);
    EXPECT_EQ(a.imm[0], htobe32(5));
    EXPECT_EQ(a.imm[1], 0u) << "imm is read only for completions flagged IBV_WC_WITH_IMM";
    EXPECT_EQ(b.status[7], IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(b.vendor_err[7], 0x44u);
    EXPECT_EQ(b.byte_len[7], 0u) << "verbs defines no byte_len for error completions";
    EXPECT_EQ(b.qp_num[7], 0x321u) << "qp_num is defined for errors too";
}

TEST_F(CqExTest, EmptyPollsAreNotEvents) {
    FakeDevice dev;
    open(dev);
    ibv_cq_ex* cq = create_cq_ex(dev, 0);
    clear_events();
    ibv_poll_cq_attr pattr{};
    for (int i = 0; i < 10; ++i) EXPECT_EQ(ibv_start_poll(cq, &pattr), ENOENT);
    EXPECT_EQ(capture_->total(), 0u);
}

TEST_F(CqExTest, ClassicPollOnAnExtendedCqIsRecordedToo) {
    FakeDevice dev;
    open(dev);
    ibv_cq_ex* cq = create_cq_ex(dev, IBV_WC_EX_WITH_BYTE_LEN);
    FakeCompletion c;
    c.wr_id = 3;
    fake_cq(ibv_cq_ex_to_cq(cq))->push(c);
    clear_events();
    ibv_wc wc;
    ASSERT_EQ(ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc), 1);
    ASSERT_EQ(events().poll_cq.size(), 1u);
    EXPECT_EQ(events().poll_cq[0].api, 0u);
    EXPECT_EQ(events().poll_cq[0].cq, reinterpret_cast<uint64_t>(cq));
}

TEST_F(CqExTest, DestroyReleasesTheStateAndIsRecorded) {
    FakeDevice dev;
    open(dev);
    ibv_cq_ex* cq = create_cq_ex(dev, 0);
    clear_events();
    EXPECT_EQ(interpose::destroy_cq(ibv_cq_ex_to_cq(cq), &fake_destroy_cq), 0);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.cq_destroy.size(), 1u);
    EXPECT_EQ(ev.cq_destroy[0].cq, reinterpret_cast<uint64_t>(cq));
    EXPECT_EQ(ev.cq_destroy[0].err, 0);
}

}  // namespace
}  // namespace sigmatrace::testing
