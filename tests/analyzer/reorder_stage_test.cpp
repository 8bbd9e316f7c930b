// The reordering stage (reorder_stage.h): capture order restored within the window, stable ties, deep copies,
// late events processed and counted, immediate traces passed straight through.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "analyzer/analysis.h"
#include "analyzer/ci_rules.h"
#include "analyzer/html_report.h"
#include "analyzer/reorder_stage.h"
#include "analyzer/text_report.h"
#include "record_feeder.h"

namespace sigmatrace::analyzer {
namespace {

using test::RecordFeeder;
namespace F = fields;

// What a sink saw of one event, copied while the event was valid.
struct Seen {
    EventId id;
    int64_t ts_ns;
    int64_t key;
    std::string procname;
    std::vector<uint64_t> wr_ids;
    std::vector<uint64_t> ts;
    const DecodedEvent* address;
};

struct Capture : EventSink {
    void on_event(const DecodedEvent& ev) override {
        Seen s{ev.id, ev.ts_ns, order_key(ev), std::string(ev.procname), {}, {}, &ev};
        if (ev.id == EventId::post_send)
            for (uint32_t k = 0; k < ev.u(F::post_send::n); ++k) {
                s.wr_ids.push_back(ev.at(F::post_send::wr_id, k));
                s.ts.push_back(ev.at(F::post_send::ts, k));
            }
        seen.push_back(std::move(s));
    }
    void on_ordering(const OrderingSummary& s) override { summary = s; }
    std::vector<Seen> seen;
    OrderingSummary summary;
};

constexpr int64_t kVpid = 700;

void process_info(RecordFeeder& feed, int64_t t, uint32_t defer_us) {
    st_process_info_rec pi{};
    pi.schema_version = SIGMATRACE_SCHEMA_VERSION;
    pi.schema_minor = SIGMATRACE_SCHEMA_MINOR;
    pi.pid = kVpid;
    pi.rank = 0;
    pi.hostname = "nodeA";
    pi.job_id = "";
    pi.defer_us = defer_us;
    feed.emit(t, kVpid, pi);
}

// A post_send event of `n` WRs captured at `capture`, capture + spread, ... (0: immediate, no capture times),
// emitted at `t`; wr_ids start at `first_id`; procname set so string copies can be checked.
void post(RecordFeeder& feed, int64_t t, int64_t capture, uint64_t first_id, uint32_t n = 1, int64_t spread = 0) {
    std::vector<uint64_t> ids(n);
    for (uint32_t k = 0; k < n; ++k) ids[k] = first_id + k;
    test::PostSendBatch b(std::move(ids), 64);
    if (capture)
        for (uint32_t k = 0; k < n; ++k) b.ts[k] = static_cast<uint64_t>(capture + spread * k);
    b.rec.qp = 0x1000;
    b.rec.qp_num = 100;
    const std::string name = "rank-" + std::to_string(first_id);
    feed.emit_with(t, kVpid, b.rec, [&](DecodedEvent& ev) { ev.procname = name; });
}

TEST(ReorderStage, EventsShuffledWithinTheWindowComeOutInCaptureOrderWithTheirData) {
    Capture out;
    ReorderStage stage(out, /*margin_ns=*/0);   // window = 2 x 100 us
    RecordFeeder feed(stage);
    process_info(feed, 1'000'000, 100);
    // 200 events (chains of 3 WRs of one call: one capture time) captured 1 us apart, each emitted up to 100 us
    // later; the muxer delivers by emission time.
    struct Ev {
        int64_t capture, emitted;
        uint64_t id;
    };
    std::vector<Ev> evs;
    std::mt19937 rng(42);
    std::uniform_int_distribution<int64_t> delay(0, 100'000);
    for (uint64_t i = 0; i < 200; ++i) {
        const int64_t capture = 2'000'000 + static_cast<int64_t>(i / 2) * 1000;   // pairs share a capture time
        evs.push_back({capture, capture + delay(rng), i * 10});
    }
    std::stable_sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) { return a.emitted < b.emitted; });
    for (const Ev& e : evs) post(feed, e.emitted, e.capture, e.id, 3);
    EXPECT_GT(stage.held(), 0u);
    stage.finish();

