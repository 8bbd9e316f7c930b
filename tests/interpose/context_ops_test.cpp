// The per-context data path: the inline ibv_post_send / ibv_post_recv / ibv_post_srq_recv / ibv_poll_cq /
// ibv_req_notify_cq of <infiniband/verbs.h>, called exactly as an application does, on a wrapped context.
#include <cerrno>
#include <cstring>
#include <vector>

#include "interpose/datapath/context_ops.h"
#include "support/shim_fixture.h"

namespace sigmatrace::testing {
namespace {

using interpose::Config;
using interpose::set_config;

// A chain of n send WRs: wr_id 1000+i, alternating RDMA_WRITE (2 SGEs) and SEND_WITH_IMM (1 SGE).
struct SendChain {
    explicit SendChain(int n) : wrs(static_cast<size_t>(n)), sges(static_cast<size_t>(2 * n)) {
        for (int i = 0; i < n; ++i) {
            ibv_send_wr& w = wrs[static_cast<size_t>(i)];
            w.wr_id = 1000 + static_cast<uint64_t>(i);
            w.next = i + 1 < n ? &wrs[static_cast<size_t>(i) + 1] : nullptr;
            w.sg_list = &sges[2 * static_cast<size_t>(i)];
            sges[2 * static_cast<size_t>(i)] = ibv_sge{0x10000u + static_cast<uint64_t>(i), 100u + static_cast<uint32_t>(i), 0x11};
            sges[2 * static_cast<size_t>(i) + 1] = ibv_sge{0x20000, 7, 0x11};
            if (i % 2 == 0) {
                w.opcode = IBV_WR_RDMA_WRITE;
                w.num_sge = 2;
                w.send_flags = IBV_SEND_SIGNALED;
                w.wr.rdma.remote_addr = 0xabc000 + static_cast<uint64_t>(i);
                w.wr.rdma.rkey = 0x77;
            } else {
                w.opcode = IBV_WR_SEND_WITH_IMM;
                w.num_sge = 1;
                w.send_flags = 0;  // unsignaled
                w.imm_data = htobe32(0x5150);
            }
        }
    }
    ibv_send_wr* head() { return wrs.data(); }
    std::vector<ibv_send_wr> wrs;
    std::vector<ibv_sge> sges;
};

class ContextOpsTest : public ShimTest {};

TEST_F(ContextOpsTest, WrappingReplacesEntryPointsAndKeepsOriginals) {
    FakeDevice dev;
    const auto orig_post_send = dev.ctx()->ops.post_send;
    const auto orig_create_qp_ex = dev.vctx()->create_qp_ex;
    open(dev);
    EXPECT_TRUE(interpose::context_entry_points_wrapped(dev.ctx()));
    EXPECT_NE(dev.ctx()->ops.post_send, orig_post_send);
    EXPECT_NE(dev.vctx()->create_qp_ex, orig_create_qp_ex);
    const interpose::ProviderEntryPoints* o = interpose::context_originals(dev.ctx());
    ASSERT_NE(o, nullptr);
    EXPECT_EQ(o->post_send, orig_post_send);
    EXPECT_EQ(o->create_qp_ex, orig_create_qp_ex);
    // A second open of the same context (or a lazy discovery) never wraps twice.
    const auto wrapped = dev.ctx()->ops.post_send;
    EXPECT_EQ(interpose::wrap_context_entry_points(dev.ctx()), interpose::WrapResult::already_wrapped);
    EXPECT_EQ(dev.ctx()->ops.post_send, wrapped);
}

TEST_F(ContextOpsTest, ContextsOfOneProviderShareASlotAndOthersGetTheirOwn) {
    FakeDevice a("a", 0), b("b", 0), c("c", 1);
    open(a);
    open(b);
    open(c);
    EXPECT_EQ(a.ctx()->ops.post_send, b.ctx()->ops.post_send);
    EXPECT_NE(a.ctx()->ops.post_send, c.ctx()->ops.post_send);
    EXPECT_NE(interpose::context_originals(a.ctx())->post_send, interpose::context_originals(c.ctx())->post_send);
}

TEST_F(ContextOpsTest, PostSendIsForwardedAndRecordedFieldByField) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(16);
    FakeQp* q = create_qp(dev, cq, cq);
    clear_events();
    SendChain chain(3);
    ibv_send_wr* bad = nullptr;
    errno = 0;
    ASSERT_EQ(ibv_post_send(q->qp(), chain.head(), &bad), 0);
    EXPECT_EQ(errno, kFakeSuccessErrno) << "the provider's errno must reach the caller";
    EXPECT_EQ(q->posted_send_ids, (std::vector<uint64_t>{1000, 1001, 1002}));

    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 1u);
    const cap_post_send& e = ev.post_send[0];
    EXPECT_EQ(e.qp, reinterpret_cast<uint64_t>(q->qp()));
    EXPECT_EQ(e.qp_num, q->qp()->qp_num);
    EXPECT_EQ(e.ret, 0);
    EXPECT_EQ(e.bad_index, -1);
    EXPECT_EQ(e.api, 0u);
    EXPECT_EQ(e.batch_offset, 0u);
    ASSERT_EQ(e.n, 3u);
    EXPECT_EQ(e.wr_id, (std::vector<uint64_t>{1000, 1001, 1002}));
    EXPECT_EQ(e.opcode, (std::vector<uint8_t>{IBV_WR_RDMA_WRITE, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE}));
    EXPECT_EQ(e.send_flags, (std::vector<uint32_t>{IBV_SEND_SIGNALED, 0, IBV_SEND_SIGNALED}));
    EXPECT_EQ(e.num_sge, (std::vector<uint16_t>{2, 1, 2}));
    EXPECT_EQ(e.bytes, (std::vector<uint32_t>{107, 101, 109}));
    EXPECT_EQ(e.raddr, (std::vector<uint64_t>{0xabc000, 0, 0xabc002}));
    EXPECT_EQ(e.rkey, (std::vector<uint32_t>{0x77, 0, 0x77}));
    EXPECT_EQ(e.imm, (std::vector<uint32_t>{0, htobe32(0x5150), 0}));
    EXPECT_EQ(e.remote_qpn, (std::vector<uint32_t>{0, 0, 0}));
}

