// The link model as an application sees it: a shaped link delivers at its configured rate, and a gray failure
// (a "slow" fault) slows it by the configured factor inside its time window only.
//
// Run under `sigmatrace fabric --node 0 --rails 2 --config gray.conf` with
//   bandwidth 1GB/s
//   slow node0/0 -> node0/1 factor 4 from 1500ms to 3500ms
// (tests/softfabric/CMakeLists.txt writes it). Times count from the fabric's start, read from its counters.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/stats.h"
#include "verbs_harness.h"

namespace sftest {
namespace {

double fabric_uptime_s() {
    const char* name = std::getenv("SOFTFABRIC_NAME");
    return static_cast<double>(softfabric::read_stats(name ? name : "default").uptime_ns) * 1e-9;
}

// Streams 64 KiB RDMA writes for `duration_s` with 512 in flight; returns the rate in bytes/s measured between
// the first and the last completion.
double measure_rate(Endpoint& me, const Wire& target, double duration_s) {
    constexpr uint32_t kSize = 64 * 1024;
    constexpr int kWindow = 512;  // 32 ms of data at 1 GB/s: the link stays busy while this process waits for a
                                  // CPU (the test shares 2 cores with everything else)
    int in_flight = 0;
    uint64_t posted = 0, completed = 0;
    double first = 0, last = 0;
    double end = now_s() + duration_s;
    while (now_s() < end || in_flight > 0) {
        while (in_flight < kWindow && now_s() < end) {
            uint64_t off = (posted % 64) * kSize;
            EXPECT_EQ(me.write(posted, off, kSize, target.addr + off, target.rkey), 0);
            ++posted;
            ++in_flight;
        }
        ibv_wc wc{};
        if (!me.poll(wc, 5.0)) {
            ADD_FAILURE() << "no completion within 5 s";
            return 0;
        }
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        --in_flight;
        double t = now_s();
        if (completed == 0) first = t;
        last = t;
        ++completed;
    }
    return static_cast<double>(completed - 1) * kSize / (last - first);
}

void wait_until_uptime(double s) {
    while (fabric_uptime_s() < s) usleep(10'000);
}

TEST(LinkShaping, ConfiguredRateThenGrayFailureThenRecovery) {
    Peer peer([] {
        EndpointOptions o;
        o.device = "sfab_1";
        o.buffer = 8 << 20;
        return o;
    }());
    EndpointOptions mine;
    mine.device = "sfab_0";
    mine.buffer = 8 << 20;
    mine.depth = 512;
    Endpoint me(mine);
    ASSERT_EQ(me.connect(peer.wire()), 0);
    ASSERT_EQ(peer.connect(me.wire()), 0);

    ASSERT_LT(fabric_uptime_s(), 0.4) << "the test must start within 0.4 s of the fabric";
    double normal = measure_rate(me, peer.wire(), 1.0);  // ends before 1.5 s (1.0 s + 32 ms in flight)
    wait_until_uptime(1.6);
    double gray = measure_rate(me, peer.wire(), 1.5);    // ends before 3.5 s (+ 128 ms in flight)
    wait_until_uptime(3.6);
    double recovered = measure_rate(me, peer.wire(), 0.5);
    std::printf("shaped rate %.1f MB/s (configured 1000), during the gray failure %.1f MB/s (slow-down %.2fx, "
                "configured 4x), after it %.1f MB/s\n",
                normal / 1e6, gray / 1e6, normal / gray, recovered / 1e6);
    // A shaped link delivers within 5% of its configured rate.
    EXPECT_NEAR(normal, 1e9, 0.05e9);
    EXPECT_NEAR(recovered, 1e9, 0.05e9);
    // The measured slow-down matches the configured factor.
    EXPECT_NEAR(normal / gray, 4.0, 0.2);
}

}  // namespace
}  // namespace sftest
