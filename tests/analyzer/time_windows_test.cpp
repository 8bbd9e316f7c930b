// Timeline windows and outstanding work (time_windows.h, outstanding.h) on operations built with exact timing: a
// FIFO link model (a queue of `depth` WRITEs per stream, each taking size / rate on its link), so every
// expectation is computed. The same on a fabric recording with an injected fault: linkload_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "analyzer/analyses/outstanding.h"
#include "analyzer/analyses/time_windows.h"
#include "send_runs.h"

namespace sigmatrace::analyzer {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kT0 = 1'700'000'000'000'000'000;   // an absolute (Unix) origin, like a trace's
constexpr uint64_t kSize = 262144;
constexpr double kRate = 250e6;

struct Timed {
    Operation op;
    DataLink link;
};

// Back-to-back WRITEs on `link` from `from` to `to` (ms after kT0), `depth` in flight, each taking kSize / rate(t).
template <typename Rate>
void stream(std::vector<Timed>& out, DataLink link, QpId qp, int64_t from, int64_t to, int depth, Rate rate) {
    std::vector<int64_t> done;
    int64_t horizon = kT0 + from * kMs;
    for (std::size_t i = 0;; ++i) {
        const int64_t post = i < static_cast<std::size_t>(depth) ? kT0 + from * kMs : done[i - static_cast<std::size_t>(depth)];
        if (post >= kT0 + to * kMs) break;
        const int64_t start = std::max(post, horizon);
        horizon = start + static_cast<int64_t>(static_cast<double>(kSize) * 1e9 / rate(start - kT0));
        done.push_back(horizon + 2000);
        Operation op;
        op.qp = qp;
        op.opcode = 1;   // IBV_WR_RDMA_WRITE
        op.bytes = kSize;
        op.post_ts = post;
        op.done_ts = done.back();
        op.signaled = true;
        out.push_back({op, link});
    }
}

// A receive on `qp` posted at `post` and consumed at `done` (ms after kT0).
Operation receive(QpId qp, int64_t post, int64_t done) {
    Operation r;
    r.qp = qp;
    r.opcode = kOpRecv;
    r.post_ts = kT0 + post * kMs;
    r.done_ts = kT0 + done * kMs;
    return r;
}

// A send on `qp` that failed at `at` ms with RNR retries exceeded (IBV_WC_RNR_RETRY_EXC_ERR).
Operation rnr_failure(QpId qp, int64_t at) {
    Operation f;
    f.qp = qp;
    f.opcode = 0;
    f.outcome = OpOutcome::Failed;
    f.wc_status = 13;
    f.post_ts = f.done_ts = kT0 + at * kMs;
    return f;
}

void sort_by_completion(std::vector<Timed>& ops) {
    std::stable_sort(ops.begin(), ops.end(), [](const Timed& a, const Timed& b) { return a.op.done_ts < b.op.done_ts; });
}

double link_bytes(const Window& w, DataLink l) {
    auto it = w.links.find(l.key());
    return it == w.links.end() ? 0.0 : it->second.bytes;
}

// Windows entirely inside [from, to) (ms after kT0).
std::vector<const Window*> inside(const TimeWindows& tw, int64_t from, int64_t to) {
    std::vector<const Window*> out;
    for (std::size_t i = 0; i < tw.windows().size(); ++i) {
        const int64_t s = (tw.first_index() + static_cast<int64_t>(i)) * tw.window_ns();
        if (s >= kT0 + from * kMs && s + tw.window_ns() <= kT0 + to * kMs) out.push_back(&tw.windows()[i]);
    }
    return out;
}

TEST(TimeWindows, AutomaticLengthGivesABoundedCountAndKeepsEveryByte) {
    std::vector<Timed> ops;
    const DataLink slowed{0, 1}, b{1, 2}, c{2, 3};
    stream(ops, slowed, 0, 0, 2000, 16, [](int64_t t) { return t >= 800 * kMs && t < 1400 * kMs ? kRate / 4 : kRate; });
    for (DataLink l : {b, c}) stream(ops, l, 1, 0, 2000, 16, [](int64_t) { return kRate; });
    sort_by_completion(ops);
    TimeWindows tw(WindowOptions{});
    for (const Timed& t : ops) tw.add(t.op, t.link);
    // 2 s in windows of 1024 ns x 2^k: 2^23 ns (8.4 ms) needs 239 windows, within the bound of 256; 2^22, 477.
    EXPECT_EQ(tw.window_ns(), int64_t{1} << 23);
    EXPECT_GT(tw.windows().size(), 128u);
    EXPECT_LE(tw.windows().size(), 256u);
    double total = 0.0;
    uint64_t count = 0;
    for (const Window& w : tw.windows())
        for (const auto& [key, cell] : w.links) {
            total += cell.bytes;
            count += cell.ops;
        }
    EXPECT_EQ(count, ops.size());
    EXPECT_NEAR(total, static_cast<double>(ops.size() * kSize), 1.0);
    // Inside the slowdown (past the queue's drain, 16 x 4.2 ms), the slowed link at a quarter, the others at the rate.
    const std::vector<const Window*> slow = inside(tw, 900, 1300);
    ASSERT_GE(slow.size(), 40u);
    const double W = static_cast<double>(tw.window_ns()) / 1e9;
    for (const Window* w : slow) {
        EXPECT_NEAR(link_bytes(*w, slowed) / W, kRate / 4, 0.02 * kRate / 4);
        EXPECT_NEAR(link_bytes(*w, b) / W, kRate, 0.02 * kRate);
        EXPECT_NEAR(link_bytes(*w, c) / W, kRate, 0.02 * kRate);
    }
    for (const Window* w : inside(tw, 100, 700)) EXPECT_NEAR(link_bytes(*w, slowed) / W, kRate, 0.02 * kRate);
    // Latency per opcode: 16 WRITEs queued at 1.05 ms each before the slowdown.
    const Window& early = *inside(tw, 100, 700).front();
    ASSERT_EQ(early.latency_by_opcode.count(1), 1u);
    EXPECT_NEAR(static_cast<double>(early.latency_by_opcode.at(1).quantile(0.5)), 16 * 1.048576e6, 0.15 * 16 * 1.048576e6);
}

TEST(TimeWindows, FixedLengthAndOperationsOutOfOrder) {
    WindowOptions o;
    o.window_ns = 10 * kMs;
    TimeWindows tw(o);
    std::vector<Timed> ops;
    stream(ops, {0, 1}, 0, 0, 100, 4, [](int64_t) { return kRate; });
    // A late operation posted long before the others (a GPU WQE reported when its QP went away).
    std::reverse(ops.begin(), ops.end());
    for (const Timed& t : ops) tw.add(t.op, t.link);
    EXPECT_EQ(tw.window_ns(), 10 * kMs);
    EXPECT_EQ(tw.first_index() * tw.window_ns(), kT0 / (10 * kMs) * (10 * kMs));
    double total = 0.0;
    for (const Window& w : tw.windows()) total += link_bytes(w, {0, 1});
    EXPECT_NEAR(total, static_cast<double>(ops.size() * kSize), 1.0);
    for (const Window* w : inside(tw, 10, 90)) EXPECT_NEAR(link_bytes(*w, {0, 1}) / 0.01, kRate, 0.02 * kRate);
}

// Three senders to receiver 0 from 500 to 1000 ms, one (sender 1) the rest of the time: the in-flight time of
// the receiver's inbound links says 3 concurrent senders there, 1 elsewhere.
TEST(TimeWindows, ConcurrentSendersPerReceiver) {
    std::vector<Timed> ops;
    stream(ops, {1, 0}, 0, 0, 1500, 8, [](int64_t) { return kRate; });
    stream(ops, {2, 0}, 1, 500, 1000, 8, [](int64_t) { return kRate; });
    stream(ops, {3, 0}, 2, 500, 1000, 8, [](int64_t) { return kRate; });
    sort_by_completion(ops);
    TimeWindows tw(WindowOptions{});
    for (const Timed& t : ops) tw.add(t.op, t.link);
    auto senders = [](const Window& w) {
        int n = 0;
        int64_t busy = 0;
        for (const auto& [key, cell] : w.links)
            if ((key & 0xffffffffu) == 0 && cell.busy_ns > 0) {
                ++n;
                busy += cell.busy_ns;
            }
        return std::pair{n, busy};
    };
    const double W = static_cast<double>(tw.window_ns());
    const std::vector<const Window*> in = inside(tw, 510, 1000);
    ASSERT_GE(in.size(), 40u);
    for (const Window* w : in) {
        EXPECT_EQ(senders(*w).first, 3);
        EXPECT_NEAR(static_cast<double>(senders(*w).second) / W, 3.0, 1e-9);
    }
    for (int64_t range : {0, 1}) {
        for (const Window* w : inside(tw, range ? 1050 : 10, range ? 1490 : 490)) {
            EXPECT_EQ(senders(*w).first, 1);
            EXPECT_NEAR(static_cast<double>(senders(*w).second) / W, 1.0, 1e-9);
        }
    }
}

// Unsignaled WRITEs retired by one signaled completion (a bandwidth run's shape): taken whole (takes_run, add_run) they
// leave the windows as they leave them one by one; a run with a post before the cached window is refused.
TEST(TimeWindows, ARunRetiredByOneCompletionIsTakenWhole) {
    WindowOptions o;
    o.window_ns = 1 * kMs;
    TimeWindows whole(o), single(o);
    const DataLink link{0, 1};
    const auto run_of = [](int64_t first_post_us, int64_t done_us, uint64_t bytes, int n) {
        std::vector<Operation> ops(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) {
            Operation& op = ops[static_cast<std::size_t>(i)];
            op.qp = 0;
            op.opcode = 0;   // IBV_WR_RDMA_WRITE
            op.bytes = bytes + static_cast<uint64_t>(i);
            op.post_ts = kT0 + (first_post_us + 3 * i) * 1000;
            op.done_ts = kT0 + done_us * 1000;
            op.implied = i + 1 < n;
            op.signaled = !op.implied;
        }
        return ops;
    };
    // The first operation fills the caches; the runs after it lie in its window, but for the last.
    const std::vector<std::vector<Operation>> runs = {run_of(100, 150, 64, 1), run_of(120, 300, 64, 20),
                                                      run_of(310, 400, 4096, 5), run_of(950, 990, 32, 10),
                                                      run_of(1100, 1500, 32, 4)};
    const std::vector<bool> taken =
        feed_runs(whole, single, link, runs, [&](TimeWindows& t, const Operation& op) { t.add(op, link); });
    EXPECT_EQ(taken, (std::vector<bool>{false, true, true, true, false})) << "the last run lies in the next window";
    ASSERT_EQ(whole.windows().size(), single.windows().size());
    for (std::size_t i = 0; i < whole.windows().size(); ++i) {
        const WindowLinkCell& a = whole.windows()[i].links.at(link.key());
        const WindowLinkCell& b = single.windows()[i].links.at(link.key());
        EXPECT_EQ(a.bytes, b.bytes) << i;
        EXPECT_EQ(a.ops, b.ops) << i;
        EXPECT_EQ(a.busy_ns, b.busy_ns) << i;
        EXPECT_EQ(a.latency.count(), b.latency.count()) << i;
        EXPECT_EQ(a.latency.quantile(0.5), b.latency.quantile(0.5)) << i;
        EXPECT_EQ(a.latency.max(), b.latency.max()) << i;
    }
    const WindowLinkCell& first = whole.windows()[0].links.at(link.key());
    EXPECT_EQ(first.ops, 36u);
    EXPECT_EQ(first.bytes, 64.0 + (20 * 64 + 190) + (5 * 4096 + 10) + (10 * 32 + 45));
    // In flight from the first post to the last completion but for the gaps 300..310 and 400..950 us.
    EXPECT_EQ(first.busy_ns, (990 - 100 - 10 - 550) * 1000);
    EXPECT_EQ(first.latency.count(), 4u) << "one completion of its own per run";
    // A run that is not one: a failed completion among them.
    std::vector<Operation> failed = run_of(10, 20, 64, 3);
    failed[1].outcome = OpOutcome::Failed;
    SendRun r;
    EXPECT_FALSE(send_run_of(failed, r));
}

TEST(Outstanding, SendWindowReceiveDepthAndRnr) {
    std::vector<Timed> ops;
    stream(ops, {0, 1}, 0, 0, 100, 8, [](int64_t) { return kRate; });
    stream(ops, {0, 1}, 1, 0, 100, 3, [](int64_t) { return kRate; });
    sort_by_completion(ops);
    Outstanding o;
    for (const Timed& t : ops) o.add(t.op);
    // Receives on QP 2: 4 posted at 0, consumed at 10, 20, 30 and 40 ms; then a send on QP 1 that failed with RNR
    // retries exceeded.
    for (int i = 0; i < 4; ++i) o.add(receive(2, 0, (i + 1) * 10));
    o.add(rnr_failure(1, 200));
    o.finish();
    ASSERT_NE(o.of(0), nullptr);
    EXPECT_EQ(o.of(0)->max_wrs, 8u);
    EXPECT_EQ(o.of(0)->max_bytes, 8 * kSize);
    // Outstanding bytes are 8 x 256 KiB at every post and 7 x 256 KiB after every completion: the p99 is the
    // bucket of 2 MiB (its upper edge, clamped to the max).
    EXPECT_EQ(o.of(0)->bytes.quantile(0.99), 8 * kSize);
    EXPECT_EQ(o.of(1)->max_wrs, 3u);
    EXPECT_EQ(o.of(1)->rnr_events, 1u);
    EXPECT_EQ(o.of(0)->rnr_events, 0u);
    EXPECT_EQ(o.of(2)->recv_max_posted, 4u);
    EXPECT_EQ(o.of(2)->recv_min_posted, 0u);
    EXPECT_EQ(o.of(2)->recv_consumed, 4u);
    EXPECT_EQ(o.of(3), nullptr);
}

// The same samples per window: QP 0 keeps 8 WRITEs in flight from 0 to 100 ms, then 2 from 100 to 200 ms (its
// send window shrinks); QP 1 posts 4 receives at 150 ms, consumed at 160, 170, 180 and 190 ms, and has one RNR
// failure at 250 ms; QP 2 is past --window-qps 2 and gets no series. Windows of 10 ms.
TEST(Outstanding, PerWindowSeries) {
    std::vector<Timed> ops;
    stream(ops, {0, 1}, 0, 0, 100, 8, [](int64_t) { return kRate; });
    stream(ops, {0, 1}, 0, 100, 200, 2, [](int64_t) { return kRate; });
    stream(ops, {0, 1}, 2, 0, 200, 5, [](int64_t) { return kRate; });
    sort_by_completion(ops);
    // The queue hands a QP's operations over in post order.
    std::stable_sort(ops.begin(), ops.end(), [](const Timed& a, const Timed& b) {
        return a.op.qp != b.op.qp ? a.op.qp < b.op.qp : a.op.post_ts < b.op.post_ts;
    });
    WindowOptions wo;
    wo.window_ns = 10 * kMs;
    wo.max_qps = 2;
    TimeWindows tw(wo);
    Outstanding o(&tw);
    for (const Timed& t : ops) {
        tw.add(t.op, t.link);
        o.add(t.op);
    }
    for (int i = 0; i < 4; ++i) o.add(receive(1, 150, 160 + i * 10));
    o.add(rnr_failure(1, 250));
    o.finish();
    tw.finish();

    auto at = [&](int64_t ms) -> const Window& {
        return tw.windows()[static_cast<std::size_t>((kT0 + ms * kMs) / tw.window_ns() - tw.first_index())];
    };
    ASSERT_EQ(tw.window_ns(), 10 * kMs);
    int full = 0, shrunk = 0;
    for (int64_t ms = 10; ms < 90; ms += 10) {   // windows inside the first stream (not its ramp or drain)
        const auto it = at(ms).qps.find(0);
        ASSERT_NE(it, at(ms).qps.end()) << ms;
        EXPECT_EQ(it->second.max_wrs, 8u) << ms;
        EXPECT_EQ(it->second.max_bytes, 8 * kSize) << ms;
        EXPECT_EQ(it->second.bytes.quantile(0.99), 8 * kSize) << ms;
        // A completion and the post it lets in happen at the same instant: 8 in flight all the time.
        EXPECT_DOUBLE_EQ(it->second.wrs_ns / static_cast<double>(tw.window_ns()), 8.0) << ms;
        EXPECT_DOUBLE_EQ(it->second.bytes_ns / static_cast<double>(tw.window_ns()), 8.0 * kSize) << ms;
        ++full;
    }
    for (int64_t ms = 120; ms < 190; ms += 10) {
        const auto it = at(ms).qps.find(0);
        ASSERT_NE(it, at(ms).qps.end()) << ms;
        EXPECT_EQ(it->second.max_wrs, 2u) << ms;
        EXPECT_EQ(it->second.max_bytes, 2 * kSize) << ms;
        ++shrunk;
    }
    EXPECT_EQ(full, 8);
    EXPECT_EQ(shrunk, 7);
    // QP 1's receive queue: 4 posted at 150 ms; 3 left after the consumption at 160 ms, 0 after 190 ms.
    EXPECT_EQ(at(150).qps.at(1).recv_max_posted, 4u);
    EXPECT_EQ(at(150).qps.at(1).recv_min_posted, UINT32_MAX);   // no consumption in that window
    EXPECT_EQ(at(160).qps.at(1).recv_min_posted, 3u);
    EXPECT_EQ(at(190).qps.at(1).recv_min_posted, 0u);
    EXPECT_EQ(at(250).qps.at(1).rnr_events, 1u);
    EXPECT_EQ(at(240).qps.count(1), 0u);
    for (const Window& w : tw.windows()) EXPECT_EQ(w.qps.count(2), 0u);
    // Doubling the windows keeps the maxima and sums the RNR failures.
    Window merged;
    merged.merge(Window(at(160)));
    merged.merge(Window(at(170)));
    EXPECT_EQ(merged.qps.at(1).recv_min_posted, 2u);
    EXPECT_EQ(merged.qps.at(0).max_wrs, 2u);
}

// A level holds until the next sample: windows it spans without a sample of their own still show it, and the
// means integrate it over time. Windows of 10 ms. QP 0: one WRITE from 5 to 47 ms. QP 1: a WRITE posted at 20 ms
// that never completes, and 2 receives posted at 5 ms, never consumed: both held to the trace's end (47 ms).
TEST(Outstanding, LevelsHoldAcrossWindowsWithoutSamples) {
    WindowOptions wo;
    wo.window_ns = 10 * kMs;
    TimeWindows tw(wo);
    Outstanding o(&tw);
    Operation w;
    w.qp = 0;
    w.opcode = 1;
    w.bytes = kSize;
    w.post_ts = kT0 + 5 * kMs;
    w.done_ts = kT0 + 47 * kMs;
    w.signaled = true;
    tw.add(w, {0, 1});
    o.add(w);
    Operation hung = w;
    hung.qp = 1;
    hung.post_ts = kT0 + 20 * kMs;
    hung.done_ts = 0;
    hung.outcome = OpOutcome::InFlight;
    o.add(hung);
    for (int i = 0; i < 2; ++i) {
        Operation r = receive(1, 5, 0);
        r.outcome = OpOutcome::InFlight;
        o.add(r);
    }
    o.finish();
    tw.finish();
    auto at = [&](int64_t ms) -> const Window& {
        return tw.windows()[static_cast<std::size_t>((kT0 + ms * kMs) / tw.window_ns() - tw.first_index())];
    };
    ASSERT_EQ(tw.windows().size(), 5u);
    const double expected_mean[] = {0.5, 1.0, 1.0, 1.0, 0.7};   // of QP 0, windows 0-40 ms
    for (int i = 0; i < 5; ++i) {
        const WindowQpCell& c = at(i * 10).qps.at(0);
        EXPECT_EQ(c.max_wrs, 1u) << i;
        EXPECT_EQ(c.max_bytes, kSize) << i;
        EXPECT_DOUBLE_EQ(c.wrs_ns / static_cast<double>(tw.window_ns()), expected_mean[i]) << i;
        EXPECT_DOUBLE_EQ(c.bytes_ns / static_cast<double>(tw.window_ns()), expected_mean[i] * kSize) << i;
        // Samples only where the WRITE was posted (5 ms) and completed (47 ms).
        EXPECT_EQ(c.bytes.count(), i == 0 || i == 4 ? 1u : 0u) << i;
    }
    // QP 1's WRITE: 1 outstanding from 20 ms to the end; its receive queue: 2 posted from 5 ms to the end.
    EXPECT_DOUBLE_EQ(at(20).qps.at(1).wrs_ns / static_cast<double>(tw.window_ns()), 1.0);
    EXPECT_DOUBLE_EQ(at(40).qps.at(1).wrs_ns / static_cast<double>(tw.window_ns()), 0.7);
    EXPECT_EQ(at(10).qps.at(1).max_wrs, 0u);
    EXPECT_EQ(at(40).qps.at(1).max_wrs, 1u);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(at(i * 10).qps.at(1).recv_max_posted, 2u) << i;
    // Doubling the windows sums the integrals: the mean over 20 ms windows is their average.
    Window merged;
    merged.merge(Window(at(0)));
    merged.merge(Window(at(10)));
    EXPECT_DOUBLE_EQ(merged.qps.at(0).wrs_ns / static_cast<double>(2 * tw.window_ns()), 0.75);
}

// perftest's pattern: 100 unsignaled WRITEs posted one per microsecond, retired at one instant by the completion
// of the last (signaled) one, twice. The WRs completed at one instant leave one sample (the empty queue), not
// 100 of levels that never held: 200 post samples and 2 completion samples, with or without windows.
TEST(Outstanding, WrsCompletedAtOneInstantLeaveOneSample) {
    constexpr int64_t kUs = 1000;
    std::vector<Operation> ops;
    for (int batch = 0; batch < 2; ++batch)
        for (int i = 1; i <= 100; ++i) {
            Operation w;
            w.qp = 0;
            w.opcode = 1;
            w.bytes = 64;
            w.post_ts = kT0 + (batch * 200 + i) * kUs;
            w.done_ts = kT0 + (batch * 200 + 150) * kUs;
            w.signaled = i == 100;
            w.implied = i != 100;
            ops.push_back(w);
        }
    Outstanding plain;
    WindowOptions wo;
    wo.window_ns = 1000 * kUs;
    TimeWindows tw(wo);
    Outstanding windowed(&tw);
    for (const Operation& op : ops) {
        plain.add(op);
        tw.add(op, {0, 1});
        windowed.add(op);
    }
    plain.finish();
    windowed.finish();
    tw.finish();
    for (const Outstanding* o : {&plain, &windowed}) {
        ASSERT_NE(o->of(0), nullptr);
        EXPECT_EQ(o->of(0)->bytes.count(), 202u);
        EXPECT_EQ(o->of(0)->max_wrs, 100u);
        EXPECT_EQ(o->of(0)->max_bytes, 6400u);
        // The levels 64..6400 once each per batch and 0 twice: the median is 50 WRs' bucket (3 200 bytes lies in
        // [3072, 3328), upper edge 3327).
        EXPECT_EQ(o->of(0)->bytes.quantile(0.5), 3327u);
    }
    ASSERT_EQ(tw.windows().size(), 1u);
    // 1..100 WRs held one microsecond each from 1 to 100 us, then 100 to the completion at 150 us; twice.
    const WindowQpCell& c = tw.windows()[0].qps.at(0);
    EXPECT_EQ(c.bytes.count(), 202u);
    EXPECT_DOUBLE_EQ(c.wrs_ns, 2.0 * (99 * 100 / 2 * kUs + 100 * 50 * kUs));
}

TEST(IntHistogram, QuantilesWithinABucket) {
    IntHistogram h;
    for (uint64_t v = 1; v <= 1000; ++v) h.add(v);
    EXPECT_EQ(h.quantile(1.0), 1000u);
    const uint64_t p50 = h.quantile(0.5);
    EXPECT_GE(p50, 500u);
    EXPECT_LE(p50, 500u + 500u / 8);
    EXPECT_EQ(h.quantile(0.001), 1u);
}

}  // namespace
}  // namespace sigmatrace::analyzer
