// Counters mode: no per-operation events; per-QP totals emitted as qp_counters deltas.
#include <chrono>
#include <thread>
#include <vector>

#include "interpose/capture/counters_emitter.h"
#include "interpose/state/object_state.h"
#include "support/shim_fixture.h"

namespace sigmatrace::testing {
namespace {

class CountersTest : public ShimTest {
protected:
    void SetUp() override {
        ShimTest::SetUp();
        interpose::Config c = test_config();
        c.mode = interpose::Mode::counters;
        c.counters_interval_ms = 3600000;  // the periodic emission is tested separately
        interpose::set_config(c);
    }
    void TearDown() override {
        interpose::counters_shutdown();
        ShimTest::TearDown();
    }
    static ibv_send_wr* chain(std::vector<ibv_send_wr>& wrs, std::vector<ibv_sge>& sges, int n, uint32_t len) {
        wrs.assign(static_cast<size_t>(n), ibv_send_wr{});
        sges.assign(static_cast<size_t>(n), ibv_sge{0x1000, len, 1});
        for (int i = 0; i < n; ++i) {
            auto& w = wrs[static_cast<size_t>(i)];
            w.wr_id = static_cast<uint64_t>(i);
            w.opcode = IBV_WR_RDMA_WRITE;
            w.sg_list = &sges[static_cast<size_t>(i)];
            w.num_sge = 1;
            w.send_flags = IBV_SEND_SIGNALED;
            w.next = i + 1 < n ? &wrs[static_cast<size_t>(i) + 1] : nullptr;
        }
        return wrs.data();
    }
};

TEST_F(CountersTest, PostsAndCompletionsAreCountedPerQpAndEmittedAsDeltas) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(256);
    FakeQp* a = create_qp(dev, cq, cq);
    FakeQp* b = create_qp(dev, cq, cq);
    clear_events();

    std::vector<ibv_send_wr> wrs;
    std::vector<ibv_sge> sges;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(a->qp(), chain(wrs, sges, 10, 100), &bad), 0);
    ASSERT_EQ(ibv_post_send(b->qp(), chain(wrs, sges, 3, 1000), &bad), 0);
    a->fail_post_at = 2;  // 2 WRs go out, then the call fails
    ASSERT_EQ(ibv_post_send(a->qp(), chain(wrs, sges, 5, 7), &bad), EINVAL);
    ibv_recv_wr r[4]{};
    for (int i = 0; i < 3; ++i) r[i].next = &r[i + 1];
    ibv_recv_wr* rbad = nullptr;
    ASSERT_EQ(ibv_post_recv(b->qp(), r, &rbad), 0);
    FakeCompletion err;
    err.qp_num = b->qp()->qp_num;
    err.status = IBV_WC_REM_ACCESS_ERR;
    cq->push(err);
    ibv_wc wc[64];
    ASSERT_EQ(ibv_poll_cq(cq->cq(), 64, wc), 10 + 3 + 2 + 1);
    EXPECT_EQ(capture_->total(), 0u) << "counters mode emits no per-operation event";

    interpose::destroy_qp(a->qp(), &fake_destroy_qp);
    interpose::counters_shutdown();  // flushes the live QP b
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.qp_counters.size(), 2u);
    const cap_qp_counters& ca = ev.qp_counters[0];
    EXPECT_EQ(ca.qp_num, a->qp()->qp_num);
    EXPECT_EQ(ca.posted_wrs, 12u);
    EXPECT_EQ(ca.posted_bytes, 10u * 100 + 2 * 7);
    EXPECT_EQ(ca.post_errors, 1u);
    EXPECT_EQ(ca.completions, 12u);
    EXPECT_EQ(ca.error_completions, 0u);
    const cap_qp_counters& cb = ev.qp_counters[1];
    EXPECT_EQ(cb.qp_num, b->qp()->qp_num);
    EXPECT_EQ(cb.posted_wrs, 3u);
    EXPECT_EQ(cb.posted_bytes, 3000u);
    EXPECT_EQ(cb.recv_wrs, 4u);
    EXPECT_EQ(cb.completions, 4u);
    EXPECT_EQ(cb.error_completions, 1u);
    EXPECT_GT(cb.interval_ns, 0u);

    // A second flush with nothing new emits nothing; new work emits only the new work.
    clear_events();
    interpose::counters_shutdown();
    EXPECT_EQ(events().qp_counters.size(), 0u);
    ASSERT_EQ(ibv_post_send(b->qp(), chain(wrs, sges, 1, 5), &bad), 0);
    interpose::counters_shutdown();
    ASSERT_EQ(events().qp_counters.size(), 1u);
    EXPECT_EQ(events().qp_counters[0].posted_wrs, 1u);
    EXPECT_EQ(events().qp_counters[0].posted_bytes, 5u);
}

TEST_F(CountersTest, TheWrApiAndExtendedPollsAreCounted) {
    FakeDevice dev;
    open(dev);
    ibv_cq_init_attr_ex cattr{};
    cattr.cqe = 64;
    cattr.wc_flags = IBV_WC_EX_WITH_QP_NUM;
    ibv_cq_ex* cq = ibv_create_cq_ex(dev.ctx(), &cattr);
    ibv_qp_init_attr_ex attr{};
    attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    attr.pd = dev.pd();
    attr.send_cq = ibv_cq_ex_to_cq(cq);
    attr.recv_cq = ibv_cq_ex_to_cq(cq);
    attr.send_ops_flags = IBV_QP_EX_WITH_SEND;
    ibv_qp* qp = ibv_create_qp_ex(dev.ctx(), &attr);
    ibv_qp_ex* qpx = &fake_qp(qp)->qpx;
    clear_events();
    ibv_wr_start(qpx);
    for (int i = 0; i < 3; ++i) {
        qpx->wr_id = static_cast<uint64_t>(i);
        qpx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_send(qpx);
        ibv_wr_set_sge(qpx, 1, 0x1000, 50);
    }
    ASSERT_EQ(ibv_wr_complete(qpx), 0);
    ibv_poll_cq_attr pattr{};
    int n = 0;
    if (ibv_start_poll(cq, &pattr) == 0) {
        do ++n;
        while (ibv_next_poll(cq) == 0);
        ibv_end_poll(cq);
    }
    ASSERT_EQ(n, 3);
    interpose::counters_shutdown();
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.qp_counters.size(), 1u);
    EXPECT_EQ(ev.qp_counters[0].posted_wrs, 3u);
    EXPECT_EQ(ev.qp_counters[0].posted_bytes, 150u);
    EXPECT_EQ(ev.qp_counters[0].completions, 3u);
    EXPECT_EQ(ev.post_send.size() + ev.poll_cq.size(), 0u);
}

TEST_F(CountersTest, TheEmitterThreadEmitsPeriodically) {
    interpose::Config c = interpose::config();
    c.counters_interval_ms = 10;
    interpose::set_config(c);
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(64);
    FakeQp* q = create_qp(dev, cq, cq);
    std::vector<ibv_send_wr> wrs;
    std::vector<ibv_sge> sges;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(q->qp(), chain(wrs, sges, 4, 10), &bad), 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (events().qp_counters.empty() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const CapturedEvents ev = events();
    ASSERT_FALSE(ev.qp_counters.empty()) << "no qp_counters within 5 s with a 10 ms interval";
    EXPECT_EQ(ev.qp_counters[0].posted_wrs, 4u);
}

}  // namespace
}  // namespace sigmatrace::testing
