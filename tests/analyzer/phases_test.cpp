// Communication phases (phase_tracker.h) on operations with exact timing: bursts of WRITEs on known links, so
// every phase's bytes, bound and binding port are computed. The same on a fabric recording with designed
// phases: linkload_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "analyzer/analyses/phase_tracker.h"
#include "send_runs.h"

namespace sigmatrace::analyzer {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kT0 = 1'700'000'000'000'000'000;   // an absolute (Unix) origin, like a trace's
constexpr uint64_t kSize = 65536;

struct Timed {
    Operation op;
    DataLink link;
};

Timed write(DataLink link, int64_t post, int64_t done, uint64_t bytes = kSize, uint8_t opcode = 0) {
    Operation op;
    op.opcode = opcode;   // IBV_WR_RDMA_WRITE
    op.bytes = bytes;
    op.post_ts = post;
    op.done_ts = done;
    op.outcome = OpOutcome::Completed;
    return {op, link};
}

// `n` back-to-back WRITEs of kSize on `link` from `from` (ns, absolute), each taking kSize / rate.
void burst(std::vector<Timed>& out, DataLink link, int64_t from, int n, double rate) {
    const auto each = static_cast<int64_t>(static_cast<double>(kSize) * 1e9 / rate);
    for (int i = 0; i < n; ++i) out.push_back(write(link, from + i * each, from + (i + 1) * each));
}

double port_bytes(const Phase& p, DevId dev, bool rx) {
    const auto it = p.ports.find(port_key(dev, rx));
    return it == p.ports.end() ? 0.0 : it->second.bytes;
}

std::vector<Phase> run(const std::vector<Timed>& ops, PhaseOptions o = {}, const std::vector<int64_t>& bounds = {}) {
    PhaseTracker t(o);
    for (const Timed& x : ops) t.add(x.op, x.link, kT0);
    return build_phases(t, bounds, "gap");
}

constexpr double kRate = 125e6;   // 1 Gbit/s

// A ring over 3 NICs (0->1, 1->2, 2->0), an incast (0, 1 -> 2, twice the bytes from 0), a ring again, 10 ms idle
// between them: three phases, each port's bytes exact.
std::vector<Timed> three_phases() {
    std::vector<Timed> ops;
    for (DataLink l : {DataLink{0, 1}, DataLink{1, 2}, DataLink{2, 0}}) burst(ops, l, kT0, 10, kRate);
    const int64_t p1 = kT0 + 20 * kMs;
    burst(ops, DataLink{0, 2}, p1, 20, kRate / 2);
    burst(ops, DataLink{1, 2}, p1, 10, kRate / 2);
    const int64_t p2 = kT0 + 60 * kMs;
    for (DataLink l : {DataLink{0, 1}, DataLink{1, 2}, DataLink{2, 0}}) burst(ops, l, p2, 5, kRate);
    std::stable_sort(ops.begin(), ops.end(), [](const Timed& a, const Timed& b) { return a.op.done_ts < b.op.done_ts; });
    return ops;
}

TEST(Phases, IdleGapsSplitThePhasesWithExactBytesPerPort) {
    const std::vector<Phase> phases = run(three_phases());
    ASSERT_EQ(phases.size(), 3u);
    for (DevId d : {0u, 1u, 2u}) {
        EXPECT_EQ(port_bytes(phases[0], d, false), 10.0 * kSize);
        EXPECT_EQ(port_bytes(phases[0], d, true), 10.0 * kSize);
        EXPECT_EQ(port_bytes(phases[2], d, false), 5.0 * kSize);
    }
    EXPECT_EQ(port_bytes(phases[1], 0, false), 20.0 * kSize);
    EXPECT_EQ(port_bytes(phases[1], 1, false), 10.0 * kSize);
    EXPECT_EQ(port_bytes(phases[1], 2, true), 30.0 * kSize);
    EXPECT_EQ(port_bytes(phases[1], 2, false), 0.0);
    EXPECT_EQ(phases[0].start_ns, kT0);
    EXPECT_EQ(phases[1].start_ns, kT0 + 20 * kMs);
    EXPECT_EQ(phases[2].start_ns, kT0 + 60 * kMs);
    EXPECT_EQ(phases[0].ops, 30u);
    EXPECT_EQ(phases[1].ops, 30u);
    EXPECT_EQ(phases[2].ops, 15u);
}

TEST(Phases, LowerBoundIsTheBusiestPortOverItsBandwidth) {
    const std::vector<Phase> phases = run(three_phases());
    ASSERT_EQ(phases.size(), 3u);
    const PhaseBound ring = lower_bound(phases[0], [](uint64_t) { return kRate; });
    EXPECT_DOUBLE_EQ(ring.lower_bound_ns, 10.0 * kSize * 1e9 / kRate);
    // The incast's receiver binds: 30 x kSize into NIC 2.
    const PhaseBound incast = lower_bound(phases[1], [](uint64_t) { return kRate; });
    EXPECT_EQ(incast.binding, port_key(2, true));
    EXPECT_DOUBLE_EQ(incast.lower_bound_ns, 30.0 * kSize * 1e9 / kRate);
    // The incast ran at half the rate: its bound is ~half its duration (its 20 WRITEs from NIC 0 take 2x).
    const double duration = static_cast<double>(phases[1].end_ns - phases[1].start_ns);
    EXPECT_NEAR(incast.lower_bound_ns / duration, 0.75, 0.01);
    // A slower NIC 0 (a quarter of the rate) binds through its sender port instead.
    const PhaseBound slow0 = lower_bound(phases[1], [](uint64_t k) { return port_dev(k) == 0 ? kRate / 4 : kRate; });
    EXPECT_EQ(slow0.binding, port_key(0, false));
    EXPECT_DOUBLE_EQ(slow0.lower_bound_ns, 20.0 * kSize * 1e9 / (kRate / 4));
    // Unknown bandwidth everywhere: no bound.
    EXPECT_EQ(lower_bound(phases[0], [](uint64_t) { return 0.0; }).lower_bound_ns, 0.0);
}

TEST(Phases, ObservedPeaksKeepTheEfficiencyWithinOne) {
    const std::vector<Timed> ops = three_phases();
    PhaseTracker t(PhaseOptions{});
    for (const Timed& x : ops) t.add(x.op, x.link, kT0);
    const std::map<uint64_t, double> peak = observed_peaks(t);
    // NIC 0 sent at the full rate in the rings, at half in the incast: its peak is the full rate.
    EXPECT_NEAR(peak.at(port_key(0, false)), kRate, kRate * 1e-6);
    for (const Phase& p : build_phases(t, {}, "gap")) {
        const PhaseBound b = lower_bound(p, [&](uint64_t k) { return peak.at(k); });
        const double eff = b.lower_bound_ns / static_cast<double>(p.end_ns - p.start_ns);
        EXPECT_GT(eff, 0.0);
        EXPECT_LE(eff, 1.0 + 1e-9);
    }
}

TEST(Phases, ArrivalOrderDoesNotChangeThePhases) {
    std::vector<Timed> ops = three_phases();
    std::reverse(ops.begin(), ops.end());
    const std::vector<Phase> phases = run(ops);
    ASSERT_EQ(phases.size(), 3u);
    EXPECT_EQ(port_bytes(phases[1], 2, true), 30.0 * kSize);
    EXPECT_EQ(phases[1].ops, 30u);
    EXPECT_EQ(phases[2].ops, 15u);
}

// Unsignaled WRITEs retired by one signaled completion, taken whole (takes_run, add_run): the same segments, bytes and
// times as one by one; a run past the gap after the segment is refused (it starts a segment of its own).
TEST(Phases, ARunRetiredByOneCompletionIsTakenWhole) {
    PhaseTracker whole({}), single({});
    const DataLink link{0, 1};
    const auto run_of = [&](int64_t first_post, int64_t done, int n) {
        std::vector<Operation> ops;
        for (int i = 0; i < n; ++i) {
            ops.push_back(write(link, first_post + 1000 * i, done, kSize + static_cast<uint64_t>(i)).op);
            ops.back().implied = i + 1 < n;
        }
        return ops;
    };
    const std::vector<std::vector<Operation>> runs = {run_of(kT0, kT0 + 5000, 1), run_of(kT0 + 2000, kT0 + 50'000, 30),
                                                      run_of(kT0 + 60'000, kT0 + 90'000, 8),
                                                      run_of(kT0 + 10 * kMs, kT0 + 11 * kMs, 8)};
    const std::vector<bool> taken =
        feed_runs(whole, single, link, runs, [&](PhaseTracker& t, const Operation& op) { t.add(op, link, kT0); });
    EXPECT_EQ(taken, (std::vector<bool>{false, true, true, false}));
    ASSERT_EQ(whole.segments().size(), 2u);
    ASSERT_EQ(single.segments().size(), 2u);
    for (auto a = whole.segments().begin(), b = single.segments().begin(); a != whole.segments().end(); ++a, ++b) {
        EXPECT_EQ(a->first, b->first);
        EXPECT_EQ(a->second.end_ns, b->second.end_ns);
        EXPECT_EQ(a->second.ops, b->second.ops);
        for (const bool rx : {false, true}) {
            const PortTally& x = a->second.ports.at(port_key(rx ? link.dst : link.src, rx));
            const PortTally& y = b->second.ports.at(port_key(rx ? link.dst : link.src, rx));
            EXPECT_EQ(x.bytes, y.bytes);
            EXPECT_EQ(x.first_ns, y.first_ns);
            EXPECT_EQ(x.last_ns, y.last_ns);
        }
    }
    const PhaseSegment& first = whole.segments().begin()->second;
    EXPECT_EQ(first.ops, 39u);
    EXPECT_EQ(first.end_ns, kT0 + 90'000);
    EXPECT_EQ(first.ports.at(port_key(link.src, false)).bytes, 39.0 * kSize + (30 * 29 / 2) + (8 * 7 / 2));
}

TEST(Phases, AGapShorterThanTheThresholdJoinsPhases) {
    PhaseOptions o;
    o.gap_ns = 30 * kMs;   // the 10 ms idle gaps no longer split; the 20+ ms after the incast does not either
    const std::vector<Phase> phases = run(three_phases(), o);
    ASSERT_EQ(phases.size(), 1u);
    EXPECT_EQ(phases[0].ops, 75u);
}

TEST(Phases, TimeSplitCutsOperationsInProportion) {
    // One continuous stream over 0..20 ms cut at 5 ms: the WRITE across the cut shares its bytes by time.
    std::vector<Timed> ops;
    burst(ops, DataLink{0, 1}, kT0 + kMs / 3, 40, kRate / 4);   // each WRITE takes ~2.1 ms
    PhaseOptions o;
    o.split = PhaseOptions::Split::Times;
    o.times_ns = {5 * kMs};
    const std::vector<Phase> phases = run(ops, o);
    ASSERT_EQ(phases.size(), 2u);
    const double total = 40.0 * kSize;
    EXPECT_NEAR(port_bytes(phases[0], 0, false) + port_bytes(phases[1], 0, false), total, 1e-6 * total);
    // Bytes in proportion to time: 5 ms - 1/3 ms at kRate / 4.
    EXPECT_NEAR(port_bytes(phases[0], 0, false), (5.0 - 1.0 / 3.0) * 1e-3 * kRate / 4, 0.01 * kSize);
    EXPECT_EQ(phases[0].end_ns, kT0 + 5 * kMs - 1);
    EXPECT_EQ(phases[1].start_ns, kT0 + 5 * kMs);
    EXPECT_EQ(phases[0].ops + phases[1].ops, 40u);
}

TEST(Phases, BoundariesGroupSegments) {
    // Boundaries at the incast's start: the first ring alone, the incast and the second ring together.
    const std::vector<Phase> phases = run(three_phases(), PhaseOptions{}, {kT0 + 20 * kMs});
    ASSERT_EQ(phases.size(), 2u);
    EXPECT_EQ(phases[0].ops, 30u);
    EXPECT_EQ(phases[1].ops, 45u);
    EXPECT_EQ(port_bytes(phases[1], 2, true), 35.0 * kSize);
}

TEST(Phases, OpcodeMarksAreCollected) {
    std::vector<Timed> ops = three_phases();
    ops.push_back(write(DataLink{0, 1}, kT0 + 19 * kMs, kT0 + 19 * kMs + 1000, 8, 2));   // RDMA_WRITE_WITH_IMM... a mark
    PhaseOptions o;
    o.split = PhaseOptions::Split::Opcode;
    o.opcode = 2;
    PhaseTracker t(o);
    for (const Timed& x : ops) t.add(x.op, x.link, kT0);
    ASSERT_EQ(t.marks().size(), 1u);
    EXPECT_EQ(t.marks()[0], kT0 + 19 * kMs);
    const std::vector<Phase> phases = build_phases(t, t.marks(), "opcode");
    ASSERT_EQ(phases.size(), 2u);
    EXPECT_EQ(phases[1].ops, 46u);
}

TEST(Phases, MemoryStaysBoundedByDoublingTheGap) {
    // 3 x kMaxSegments bursts 2 ms apart, then 5 ms apart: the gap doubles until the segments fit.
    std::vector<Timed> ops;
    const std::size_t n = 3 * PhaseTracker::kMaxSegments;
    for (std::size_t i = 0; i < n; ++i) ops.push_back(write(DataLink{0, 1}, kT0 + static_cast<int64_t>(i) * 2 * kMs, kT0 + static_cast<int64_t>(i) * 2 * kMs + 1000));
    PhaseTracker t(PhaseOptions{});
    for (const Timed& x : ops) t.add(x.op, x.link, kT0);
    EXPECT_LE(t.segments().size(), PhaseTracker::kMaxSegments);
    EXPECT_EQ(t.gap_ns(), 2 * kMs);   // 1 ms -> 2 ms joins every burst
    double bytes = 0.0;
    uint64_t count = 0;
    for (const auto& [s, seg] : t.segments()) {
        bytes += seg.ports.at(port_key(0, false)).bytes;
        count += seg.ops;
    }
    EXPECT_EQ(count, n);
    EXPECT_EQ(bytes, static_cast<double>(n * kSize));
}

// Shares of a trace (analysis.h, merge_share): each tracker given the operations of its senders, merged, keeps
// the segments one tracker given all of them keeps, whichever merges into which, also when one share's gap has
// grown and the other's has not.
TEST(Phases, SharesMergeIntoTheWholeTracesSegments) {
    std::vector<Timed> ops = three_phases();
    // NIC 0 then writes a burst every 1.5 ms, more than kMaxSegments of them (its gap doubles to 2 ms, which
    // joins them), while NIC 1 writes every 1.5 ms in the same span, too few times to double its share's.
    const int64_t from = kT0 + 100 * kMs;
    for (std::size_t i = 0; i < PhaseTracker::kMaxSegments + 100; ++i)
        ops.push_back(write(DataLink{0, 1}, from + static_cast<int64_t>(i) * 3 * kMs / 2, from + static_cast<int64_t>(i) * 3 * kMs / 2 + 1000));
    for (int i = 0; i < 50; ++i)
        ops.push_back(write(DataLink{1, 2}, from + 400 + i * 3 * kMs / 2, from + 900 + i * 3 * kMs / 2, 4096));
    ops.push_back(write(DataLink{2, 0}, kT0 + 90 * kMs, kT0 + 91 * kMs, 100));
    PhaseTracker whole(PhaseOptions{}), a(PhaseOptions{}), b(PhaseOptions{}), a2(PhaseOptions{}), b2(PhaseOptions{});
    for (const Timed& x : ops) {
        whole.add(x.op, x.link, kT0);
        (x.link.src == 0 ? a : b).add(x.op, x.link, kT0);
        (x.link.src == 0 ? a2 : b2).add(x.op, x.link, kT0);
    }
    ASSERT_EQ(a.gap_ns(), 2 * kMs);
    ASSERT_EQ(b.gap_ns(), kMs);
    ASSERT_EQ(whole.gap_ns(), 2 * kMs);
    a.merge(b);
    b2.merge(a2);
    for (const PhaseTracker* merged : {&a, &b2}) {
        EXPECT_EQ(merged->gap_ns(), whole.gap_ns());
        ASSERT_EQ(merged->segments().size(), whole.segments().size());
        for (auto w = whole.segments().begin(), m = merged->segments().begin(); w != whole.segments().end(); ++w, ++m) {
            EXPECT_EQ(m->first, w->first);
            EXPECT_EQ(m->second.end_ns, w->second.end_ns);
            EXPECT_EQ(m->second.ops, w->second.ops);
            ASSERT_EQ(m->second.ports.size(), w->second.ports.size()) << "segment at " << w->first - kT0;
            for (const auto& [key, t] : w->second.ports) {
                const PortTally& mt = m->second.ports.at(key);
                EXPECT_EQ(mt.bytes, t.bytes);
                EXPECT_EQ(mt.first_ns, t.first_ns);
                EXPECT_EQ(mt.last_ns, t.last_ns);
            }
        }
    }
    // The three designed phases, the lone small WRITE, and the bursts of both NICs joined into one.
    const std::vector<Phase> phases = build_phases(a, {}, "gap");
    ASSERT_EQ(phases.size(), 5u);
    EXPECT_EQ(phases[4].ops, PhaseTracker::kMaxSegments + 100 + 50);
    EXPECT_EQ(port_bytes(phases[4], 2, true), 50.0 * 4096);
}

TEST(Phases, StragglerIsThePortWhoseLastByteEndsLate) {
    std::vector<Timed> ops;
    for (DataLink l : {DataLink{0, 3}, DataLink{1, 3}, DataLink{2, 3}}) burst(ops, l, kT0, 10, kRate);
    burst(ops, DataLink{1, 3}, kT0 + 10 * static_cast<int64_t>(kSize * 1e9 / kRate), 10, kRate / 2);   // 1 keeps sending
    const std::vector<Phase> phases = run(ops);
    ASSERT_EQ(phases.size(), 1u);
    const auto s = straggler_of(phases[0], false, 0.25);
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->port, port_key(1, false));
    EXPECT_EQ(s->late_ns, 20 * static_cast<int64_t>(kSize * 1e9 / kRate));
    EXPECT_FALSE(straggler_of(phases[0], true, 0.25).has_value());   // one receiver: nobody to be late against
    EXPECT_FALSE(straggler_of(run(three_phases())[0], false, 0.25).has_value());
}

}  // namespace
}  // namespace sigmatrace::analyzer