TEST_F(ContextOpsTest, LongChainsAreSplitIntoBatchesWithOffsets) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(128);
    FakeQp* q = create_qp(dev, cq, cq);
    clear_events();
    SendChain chain(70);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(q->qp(), chain.head(), &bad), 0);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 3u);
    EXPECT_EQ(ev.post_send[0].batch_offset, 0u);
    EXPECT_EQ(ev.post_send[0].n, 32u);
    EXPECT_EQ(ev.post_send[1].batch_offset, 32u);
    EXPECT_EQ(ev.post_send[1].n, 32u);
    EXPECT_EQ(ev.post_send[2].batch_offset, 64u);
    EXPECT_EQ(ev.post_send[2].n, 6u);
    EXPECT_EQ(ev.post_send[1].wr_id.front(), 1032u);
    EXPECT_EQ(ev.post_send[2].wr_id.back(), 1069u);
}

TEST_F(ContextOpsTest, FailedPostKeepsReturnValueBadWrAndErrno) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(16);
    FakeQp* q = create_qp(dev, cq, cq);
    clear_events();
    SendChain chain(5);
    q->fail_post_at = 3;
    ibv_send_wr* bad = nullptr;
    errno = 0;
    EXPECT_EQ(ibv_post_send(q->qp(), chain.head(), &bad), EINVAL);
    EXPECT_EQ(errno, kFakeFailureErrno);
    EXPECT_EQ(bad, &chain.wrs[3]);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 1u);
    EXPECT_EQ(ev.post_send[0].ret, EINVAL);
    EXPECT_EQ(ev.post_send[0].bad_index, 3);
    EXPECT_EQ(ev.post_send[0].n, 5u) << "the event lists the chain as given; bad_index says where it stopped";
}

TEST_F(ContextOpsTest, UdSendsRecordTheirDestination) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(16);
    FakeQp* q = create_qp(dev, cq, cq, IBV_QPT_UD);
    clear_events();
    ibv_sge sge{0x1000, 64, 1};
    ibv_send_wr w{};
    w.wr_id = 9;
    w.sg_list = &sge;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    w.wr.ud.ah = reinterpret_cast<ibv_ah*>(0xa11);
    w.wr.ud.remote_qpn = 0x1234;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(q->qp(), &w, &bad), 0);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 1u);
    EXPECT_EQ(ev.post_send[0].remote_qpn, (std::vector<uint32_t>{0x1234}));
    EXPECT_EQ(ev.post_send[0].ah, (std::vector<uint64_t>{0xa11}));
    EXPECT_EQ(ev.post_send[0].raddr, (std::vector<uint64_t>{0}));
}

