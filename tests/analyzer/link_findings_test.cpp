// The link-level detectors (gray links, incast) on operations built with exact timing: a FIFO link model (a
// queue of `depth` WRITEs per stream, each taking size / rate on its link), so every expectation is computed.
// The same detectors on fabric recordings with an injected fault: linkload_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "analyzer/analyses/gray_link_detector.h"
#include "analyzer/analyses/incast_detector.h"
#include "analyzer/analyses/topology.h"

namespace sigmatrace::analyzer {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kT0 = 1'700'000'000'000'000'000;   // an absolute (Unix) origin, like a trace's
constexpr uint64_t kSize = 262144;

struct Timed {
    Operation op;
    DataLink link;
};

// A stream of back-to-back WRITEs on `link` from `from` to `to` (ns after kT0): `depth` in flight, each taking
// kSize / rate(t) on the link, rate(t) in bytes/s as a function of the transmission's start.
template <typename Rate>
void stream(std::vector<Timed>& out, DataLink link, int64_t from, int64_t to, int depth, Rate rate) {
    std::vector<int64_t> done;
    int64_t horizon = kT0 + from;
    for (std::size_t i = 0;; ++i) {
        // Posted when a queue slot freed (the completion `depth` operations earlier), or at the start.
        const int64_t post = i < static_cast<std::size_t>(depth) ? kT0 + from : done[i - static_cast<std::size_t>(depth)];
        if (post >= kT0 + to) break;
        const int64_t start = std::max(post, horizon);
        horizon = start + static_cast<int64_t>(static_cast<double>(kSize) * 1e9 / rate(start - kT0));
        done.push_back(horizon + 2000);   // plus a latency: the ACK
        Operation op;
        op.bytes = kSize;
        op.post_ts = post;
        op.done_ts = done.back();
        op.outcome = OpOutcome::Completed;
        out.push_back({op, link});
    }
}

// Operations reach the detectors in completion order, as when reading a trace.
void sort_by_completion(std::vector<Timed>& ops) {
    std::stable_sort(ops.begin(), ops.end(), [](const Timed& a, const Timed& b) { return a.op.done_ts < b.op.done_ts; });
}

constexpr double kRate = 250e6;   // 250 MB/s, the fabric tests' link

TEST(GrayLink, OneSlowedLinkAmongHealthyPeers) {
    std::vector<Timed> ops;
    const DataLink slowed{0, 1}, b{1, 2}, c{2, 3}, d{3, 0};
    stream(ops, slowed, 0, 2000 * kMs, 16, [](int64_t t) { return t >= 800 * kMs && t < 1400 * kMs ? kRate / 4 : kRate; });
    for (DataLink l : {b, c, d}) stream(ops, l, 0, 2000 * kMs, 16, [](int64_t) { return kRate; });
    sort_by_completion(ops);
    GrayLinkDetector g(GrayLinkOptions{});
    for (const Timed& t : ops) g.add(t.op, t.link);
    const GrayLinkResult r = g.finish();
    ASSERT_EQ(r.episodes.size(), 1u);
    const GrayEpisode& e = r.episodes[0];
    EXPECT_EQ(e.link.key(), slowed.key());
    EXPECT_NEAR(static_cast<double>(e.start_ns - kT0), 800.0 * kMs, 3.0 * kMs);   // interpolated inside its window
    EXPECT_NEAR(static_cast<double>(e.end_ns - kT0), 1400.0 * kMs, 6.0 * kMs);    // + the last slow WRITE (4.2 ms)
    EXPECT_FALSE(e.until_end);
    EXPECT_NEAR(e.slowdown, 4.0, 0.04);
    EXPECT_NEAR(e.own_bytes_per_s, kRate, 0.01 * kRate);
    EXPECT_NEAR(e.peers_bytes_per_s, kRate, 0.01 * kRate);
    EXPECT_GE(e.slow_windows, 11u);
    ASSERT_EQ(r.links.size(), 4u);
    for (const LinkThroughput& l : r.links) EXPECT_NEAR(l.p50_bytes_per_s, kRate, 0.01 * kRate);
}

// Live (evaluate(): the windows closed so far, the detector unchanged): nothing before the slowdown, the episode
// once min_windows slow windows have closed (well before the slowdown ends), its start as finish() gives it.
TEST(GrayLink, EvaluatedWhileStreamingTheEpisodeShowsOnceItsWindowsClose) {
    std::vector<Timed> ops;
    const DataLink slowed{0, 1}, b{1, 2};
    stream(ops, slowed, 0, 2000 * kMs, 16, [](int64_t t) { return t >= 800 * kMs && t < 1400 * kMs ? kRate / 4 : kRate; });
    stream(ops, b, 0, 2000 * kMs, 16, [](int64_t) { return kRate; });
    sort_by_completion(ops);
    GrayLinkDetector g(GrayLinkOptions{});
    int64_t first_seen = -1;
    for (const Timed& t : ops) {
        g.add(t.op, t.link);
        const GrayLinkResult now = g.evaluate();
        if (t.op.done_ts < kT0 + 800 * kMs) {
            ASSERT_TRUE(now.episodes.empty()) << "an episode before the slowdown, at " << (t.op.done_ts - kT0) / kMs << " ms";
        }
        if (first_seen < 0 && !now.episodes.empty()) {
            first_seen = t.op.done_ts - kT0;
            EXPECT_EQ(now.episodes[0].link.key(), slowed.key());
            EXPECT_NEAR(static_cast<double>(now.episodes[0].start_ns - kT0), 800.0 * kMs, 3.0 * kMs);
            EXPECT_TRUE(now.episodes[0].until_end);   // no healthy window after it yet
        }
    }
    // min_windows (3) windows of 50 ms past the onset, and the next completion closing the third.
    EXPECT_GE(first_seen, 950 * kMs);
    EXPECT_LE(first_seen, 1010 * kMs);
    const GrayLinkResult end = g.finish();
    ASSERT_EQ(end.episodes.size(), 1u);
    EXPECT_FALSE(end.episodes[0].until_end);
}

// Without peers, the link's own earlier level is the reference; a slowdown lasting until the end is reported so.
TEST(GrayLink, OwnEarlierLevelAloneAndUntilTheEnd) {
    std::vector<Timed> ops;
    stream(ops, {0, 1}, 0, 1000 * kMs, 8, [](int64_t t) { return t >= 600 * kMs ? kRate / 3 : kRate; });
    GrayLinkDetector g(GrayLinkOptions{});
    for (const Timed& t : ops) g.add(t.op, t.link);
    const GrayLinkResult r = g.finish();
    ASSERT_EQ(r.episodes.size(), 1u);
    EXPECT_NEAR(r.episodes[0].slowdown, 3.0, 0.05);
    EXPECT_TRUE(r.episodes[0].until_end);
    EXPECT_EQ(r.episodes[0].peers_bytes_per_s, 0.0);
    EXPECT_NEAR(static_cast<double>(r.episodes[0].start_ns - kT0), 600.0 * kMs, 3.0 * kMs);
}

// Too short (2 windows < 3), not slow enough (x1.5 < 1 / 0.5), small messages, and messages sent one at a time
// (never queued: latency-bound, not a throughput measurement): nothing reported.
TEST(GrayLink, WhatIsNotAGrayLink) {
    std::vector<Timed> ops;
    stream(ops, {0, 1}, 0, 1000 * kMs, 16, [](int64_t t) { return t >= 400 * kMs && t < 500 * kMs ? kRate / 4 : kRate; });
    stream(ops, {1, 2}, 0, 1000 * kMs, 16, [](int64_t t) { return t >= 400 * kMs ? kRate / 1.5 : kRate; });
    stream(ops, {2, 3}, 0, 1000 * kMs, 1, [](int64_t t) { return t >= 400 * kMs ? kRate / 4 : kRate; });
    std::vector<Timed> small;
    stream(small, {3, 0}, 0, 1000 * kMs, 16, [](int64_t t) { return t >= 400 * kMs ? kRate / 4 : kRate; });
    for (Timed& t : small) t.op.bytes = 4096;
    ops.insert(ops.end(), small.begin(), small.end());
    sort_by_completion(ops);
    GrayLinkDetector g(GrayLinkOptions{});
    for (const Timed& t : ops) g.add(t.op, t.link);
    const GrayLinkResult r = g.finish();
    EXPECT_TRUE(r.episodes.empty()) << r.episodes.size();
    for (const LinkThroughput& l : r.links) {
        if (l.link.key() == DataLink{2, 3}.key()) {
            EXPECT_EQ(l.queued_ops, 0u);
        }
    }
}

// Completions polled in batches (every 8th one, all 8 with the poll's time) measure the same throughput.
TEST(GrayLink, BatchedCompletionsMeasureTheSame) {
    std::vector<Timed> ops;
    stream(ops, {0, 1}, 0, 1000 * kMs, 16, [](int64_t t) { return t >= 500 * kMs ? kRate / 4 : kRate; });
    for (std::size_t i = 0; i < ops.size(); ++i) ops[i].op.done_ts = ops[std::min(ops.size() - 1, i | 7)].op.done_ts;
    GrayLinkDetector g(GrayLinkOptions{});
    for (const Timed& t : ops) g.add(t.op, t.link);
    const GrayLinkResult r = g.finish();
    ASSERT_EQ(r.episodes.size(), 1u);
    EXPECT_NEAR(r.episodes[0].slowdown, 4.0, 0.04);
    EXPECT_NEAR(r.episodes[0].own_bytes_per_s, kRate, 0.01 * kRate);
    EXPECT_LT(r.links[0].max_bytes_per_s, 1.05 * kRate);   // batches spread over the windows they span
}

// A long trace: past kMaxWindows windows per link the window doubles, and detection still works.
TEST(GrayLink, LongTracesDoubleTheWindow) {
    GrayLinkOptions o;
    o.window_ns = 5 * kMs;
    std::vector<Timed> ops;
    const int64_t len = 30'000 * kMs;   // 6000 windows of 5 ms
    stream(ops, {0, 1}, 0, len, 16, [&](int64_t t) { return t >= 20'000 * kMs && t < 22'000 * kMs ? kRate / 4 : kRate; });
    GrayLinkDetector g(o);
    for (const Timed& t : ops) g.add(t.op, t.link);
    const GrayLinkResult r = g.finish();
    EXPECT_EQ(r.window_ns, 10 * kMs);
    ASSERT_EQ(r.episodes.size(), 1u);
    EXPECT_NEAR(static_cast<double>(r.episodes[0].start_ns - kT0), 20'000.0 * kMs, 10.0 * kMs);
    EXPECT_NEAR(r.episodes[0].slowdown, 4.0, 0.05);
}

// qperf on a CPU-loaded machine: a sender that keeps 2 WRITEs outstanding and posts the next one when it has
// polled a completion. From 300 to 700 ms its thread runs late: every completion is seen 8 ms after the link
// finished it, and the next WRITE is posted only then. The link stays fast; its completions just arrive at the
// poller's pace. Every WRITE is posted right when the completion before it is seen (queued behind one operation
// at most, the queue ran dry): the sender set the pace, not the link, and nothing is measured or reported. The
// same sender 4 deep on a link slowed 4x from 300 ms is a gray link. (Measuring every WRITE queued behind one
// outstanding operation, as before, reported the paced link as a gray link.)
TEST(GrayLink, ASenderPacedByItsPollerIsNotAGrayLink) {
    auto run = [](int depth, double slow_factor, int64_t lag) {
        std::vector<Timed> ops;
        std::vector<int64_t> seen;   // when the poller saw each completion
        int64_t horizon = kT0;
        for (std::size_t i = 0;; ++i) {
            const int64_t post = i < static_cast<std::size_t>(depth) ? kT0 : seen[i - static_cast<std::size_t>(depth)];
            if (post >= kT0 + 1000 * kMs) break;
            const int64_t start = std::max(post, horizon);
            const bool loaded = start - kT0 >= 300 * kMs && start - kT0 < 700 * kMs;
            const double rate = loaded ? kRate / slow_factor : kRate;
            horizon = start + static_cast<int64_t>(static_cast<double>(kSize) * 1e9 / rate);
            seen.push_back(std::max(horizon + 2000 + (loaded ? lag : 0), seen.empty() ? 0 : seen.back()));
            Operation op;
            op.bytes = kSize;
            op.post_ts = post;
            op.done_ts = seen.back();
            op.outcome = OpOutcome::Completed;
            ops.push_back({op, {0, 1}});
        }
        GrayLinkDetector g(GrayLinkOptions{});
        for (const Timed& t : ops) g.add(t.op, t.link);
        return g.finish();
    };
    const GrayLinkResult paced = run(2, 1.0, 8 * kMs);
    EXPECT_TRUE(paced.episodes.empty()) << paced.episodes.size();
    ASSERT_EQ(paced.links.size(), 1u);
    EXPECT_EQ(paced.links[0].queued_ops, 0u);
    // Every WRITE but two that started busy periods (the first, and one where the lag ends) was sender-paced.
    EXPECT_EQ(paced.links[0].large_ops, 657u);
    EXPECT_EQ(paced.links[0].sender_bound_ops, 655u);
    const GrayLinkResult slowed = run(4, 4.0, 0);
    ASSERT_EQ(slowed.episodes.size(), 1u);
    EXPECT_NEAR(slowed.episodes[0].slowdown, 4.0, 0.05);
    EXPECT_NEAR(static_cast<double>(slowed.episodes[0].start_ns - kT0), 300.0 * kMs, 3.0 * kMs);
}

// A trace analysed in shares (analysis.h, merge_share): detectors fed disjoint links merge into the result of one
// fed every link. With 1 ms windows, the share holding the two 5 s links doubles its window (past kMaxWindows) and
// the one holding the two 2 s links does not: the merge doubles the latter's, as the whole trace's run did while
// reading. Counts and times are exact; throughputs, from bytes spread over intervals and summed in another
// grouping, equal to the last bits of a double.
TEST(GrayLink, SharesOfDisjointLinksMergeIntoTheWholeTracesResult) {
    std::vector<Timed> ops;
    const DataLink slowed{0, 1}, b{1, 2}, c{2, 3}, d{3, 0};
    stream(ops, slowed, 0, 5000 * kMs, 16, [](int64_t t) { return t >= 1500 * kMs && t < 3000 * kMs ? kRate / 4 : kRate; });
    stream(ops, b, 0, 5000 * kMs, 16, [](int64_t) { return kRate; });
    for (DataLink l : {c, d}) stream(ops, l, 0, 2000 * kMs, 16, [](int64_t) { return kRate; });
    sort_by_completion(ops);
    GrayLinkOptions o;
    o.window_ns = kMs;
    GrayLinkDetector whole(o), long_links(o), short_links(o);
    for (const Timed& t : ops) {
        whole.add(t.op, t.link);
        (t.link.key() == slowed.key() || t.link.key() == b.key() ? long_links : short_links).add(t.op, t.link);
    }
    ASSERT_TRUE(short_links.can_merge(long_links));
    short_links.merge(long_links);
    const GrayLinkResult want = whole.finish(), got = short_links.finish();
    EXPECT_EQ(want.window_ns, 2 * kMs);
    EXPECT_EQ(got.window_ns, want.window_ns);
    ASSERT_EQ(want.episodes.size(), 1u);
    ASSERT_EQ(got.episodes.size(), want.episodes.size());
    const GrayEpisode &w = want.episodes[0], &g = got.episodes[0];
    EXPECT_EQ(g.link.key(), slowed.key());
    EXPECT_NEAR(static_cast<double>(g.start_ns), static_cast<double>(w.start_ns), 1.0);
    EXPECT_NEAR(static_cast<double>(g.end_ns), static_cast<double>(w.end_ns), 1.0);
    EXPECT_EQ(g.slow_windows, w.slow_windows);
    EXPECT_EQ(g.bytes, w.bytes);
    EXPECT_DOUBLE_EQ(g.slowdown, w.slowdown);
    EXPECT_EQ(g.samples.size(), w.samples.size());
    ASSERT_EQ(got.links.size(), 4u);
    ASSERT_EQ(got.links.size(), want.links.size());
    for (std::size_t i = 0; i < want.links.size(); ++i) {
        EXPECT_EQ(got.links[i].link.key(), want.links[i].link.key()) << i;
        EXPECT_EQ(got.links[i].large_ops, want.links[i].large_ops) << i;
        EXPECT_EQ(got.links[i].queued_ops, want.links[i].queued_ops) << i;
        EXPECT_EQ(got.links[i].measured_windows, want.links[i].measured_windows) << i;
        EXPECT_DOUBLE_EQ(got.links[i].p50_bytes_per_s, want.links[i].p50_bytes_per_s) << i;
        EXPECT_DOUBLE_EQ(got.links[i].max_bytes_per_s, want.links[i].max_bytes_per_s) << i;
    }
    // A link both shares measured cannot be merged.
    GrayLinkDetector again(o);
    again.add(ops.front().op, ops.front().link);
    EXPECT_FALSE(short_links.can_merge(again));
}

class Incast : public ::testing::Test {
protected:
    void SetUp() override {
        for (int n = 0; n < 5; ++n) nic_[n] = topo_.device_id(topo_.node_id("node" + std::to_string(n)), "sfab_0");
    }
    DataLink link(int from, int to) const { return {nic_[from], nic_[to]}; }
    IncastResult run(std::vector<Timed>& ops, IncastOptions o = {}) {
        sort_by_completion(ops);
        IncastDetector d(o, topo_);
        for (const Timed& t : ops) d.add(t.op, t.link);
        return d.finish();
    }
    Topology topo_;
    DevId nic_[5]{};
};

TEST_F(Incast, ManyToOneHasItsDegreeAndDuration) {
    std::vector<Timed> ops;
    // 100 ms of ring traffic, then nodes 1..4 all send to node0 from 100 ms to 400 ms.
    for (int s = 0; s < 5; ++s) stream(ops, link(s, (s + 1) % 5), 0, 100 * kMs, 4, [](int64_t) { return kRate; });
    for (int s = 1; s < 5; ++s) stream(ops, link(s, 0), 100 * kMs, 400 * kMs, 4, [](int64_t) { return kRate; });
    const IncastResult r = run(ops);
    ASSERT_EQ(r.receivers.size(), 1u);
    const IncastReceiver& rc = r.receivers[0];
    EXPECT_EQ(rc.receiver, nic_[0]);
    EXPECT_EQ(rc.episodes, 1u);
    EXPECT_EQ(rc.max_degree, 4u);
    ASSERT_EQ(rc.kept.size(), 1u);
    const IncastEpisode& e = rc.kept[0];
    EXPECT_EQ(e.senders.size(), 4u);
    // From the phase's start to its end plus the drain of 4 queued WRITEs (4.2 ms), to the window (1 ms).
    EXPECT_NEAR(static_cast<double>(e.start_ns - kT0), 100.0 * kMs, 1.0 * kMs);
    EXPECT_NEAR(static_cast<double>(e.end_ns - kT0), 404.2 * kMs, 1.5 * kMs);
    EXPECT_EQ(r.clipped_bytes, 0.0);
}

// Live (evaluate()): the many-to-one phase shows as an episode once it has lasted min_duration and its windows are
// final (kSlackWindows behind the completions), long before it ends; evaluate() leaves finish()'s result as it was.
TEST_F(Incast, EvaluatedWhileStreamingTheEpisodeShowsBeforeItEnds) {
    std::vector<Timed> ops;
    for (int s = 0; s < 5; ++s) stream(ops, link(s, (s + 1) % 5), 0, 100 * kMs, 4, [](int64_t) { return kRate; });
    for (int s = 1; s < 5; ++s) stream(ops, link(s, 0), 100 * kMs, 400 * kMs, 4, [](int64_t) { return kRate; });
    sort_by_completion(ops);
    IncastDetector d(IncastOptions{}, topo_);
    int64_t first_seen = -1;
    for (const Timed& t : ops) {
        d.add(t.op, t.link);
        const IncastResult now = d.evaluate();
        if (first_seen < 0 && !now.receivers.empty()) {
            first_seen = t.op.done_ts - kT0;
            ASSERT_EQ(now.receivers[0].receiver, nic_[0]);
            ASSERT_EQ(now.receivers[0].kept.size(), 1u);
            EXPECT_NEAR(static_cast<double>(now.receivers[0].kept[0].start_ns - kT0), 100.0 * kMs, 1.0 * kMs);
        }
    }
    // Windows are final 100 windows (100 ms) behind the completions; the episode needs 2 ms of them.
    EXPECT_GE(first_seen, 200 * kMs);
    EXPECT_LE(first_seen, 210 * kMs);
    const IncastResult r = d.finish();
    ASSERT_EQ(r.receivers.size(), 1u);
    EXPECT_EQ(r.receivers[0].episodes, 1u);
    EXPECT_NEAR(static_cast<double>(r.receivers[0].kept[0].end_ns - kT0), 404.2 * kMs, 1.5 * kMs);
}

// A balanced all-to-all: every node receives from every other one, but each sender spreads its data evenly, so no
// sender is focused on one receiver. Two senders to one receiver are below the default degree of 3.
// A completed operation in flight longer than kSlackWindows has its early part cut and counted; a WQE without a
// visible completion (Observed, post = done) drained after its window closed is left out, not counted as cut.
TEST_F(Incast, LateObservedWqesAreLeftOutLongInFlightOnesAreClipped) {
    std::vector<Timed> ops;
    stream(ops, link(1, 2), 0, 300 * kMs, 4, [](int64_t) { return kRate; });
    sort_by_completion(ops);
    Timed observed{ops.front().op, link(3, 0)};
    observed.op.outcome = OpOutcome::Observed;
    observed.op.done_ts = observed.op.post_ts = kT0 + kMs;
    Timed long_one = observed;
    long_one.op.outcome = OpOutcome::Completed;
    long_one.op.post_ts = kT0;
    long_one.op.done_ts = kT0 + 250 * kMs;
    IncastDetector d(IncastOptions{}, topo_);
    for (const Timed& t : ops) {
        d.add(t.op, t.link);
        if (t.op.done_ts >= long_one.op.done_ts && long_one.op.bytes) {
            d.add(long_one.op, long_one.link);   // in completion order: its first 150 ms are behind the final windows
            long_one.op.bytes = 0;
        }
    }
    d.add(observed.op, observed.link);   // drained at the end, 299 ms after its post
    const IncastResult r = d.finish();
    EXPECT_NEAR(r.clipped_bytes, static_cast<double>(kSize) * 150.0 / 250.0, static_cast<double>(kSize) * 2.0 / 250.0);
}

TEST_F(Incast, BalancedAllToAllAndTwoSendersAreNot) {
    std::vector<Timed> ops;
    for (int s = 0; s < 5; ++s)
        for (int d = 0; d < 5; ++d)
            if (s != d) stream(ops, link(s, d), 0, 300 * kMs, 4, [](int64_t) { return kRate; });
    for (int s = 1; s < 3; ++s) stream(ops, link(s, 0), 300 * kMs, 600 * kMs, 4, [](int64_t) { return kRate; });
    EXPECT_TRUE(run(ops).receivers.empty());
    IncastOptions two;
    two.min_senders = 2;
    std::vector<Timed> again;
    for (int s = 1; s < 3; ++s) stream(again, link(s, 0), 300 * kMs, 600 * kMs, 4, [](int64_t) { return kRate; });
    const IncastResult r = run(again, two);
    ASSERT_EQ(r.receivers.size(), 1u);
    EXPECT_EQ(r.receivers[0].max_degree, 2u);
}

}  // namespace
}  // namespace sigmatrace::analyzer
