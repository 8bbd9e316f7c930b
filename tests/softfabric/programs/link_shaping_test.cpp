// The link model as an application sees it: a shaped link delivers at its configured rate, and a gray failure
// (a "slow" fault) slows it by the configured factor inside its time window only.
//
// Run under `sigmatrace fabric --node 0 --rails 2 --config gray.conf` with
//   bandwidth 1GB/s
//   slow node0/0 -> node0/1 factor 4 from 1500ms to 3500ms
// (tests/softfabric/CMakeLists.txt writes it). Times count from the fabric's start, read from its counters; rates
// come from the fabric's CQE timestamps, so the test holds on busy CPUs (measure_rate()).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/stats.h"
#include "verbs_harness.h"

namespace sftest {
namespace {

// When the fabric started, on its clock (CLOCK_MONOTONIC, softfabric/core/clock.h): read once from its counters.
uint64_t fabric_start_ns() {
    static const uint64_t start = [] {
        const char* name = std::getenv("SOFTFABRIC_NAME");
        const uint64_t uptime = softfabric::read_stats(name ? name : "default").uptime_ns;
        return softfabric::now_ns() - uptime;
    }();
    return start;
}

double fabric_uptime_s() {
    return static_cast<double>(softfabric::now_ns() - fabric_start_ns()) * 1e-9;
}

struct Rate {
    double bytes_per_s = 0;
    uint64_t intervals = 0;  // completions measured
    uint64_t excluded = 0;   // completions after an idle link (the WR was posted too late to queue)
};

// Streams 64 KiB RDMA writes, 512 in flight, until the fabric's uptime reaches `until_s`, and measures the rate
// the link delivered them at from the fabric's own CQE timestamps (the modelled completion times, which a
// process or engine thread waiting for a CPU does not move). A completion counts only when its WR was queued
// behind the previous one on the link (posted at least 10 us, more than the round trip, before that one
// completed): its interval is then the link's serialization time alone. When this process starves, the window
// drains and the link idles: those intervals measure the sender, not the link, and are left out (and counted).
Rate measure_rate(Endpoint& me, const Wire& target, double until_s) {
    constexpr uint32_t kSize = 64 * 1024;
    constexpr int kWindow = 512;
    constexpr uint64_t kQueuedMarginNs = 10'000;
    std::vector<uint64_t> posted_at;  // after each post returned: not before the fabric took the WR
    int in_flight = 0;
    uint64_t completed = 0;
    uint64_t previous_ts = 0;
    uint64_t busy_ns = 0;
    Rate r;
    while (fabric_uptime_s() < until_s || in_flight > 0) {
        while (in_flight < kWindow && fabric_uptime_s() < until_s) {
            const uint64_t n = posted_at.size();
            const uint64_t off = (n % 64) * kSize;
            EXPECT_EQ(me.write(n, off, kSize, target.addr + off, target.rkey), 0);
            posted_at.push_back(softfabric::now_ns());
            ++in_flight;
        }
        ibv_wc wc{};
        uint64_t ts = 0;
        if (!me.poll(wc, &ts, 5.0)) {
            ADD_FAILURE() << "no completion within 5 s";
            return r;
        }
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.wr_id, completed) << "RC completions in order";
        --in_flight;
        if (completed > 0) {
            EXPECT_GE(ts, previous_ts) << "CQE timestamps in completion order";
            if (posted_at[completed] + kQueuedMarginNs <= previous_ts) {
                busy_ns += ts - previous_ts;
                ++r.intervals;
            } else {
                ++r.excluded;
            }
        }
        previous_ts = ts;
        ++completed;
    }
    if (busy_ns > 0) r.bytes_per_s = static_cast<double>(r.intervals) * kSize * 1e9 / static_cast<double>(busy_ns);
    return r;
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
    mine.completion_timestamps = true;
    mine.device = "sfab_0";
    mine.buffer = 8 << 20;
    mine.depth = 512;
    Endpoint me(mine);
    ASSERT_EQ(me.connect(peer.wire()), 0);
    ASSERT_EQ(peer.connect(me.wire()), 0);

    ASSERT_LT(fabric_uptime_s(), 0.5) << "the test must start within 0.5 s of the fabric";
    const Rate normal = measure_rate(me, peer.wire(), 1.0);  // ends before 1.5 s (+ 32 ms in flight)
    wait_until_uptime(1.6);
    const Rate gray = measure_rate(me, peer.wire(), 3.1);    // ends before 3.5 s (+ 128 ms in flight)
    wait_until_uptime(3.6);
    const Rate recovered = measure_rate(me, peer.wire(), 4.1);
    std::printf("shaped rate %.1f MB/s (configured 1000), during the gray failure %.1f MB/s (slow-down %.2fx, "
                "configured 4x), after it %.1f MB/s; completions measured %llu/%llu/%llu, after an idle link "
                "%llu/%llu/%llu\n",
                normal.bytes_per_s / 1e6, gray.bytes_per_s / 1e6, normal.bytes_per_s / gray.bytes_per_s,
                recovered.bytes_per_s / 1e6, static_cast<unsigned long long>(normal.intervals),
                static_cast<unsigned long long>(gray.intervals), static_cast<unsigned long long>(recovered.intervals),
                static_cast<unsigned long long>(normal.excluded), static_cast<unsigned long long>(gray.excluded),
                static_cast<unsigned long long>(recovered.excluded));
    // Enough of each phase measured to mean something (a phase is thousands of 64 KiB writes).
    EXPECT_GT(normal.intervals, 1000u);
    EXPECT_GT(gray.intervals, 1000u);
    EXPECT_GT(recovered.intervals, 1000u);
    // A shaped link delivers within 5% of its configured rate.
    EXPECT_NEAR(normal.bytes_per_s, 1e9, 0.05e9);
    EXPECT_NEAR(recovered.bytes_per_s, 1e9, 0.05e9);
    // The measured slow-down matches the configured factor.
    EXPECT_NEAR(normal.bytes_per_s / gray.bytes_per_s, 4.0, 0.2);
}

}  // namespace
}  // namespace sftest
