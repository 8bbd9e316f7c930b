// The relative-skew fit of clock alignment (src/analyzer/analyses/clock_alignment.h) on bounds made from a known
// skew: messages both ways with known latencies.
#include "analyzer/analyses/clock_alignment.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

using namespace sigmatrace::analyzer;

// delta(t) = offset + drift * t; A->B messages of latency `there` give delta < delta(t) + there; B->A messages of
// latency `back` give delta > delta(t) - back.
struct Skew {
    double offset, drift;
    double at(double t) const { return offset + drift * t; }
};

void messages(const Skew& s, double t_begin, double t_end, int n, double there, double back,
              std::vector<SkewBound>* upper, std::vector<SkewBound>* lower) {
    for (int i = 0; i < n; ++i) {
        const double t = t_begin + (t_end - t_begin) * i / (n - 1);
        const double jitter = 100.0 * ((i * 7919) % 13);   // 0..1.2 us of extra delay
        upper->push_back({t, s.at(t) + there + jitter});
        lower->push_back({t + 1000, s.at(t + 1000) - back - jitter});
    }
}

TEST(ClockAlignment, OffsetAndDriftAreRecoveredWithinTheLatencyBand) {
    const Skew truth{2'000'000, 50e-6};
    std::vector<SkewBound> upper, lower;
    messages(truth, 0, 5e9, 400, 3000, 3000, &upper, &lower);
    const PairFit fit = fit_relative_skew(upper, lower, 0);
    ASSERT_TRUE(fit.two_sided);
    ASSERT_TRUE(fit.consistent);
    EXPECT_NEAR(fit.drift, 50e-6, 0.05e-6);
    EXPECT_NEAR(fit.offset_ns, 2'000'000, 300);        // symmetric latencies: the band is centred on the truth
    EXPECT_NEAR(fit.half_width_ns, 3000, 300);         // the one-way latency, less nothing
    // The offset is given at t0: the same fit from t0 = 1 s is the skew there.
    const PairFit later = fit_relative_skew(upper, lower, 1e9);
    EXPECT_NEAR(later.offset_ns, truth.at(1e9), 300);
}

