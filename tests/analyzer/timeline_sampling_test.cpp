// The timeline's level of detail above --perfetto-max-ops (outputs/timeline_sampling.h).
#include <gtest/gtest.h>

#include <vector>

#include "analyzer/outputs/timeline_sampling.h"

namespace sigmatrace::analyzer {
namespace {

std::vector<uint64_t> kept(TimelineSampler& s, uint64_t ops) {
    std::vector<uint64_t> out;
    for (uint64_t i = 0; i < ops; ++i)
        if (s.keep()) out.push_back(i);
    return out;
}

TEST(TimelineSampler, LevelsOfFallingDensity) {
    TimelineSampler s(8);
    // Every one until 4 are written; then 1 in 4 for 2 (from one stride after the last kept), 1 in 16 for 1,
    // 1 in 64 for the last.
    EXPECT_EQ(kept(s, 100), (std::vector<uint64_t>{0, 1, 2, 3, 7, 11, 27, 91}));
    EXPECT_EQ(s.written(), 8u);
    EXPECT_EQ(s.dropped(), 92u);
    EXPECT_EQ(s.statement(), "8 of 100 operations written (--perfetto-max-ops 8): every one up to #4, then 1 in 4 from "
                             "#8, then 1 in 16 from #28, then 1 in 64 from #92 (in reconstruction order, about time order)");
}

TEST(TimelineSampler, UnderTheBudgetEverythingAndNoStatement) {
    TimelineSampler s(1000);
    EXPECT_EQ(kept(s, 400).size(), 400u);
    EXPECT_EQ(s.dropped(), 0u);
    EXPECT_EQ(s.statement(), "");
}

TEST(TimelineSampler, ALongTraceIsCoveredToItsEndWithinTheBudget) {
    TimelineSampler s(1000);
    const std::vector<uint64_t> k = kept(s, 5'000'000);
    EXPECT_LE(k.size(), 1000u);
    EXPECT_GE(k.size(), 990u);
    EXPECT_EQ(k[499], 499u);   // the first half of the budget: every operation
    EXPECT_GT(k.back(), 1'000'000u) << "the kept operations reach far into the trace, not only its start";
    for (std::size_t i = 1; i < k.size(); ++i) ASSERT_LT(k[i - 1], k[i]);
}

TEST(TimelineSampler, ZeroBudgetWritesNothing) {
    TimelineSampler s(0);
    EXPECT_TRUE(kept(s, 10).empty());
    EXPECT_EQ(s.dropped(), 10u);
}

}  // namespace
}  // namespace sigmatrace::analyzer