    ASSERT_EQ(out.seen.size(), 201u);
    EXPECT_EQ(out.seen[0].id, EventId::process_info);
    EXPECT_EQ(out.summary.late_events, 0u);
    EXPECT_EQ(out.summary.window_ns, 200'000);
    EXPECT_GT(out.summary.max_held, 1u);
    // Sorted by capture time; of two events captured at the same time, the one the muxer delivered first.
    std::vector<uint64_t> arrival_rank(2000);
    for (std::size_t i = 0; i < evs.size(); ++i) arrival_rank[evs[i].id] = i;
    for (std::size_t i = 1; i < out.seen.size(); ++i) {
        const Seen& s = out.seen[i];
        ASSERT_EQ(s.wr_ids.size(), 3u);
        const uint64_t id = s.wr_ids[0];
        const int64_t capture = 2'000'000 + static_cast<int64_t>(id / 20) * 1000;
        // Data intact after the copy: the feeder overwrote its buffers 200 times since.
        EXPECT_EQ(s.wr_ids, (std::vector<uint64_t>{id, id + 1, id + 2}));
        EXPECT_EQ(s.ts, (std::vector<uint64_t>(3, uint64_t(capture))));
        EXPECT_EQ(s.procname, "rank-" + std::to_string(id));
        EXPECT_EQ(s.key, capture);
        if (i > 1) {
            const Seen& prev = out.seen[i - 1];
            ASSERT_LE(prev.key, s.key) << "event " << i;
            if (prev.key == s.key) {
                EXPECT_LT(arrival_rank[prev.wr_ids[0]], arrival_rank[id]) << "tie at " << s.key;
            }
        }
    }
}

TEST(ReorderStage, MergedCallsAreReleasedElementByElementAtTheirOwnTimes) {
    Capture out;
    ReorderStage stage(out, 0);
    RecordFeeder feed(stage);
    process_info(feed, 1'000'000, 100);
    // One event merging 3 calls captured at 2.000, 2.030, 2.060 ms (wr_ids 10..12), emitted at 2.090 ms; another
    // thread's single call captured at 2.045 ms (wr_id 50), emitted at 2.095 ms.
    post(feed, 2'090'000, 2'000'000, 10, 3, 30'000);
    post(feed, 2'095'000, 2'045'000, 50);
    stage.finish();
    // 10 and 11 precede 50: one view of both; then 50; then 12.
    ASSERT_EQ(out.seen.size(), 4u);
    const std::vector<std::vector<uint64_t>> ids = {{10, 11}, {50}, {12}};
    const std::vector<std::vector<uint64_t>> times = {{2'000'000, 2'030'000}, {2'045'000}, {2'060'000}};
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const Seen& s = out.seen[i + 1];
        EXPECT_EQ(s.wr_ids, ids[i]) << "release " << i;
        EXPECT_EQ(s.ts, times[i]) << "release " << i;
        EXPECT_EQ(s.key, static_cast<int64_t>(times[i][0]));
        EXPECT_EQ(s.procname, ids[i][0] == 50 ? "rank-50" : "rank-10");
    }
    EXPECT_EQ(out.summary.late_events, 0u);
}

TEST(ReorderStage, AMergedEventNothingComesBetweenGoesOutAsOneView) {
    Capture out;
    ReorderStage stage(out, 0);
    RecordFeeder feed(stage);
    process_info(feed, 1'000'000, 100);
    post(feed, 2'090'000, 2'000'000, 10, 3, 30'000);   // 2.000, 2.030, 2.060 ms
    post(feed, 2'095'000, 2'070'000, 50);               // after all of them
    stage.finish();
    ASSERT_EQ(out.seen.size(), 3u);
    EXPECT_EQ(out.seen[1].wr_ids, (std::vector<uint64_t>{10, 11, 12}));
    EXPECT_EQ(out.seen[1].ts, (std::vector<uint64_t>{2'000'000, 2'030'000, 2'060'000}));
    EXPECT_EQ(out.seen[2].wr_ids, std::vector<uint64_t>{50});
}

TEST(ReorderStage, EventOlderThanWhatWasReleasedIsProcessedAndCounted) {
    Capture out;
    ReorderStage stage(out, 0);
    RecordFeeder feed(stage);
    process_info(feed, 1'000'000, 10);          // window 20 us
    post(feed, 2'000'000, 2'000'000, 1);
    post(feed, 3'000'000, 3'000'000, 2);        // watermark 3 ms: the first post is released
    ASSERT_EQ(out.seen.size(), 2u);
    post(feed, 3'000'100, 1'500'000, 3);        // captured 1.5 ms before, emitted far beyond its 10 us bound
    ASSERT_EQ(out.seen.size(), 3u);             // processed at once, not dropped, not held
    EXPECT_EQ(out.seen[2].wr_ids[0], 3u);
    stage.finish();
    ASSERT_EQ(out.seen.size(), 4u);
    EXPECT_EQ(out.seen[3].wr_ids[0], 2u);
    EXPECT_EQ(out.summary.late_events, 1u);
    EXPECT_EQ(out.summary.max_lateness_ns, 500'000);
}

TEST(ReorderStage, AnEventLaterThanItsBoundWidensTheWindowForWhatFollows) {
    Capture out;
    ReorderStage stage(out, 0);
    RecordFeeder feed(stage);
    process_info(feed, 1'000'000, 10);          // announced window 20 us
    post(feed, 2'000'000, 2'000'000, 1);
    post(feed, 3'000'000, 3'000'000, 2);        // releases 1
    post(feed, 3'000'100, 1'500'000, 3);        // late by 1.5 ms: processed, counted, window -> 3.0002 ms
    post(feed, 4'000'000, 4'000'000, 4);
    post(feed, 4'500'000, 2'500'000, 5);        // 2 ms late for the announced window, in time for the wider one
    stage.finish();
    std::vector<uint64_t> order;
    for (std::size_t i = 1; i < out.seen.size(); ++i) order.push_back(out.seen[i].wr_ids.at(0));
    EXPECT_EQ(order, (std::vector<uint64_t>{1, 3, 5, 2, 4}));
    EXPECT_EQ(out.summary.late_events, 1u);
    EXPECT_EQ(out.summary.window_ns, 2 * 2'000'000);
}

TEST(ReorderStage, PastItsMemoryBoundTheOldestHeldEventIsReleasedEarly) {
    Capture out;
    ReorderStage stage(out, 0, /*max_held=*/2);
    RecordFeeder feed(stage);
    process_info(feed, 1'000'000, 1000);        // window 2 ms: nothing below is due before finish()
    post(feed, 2'000'500, 2'000'300, 3);
    post(feed, 2'000'600, 2'000'100, 1);
    ASSERT_EQ(out.seen.size(), 1u);
    EXPECT_EQ(stage.held(), 2u);
    post(feed, 2'000'700, 2'000'200, 2);        // a third: the oldest (1) goes out before its time
    ASSERT_EQ(out.seen.size(), 2u);
    EXPECT_EQ(out.seen[1].wr_ids, std::vector<uint64_t>{1});
    EXPECT_EQ(stage.held(), 2u);
    // A merged event of 3 calls at 2.000180, .280, .380, the oldest held: its first element goes out alone (2
    // comes before the second), its remainder goes back, and 2 goes out to get down to the bound.
    post(feed, 2'000'800, 2'000'180, 10, 3, 100);
    ASSERT_EQ(out.seen.size(), 4u);
    EXPECT_EQ(out.seen[2].wr_ids, std::vector<uint64_t>{10});
    EXPECT_EQ(out.seen[3].wr_ids, std::vector<uint64_t>{2});
    EXPECT_EQ(stage.held(), 2u);                // 3 and the merged event's remainder
    post(feed, 2'000'900, 2'000'150, 4);        // older than what went out: processed at once, counted late
    ASSERT_EQ(out.seen.size(), 5u);
    EXPECT_EQ(out.seen[4].wr_ids, std::vector<uint64_t>{4});
    stage.finish();
    std::vector<uint64_t> rest;
    for (std::size_t i = 5; i < out.seen.size(); ++i)
        for (uint64_t id : out.seen[i].wr_ids) rest.push_back(id);
    EXPECT_EQ(rest, (std::vector<uint64_t>{11, 3, 12}));
    EXPECT_EQ(out.summary.late_events, 1u);
    EXPECT_LE(out.summary.max_held, 3u);
}

TEST(ReorderStage, LateEventsAreReportedInTheAnalysis) {
    Analysis analysis;
    ReorderStage stage(analysis, 0);
    RecordFeeder feed(stage);
    process_info(feed, 1'000'000, 10);
    post(feed, 2'000'000, 2'000'000, 1);
    post(feed, 3'000'000, 3'000'000, 2);
    post(feed, 3'000'100, 1'500'000, 3);
    stage.finish();
    const nlohmann::json doc = analysis.finish();
    EXPECT_EQ(doc["trace"]["late_events"], 1);
    EXPECT_EQ(doc["trace"]["reorder_window_ns"], 2 * 1'500'100);   // widened by the late event's 1.5 ms delay
    EXPECT_EQ(doc["trace"]["events"], 4);
    const auto late = std::find_if(doc["findings"].begin(), doc["findings"].end(),
                                   [](const nlohmann::json& f) { return f["kind"] == "late_events"; });
    ASSERT_NE(late, doc["findings"].end()) << doc["findings"].dump();
    EXPECT_EQ((*late)["evidence"]["late_events"], 1);
    EXPECT_EQ((*late)["severity"], "warning");   // its WRs never completed: the late processing may matter
    EXPECT_NE(render_text_report(doc).find("(0 discarded, 1 out of capture order)"), std::string::npos)
        << render_text_report(doc);
    EXPECT_NE(render_html_report(doc).find("<b>1</b> out of capture order"), std::string::npos);
    std::string error;
    const auto rule = parse_rule("late>0", error);
    ASSERT_TRUE(rule) << error;
    EXPECT_TRUE(evaluate_rule(*rule, doc, nullptr).failed);
}

// The same late post (processed when it came, before post 2 that the window still held), then every WR completes
// and every completion matches: the late processing changed nothing (operation times are capture times), so the
// finding is information, not a warning. (Completions in the order 1, 2, 3 would leave 3 unmatched: a warning.)
TEST(ReorderStage, LateEventsThatChangedNothingAreInformation) {
    Analysis analysis;
    ReorderStage stage(analysis, 0);
    RecordFeeder feed(stage);
    process_info(feed, 1'000'000, 10);
    post(feed, 2'000'000, 2'000'000, 1);
    post(feed, 3'000'000, 3'000'000, 2);
    post(feed, 3'000'100, 1'500'000, 3);
    test::PollBatch b({1, 3, 2}, 100);   // the order the late post left them in: every completion matches
    for (uint64_t& t : b.ts) t = 3'100'000;
    feed.emit(3'100'000, kVpid, b.rec);
    stage.finish();
    const nlohmann::json doc = analysis.finish();
    EXPECT_EQ(doc["trace"]["late_events"], 1);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["completed"], 3);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
    const auto late = std::find_if(doc["findings"].begin(), doc["findings"].end(),
                                   [](const nlohmann::json& f) { return f["kind"] == "late_events"; });
    ASSERT_NE(late, doc["findings"].end()) << doc["findings"].dump();
    EXPECT_EQ((*late)["severity"], "info");
    EXPECT_EQ((*late)["evidence"]["unmatched_completions"], 0);
}

TEST(ReorderStage, ImmediateTracesPassStraightThrough) {
    Capture out;
    ReorderStage stage(out);
    struct Probe : EventSink {   // what the stage was given, to compare addresses
        explicit Probe(EventSink& to) : next(to) {}
        void on_event(const DecodedEvent& ev) override {
            given.push_back(&ev);
            next.on_event(ev);
        }
        EventSink& next;
        std::vector<const DecodedEvent*> given;
    };
    Probe probe(stage);
    RecordFeeder feed(probe);
    process_info(feed, 1'000'000, 0);
    // Emission order is capture order in immediate mode; a timestamp going backwards (another stream) too
    // must come out as it came in.
    const std::vector<int64_t> times = {2'000'000, 2'000'500, 2'000'400, 2'001'000};
    for (std::size_t i = 0; i < times.size(); ++i) {
        post(feed, times[i], 0, 10 * (i + 1), 2);
        EXPECT_EQ(stage.held(), 0u);
        EXPECT_EQ(out.seen.size(), i + 2);   // delivered during the call
    }
    stage.finish();
    ASSERT_EQ(out.seen.size(), 5u);
    for (std::size_t i = 0; i < out.seen.size(); ++i) {
        EXPECT_EQ(out.seen[i].address, probe.given[i]) << "event " << i << " was copied";
        if (i > 0) {
            EXPECT_EQ(out.seen[i].ts_ns, times[i - 1]);
        }
    }
    EXPECT_EQ(out.summary.window_ns, 0);
    EXPECT_EQ(out.summary.max_held, 0u);
    EXPECT_EQ(out.summary.late_events, 0u);
}

TEST(ReorderStage, CaptureTimesWithoutProcessInfoStillReorder) {
    // Recording started after the process announced itself: its nonzero capture times say it defers.
    Capture out;
    ReorderStage stage(out, 0);
    RecordFeeder feed(stage);
    post(feed, 2'000'900, 2'000'500, 1);
    post(feed, 2'001'000, 2'000'100, 2);
    stage.finish();
    ASSERT_EQ(out.seen.size(), 2u);
    EXPECT_EQ(out.seen[0].wr_ids[0], 2u);
    EXPECT_EQ(out.seen[1].wr_ids[0], 1u);
    EXPECT_EQ(out.summary.window_ns, 2 * kAssumedDeferNs);
    EXPECT_EQ(out.summary.late_events, 0u);
}

}  // namespace
}  // namespace sigmatrace::analyzer
