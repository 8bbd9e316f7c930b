// The reordering stage (reorder_stage.h), fed through the element decoder as the Babeltrace2 consumer feeds it:
// capture order restored element by element within the window, stable ties, deep copies, late elements
// processed and counted once per event, immediate traces passed straight through.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "analyzer/analyses/analysis.h"
#include "analyzer/outputs/ci_rules.h"
#include "analyzer/decode/element_decoder.h"
#include "analyzer/outputs/html_report.h"
#include "analyzer/decode/reorder_stage.h"
#include "analyzer/outputs/text_report.h"
#include "record_feeder.h"
#include "support/records_words.h"

namespace sigmatrace::analyzer {
namespace {

using test::RecordFeeder;
namespace F = fields;

// What a sink saw of one event or element, copied while it was valid.
struct Seen {
    bool element = false;
    EventId id = EventId::count_;   // an element's call kind as its event id
    int64_t ts_ns = 0;              // an event's timestamp, an element's capture time
    uint64_t wr_id = 0;
    std::string procname;
    uint64_t serial = 0;
    const void* address = nullptr;
};

struct Capture : EventSink {
    void on_event(const DecodedEvent& ev) override {
        seen.push_back(Seen{false, ev.id, ev.ts_ns, 0, std::string(ev.procname), 0, &ev});
    }
    void on_element(const DataElement& e) override {
        seen.push_back(Seen{true, event_of(e.kind), e.ts_ns, e.wr_id, std::string(e.origin->procname), e.origin->serial, &e});
    }
    void on_ordering(const OrderingSummary& s) override { summary = s; }
    // The wr_ids of the elements seen from index `from` on, in order.
    std::vector<uint64_t> ids(std::size_t from = 0) const {
        std::vector<uint64_t> v;
        for (std::size_t i = from; i < seen.size(); ++i)
            if (seen[i].element) v.push_back(seen[i].wr_id);
        return v;
    }
    std::vector<Seen> seen;
    OrderingSummary summary;
};

// The stage with the element decoder in front of it, fed with records.
struct Fed {
    explicit Fed(EventSink& out, int64_t margin_ns = 0, std::size_t max_held = kMaxHeldEvents)
        : stage(out, margin_ns, max_held) {}
    ReorderStage stage;
    ElementDecoder decoder{stage};
    RecordFeeder feed{decoder};
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

// A poll_cq event of completions `ids` of QP 100, captured at `times` (one call each when they differ),
// emitted at `t`.
void poll(RecordFeeder& feed, int64_t t, std::vector<uint64_t> ids, const std::vector<int64_t>& times) {
    test::PollBatch b(std::move(ids), 100);
    for (std::size_t k = 0; k < times.size(); ++k) b.ts[k] = static_cast<uint64_t>(times[k]);
    feed.emit_with(t, kVpid, b.rec, [](DecodedEvent& ev) { ev.procname = "poller"; });
}

TEST(ReorderStage, EventsShuffledWithinTheWindowComeOutInCaptureOrderWithTheirData) {
    Capture out;
    Fed f(out);   // window = 2 x 100 us
    process_info(f.feed, 1'000'000, 100);
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
    for (const Ev& e : evs) post(f.feed, e.emitted, e.capture, e.id, 3);
    EXPECT_GT(f.stage.held(), 0u);
    f.stage.finish();

    ASSERT_EQ(out.seen.size(), 601u);
    EXPECT_FALSE(out.seen[0].element);
    EXPECT_EQ(out.seen[0].id, EventId::process_info);
    EXPECT_EQ(out.summary.late_events, 0u);
    EXPECT_EQ(out.summary.window_ns, 200'000);
    EXPECT_GT(out.summary.max_held, 3u);
    // Sorted by capture time; of two events captured at the same time, the one the muxer delivered first, each
    // event's 3 WRs together and in order.
    std::vector<uint64_t> arrival_rank(2000);
    for (std::size_t i = 0; i < evs.size(); ++i) arrival_rank[evs[i].id] = i;
    for (std::size_t i = 1; i < out.seen.size(); i += 3) {
        const uint64_t id = out.seen[i].wr_id;
        ASSERT_EQ(id % 10, 0u) << "element " << i;
        const int64_t capture = 2'000'000 + static_cast<int64_t>(id / 20) * 1000;
        for (std::size_t k = 0; k < 3; ++k) {
            const Seen& s = out.seen[i + k];
            ASSERT_TRUE(s.element);
            // Data intact after the copy: the feeder overwrote its buffers 200 times since.
            EXPECT_EQ(s.wr_id, id + k);
            EXPECT_EQ(s.ts_ns, capture);
            EXPECT_EQ(s.procname, "rank-" + std::to_string(id));
            EXPECT_EQ(s.id, EventId::post_send);
        }
        if (i > 1) {
            const Seen& prev = out.seen[i - 1];
            ASSERT_LE(prev.ts_ns, capture) << "element " << i;
            if (prev.ts_ns == capture) {
                EXPECT_LT(arrival_rank[prev.wr_id - 2], arrival_rank[id]) << "tie at " << capture;
            }
        }
    }
}

TEST(ReorderStage, MergedCallsAreReleasedElementByElementAtTheirOwnTimes) {
    Capture out;
    Fed f(out);
    process_info(f.feed, 1'000'000, 100);
    // One event merging 3 calls captured at 2.000, 2.030, 2.060 ms (wr_ids 10..12), emitted at 2.090 ms; another
    // thread's single call captured at 2.045 ms (wr_id 50), emitted at 2.095 ms.
    post(f.feed, 2'090'000, 2'000'000, 10, 3, 30'000);
    post(f.feed, 2'095'000, 2'045'000, 50);
    f.stage.finish();
    ASSERT_EQ(out.seen.size(), 5u);
    EXPECT_EQ(out.ids(), (std::vector<uint64_t>{10, 11, 50, 12}));
    const std::vector<int64_t> times = {2'000'000, 2'030'000, 2'045'000, 2'060'000};
    for (std::size_t i = 0; i < times.size(); ++i) {
        const Seen& s = out.seen[i + 1];
        EXPECT_EQ(s.ts_ns, times[i]) << "release " << i;
        EXPECT_EQ(s.procname, s.wr_id == 50 ? "rank-50" : "rank-10");
    }
    EXPECT_EQ(out.seen[1].serial, out.seen[4].serial);   // 10 and 12: one event
    EXPECT_NE(out.seen[1].serial, out.seen[3].serial);
    EXPECT_EQ(out.summary.late_events, 0u);
}

// The case whole-event keys cannot order: thread B's poll [c0@1, c1@3] emitted first, thread A's post [p1@2]
// that c1 completes emitted after it; every element goes out at its own capture time: c0, p1, c1.
TEST(ReorderStage, AnotherThreadsPostGoesBetweenTheCompletionsOfOnePoll) {
    Capture out;
    Fed f(out);
    process_info(f.feed, 1'000'000, 100);
    poll(f.feed, 2'090'000, {7, 11}, {2'001'000, 2'003'000});
    post(f.feed, 2'095'000, 2'002'000, 11);
    f.stage.finish();
    ASSERT_EQ(out.seen.size(), 4u);
    EXPECT_EQ(out.seen[1].id, EventId::poll_cq);
    EXPECT_EQ(out.seen[1].wr_id, 7u);
    EXPECT_EQ(out.seen[1].ts_ns, 2'001'000);
    EXPECT_EQ(out.seen[2].id, EventId::post_send);
    EXPECT_EQ(out.seen[2].wr_id, 11u);
    EXPECT_EQ(out.seen[2].ts_ns, 2'002'000);
    EXPECT_EQ(out.seen[3].id, EventId::poll_cq);
    EXPECT_EQ(out.seen[3].wr_id, 11u);
    EXPECT_EQ(out.seen[3].ts_ns, 2'003'000);
    EXPECT_EQ(out.seen[3].procname, "poller");
    EXPECT_EQ(out.summary.late_events, 0u);

    // Through the analysis: c1 completes p1 (posted before it), c0 matches nothing.
    Analysis analysis;
    Fed g(analysis);
    process_info(g.feed, 1'000'000, 100);
    poll(g.feed, 2'090'000, {7, 11}, {2'001'000, 2'003'000});
    post(g.feed, 2'095'000, 2'002'000, 11);
    g.stage.finish();
    const nlohmann::json doc = analysis.finish();
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["completed"], 1);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["latency_ns"]["max"], 1000);
    EXPECT_EQ(doc["trace"]["events"], 3);
}

TEST(ReorderStage, AMergedEventNothingComesBetweenGoesOutWhole) {
    Capture out;
    Fed f(out);
    process_info(f.feed, 1'000'000, 100);
    post(f.feed, 2'090'000, 2'000'000, 10, 3, 30'000);   // 2.000, 2.030, 2.060 ms
    post(f.feed, 2'095'000, 2'070'000, 50);               // after all of them
    f.stage.finish();
    ASSERT_EQ(out.seen.size(), 5u);
    EXPECT_EQ(out.ids(), (std::vector<uint64_t>{10, 11, 12, 50}));
    EXPECT_EQ(out.seen[3].ts_ns, 2'060'000);
    EXPECT_EQ(out.summary.max_held, 4u);
}

TEST(ReorderStage, EventOlderThanWhatWasReleasedIsProcessedAndCounted) {
    Capture out;
    Fed f(out);
    process_info(f.feed, 1'000'000, 10);          // window 20 us
    post(f.feed, 2'000'000, 2'000'000, 1);
    post(f.feed, 3'000'000, 3'000'000, 2);        // watermark 3 ms: the first post is released
    ASSERT_EQ(out.seen.size(), 2u);
    post(f.feed, 3'000'100, 1'500'000, 3, 2);     // captured 1.5 ms before, emitted far beyond its 10 us bound
    ASSERT_EQ(out.seen.size(), 4u);               // processed at once, not dropped, not held
    EXPECT_EQ(out.ids(), (std::vector<uint64_t>{1, 3, 4}));
    f.stage.finish();
    EXPECT_EQ(out.ids(), (std::vector<uint64_t>{1, 3, 4, 2}));
    EXPECT_EQ(out.summary.late_events, 1u);       // one event, of two late elements
    EXPECT_EQ(out.summary.max_lateness_ns, 500'000);
}

TEST(ReorderStage, AnEventLaterThanItsBoundWidensTheWindowForWhatFollows) {
    Capture out;
    Fed f(out);
    process_info(f.feed, 1'000'000, 10);          // announced window 20 us
    post(f.feed, 2'000'000, 2'000'000, 1);
    post(f.feed, 3'000'000, 3'000'000, 2);        // releases 1
    post(f.feed, 3'000'100, 1'500'000, 3);        // late by 1.5 ms: processed, counted, window -> 3.0002 ms
    post(f.feed, 4'000'000, 4'000'000, 4);
    post(f.feed, 4'500'000, 2'500'000, 5);        // 2 ms late for the announced window, in time for the wider one
    f.stage.finish();
    EXPECT_EQ(out.ids(), (std::vector<uint64_t>{1, 3, 5, 2, 4}));
    EXPECT_EQ(out.summary.late_events, 1u);
    EXPECT_EQ(out.summary.window_ns, 2 * 2'000'000);
}

TEST(ReorderStage, PastItsMemoryBoundTheOldestHeldElementIsReleasedEarly) {
    Capture out;
    Fed f(out, 0, /*max_held=*/2);
    process_info(f.feed, 1'000'000, 1000);        // window 2 ms: nothing below is due before finish()
    post(f.feed, 2'000'500, 2'000'300, 3);
    post(f.feed, 2'000'600, 2'000'100, 1);
    ASSERT_EQ(out.seen.size(), 1u);
    EXPECT_EQ(f.stage.held(), 2u);
    post(f.feed, 2'000'700, 2'000'200, 2);        // a third: the oldest (1) goes out before its time
    EXPECT_EQ(out.ids(), std::vector<uint64_t>{1});
    EXPECT_EQ(f.stage.held(), 2u);
    // A merged event of 3 calls at 2.000180, .280, .380: its first element is the oldest held, so it goes out
    // as soon as it comes in; the second (.280) then makes 3 held, and the oldest (2) goes out; the third
    // (.380) makes 3 held again, and the oldest (.280) goes out.
    post(f.feed, 2'000'800, 2'000'180, 10, 3, 100);
    EXPECT_EQ(out.ids(), (std::vector<uint64_t>{1, 10, 2, 11}));
    EXPECT_EQ(f.stage.held(), 2u);                // 3 and 12
    post(f.feed, 2'000'900, 2'000'150, 4);        // older than what went out: processed at once, counted late
    EXPECT_EQ(out.ids(), (std::vector<uint64_t>{1, 10, 2, 11, 4}));
    f.stage.finish();
    EXPECT_EQ(out.ids(), (std::vector<uint64_t>{1, 10, 2, 11, 4, 3, 12}));
    EXPECT_EQ(out.summary.late_events, 1u);
    EXPECT_EQ(out.summary.max_held, 3u);
}

TEST(ReorderStage, LateEventsAreReportedInTheAnalysis) {
    Analysis analysis;
    Fed f(analysis);
    process_info(f.feed, 1'000'000, 10);
    post(f.feed, 2'000'000, 2'000'000, 1);
    post(f.feed, 3'000'000, 3'000'000, 2);
    post(f.feed, 3'000'100, 1'500'000, 3);
    f.stage.finish();
    const nlohmann::json doc = analysis.finish();
    EXPECT_EQ(doc["trace"]["late_events"], 1);
    EXPECT_EQ(doc["trace"]["reorder_window_ns"], 2 * 1'500'100);   // widened by the late event's 1.5 ms delay
    EXPECT_EQ(doc["trace"]["events"], 4);
    const auto late = std::find_if(doc["findings"].begin(), doc["findings"].end(),
                                   [](const nlohmann::json& x) { return x["kind"] == "late_events"; });
    ASSERT_NE(late, doc["findings"].end()) << doc["findings"].dump();
    EXPECT_EQ((*late)["evidence"]["late_events"], 1);
    EXPECT_EQ((*late)["severity"], "warning");   // its WRs never completed: the late processing may matter
    EXPECT_NE(render_text_report(doc).find("(0 discarded, 1 out of capture order)"), std::string::npos)
        << render_text_report(doc);
    EXPECT_NE(render_html_report(doc, std::nullopt).find("<b>1</b> out of capture order"), std::string::npos);
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
    Fed f(analysis);
    process_info(f.feed, 1'000'000, 10);
    post(f.feed, 2'000'000, 2'000'000, 1);
    post(f.feed, 3'000'000, 3'000'000, 2);
    post(f.feed, 3'000'100, 1'500'000, 3);
    test::PollBatch b({1, 3, 2}, 100);   // the order the late post left them in: every completion matches
    for (uint64_t& t : b.ts) t = 3'100'000;
    f.feed.emit(3'100'000, kVpid, b.rec);
    f.stage.finish();
    const nlohmann::json doc = analysis.finish();
    EXPECT_EQ(doc["trace"]["late_events"], 1);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["completed"], 3);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
    const auto late = std::find_if(doc["findings"].begin(), doc["findings"].end(),
                                   [](const nlohmann::json& x) { return x["kind"] == "late_events"; });
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
        void on_element(const DataElement& e) override {
            given.push_back(&e);
            next.on_element(e);
        }
        EventSink& next;
        std::vector<const void*> given;
    };
    Probe probe(stage);
    ElementDecoder decoder(probe);
    RecordFeeder feed(decoder);
    process_info(feed, 1'000'000, 0);
    // Emission order is capture order in immediate mode; a timestamp going backwards (another stream) too
    // must come out as it came in.
    const std::vector<int64_t> times = {2'000'000, 2'000'500, 2'000'400, 2'001'000};
    for (std::size_t i = 0; i < times.size(); ++i) {
        post(feed, times[i], 0, 10 * (i + 1), 2);
        EXPECT_EQ(stage.held(), 0u);
        EXPECT_EQ(out.seen.size(), 2 * i + 3);   // delivered during the call
    }
    stage.finish();
    ASSERT_EQ(out.seen.size(), 9u);
    for (std::size_t i = 0; i < out.seen.size(); ++i) {
        EXPECT_EQ(out.seen[i].address, probe.given[i]) << "item " << i << " was copied";
        if (i > 0) {
            EXPECT_EQ(out.seen[i].ts_ns, times[(i - 1) / 2]);   // no capture time: the event's
            EXPECT_EQ(out.seen[i].wr_id, 10 * ((i - 1) / 2 + 1) + (i - 1) % 2);
        }
    }
    EXPECT_EQ(out.summary.window_ns, 0);
    EXPECT_EQ(out.summary.max_held, 0u);
    EXPECT_EQ(out.summary.late_events, 0u);
}

TEST(ReorderStage, CaptureTimesWithoutProcessInfoStillReorder) {
    // Recording started after the process announced itself: its nonzero capture times say it defers.
    Capture out;
    Fed f(out);
    post(f.feed, 2'000'900, 2'000'500, 1);
    post(f.feed, 2'001'000, 2'000'100, 2);
    f.stage.finish();
    EXPECT_EQ(out.ids(), (std::vector<uint64_t>{2, 1}));
    EXPECT_EQ(out.seen.size(), 2u);
    EXPECT_EQ(out.summary.window_ns, 2 * kAssumedDeferNs);
    EXPECT_EQ(out.summary.late_events, 0u);
}

// A records carrier held in the window goes out after its elements with every field but its words, which only
// the element decoder in front of the stage reads.
TEST(ReorderStage, AHeldRecordsCarrierKeepsItsFieldsButNotItsWords) {
    struct Carriers : Capture {
        void on_event(const DecodedEvent& ev) override {
            Capture::on_event(ev);
            if (ev.id != EventId::deferred_records) return;
            words.push_back(ev.f[F::deferred_records::words].seq_len);
            lost.push_back(ev.u(F::deferred_records::lost));
            n.push_back(ev.u(F::deferred_records::n));
        }
        std::vector<uint32_t> words;
        std::vector<uint64_t> lost, n;
    } out;
    Fed f(out);
    process_info(f.feed, 1'000'000, 100);   // window 200 us: the carrier below is held until finish()
    records::SendFixed fixed{};
    fixed.qp = 0x1000;
    fixed.qp_num = 100;
    fixed.ret = 2;
    std::vector<records::SendEntry> wrs(2, records::SendEntry{});
    wrs[0].wr_id = 1;
    wrs[1].wr_id = 2;
    const std::vector<uint64_t> words = testing::encode_words({testing::TestRecord::send(2'000'000, fixed, wrs)});
    st_deferred_records_rec r{};
    r.layout = records::kLayout;
    r.n = static_cast<uint32_t>(words.size());
    r.words = words.data();
    r.lost = 7;
    f.feed.emit(2'000'050, kVpid, r);
    EXPECT_GT(f.stage.held(), 0u);
    f.stage.finish();
    EXPECT_EQ(out.ids(), (std::vector<uint64_t>{1, 2}));
    ASSERT_EQ(out.words.size(), 1u);
    EXPECT_EQ(out.words[0], 0u);
    EXPECT_EQ(out.lost[0], 7u);
    EXPECT_EQ(out.n[0], words.size());
}

// Elements held in the window keep their extra fields (a UD send's address handle and destination, an error
// completion's vendor error) after the element decoder has moved on to other events: the run keeps its own.
TEST(ReorderStage, HeldElementsKeepTheirExtraFields) {
    struct Extras : Capture {
        void on_element(const DataElement& e) override {
            Capture::on_element(e);
            extras.push_back(e.extra());
        }
        std::vector<ElementExtra> extras;
    } out;
    Fed f(out);
    process_info(f.feed, 1'000'000, 100);   // window 200 us: the carriers below are held until finish()
    auto carrier = [&](int64_t t, const std::vector<testing::TestRecord>& recs) {
        const std::vector<uint64_t> words = testing::encode_words(recs);
        f.feed.emit_words(t, kVpid, words);
    };
    records::SendFixed fixed{};
    fixed.qp = 0x1000;
    fixed.qp_num = 100;
    std::vector<records::SendEntry> wrs(3, records::SendEntry{});
    for (uint64_t k = 0; k < 3; ++k) wrs[k].wr_id = k + 1;
    wrs[0].ah = 0xa11;
    wrs[0].remote_qpn = 0x51;
    wrs[2].ah = 0xa13;
    wrs[2].remote_qpn = 0x53;
    records::PollFixed pf{};
    pf.cq = 0x2000;
    std::vector<records::CompletionEntry> wcs(1, records::CompletionEntry{});
    wcs[0].wr_id = 4;
    wcs[0].qp_num = 100;
    wcs[0].status = 5;
    wcs[0].vendor_err = 0x81;
    carrier(2'000'050, {testing::TestRecord::send(2'000'000, fixed, wrs), testing::TestRecord::poll(2'000'010, pf, wcs)});
    // A later carrier, with extra fields of its own, replaces the decoder's before anything is released.
    std::vector<records::SendEntry> later(1, records::SendEntry{});
    later[0].wr_id = 5;
    later[0].ah = 0xb00;
    later[0].remote_qpn = 0x99;
    carrier(2'000'090, {testing::TestRecord::send(2'000'080, fixed, later)});
    EXPECT_EQ(f.stage.held(), 7u);   // five elements and two carriers
    f.stage.finish();
    ASSERT_EQ(out.ids(), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
    ASSERT_EQ(out.extras.size(), 5u);
    EXPECT_EQ(out.extras[0].ah, 0xa11u);
    EXPECT_EQ(out.extras[0].remote_qpn, 0x51u);
    EXPECT_EQ(out.extras[1], ElementExtra{});
    EXPECT_EQ(out.extras[2].ah, 0xa13u);
    EXPECT_EQ(out.extras[2].remote_qpn, 0x53u);
    EXPECT_EQ(out.extras[3].vendor_err, 0x81u);
    EXPECT_EQ(out.extras[3].ah, 0u);
    EXPECT_EQ(out.extras[4].ah, 0xb00u);
    EXPECT_EQ(out.extras[4].remote_qpn, 0x99u);
}

}  // namespace
}  // namespace sigmatrace::analyzer