TEST_F(ContextOpsTest, NothingIsBuiltWhenNoSessionListens) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(16);
    FakeQp* q = create_qp(dev, cq, cq);
    capture_.reset();  // no callback: ST_TRACE_ENABLED is false, as with no LTTng session
    SendChain chain(4);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(q->qp(), chain.head(), &bad), 0);
    ibv_wc wc[8];
    EXPECT_EQ(ibv_poll_cq(cq->cq(), 8, wc), 2);
    EXPECT_EQ(q->posted_send_ids.size(), 4u);
    capture_ = std::make_unique<EventCapture>();
    EXPECT_EQ(capture_->total(), 0u);
}

TEST_F(ContextOpsTest, PollCqRecordsNonEmptyPollsOnly) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(64);
    FakeQp* q = create_qp(dev, cq, cq);
    ibv_wc wc[64];
    clear_events();
    for (int i = 0; i < 5; ++i) EXPECT_EQ(ibv_poll_cq(cq->cq(), 16, wc), 0);
    EXPECT_EQ(events().poll_cq.size(), 0u) << "empty polls are not events";

    for (uint32_t i = 0; i < 40; ++i) {
        FakeCompletion c;
        c.wr_id = 500 + i;
        c.opcode = i % 2 ? IBV_WC_RECV : IBV_WC_RDMA_WRITE;
        c.status = i == 39 ? IBV_WC_REM_ACCESS_ERR : IBV_WC_SUCCESS;
        c.vendor_err = i == 39 ? 0x88 : 0;
        c.byte_len = 64 + i;
        c.qp_num = q->qp()->qp_num;
        c.src_qp = i % 2 ? 0x777 : 0;
        c.wc_flags = i == 1 ? IBV_WC_WITH_IMM : 0;
        c.imm = i == 1 ? htobe32(42) : 0xdead;  // imm is only meaningful with IBV_WC_WITH_IMM
        cq->push(c);
    }
    errno = 0;
    EXPECT_EQ(ibv_poll_cq(cq->cq(), 64, wc), 40);
    EXPECT_EQ(errno, kFakeSuccessErrno);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.poll_cq.size(), 2u);
    const cap_poll_cq& a = ev.poll_cq[0];
    const cap_poll_cq& b = ev.poll_cq[1];
    EXPECT_EQ(a.cq, reinterpret_cast<uint64_t>(cq->cq()));
    EXPECT_EQ(a.ret, 40);
    EXPECT_EQ(a.api, 0u);
    EXPECT_EQ(a.n, 32u);
    EXPECT_EQ(b.n, 8u);
    EXPECT_EQ(a.wr_id[0], 500u);
    EXPECT_EQ(b.wr_id[7], 539u);
    EXPECT_EQ(a.opcode[1], IBV_WC_RECV);
    EXPECT_EQ(a.byte_len[2], 66u);
    EXPECT_EQ(a.qp_num[0], q->qp()->qp_num);
    EXPECT_EQ(a.src_qp[1], 0x777u);
    EXPECT_EQ(a.wc_flags[1], static_cast<uint32_t>(IBV_WC_WITH_IMM));
    EXPECT_EQ(a.imm[1], htobe32(42));
    EXPECT_EQ(a.imm[0], 0u);
    EXPECT_EQ(b.status[7], IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(b.vendor_err[7], 0x88u);
    EXPECT_EQ(a.hw_ts[0], 0u);
}

