// The configuration file format (docs/softfabric.md, "Configuration file"): values, selectors, errors.
#include <gtest/gtest.h>

#include "core/config.h"

namespace softfabric {
namespace {

TEST(Config, ParsesUnitsOfBandwidthAndTime) {
    EXPECT_EQ(parse_bandwidth("100Gbit/s"), 12'500'000'000ull);
    EXPECT_EQ(parse_bandwidth("25Gbps"), 3'125'000'000ull);
    EXPECT_EQ(parse_bandwidth("12.5GB/s"), 12'500'000'000ull);
    EXPECT_EQ(parse_bandwidth("800MiB/s"), 838'860'800ull);
    EXPECT_EQ(parse_bandwidth("unlimited"), 0ull);
    EXPECT_EQ(parse_duration_ns("1us"), 1'000ull);
    EXPECT_EQ(parse_duration_ns("2.5ms"), 2'500'000ull);
    EXPECT_EQ(parse_duration_ns("3s"), 3'000'000'000ull);
    EXPECT_EQ(parse_duration_ns("250ns"), 250ull);
    EXPECT_THROW(parse_bandwidth("fast"), ConfigError);
    EXPECT_THROW(parse_bandwidth("10 furlongs"), ConfigError);
    EXPECT_THROW(parse_duration_ns("5 fortnights"), ConfigError);
}

TEST(Config, ParsesEveryStatement) {
    const char* text = R"(# a test configuration
bandwidth 50Gbit/s
latency 2us
mtu 2048
seed 7
link node0/0 -> node1/* bandwidth 10Gbit/s latency 5us
link 2 <-> 3 latency 1ms
slow node0/0 -> node1/0 factor 4 from 1s to 3s
loss * -> node2 probability 0.25
down node1/sfab_1 <-> node2/1 from 500ms
)";
    FabricConfig c = parse_config(text, "test.conf");
    EXPECT_EQ(c.defaults.bandwidth_bytes_per_s, 6'250'000'000ull);
    EXPECT_EQ(c.defaults.latency_ns, 2'000ull);
    EXPECT_EQ(c.mtu, 2048u);
    EXPECT_EQ(c.loss_seed, 7u);
    ASSERT_EQ(c.overrides.size(), 2u);
    EXPECT_TRUE(c.overrides[0].has_bandwidth);
    EXPECT_TRUE(c.overrides[0].has_latency);
    EXPECT_EQ(c.overrides[0].params.latency_ns, 5'000ull);
    EXPECT_TRUE(c.overrides[0].link.matches({0, 0}, {1, 5}));
    EXPECT_FALSE(c.overrides[0].link.matches({1, 5}, {0, 0}));  // directed
    EXPECT_TRUE(c.overrides[1].link.matches({3, 1}, {2, 0}));   // both directions
    EXPECT_FALSE(c.overrides[1].has_bandwidth);
    ASSERT_EQ(c.faults.size(), 3u);
    EXPECT_EQ(c.faults[0].kind, FaultKind::Slow);
    EXPECT_DOUBLE_EQ(c.faults[0].value, 4.0);
    EXPECT_EQ(c.faults[0].from_ns, 1'000'000'000ull);
    EXPECT_EQ(c.faults[0].to_ns, 3'000'000'000ull);
    EXPECT_EQ(c.faults[1].kind, FaultKind::Loss);
    EXPECT_TRUE(c.faults[1].link.matches({7, 3}, {2, 1}));
    EXPECT_EQ(c.faults[1].to_ns, Fault::kNeverEnds);
    EXPECT_EQ(c.faults[2].kind, FaultKind::Down);
    EXPECT_TRUE(c.faults[2].link.matches({2, 1}, {1, 1}));
    EXPECT_FALSE(c.faults[2].link.matches({2, 0}, {1, 1}));
}

TEST(Config, ErrorsNameFileAndLine) {
    try {
        parse_config("latency 1us\nslow node0 -> node1 factor 0.5\n", "gray.conf");
        FAIL() << "a slow-down factor below 1 must be refused";
    } catch (const ConfigError& e) {
        EXPECT_STREQ(e.what(), "gray.conf:2: the slow-down factor must be >= 1");
    }
    EXPECT_THROW(parse_config("teleport node0 -> node1\n", "f"), ConfigError);
    EXPECT_THROW(parse_config("loss node0 -> node1 probability 2\n", "f"), ConfigError);
    EXPECT_THROW(parse_config("down node0 node1\n", "f"), ConfigError);
    EXPECT_THROW(parse_config("down node0 -> node99\n", "f"), ConfigError);
    EXPECT_THROW(parse_config("down node0 -> node1 from 2s to 1s\n", "f"), ConfigError);
    EXPECT_THROW(parse_config("mtu 1500\n", "f"), ConfigError);
    EXPECT_THROW(parse_config("link node0 -> node1\n", "f"), ConfigError);
    EXPECT_THROW(load_config_file("/nonexistent/fabric.conf"), ConfigError);
}

TEST(Config, ClockSkewsAreSignedPerNodeAndTheLastStatementForANodeWins) {
    const FabricConfig c = parse_config("clock node2 offset 2ms drift 50ppm\n"
                                        "clock node5 offset -1500us\n"
                                        "clock 6 drift -20.5ppm\n"
                                        "clock node5 offset +3ms drift 1ppm\n",
                                        "skew.conf");
    ASSERT_EQ(c.clocks.size(), 3u);
    ASSERT_NE(c.clock_of(2), nullptr);
    EXPECT_EQ(c.clock_of(2)->offset_ns, 2'000'000);
    EXPECT_DOUBLE_EQ(c.clock_of(2)->drift_ppm, 50.0);
    EXPECT_EQ(c.clock_of(5)->offset_ns, 3'000'000);
    EXPECT_DOUBLE_EQ(c.clock_of(5)->drift_ppm, 1.0);
    EXPECT_EQ(c.clock_of(6)->offset_ns, 0);
    EXPECT_DOUBLE_EQ(c.clock_of(6)->drift_ppm, -20.5);
    EXPECT_EQ(c.clock_of(0), nullptr);
    try {
        parse_config("clock node1/0 offset 1ms\n", "skew.conf");
        FAIL() << "a clock belongs to a node, not a NIC";
    } catch (const ConfigError& e) {
        EXPECT_STREQ(e.what(), "skew.conf:1: 'clock' takes one node (nodeN): a clock belongs to a host, not to a NIC");
    }
    EXPECT_THROW(parse_config("clock node1\n", "f"), ConfigError);
    EXPECT_THROW(parse_config("clock node1 drift 50\n", "f"), ConfigError);
    EXPECT_THROW(parse_config("clock node1 offset 2\n", "f"), ConfigError);
    EXPECT_THROW(parse_config("clock * offset 2ms\n", "f"), ConfigError);
}

}  // namespace
}  // namespace softfabric