// The lines the bounds allow: the truth's drift and offset lie in their ranges, and the fit is within its stated
// uncertainties of the truth, whatever the latencies' asymmetry and wherever t0 is.
TEST(ClockAlignment, TheTruthLiesWithinTheStatedRanges) {
    struct Case {
        Skew truth;
        double span_ns, there, back, t0;
    };
    for (const Case& c : {Case{{2'000'000, 50e-6}, 1e9, 3000, 3000, 0.5e9}, Case{{-1'500'000, -20e-6}, 2e9, 1000, 9000, 1e9},
                          Case{{40'000, 0}, 0.2e9, 5000, 2000, 0.1e9}, Case{{2'000'000, 50e-6}, 1e9, 3000, 3000, 0}}) {
        SCOPED_TRACE(c.truth.offset);
        std::vector<SkewBound> upper, lower;
        messages(c.truth, 0, c.span_ns, 300, c.there, c.back, &upper, &lower);
        const PairFit fit = fit_relative_skew(upper, lower, c.t0);
        ASSERT_TRUE(fit.consistent);
        const double offset_at_t0 = c.truth.at(c.t0);
        EXPECT_LE(fit.drift_lo, c.truth.drift);
        EXPECT_GE(fit.drift_hi, c.truth.drift);
        EXPECT_LE(fit.offset_lo_ns, offset_at_t0);
        EXPECT_GE(fit.offset_hi_ns, offset_at_t0);
        EXPECT_LE(std::abs(fit.offset_ns - offset_at_t0), fit.offset_uncertainty_ns());
        EXPECT_LE(std::abs(fit.drift - c.truth.drift), fit.drift_uncertainty());
        // At the band's widest drift the offsets are its half-width from the fit; other drifts add to it.
        EXPECT_GE(fit.offset_uncertainty_ns(), fit.half_width_ns);
    }
}

// Over 1 s of messages with 3 us each way, the drift is known to a few ppm and, at the middle of the messages, the
// offset to the latency; 1 s after the last message the offset may have moved by the drift's range times the
// distance.
TEST(ClockAlignment, DriftRangeNarrowsWithTheSpanAndOffsetsWidenAwayFromTheMessages) {
    const Skew truth{2'000'000, 50e-6};
    std::vector<SkewBound> upper, lower;
    messages(truth, 0, 1e9, 300, 3000, 3000, &upper, &lower);
    const PairFit middle = fit_relative_skew(upper, lower, 0.5e9);
    ASSERT_TRUE(middle.consistent);
    EXPECT_LT(middle.drift_uncertainty(), 20e-6);
    EXPECT_GT(middle.drift_uncertainty(), 0.0);
    EXPECT_NEAR(middle.offset_uncertainty_ns(), middle.half_width_ns, 10);
    EXPECT_NEAR(middle.half_width_ns, 3000, 300);
    const PairFit later = fit_relative_skew(upper, lower, 2e9);
    EXPECT_NEAR(later.drift_hi - later.drift_lo, middle.drift_hi - middle.drift_lo, 1e-9);   // where t0 is changes no drift
    EXPECT_GT(later.offset_uncertainty_ns(), middle.offset_uncertainty_ns() + 0.5 * middle.drift_uncertainty() * 1e9);
    EXPECT_LE(later.offset_uncertainty_ns(), middle.offset_uncertainty_ns() + middle.drift_uncertainty() * 1.5e9);
    // Bounds all at one moment say nothing of the drift: the whole range the fit considers (1000 ppm).
    const PairFit instant = fit_relative_skew({{1e9, 5000}}, {{1e9, 3000}}, 1e9);
    EXPECT_NEAR(instant.drift_lo, -1e-3, 1e-12);
    EXPECT_NEAR(instant.drift_hi, 1e-3, 1e-12);
    EXPECT_NEAR(instant.offset_uncertainty_ns(), 1000, 1e-6);
}

TEST(ClockAlignment, AsymmetricLatencyBiasesWithinTheStatedUncertainty) {
    const Skew truth{-1'500'000, -20e-6};
    std::vector<SkewBound> upper, lower;
    messages(truth, 0, 2e9, 200, 1000, 9000, &upper, &lower);
    const PairFit fit = fit_relative_skew(upper, lower, 0);
    ASSERT_TRUE(fit.consistent);
    EXPECT_LE(std::abs(fit.offset_ns - truth.offset), fit.half_width_ns);
    EXPECT_NEAR(fit.drift, -20e-6, 0.1e-6);
}

TEST(ClockAlignment, BoundsClusteredInTimeDoNotInventDrift) {
    std::vector<SkewBound> upper{{1e9, 5000}, {1e9 + 10, 5200}}, lower{{1e9 + 5, 3000}};
    const PairFit fit = fit_relative_skew(upper, lower, 0);
    ASSERT_TRUE(fit.consistent);
    EXPECT_NEAR(fit.drift, 0, 1e-9);
    EXPECT_NEAR(fit.offset_ns, 4000, 1);
    EXPECT_NEAR(fit.half_width_ns, 1000, 1);
}

// Loose bounds over a short stretch whose delays grow (receivers falling behind as a burst goes on): a tilt fits
// them a little better, but a drift that small a stretch cannot show is not one; the offset is the band's middle.
TEST(ClockAlignment, ABriefStretchOfLooseBoundsFitsNoDrift) {
    std::vector<SkewBound> upper, lower;
    for (int i = 0; i < 48; ++i) {
        const double t = 2e8 + i * 1.2e6;            // 57 ms, 200 ms after t0
        const double lag = 40'000 + i * 1'000.0;     // 40 to 87 us late, growing
        upper.push_back({t, 1'000'000 + lag});
        lower.push_back({t + 500, 1'000'000 - 40'000 - (47 - i) * 1'000.0});
    }
    const PairFit fit = fit_relative_skew(upper, lower, 0);
    ASSERT_TRUE(fit.consistent);
    EXPECT_EQ(fit.drift, 0);
    EXPECT_NEAR(fit.offset_ns, 1'000'000, 1);
    EXPECT_NEAR(fit.half_width_ns, 40'000, 1);
}

// What the readers apply: estimated hosts only, local - (offset + drift x (local - t0)).
TEST(ClockAlignment, TheCorrectionMovesEstimatedHostsOnly) {
    ClockResult r;
    r.reference = "h0";
    r.at_ns = 1'000'000'000;
    const auto host = [](const char* name, HostClock::Status s, double offset, double ppm) {
        HostClock h;
        h.host = name;
        h.status = s;
        h.offset_ns = offset;
        h.drift_ppm = ppm;
        return h;
    };
    r.hosts = {host("h0", HostClock::Status::reference, 0, 0), host("h1", HostClock::Status::estimated, 2e6, 50),
               host("h2", HostClock::Status::contradictory, 5e6, 0), host("h3", HostClock::Status::one_sided, 0, 0)};
    const ClockCorrection c(r);
    EXPECT_EQ(c.find("h0"), nullptr);
    EXPECT_EQ(c.find("h2"), nullptr);
    EXPECT_EQ(c.find("h3"), nullptr);
    const ClockShift* h1 = c.find("h1");
    ASSERT_NE(h1, nullptr);
    EXPECT_EQ(h1->to_reference(1'000'000'000), 1'000'000'000 - 2'000'000);
    EXPECT_EQ(h1->to_reference(3'000'000'000), 3'000'000'000 - 2'000'000 - 100'000);   // 50 ppm of 2 s
    EXPECT_LT(h1->to_reference(3'000'000'000), h1->to_reference(3'000'000'001));
}

TEST(ClockAlignment, OneDirectionIsNoEstimateAndCrossingBoundsContradict) {
    EXPECT_FALSE(fit_relative_skew({{0, 5000}}, {}, 0).two_sided);
    EXPECT_FALSE(fit_relative_skew({}, {{0, 5000}}, 0).two_sided);
    // A clock that jumped by 1 ms mid-trace: no line fits between the bounds.
    std::vector<SkewBound> upper, lower;
    for (int i = 0; i < 50; ++i) {
        const double t = i * 1e7, step = i < 25 ? 0 : 1e6;
        upper.push_back({t, step + 2000});
        lower.push_back({t, step - 2000});
    }
    const PairFit fit = fit_relative_skew(upper, lower, 0);
    ASSERT_TRUE(fit.two_sided);
    EXPECT_FALSE(fit.consistent);
    EXPECT_LT(fit.half_width_ns, 0);
}

}  // namespace