TEST_F(ContextOpsTest, PostRecvAndSrqRecvAreRecorded) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(16);
    FakeQp* q = create_qp(dev, cq, cq);
    clear_events();
    ibv_sge sge[3] = {{0x1000, 256, 1}, {0x2000, 256, 1}, {0x3000, 8, 1}};
    ibv_recv_wr r[2]{};
    r[0].wr_id = 71;
    r[0].sg_list = sge;
    r[0].num_sge = 2;
    r[0].next = &r[1];
    r[1].wr_id = 72;
    r[1].sg_list = &sge[2];
    r[1].num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(q->qp(), r, &bad), 0);
    ibv_srq srq{};
    srq.context = dev.ctx();
    ASSERT_EQ(ibv_post_srq_recv(&srq, r, &bad), 0);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_recv.size(), 1u);
    EXPECT_EQ(ev.post_recv[0].qp_num, q->qp()->qp_num);
    EXPECT_EQ(ev.post_recv[0].wr_id, (std::vector<uint64_t>{71, 72}));
    EXPECT_EQ(ev.post_recv[0].num_sge, (std::vector<uint16_t>{2, 1}));
    EXPECT_EQ(ev.post_recv[0].bytes, (std::vector<uint32_t>{512, 8}));
    ASSERT_EQ(ev.post_srq_recv.size(), 1u);
    EXPECT_EQ(ev.post_srq_recv[0].srq, reinterpret_cast<uint64_t>(&srq));
    EXPECT_EQ(ev.post_srq_recv[0].n, 2u);

    q->fail_post_at = 1;
    EXPECT_EQ(ibv_post_recv(q->qp(), r, &bad), ENOMEM);
    EXPECT_EQ(bad, &r[1]);
    EXPECT_EQ(events().post_recv.back().bad_index, 1);
    EXPECT_EQ(events().post_recv.back().ret, ENOMEM);

    // One WR (deferred capture takes a straight-line path for it): the same fields, and a failure at it.
    r[0].next = nullptr;
    clear_events();
    ASSERT_EQ(ibv_post_recv(q->qp(), r, &bad), 0);
    q->fail_post_at = 0;
    bad = nullptr;
    EXPECT_EQ(ibv_post_recv(q->qp(), r, &bad), ENOMEM);
    EXPECT_EQ(bad, &r[0]);
    const CapturedEvents one = events();
    ASSERT_EQ(one.post_recv.size(), 2u);
    EXPECT_EQ(one.post_recv[0].qp_num, q->qp()->qp_num);
    EXPECT_EQ(one.post_recv[0].wr_id, (std::vector<uint64_t>{71}));
    EXPECT_EQ(one.post_recv[0].num_sge, (std::vector<uint16_t>{2}));
    EXPECT_EQ(one.post_recv[0].bytes, (std::vector<uint32_t>{512}));
    EXPECT_EQ(one.post_recv[0].ret, 0);
    EXPECT_EQ(one.post_recv[0].bad_index, -1);
    EXPECT_EQ(one.post_recv[1].ret, ENOMEM);
    EXPECT_EQ(one.post_recv[1].bad_index, 0);
    EXPECT_EQ(one.post_recv[1].wr_id, (std::vector<uint64_t>{71}));
}

TEST_F(ContextOpsTest, ReqNotifyIsRecorded) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(16);
    clear_events();
    EXPECT_EQ(ibv_req_notify_cq(cq->cq(), 1), 0);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.req_notify_cq.size(), 1u);
    EXPECT_EQ(ev.req_notify_cq[0].cq, reinterpret_cast<uint64_t>(cq->cq()));
    EXPECT_EQ(ev.req_notify_cq[0].solicited_only, 1u);
}

TEST_F(ContextOpsTest, CategoriesSelectWhatIsRecorded) {
    Config c = test_config();
    c.categories = interpose::kCategoryPoll;
    set_config(c);
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(16);
    FakeQp* q = create_qp(dev, cq, cq);
    clear_events();
    SendChain chain(2);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(q->qp(), chain.head(), &bad), 0);
    ibv_wc wc[4];
    ASSERT_EQ(ibv_poll_cq(cq->cq(), 4, wc), 1);
    const CapturedEvents ev = events();
    EXPECT_EQ(ev.post_send.size(), 0u);
    EXPECT_EQ(ev.poll_cq.size(), 1u);
}

TEST_F(ContextOpsTest, RedactionZeroesAddressesAndKeys) {
    Config c = test_config();
    c.redact = interpose::kRedactAddresses | interpose::kRedactKeys;
    set_config(c);
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(16);
    FakeQp* q = create_qp(dev, cq, cq);
    clear_events();
    SendChain chain(1);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(q->qp(), chain.head(), &bad), 0);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 1u);
    EXPECT_EQ(ev.post_send[0].raddr, (std::vector<uint64_t>{0}));
    EXPECT_EQ(ev.post_send[0].rkey, (std::vector<uint32_t>{0}));
    EXPECT_EQ(ev.post_send[0].bytes, (std::vector<uint32_t>{107})) << "sizes are not redacted";
}

TEST_F(ContextOpsTest, OffModeWrapsNothing) {
    Config c = test_config();
    c.mode = interpose::Mode::off;
    set_config(c);
    FakeDevice dev;
    const auto orig = dev.ctx()->ops.post_send;
    open(dev);
    EXPECT_EQ(dev.ctx()->ops.post_send, orig);
    EXPECT_EQ(capture_->total(), 0u);
}

}  // namespace
}  // namespace sigmatrace::testing
