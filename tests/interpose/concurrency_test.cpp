// Many threads posting on their own QPs while others poll a shared CQ, with QPs created and destroyed
// concurrently (the per-QP state index grows under readers). Run in the TSan build (label tsan): the data
// path takes no shared lock, so any unsynchronised sharing shows up as a race.
#include <atomic>
#include <thread>
#include <vector>

#include "interpose/capture/counters_emitter.h"
#include "support/shim_fixture.h"

namespace sigmatrace::testing {
namespace {

class ConcurrencyTest : public ShimTest, public ::testing::WithParamInterface<interpose::Mode> {};

constexpr int kPosters = 4;
constexpr int kPollers = 2;
constexpr int kPostsPerThread = 2000;
constexpr int kChain = 4;

TEST_P(ConcurrencyTest, PostersAndPollersOnASharedCq) {
    interpose::Config c = test_config();
    c.mode = GetParam();
    c.counters_interval_ms = 5;  // the emitter thread runs concurrently too
    interpose::set_config(c);
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(1 << 16);
    std::vector<FakeQp*> qps;
    for (int t = 0; t < kPosters; ++t) qps.push_back(create_qp(dev, cq, cq));

    std::atomic<int> posters_left{kPosters};
    std::atomic<long> polled{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kPosters; ++t)
        threads.emplace_back([&, t] {
            std::vector<ibv_send_wr> wrs(kChain);
            ibv_sge sge{0x1000, 64, 1};
            for (int i = 0; i < kPostsPerThread; ++i) {
                for (int k = 0; k < kChain; ++k) {
                    wrs[k] = ibv_send_wr{};
                    wrs[k].wr_id = (static_cast<uint64_t>(t) << 32) | static_cast<uint64_t>(i * kChain + k);
                    wrs[k].opcode = IBV_WR_RDMA_WRITE;
                    wrs[k].sg_list = &sge;
                    wrs[k].num_sge = 1;
                    wrs[k].send_flags = k == kChain - 1 ? IBV_SEND_SIGNALED : 0;
                    wrs[k].next = k + 1 < kChain ? &wrs[k + 1] : nullptr;
                }
                ibv_send_wr* bad = nullptr;
                ASSERT_EQ(ibv_post_send(qps[static_cast<size_t>(t)]->qp(), wrs.data(), &bad), 0);
            }
            posters_left.fetch_sub(1);
        });
    for (int p = 0; p < kPollers; ++p)
        threads.emplace_back([&] {
            ibv_wc wc[16];
            for (;;) {
                const int n = ibv_poll_cq(cq->cq(), 16, wc);
                ASSERT_GE(n, 0);
                polled.fetch_add(n);
                if (n == 0 && posters_left.load() == 0) {
                    std::lock_guard<std::mutex> lock(cq->mutex);
                    if (cq->queue.empty()) break;
                }
            }
        });
    // Meanwhile, QPs come and go on the same context (set-up path, registry growth).
    threads.emplace_back([&] {
        for (int i = 0; i < 300; ++i) {
            FakeQp* q = create_qp(dev, cq, cq);
            interpose::destroy_qp(q->qp(), &fake_destroy_qp);
        }
    });
    for (auto& th : threads) th.join();

    EXPECT_EQ(polled.load(), static_cast<long>(kPosters) * kPostsPerThread);
    interpose::counters_shutdown();
    const CapturedEvents ev = events();
    if (GetParam() == interpose::Mode::ops) {
        size_t wrs = 0;
        for (const auto& e : ev.post_send) wrs += e.n;
        size_t completions = 0;
        for (const auto& e : ev.poll_cq) completions += e.n;
        EXPECT_EQ(wrs, static_cast<size_t>(kPosters) * kPostsPerThread * kChain)
            << "dropped records: " << interpose::deferred::ring_stats().dropped_records;
        EXPECT_EQ(completions, static_cast<size_t>(kPosters) * kPostsPerThread);
    } else {
        uint64_t wrs = 0, completions = 0;
        for (const auto& e : ev.qp_counters) {
            wrs += e.posted_wrs;
            completions += e.completions;
        }
        EXPECT_EQ(wrs, static_cast<uint64_t>(kPosters) * kPostsPerThread * kChain);
        EXPECT_EQ(completions, static_cast<uint64_t>(kPosters) * kPostsPerThread);
        EXPECT_TRUE(ev.post_send.empty());
    }
}

// Several threads building ibv_wr_* lists on one QP: the provider serialises them with its send-queue lock,
// taken in wr_start and released in wr_complete (the fake provider does too). The shim's list state for that
// QP must only be touched inside that window: a thread resetting it before the provider's wr_start returns
// would clear the list another thread is building (a race TSan reports, and WRs missing from the events).
TEST_P(ConcurrencyTest, WrListsOfManyThreadsOnOneQp) {
    interpose::Config c = test_config();
    c.mode = GetParam();
    c.counters_interval_ms = 5;
    interpose::set_config(c);
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(1 << 16);
    ibv_qp_ex* qpx = create_ex_qp(dev, cq, IBV_QP_EX_WITH_RDMA_WRITE, 1 << 16);
    ASSERT_NE(qpx, nullptr);
    constexpr int kThreads = 4, kLists = 500, kWrsPerList = 3;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            for (int l = 0; l < kLists; ++l) {
                ibv_wr_start(qpx);
                for (int k = 0; k < kWrsPerList; ++k) {
                    qpx->wr_id = (static_cast<uint64_t>(t) << 32) | static_cast<uint64_t>(l * kWrsPerList + k);
                    qpx->wr_flags = k == kWrsPerList - 1 ? IBV_SEND_SIGNALED : 0;
                    ibv_wr_rdma_write(qpx, 0x22, 0xabc000);
                    ibv_wr_set_sge(qpx, 1, 0x1000, 64);
                }
                ASSERT_EQ(ibv_wr_complete(qpx), 0);
            }
        });
    for (auto& th : threads) th.join();
    interpose::counters_shutdown();
    const CapturedEvents ev = events();
    const uint64_t expected = static_cast<uint64_t>(kThreads) * kLists * kWrsPerList;
    if (GetParam() == interpose::Mode::ops) {
        uint64_t wrs = 0, bytes = 0;
        for (const auto& e : ev.post_send) {
            wrs += e.n;
            for (uint32_t i = 0; i < e.n; ++i) bytes += e.bytes[i];
        }
        EXPECT_EQ(wrs, expected);
        EXPECT_EQ(bytes, expected * 64);
    } else {
        uint64_t wrs = 0, bytes = 0;
        for (const auto& e : ev.qp_counters) {
            wrs += e.posted_wrs;
            bytes += e.posted_bytes;
        }
        EXPECT_EQ(wrs, expected);
        EXPECT_EQ(bytes, expected * 64);
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, ConcurrencyTest, ::testing::Values(interpose::Mode::ops, interpose::Mode::counters),
                         [](const auto& p) { return p.param == interpose::Mode::ops ? "ops" : "counters"; });

}  // namespace
}  // namespace sigmatrace::testing
