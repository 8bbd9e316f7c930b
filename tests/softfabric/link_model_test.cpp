// The link model and the fabric region: serialization at the configured bandwidth, latency, the fault
// schedule (slow, loss, down, time windows), counters, and how launches share or refuse a fabric.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "core/clock.h"
#include "core/fabric_region.h"
#include "core/link_model.h"
#include "core/stats.h"

namespace softfabric {
namespace {

// A fabric of its own for each test, removed afterwards.
class LinkModelTest : public ::testing::Test {
protected:
    static inline int counter = 0;
    std::string name = "unit-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
    void TearDown() override { shm_unlink(Fabric::shm_name(name).c_str()); }
    std::unique_ptr<Fabric> open_with(const std::string& text) {
        FabricConfig c = parse_config(text, "test.conf");
        return Fabric::open(name, OpenMode::Launch, &c);
    }
};

constexpr NicId kA{0, 0};
constexpr NicId kB{1, 0};

TEST_F(LinkModelTest, SerializesAtTheConfiguredBandwidthAndAddsLatency) {
    auto f = open_with("bandwidth 1GB/s\nlatency 10us\n");
    LinkModel links(f->region());
    uint64_t t0 = now_ns() + 1'000'000;
    Transmission a = links.transmit(kA, kB, 1'000'000, t0);  // 1 MB at 1 GB/s: 1 ms
    EXPECT_EQ(a.start_ns, t0);
    EXPECT_EQ(a.end_ns, t0 + 1'000'000);
    EXPECT_EQ(a.arrive_ns, t0 + 1'010'000);
    EXPECT_FALSE(a.lost);
    // The next message queues behind the first one on the same link ...
    Transmission b = links.transmit(kA, kB, 500'000, t0);
    EXPECT_EQ(b.start_ns, a.end_ns);
    EXPECT_EQ(b.end_ns, a.end_ns + 500'000);
    // ... but not on the reverse link.
    Transmission c = links.transmit(kB, kA, 1000, t0);
    EXPECT_EQ(c.start_ns, t0);
}

TEST_F(LinkModelTest, LinkOverridesApplyToTheirLinksOnly) {
    auto f = open_with("bandwidth unlimited\nlatency 1us\nlink node0/0 -> node1/0 bandwidth 8Gbit/s latency 7us\n");
    LinkModel links(f->region());
    uint64_t t0 = now_ns();
    Transmission slow = links.transmit(kA, kB, 1000, t0);
    EXPECT_EQ(slow.end_ns - slow.start_ns, 1000u);  // 1 GB/s
    EXPECT_EQ(slow.latency_ns, 7000u);
    Transmission back = links.transmit(kB, kA, 1'000'000, t0);
    EXPECT_EQ(back.end_ns, back.start_ns);  // unlimited
    EXPECT_EQ(back.latency_ns, 1000u);
}

TEST_F(LinkModelTest, GrayFailureSlowsBandwidthAndLatencyInsideItsWindow) {
    auto f = open_with("bandwidth 1GB/s\nlatency 2us\nslow node0/0 -> node1/0 factor 4 from 10s to 20s\n");
    FabricRegion& r = f->region();
    LinkModel links(r);
    uint64_t now = now_ns();
    r.start_ns = now - 5'000'000'000ull;  // 5 s into the run: before the window
    Transmission before = links.transmit(kA, kB, 1000, now);
    EXPECT_EQ(before.end_ns - before.start_ns, 1000u);
    r.start_ns = now - 15'000'000'000ull;  // inside
    Transmission during = links.transmit(kA, kB, 1000, now + 1'000'000);
    EXPECT_EQ(during.end_ns - during.start_ns, 4000u);
    EXPECT_EQ(during.latency_ns, 8000u);
    r.start_ns = now - 25'000'000'000ull;  // after
    Transmission after = links.transmit(kA, kB, 1000, now + 2'000'000);
    EXPECT_EQ(after.end_ns - after.start_ns, 1000u);
}

TEST_F(LinkModelTest, LossAndDownDropAttemptsAndCountThem) {
    auto f = open_with("loss node0/0 -> node1/0 probability 0.25\ndown node1/0 -> node0/0\n");
    LinkModel links(f->region());
    int lost = 0;
    for (int i = 0; i < 4000; ++i) lost += links.transmit(kA, kB, 100, now_ns()).lost;
    EXPECT_GT(lost, 800);   // 1000 expected
    EXPECT_LT(lost, 1200);
    EXPECT_TRUE(links.transmit(kB, kA, 100, now_ns()).lost);
    EXPECT_EQ(f->region().link(kA, kB).lost.load(), static_cast<uint64_t>(lost));
    EXPECT_EQ(f->region().link(kB, kA).lost.load(), 1u);
    links.count_delivered(kA, kB, 4096);
    FabricStats s = read_stats(name);
    ASSERT_EQ(s.links.size(), 2u);
    EXPECT_EQ(s.links[0].bytes, 4096u);
    EXPECT_EQ(s.links[0].ops, 1u);
}

TEST_F(LinkModelTest, ABusyFabricRefusesAnotherConfigurationButAcceptsTheSame) {
    auto f = open_with("latency 3us\n");
    f->join(0);  // this process is a live member now
    EXPECT_THROW(open_with("latency 4us\n"), FabricError);
    EXPECT_NO_THROW(open_with("latency 3us\n"));
    EXPECT_NO_THROW(Fabric::open(name, OpenMode::Launch, nullptr));  // no configuration: join as is
    EXPECT_EQ(f->region().config.default_latency_ns, 3000u);
}

TEST_F(LinkModelTest, AnIdleFabricIsReconfiguredAndRestarted) {
    auto f = open_with("latency 3us\n");
    f->region().link(kA, kB).bytes.store(99);
    uint64_t first_start = f->region().start_ns;
    auto g = open_with("latency 5us\n");  // no live member: starts over
    EXPECT_EQ(g->region().config.default_latency_ns, 5000u);
    EXPECT_EQ(g->region().link(kA, kB).bytes.load(), 0u);
    EXPECT_GE(g->region().start_ns, first_start);
}

TEST_F(LinkModelTest, StatsOfAMissingFabricSayHowToStartOne) {
    try {
        read_stats(name + "-absent");
        FAIL();
    } catch (const FabricError& e) {
        EXPECT_NE(std::string(e.what()).find("sigmatrace fabric --name"), std::string::npos);
    }
}

}  // namespace
}  // namespace softfabric
