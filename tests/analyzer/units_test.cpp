// The quantile histogram, the FIFO ring, run-wise statistics and traffic, the CI rule language and the report
// formatting helpers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include "analyzer/outputs/ci_rules.h"
#include "analyzer/outputs/format_units.h"
#include "analyzer/analyses/fifo_ring.h"
#include "analyzer/analyses/outstanding.h"
#include "analyzer/analyses/quantile_histogram.h"
#include "analyzer/analyses/statistics.h"
#include "analyzer/analyses/topology.h"
#include "analyzer/analyses/traffic.h"
#include "analyzer/decode/decoded_event.h"

namespace sigmatrace::analyzer {
namespace {

using nlohmann::json;

double exact_quantile(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    const auto rank = static_cast<std::size_t>(std::max(1.0, std::ceil(q * static_cast<double>(v.size()))));
    return v[rank - 1];
}

TEST(QuantileHistogram, QuantilesWithinOneBinOfExact) {
    std::mt19937_64 rng(42);
    std::lognormal_distribution<double> dist(std::log(5000.0), 1.2);  // latencies around 5 us, heavy tail
    QuantileHistogram h;
    std::vector<double> v;
    for (int i = 0; i < 200000; ++i) {
        const double x = std::round(dist(rng));
        v.push_back(x);
        h.add(x);
    }
    for (double q : {0.5, 0.9, 0.99, 0.999}) {
        const double exact = exact_quantile(v, q);
        EXPECT_NEAR(h.quantile(q), exact, exact * 0.012) << "q=" << q;
    }
    EXPECT_EQ(h.max(), *std::max_element(v.begin(), v.end()));
    EXPECT_EQ(h.count(), v.size());
}

TEST(QuantileHistogram, SmallSamplesAndZeros) {
    QuantileHistogram h;
    EXPECT_EQ(h.quantile(0.5), 0.0);
    h.add(0);
    h.add(0);
    h.add(1000);
    EXPECT_EQ(h.quantile(0.5), 0.0);
    EXPECT_EQ(h.quantile(1.0), 1000.0);
    EXPECT_EQ(h.max(), 1000.0);
    QuantileHistogram one;
    one.add(12345);
    EXPECT_EQ(one.quantile(0.5), 12345.0);  // clamped to [min, max]
    EXPECT_EQ(one.quantile(0.99), 12345.0);
}

// bin() finds integer values' bins from a table instead of a logarithm: the index must be exactly the axis's,
// everywhere (every integer up to 200 000, around every power of ten and bin edge, random ones up to 2^53).
TEST(QuantileHistogram, IntegerBinsAreTheAxisBins) {
    namespace bh = boost::histogram;
    const bh::axis::regular<double, bh::axis::transform::log> axis(2600, 1.0, 1e13);
    const QuantileHistogram h;
    uint64_t checked = 0, mismatches = 0;
    const auto check = [&](double v) {
        ++checked;
        if (h.bin(v).index != axis.index(v)) {
            if (++mismatches < 5) ADD_FAILURE() << "value " << v << ": bin " << h.bin(v).index << ", axis " << axis.index(v);
        }
    };
    for (double v = 0; v <= 200000; ++v) check(v);
    for (int i = 0; i <= 2600; ++i) {
        const double edge = std::floor(axis.value(i));
        for (double d = -2; d <= 2; ++d)
            if (edge + d >= 0) check(edge + d);
    }
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 200000; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        check(static_cast<double>(x >> (11 + i % 50)));
    }
    check(9007199254740991.0);
    check(9007199254740992.0);
    check(1e13);
    check(2.5);
    EXPECT_EQ(mismatches, 0u) << "of " << checked;
}

TEST(QuantileHistogram, MergeEqualsAddingEverything) {
    QuantileHistogram a, b, all;
    for (int i = 1; i <= 1000; ++i) {
        (i % 2 ? a : b).add(i * 10.0);
        all.add(i * 10.0);
    }
    a.merge(b);
    EXPECT_EQ(a.count(), all.count());
    EXPECT_EQ(a.quantile(0.99), all.quantile(0.99));
    EXPECT_EQ(a.max(), 10000.0);
}

// A batch of integers gives what adding them one by one gives: cells, count, min, max, sum; values of corrupt
// times (near +-2^62, a negative latency) too, with no overflow.
TEST(QuantileHistogram, AddingIntegersAsABatchEqualsAddingEachOne) {
    // 1, 2^53 - 1 and 2^53: the ends of the integer table's range, and the first value past it.
    const std::vector<int64_t> values{120, 5'000, 5'000, 7, 1'000'000'007, -3, int64_t{1} << 62, 0, 99'999, 1,
                                      (int64_t{1} << 53) - 1, int64_t{1} << 53};
    QuantileHistogram one, batch;
    for (const int64_t v : values) one.add(one.bin(static_cast<double>(v)));
    batch.add_integers(values, [](int64_t v) { return v; });
    batch.add_integers(std::vector<int64_t>{}, [](int64_t v) { return v; });   // nothing
    EXPECT_EQ(batch.count(), one.count());
    EXPECT_EQ(batch.min(), one.min());
    EXPECT_EQ(batch.max(), one.max());
    EXPECT_EQ(batch.sum(), one.sum());
    EXPECT_EQ(batch.cells(), one.cells());
    for (const double q : {0.0, 0.25, 0.5, 0.9, 1.0}) EXPECT_EQ(batch.quantile(q), one.quantile(q)) << q;
}

Operation implied_write(int64_t post_ts, uint64_t bytes, uint8_t opcode = static_cast<uint8_t>(WrOpcode::RDMA_WRITE)) {
    Operation op;
    op.proc = 0;
    op.qp = 3;
    op.opcode = opcode;
    op.implied = true;
    op.outcome = OpOutcome::Completed;
    op.post_ts = post_ts;
    op.done_ts = 1'000'000;
    op.bytes = bytes;
    return op;
}

// A run of implied sends of several sizes gives what adding each alone gives: sizes (stretches of one size are
// noted together), sums, times, posters.
TEST(OpAggregate, ARunOfSeveralSizesEqualsItsOperationsOneByOne) {
    std::vector<Operation> run;
    for (const uint64_t size : {64, 64, 64, 4096, 4096, 64, 1, 1'000'000})
        run.push_back(implied_write(500 + 10 * static_cast<int64_t>(run.size()), size));
    run[5].poster = records::Poster::gpu;
    OpAggregate whole, single;
    QuantileHistogram::Binned last_whole{-1.0, 0}, last_single{-1.0, 0};
    whole.add_implied(run, last_whole);
    for (const Operation& op : run) single.add_implied(std::span<const Operation>(&op, 1), last_single);
    whole.flush_sizes();
    single.flush_sizes();
    EXPECT_EQ(whole.count, 8u);
    EXPECT_EQ(whole.bytes, 64u * 4 + 4096 * 2 + 1 + 1'000'000);
    EXPECT_EQ(whole.bytes, single.bytes);
    EXPECT_EQ(whole.completed_bytes, single.completed_bytes);
    EXPECT_EQ(whole.gpu, 1u);
    EXPECT_EQ(whole.verbs_posted, 7u);
    EXPECT_EQ(whole.first_ts, 500);
    EXPECT_EQ(whole.last_ts, 1'000'000);
    EXPECT_EQ(whole.size_bytes.count(), 8u);
    EXPECT_EQ(whole.size_bytes.cells(), single.size_bytes.cells());
    EXPECT_EQ(whole.size_bytes.sum(), single.size_bytes.sum());
    EXPECT_EQ(whole.implied_latency_ns.cells(), single.implied_latency_ns.cells());
}

// A run of sends taken whole leaves the queue and the samples that adding each one leaves.
TEST(Outstanding, ARunEqualsItsOperationsOneByOne) {
    std::vector<Operation> earlier{implied_write(100, 64), implied_write(110, 64)};
    for (Operation& op : earlier) op.done_ts = 400;
    std::vector<Operation> run;
    for (int i = 0; i < 6; ++i)   // posted every 50 ns from 300: two before 400
        run.push_back(implied_write(300 + 50 * i, 64 + 64 * static_cast<uint64_t>(i)));
    Outstanding whole, single;
    for (const Operation& op : earlier) {
        whole.add(op);
        single.add(op);
    }
    whole.add_run(run);
    for (const Operation& op : run) single.add(op);
    const QpOutstanding* w = whole.of(3);
    const QpOutstanding* s = single.of(3);
    ASSERT_NE(w, nullptr);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(w->send_ops, 8u);
    EXPECT_EQ(w->max_wrs, 6u);   // the whole run, once 400 retired the earlier two
    EXPECT_EQ(w->max_bytes, 64u * (1 + 2 + 3 + 4 + 5 + 6));
    EXPECT_EQ(w->max_wrs, s->max_wrs);
    EXPECT_EQ(w->max_bytes, s->max_bytes);
    EXPECT_EQ(w->bytes.count(), s->bytes.count());
    for (const double q : {0.0, 0.5, 0.99, 1.0}) EXPECT_EQ(w->bytes.quantile(q), s->bytes.quantile(q)) << q;
}

// A run's operations go to their own cells: a stretch of one cell is summed, and a change of opcode (an RDMA
// READ counts the other way), of UD destination or a failure ends it.
TEST(Traffic, EachStretchOfARunGoesToItsCell) {
    std::vector<Operation> ops{implied_write(1, 10), implied_write(2, 20),
                               implied_write(3, 5, static_cast<uint8_t>(WrOpcode::RDMA_READ)),
                               implied_write(4, 7), implied_write(5, 30), implied_write(6, 40), implied_write(7, 50)};
    ops[3].outcome = OpOutcome::Failed;   // moved nothing
    ops[5].ud_ah = 0x99;                  // another destination
    Traffic traffic;
    traffic.add(ops);
    traffic.add(implied_write(8, 100));   // the first cell again, after the others
    Topology topo;
    std::map<std::tuple<bool, uint64_t>, std::pair<uint64_t, uint64_t>> cells;   // (read, ud_ah) -> bytes, ops
    for (const Traffic::PortablePending& c : traffic.export_pending(topo)) {
        EXPECT_EQ(c.qp, 3u);
        cells[{c.read, c.ud_ah}] = {c.bytes, c.ops};
    }
    using Cell = std::pair<uint64_t, uint64_t>;
    EXPECT_EQ(cells.size(), 3u);
    EXPECT_EQ((cells[{false, 0}]), (Cell{10 + 20 + 30 + 50 + 100, 5}));
    EXPECT_EQ((cells[{true, 0}]), (Cell{5, 1}));
    EXPECT_EQ((cells[{false, 0x99}]), (Cell{40, 1}));
}

json doc_with(double p99_write, uint64_t completed, uint64_t discarded, double skew_in) {
    return json{{"schema", "sigmatrace.analysis/1"},
                {"trace", {{"discarded_events", discarded}, {"discarded_packets", 0}}},
                {"ops",
                 {{"errors", 0},
                  {"total", completed},
                  {"by_opcode",
                   {{"RDMA_WRITE", {{"completed", completed}, {"count", completed}, {"latency_ns", {{"p99", p99_write}, {"p50", 100}, {"max", 9000}}}}},
                    {"RECV", {{"completed", 3}, {"count", 3}, {"latency_ns", {{"p99", 50000}, {"p50", 100}, {"max", 50000}}}}}}}}},
                {"traffic", {{"inbound_skew", skew_in}, {"outbound_skew", 1.0}}},
                {"barriers", {{"epochs", 0}, {"spread_ns", {{"p99", nullptr}}}}},
                {"findings", json::array({{{"kind", "traffic_skew"}}})}};
}

RuleResult check(const std::string& text, const json& doc, const json* base = nullptr) {
    std::string err;
    auto r = parse_rule(text, err);
    EXPECT_TRUE(r) << err;
    if (!r) return {};
    return evaluate_rule(*r, doc, base);
}

TEST(FifoRing, KeepsOrderAcrossWrapGrowthAndRemovals) {
    // Against std::deque as the model: pushes past the capacity while the head is mid-ring (growth unwraps),
    // prefix drops, and removals from the middle.
    FifoRing<int> ring;
    std::deque<int> model;
    std::mt19937 rng(7);
    int next = 0;
    for (int step = 0; step < 20000; ++step) {
        const unsigned r = rng() % 10;
        if (r < 3 || model.empty()) {
            ring.push_back(next);
            model.push_back(next++);
        } else if (r < 6) {
            ring.emplace_back() = next;   // filled in place: the slot may hold an element dropped before
            model.push_back(next++);
        } else if (r < 8) {
            const std::size_t n = 1 + rng() % model.size();
            ring.drop_front(n);
            model.erase(model.begin(), model.begin() + static_cast<std::ptrdiff_t>(n));
        } else {
            const std::size_t i = rng() % model.size();
            ring.erase(i);
            model.erase(model.begin() + static_cast<std::ptrdiff_t>(i));
        }
        ASSERT_EQ(ring.size(), model.size());
        if (!model.empty()) {
            ASSERT_EQ(ring.front(), model.front());
        }
        if (step % 97 == 0) {
            std::vector<int> seen;
            ring.for_each([&](int v) { seen.push_back(v); });
            ASSERT_EQ(seen, std::vector<int>(model.begin(), model.end())) << "at step " << step;
        }
    }
    ring.clear();
    EXPECT_TRUE(ring.empty());
    ring.push_back(42);
    EXPECT_EQ(ring[0], 42);
}

TEST(FifoRing, CopiesKeepTheirContentAndAMovedFromRingStartsEmpty) {
    // A wrapped ring: its head mid-buffer.
    FifoRing<int> ring;
    for (int v = 0; v < 8; ++v) ring.push_back(v);
    ring.drop_front(5);
    for (int v = 8; v < 12; ++v) ring.push_back(v);
    const auto items = [](const FifoRing<int>& r) {
        std::vector<int> seen;
        r.for_each([&](int v) { seen.push_back(v); });
        return seen;
    };
    const std::vector<int> want = {5, 6, 7, 8, 9, 10, 11};
    FifoRing<int> copy = ring;
    copy.push_back(12);   // grows the copy only
    EXPECT_EQ(items(ring), want);
    EXPECT_EQ(items(copy), (std::vector<int>{5, 6, 7, 8, 9, 10, 11, 12}));

    FifoRing<int> moved = std::move(ring);
    EXPECT_EQ(items(moved), want);
    EXPECT_TRUE(ring.empty());   // NOLINT(bugprone-use-after-move): a moved-from ring is specified empty
    for (int v = 0; v < 20; ++v) ring.push_back(v);   // and usable: it grows a buffer of its own
    EXPECT_EQ(ring.size(), 20u);
    EXPECT_EQ(ring[19], 19);
    EXPECT_EQ(items(moved), want);

    copy = std::move(moved);
    EXPECT_EQ(items(copy), want);
    EXPECT_TRUE(moved.empty());   // NOLINT(bugprone-use-after-move)
    moved.push_back(1);
    EXPECT_EQ(moved.front(), 1);
}

// Capture times to ns from origin, inline (the direct reader) or through the event's conversion: the same
// clamps either way.
TEST(CaptureTimes, LinearConversionKeepsNoneAndClampsWhatItCannotConvert) {
    EXPECT_EQ(capture_ns_from_origin(1'000, 0), 0u);                  // no capture time
    EXPECT_EQ(capture_ns_from_origin(1'000, 5), 1'005u);
    EXPECT_EQ(capture_ns_from_origin(-1'000, 999), 0u);               // before the origin
    EXPECT_EQ(capture_ns_from_origin(-1'000, 1'000), 0u);             // at it: cannot be told from none
    EXPECT_EQ(capture_ns_from_origin(-1'000, 1'001), 1u);
    EXPECT_EQ(capture_ns_from_origin(10, static_cast<uint64_t>(INT64_MAX) - 10), static_cast<uint64_t>(INT64_MAX));
    EXPECT_EQ(capture_ns_from_origin(10, static_cast<uint64_t>(INT64_MAX) - 9), 0u);   // overflows
    EXPECT_EQ(capture_ns_from_origin(0, UINT64_MAX), 0u);

    DecodedEvent ev;
    EXPECT_EQ(ev.capture_time(42), 42u);   // the default: the times already are ns from origin
    const uint64_t add = 7;
    ev.capture = CaptureClock::through([](const void* ctx, uint64_t t) { return t + *static_cast<const uint64_t*>(ctx); }, &add);
    EXPECT_EQ(ev.capture_time(42), 49u);
    ev.capture = CaptureClock::linear(100);
    EXPECT_EQ(ev.capture_time(42), 142u);
    EXPECT_EQ(ev.capture_time(0), 0u);     // no capture time stays none
    ev.capture = CaptureClock::linear(-1'000);
    EXPECT_EQ(ev.capture_time(999), 0u);
}

TEST(CiRules, AbsoluteRules) {
    const json d = doc_with(2000, 100, 5, 2.5);
    EXPECT_TRUE(check("discarded>0", d).failed);
    EXPECT_FALSE(check("errors>0", d).failed);
    EXPECT_TRUE(check("skew > 2", d).failed);
    EXPECT_FALSE(check("skew>3x", d).failed);
    EXPECT_TRUE(check("p99[RDMA_WRITE]>1us", d).failed);
    EXPECT_FALSE(check("p99[RDMA_WRITE]>=2.5us", d).failed);
    EXPECT_TRUE(check("p99>40us", d).failed);  // RECV's p99 is 50 us
    EXPECT_TRUE(check("findings[traffic_skew]>0", d).failed);
    EXPECT_FALSE(check("findings[error_storm]>0", d).failed);
    EXPECT_TRUE(check("findings.traffic_skew>0", d).failed);   // findings.KIND: the same count
    EXPECT_FALSE(check("findings.gray_link>0", d).failed);
    EXPECT_EQ(check("findings.traffic_skew>0", d).details.at(0), "findings[traffic_skew] = 1");
    EXPECT_TRUE(check("traffic.inbound_skew>=2.5", d).failed);
    const RuleResult r = check("p99[RDMA_WRITE]>1us", d);
    ASSERT_EQ(r.details.size(), 1u);
    EXPECT_EQ(r.details[0], "ops.by_opcode.RDMA_WRITE.latency_ns.p99 = 2 us");
}

// A stream that lost an unknown number of events has no count: `discarded` still sees the loss.
TEST(CiRules, DiscardedSeesALossOfUnknownSize) {
    json d = doc_with(2000, 100, 0, 1.0);
    EXPECT_FALSE(check("discarded>0", d).failed);
    d["trace"]["discarded_uncounted"] = 1;
    const RuleResult r = check("discarded>0", d);
    EXPECT_TRUE(r.failed);
    ASSERT_EQ(r.details.size(), 1u);
    EXPECT_EQ(r.details[0], "trace.discarded_uncounted = 1");
}

TEST(CiRules, BaselineIncrease) {
    const json old = doc_with(2000, 100, 0, 1.0);
    const json slower = doc_with(3000, 100, 0, 1.0);
    const RuleResult r = check("increase(p99)>20%", slower, &old);
    EXPECT_TRUE(r.failed);
    ASSERT_EQ(r.details.size(), 1u);  // RECV has too few samples to compare
    EXPECT_EQ(r.details[0], "ops.by_opcode.RDMA_WRITE.latency_ns.p99: 2 us -> 3 us (+50.0%)");
    EXPECT_FALSE(check("increase(p99)>60%", slower, &old).failed);
    EXPECT_FALSE(check("increase(p99)>20%", old, &old).failed);
    EXPECT_TRUE(check("decrease(p99)>20%", old, &slower).failed);
    EXPECT_TRUE(check("increase(p99)>0", slower, &old).failed);  // absolute ns
    // Without a baseline a comparison rule cannot pass silently.
    EXPECT_TRUE(check("increase(p99)>20%", slower).failed);
}

TEST(CiRules, Malformed) {
    std::string err;
    EXPECT_FALSE(parse_rule("p99", err));
    EXPECT_NE(err.find("no comparison"), std::string::npos);
    EXPECT_FALSE(parse_rule("latency>5", err));
    EXPECT_NE(err.find("unknown metric 'latency'"), std::string::npos);
    EXPECT_FALSE(parse_rule("errors>lots", err));
    EXPECT_FALSE(parse_rule("errors>5%", err));
    EXPECT_FALSE(parse_rule("increase(p99>5", err));
    EXPECT_FALSE(parse_rule("p99[RDMA_WRITE>5", err));
}

TEST(FormatUnits, HumanReadable) {
    EXPECT_EQ(format_bytes(512), "512 B");
    EXPECT_EQ(format_bytes(1536), "1.50 KiB");
    EXPECT_EQ(format_bytes(3.2 * 1024 * 1024 * 1024), "3.20 GiB");
    EXPECT_EQ(format_ns(850), "850 ns");
    EXPECT_EQ(format_ns(4560), "4.56 us");
    EXPECT_EQ(format_ns(12.3e6), "12.3 ms");
    EXPECT_EQ(format_count(1234567), "1,234,567");
    EXPECT_EQ(format_count(12), "12");
}

}  // namespace
}  // namespace sigmatrace::analyzer
