// Many threads posting on their own QPs while others poll a shared CQ, with QPs created and destroyed
// concurrently (the per-QP state index grows under readers). Run in the TSan build (label tsan): the data
// path takes no shared lock, so any unsynchronised sharing shows up as a race.
#include <atomic>
#include <thread>
#include <vector>

#include "interpose/counters_emitter.h"
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
        EXPECT_EQ(wrs, static_cast<size_t>(kPosters) * kPostsPerThread * kChain);
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

INSTANTIATE_TEST_SUITE_P(Modes, ConcurrencyTest, ::testing::Values(interpose::Mode::ops, interpose::Mode::counters),
                         [](const auto& p) { return p.param == interpose::Mode::ops ? "ops" : "counters"; });

}  // namespace
}  // namespace sigmatrace::testing
