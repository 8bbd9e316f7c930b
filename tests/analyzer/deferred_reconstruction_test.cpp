// Operation reconstruction on deferred-emission events (schema minor 2): each WR and each completion is timed
// by its element's capture time (`ts`), not by its event's timestamp, and the reordering stage puts a poll
// emitted before the post it completes back behind that post. Exact nanoseconds throughout.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <sigmatrace/deferred_records.h>
#include <sigmatrace/deferred_records_wire.h>

#include "analyzer/analyses/analysis.h"
#include "analyzer/outputs/event_dump.h"
#include "analyzer/decode/element_decoder.h"
#include "analyzer/decode/reorder_stage.h"
#include "record_feeder.h"
#include "support/records_words.h"

namespace sigmatrace::analyzer {
namespace {

using test::RecordFeeder;

constexpr int64_t kVpid = 800;
constexpr int64_t kThreadA = 801, kThreadB = 802;   // poster and poller threads of one process
constexpr uint32_t kDeferUs = 1000;

struct Ops : OpListener {
    void on_operation(const Operation& op) override { ops.push_back(op); }
    std::vector<Operation> ops;
};

// One deferring process with an RC QP (handle 0x1000, QPN 100) on CQ 0xcc.
struct DeferredWorld {
    Analysis analysis;
    ReorderStage stage{analysis};
    ElementDecoder decoder{stage};  // in front of the stage, as in the Babeltrace2 consumer
    Ops ops;
    int64_t t = 1'000'000;

    RecordFeeder feed;

    // through_stage false: events go straight to the analysis in emission order (what the stage fixes).
    // (Every event goes through the element decoder in front of the stage; it passes other events on as they are.)
    explicit DeferredWorld(bool through_stage = true)
        : feed(through_stage ? static_cast<EventSink&>(decoder) : static_cast<EventSink&>(analysis)) {
        analysis.add_listener(&ops);
    }

    void setup() {
        st_process_info_rec pi{};
        pi.schema_version = SIGMATRACE_SCHEMA_VERSION;
        pi.schema_minor = SIGMATRACE_SCHEMA_MINOR;
        pi.pid = kVpid;
        pi.rank = 0;
        pi.world_size = 1;
        pi.hostname = "nodeA";
        pi.job_id = "";
        pi.defer_us = kDeferUs;
        feed.emit(t++, kVpid, pi);
        st_device_open_rec d{};
        d.ctx = 0xc0;
        d.device = "mlx0";
        feed.emit(t++, kVpid, d);
        st_cq_create_rec c{};
        c.ctx = 0xc0;
        c.cq = 0xcc;
        feed.emit(t++, kVpid, c);
        st_qp_create_rec q{};
        q.ctx = 0xc0;
        q.qp = 0x1000;
        q.qp_num = 100;
        q.qp_type = 2;
        q.send_cq = q.recv_cq = 0xcc;
        q.max_send_wr = 64;
        q.max_recv_wr = 64;
        feed.emit(t++, kVpid, q);
    }
    // A post_send event (thread A) of RDMA WRITEs captured at `ts`, emitted at `emitted`; signaled unless
    // `unsignaled` says otherwise for the WR.
    void post(int64_t emitted, std::vector<uint64_t> wr_ids, std::vector<uint64_t> ts, std::vector<bool> unsignaled = {}) {
        test::PostSendBatch b(std::move(wr_ids));
        b.ts = std::move(ts);
        for (std::size_t i = 0; i < unsignaled.size(); ++i)
            if (unsignaled[i]) b.send_flags[i] = 0;
        b.point();
        b.rec.qp = 0x1000;
        b.rec.qp_num = 100;
        feed.emit_with(emitted, kVpid, b.rec, [](DecodedEvent& ev) { ev.vtid = kThreadA; });
    }
    // A poll_cq event (thread B) of successful RDMA WRITE completions polled at `ts`, emitted at `emitted`.
    void poll(int64_t emitted, std::vector<uint64_t> wr_ids, std::vector<uint64_t> ts) {
        test::PollBatch b(std::move(wr_ids), 100);
        b.ts = std::move(ts);
        b.point();
        feed.emit_with(emitted, kVpid, b.rec, [](DecodedEvent& ev) { ev.vtid = kThreadB; });
    }
    nlohmann::json finish() {
        stage.finish();
        return analysis.finish();
    }
};

TEST(DeferredReconstruction, PollEmittedBeforeItsPostIsMatchedAfterReordering) {
    DeferredWorld w;
    w.setup();
    constexpr int64_t kPost = 5'000'000, kDone = kPost + 12'345;
    // Thread B's poller emitted its event right away; thread A's post waited 900 us in its ring.
    w.poll(kDone + 100, {7}, {uint64_t(kDone)});
    w.post(kPost + 900'000, {7}, {uint64_t(kPost)});
    const nlohmann::json doc = w.finish();
    ASSERT_EQ(w.ops.ops.size(), 1u);
    const Operation& op = w.ops.ops[0];
    EXPECT_EQ(op.outcome, OpOutcome::Completed);
    EXPECT_EQ(op.wr_id, 7u);
    EXPECT_EQ(op.post_ts, kPost);
    EXPECT_EQ(op.done_ts, kDone);
    EXPECT_EQ(op.done_ts - op.post_ts, 12'345);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["latency_ns"]["max"], 12'345);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
    EXPECT_EQ(doc["trace"]["late_events"], 0);
    EXPECT_EQ(doc["trace"]["reorder_window_ns"], 2 * 1'000'000 + kReorderMarginNs);
}

TEST(DeferredReconstruction, WithoutTheStageThatPollFindsNothing) {
    // The premise of the test above: fed in emission order straight to the analysis, the completion comes
    // before its post and stays unmatched (and the WR in flight).
    DeferredWorld w(/*through_stage=*/false);
    w.setup();
    w.poll(5'012'445, {7}, {5'012'345});
    w.post(5'900'000, {7}, {5'000'000});
    const nlohmann::json doc = w.analysis.finish();
    ASSERT_EQ(w.ops.ops.size(), 1u);
    EXPECT_EQ(w.ops.ops[0].outcome, OpOutcome::InFlight);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 1);
}

TEST(DeferredReconstruction, MergedPostAndPollTimeEachElementByItsCall) {
    DeferredWorld w;
    w.setup();
    // Three ibv_post_send calls merged into one event, then three polls merged into one; each completion
    // completes the WR of the same index.
    const std::vector<uint64_t> posted = {6'000'000, 6'000'250, 6'000'700};
    const std::vector<uint64_t> polled = {6'001'000, 6'001'900, 6'003'100};
    w.post(6'400'000, {1, 2, 3}, posted);
    w.poll(6'500'000, {1, 2, 3}, polled);
    const nlohmann::json doc = w.finish();
    ASSERT_EQ(w.ops.ops.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        const Operation& op = w.ops.ops[i];
        EXPECT_EQ(op.wr_id, i + 1);
        EXPECT_EQ(op.outcome, OpOutcome::Completed);
        EXPECT_FALSE(op.implied);
        EXPECT_EQ(op.post_ts, static_cast<int64_t>(posted[i])) << "WR " << i + 1;
        EXPECT_EQ(op.done_ts, static_cast<int64_t>(polled[i])) << "WR " << i + 1;
    }
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["latency_ns"]["max"], 2400);   // 6'003'100 - 6'000'700
    // The trace starts at the first capture, not at the first post event's emission.
    EXPECT_EQ(doc["trace"]["start_ns"], 1'000'000);
    // Released element by element, but each counted as the one event the trace holds.
    EXPECT_EQ(doc["trace"]["events_by_type"]["post_send"], 1);
    EXPECT_EQ(doc["trace"]["events_by_type"]["poll_cq"], 1);
    EXPECT_EQ(doc["trace"]["events"], 4 + 2);
}

TEST(DeferredReconstruction, MergedPollSpanningAnotherThreadsPostIsOrderedPerElement) {
    // Thread B's merged poll [c0@1, c1@3] and thread A's post [p1@2], c1 completing p1 (us after kT): ordering
    // whole events by their first element would process c1 before p1.
    constexpr int64_t kT = 5'000'000;
    DeferredWorld w;
    w.setup();
    w.post(kT + 100, {20}, {uint64_t(kT)});                       // p0@0, completed by c0
    w.poll(kT + 3'100, {20, 21}, {uint64_t(kT + 1'000), uint64_t(kT + 3'000)});
    w.post(kT + 3'200, {21}, {uint64_t(kT + 2'000)});             // p1@2, emitted after the poll
    const nlohmann::json doc = w.finish();
    ASSERT_EQ(w.ops.ops.size(), 2u);
    for (const Operation& op : w.ops.ops) EXPECT_EQ(op.outcome, OpOutcome::Completed) << "wr_id " << op.wr_id;
    EXPECT_EQ(w.ops.ops[0].wr_id, 20u);
    EXPECT_EQ(w.ops.ops[0].done_ts - w.ops.ops[0].post_ts, 1'000);
    EXPECT_EQ(w.ops.ops[1].wr_id, 21u);
    EXPECT_EQ(w.ops.ops[1].post_ts, kT + 2'000);
    EXPECT_EQ(w.ops.ops[1].done_ts, kT + 3'000);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
    for (const auto& warning : doc["warnings"])   // (the peer is not traced here: that warning is expected)
        EXPECT_EQ(warning.get<std::string>().find("matched no posted"), std::string::npos) << warning;
}

// What failed in CI (the ASan build, both cores busy): ib_write_bw's last records were drained by the SCHED_IDLE
// emitter 108 ms after their captures, past the 100 ms the window could then widen to. Its events format
// merged them into posts [p1@0, p2@10 us] and [p3@30 us] and a poll [c1@5 us, c3@35 us] emitted between them; c3
// completes the unsignaled p2 and p3. Processed in emission order, c3 came before p3 and p3 stayed in flight.
TEST(DeferredReconstruction, ADrainEmittedLongAfterItsCapturesIsStillOrderedPerElement) {
    constexpr int64_t kT = 5'000'000, kUs = 1'000, kLate = 150'000'000;
    DeferredWorld w;
    w.setup();
    w.post(kT - 900 * kUs, {0}, {uint64_t(kT - 1'000 * kUs)});   // earlier traffic, emitted in time
    w.poll(kT - 800 * kUs, {0}, {uint64_t(kT - 950 * kUs)});
    w.post(kT + kLate, {1, 2}, {uint64_t(kT), uint64_t(kT + 10 * kUs)}, {false, true});
    w.poll(kT + kLate + 1, {1, 3}, {uint64_t(kT + 5 * kUs), uint64_t(kT + 35 * kUs)});
    w.post(kT + kLate + 2, {3}, {uint64_t(kT + 30 * kUs)});
    const nlohmann::json doc = w.finish();
    ASSERT_EQ(w.ops.ops.size(), 4u);
    std::map<uint64_t, const Operation*> by_id;
    for (const Operation& op : w.ops.ops) {
        EXPECT_EQ(op.outcome, OpOutcome::Completed) << "wr_id " << op.wr_id;
        by_id[op.wr_id] = &op;
    }
    ASSERT_EQ(by_id.size(), 4u);
    EXPECT_EQ(by_id[1]->done_ts, kT + 5 * kUs);
    EXPECT_EQ(by_id[2]->done_ts, kT + 35 * kUs);   // implied by c3
    EXPECT_EQ(by_id[3]->post_ts, kT + 30 * kUs);
    EXPECT_EQ(by_id[3]->done_ts, kT + 35 * kUs);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
    EXPECT_EQ(doc["ops"]["implied"], 1);
    EXPECT_EQ(doc["trace"]["late_events"], 0);
    EXPECT_EQ(doc["trace"]["reorder_window_ns"], 2 * kLate + kReorderMarginNs);   // widened by the drain's first event
}

// A delay past the cap still widens the window, to the cap: what is ordered within it is.
TEST(DeferredReconstruction, ADelayPastTheCapWidensTheWindowToTheCap) {
    constexpr int64_t kT = 5'000'000, kUs = 1'000, kLate = kMaxReorderWindowNs + 5'000'000;
    DeferredWorld w;
    w.setup();
    w.post(kT + kLate, {1}, {uint64_t(kT)});
    w.poll(kT + kLate + 1, {1}, {uint64_t(kT + 5 * kUs)});
    const nlohmann::json doc = w.finish();
    EXPECT_EQ(doc["trace"]["reorder_window_ns"], kMaxReorderWindowNs);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
}

TEST(DeferredReconstruction, ZeroCaptureTimesMeanTheEventTimestamp) {
    // Immediate mode writes zeros; a trace of schema minor 1 has no `ts` at all.
    DeferredWorld w;
    w.setup();
    w.post(7'000'000, {1, 2}, {0, 0});
    w.poll(7'010'000, {2}, {0});
    const nlohmann::json doc = w.finish();
    ASSERT_EQ(w.ops.ops.size(), 2u);
    EXPECT_EQ(w.ops.ops[1].post_ts, 7'000'000);
    EXPECT_EQ(w.ops.ops[1].done_ts, 7'010'000);
    // An all-zero or empty `ts` is not malformed (the peer is not traced here: that warning is expected).
    for (const auto& warning : doc["warnings"])
        EXPECT_EQ(warning.get<std::string>().find("malformed"), std::string::npos) << warning;
}


// ---- deferred_records events (schema minor 4): the tracer's records, decoded into elements before the stage

// A one-WR signaled RDMA WRITE post (wr_id, QP 0x1000/100) captured at `post_ts` and its completion polled on CQ
// 0xcc at `poll_ts` (ns from origin, as the consumer hands them over): ring records, encoded as the tracer does.
std::vector<testing::TestRecord> post_and_poll(uint64_t wr_id, uint64_t post_ts, uint64_t poll_ts) {
    using namespace records;
    std::vector<testing::TestRecord> r;
    r.push_back(testing::TestRecord::send(
        post_ts, SendFixed{0x1000, 100, 0, -1, 1, 0, 0},
        {SendEntry{wr_id, 0xabc000, 0, 2 /* SIGNALED */, 4096, 0x11, 0, 0, 1, 0 /* RDMA_WRITE */, 0}}));
    CompletionEntry c{};
    c.wr_id = wr_id;
    c.qp_num = 100;
    c.opcode = 1;  // IBV_WC_RDMA_WRITE
    r.push_back(testing::TestRecord::poll(poll_ts, PollFixed{0xcc, 1, 0}, {c}));
    return r;
}
std::vector<uint64_t> post_and_poll_words(uint64_t wr_id, uint64_t post_ts, uint64_t poll_ts) {
    return testing::encode_words(post_and_poll(wr_id, post_ts, poll_ts));
}

void emit_records(DeferredWorld& w, int64_t emitted, const std::vector<uint64_t>& words, uint32_t layout = records::kLayout) {
    st_deferred_records_rec r{};
    r.layout = layout;
    r.n = static_cast<uint32_t>(words.size());
    r.words = words.data();
    w.feed.emit_with(emitted, kVpid, r, [](DecodedEvent& ev) { ev.vtid = kThreadA; });
}

bool warns_malformed(const nlohmann::json& doc) {
    for (const auto& warning : doc["warnings"])
        if (warning.get<std::string>().find("malformed") != std::string::npos) return true;
    return false;
}

TEST(DeferredRecords, ACallsRecordIsReconstructedLikeItsEvent) {
    DeferredWorld w;
    w.setup();
    constexpr uint64_t kPost = 5'000'000, kDone = kPost + 7'777;
    emit_records(w, kDone + 400'000, post_and_poll_words(9, kPost, kDone));
    const nlohmann::json doc = w.finish();
    ASSERT_EQ(w.ops.ops.size(), 1u);
    const Operation& op = w.ops.ops[0];
    EXPECT_EQ(op.outcome, OpOutcome::Completed);
    EXPECT_EQ(op.wr_id, 9u);
    EXPECT_EQ(op.bytes, 4096u);
    EXPECT_EQ(op.post_ts, static_cast<int64_t>(kPost));
    EXPECT_EQ(op.done_ts, static_cast<int64_t>(kDone));
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
    // The trace's event is the carrier: counted once, its records not as events of their own.
    EXPECT_EQ(doc["trace"]["events_by_type"]["deferred_records"], 1);
    EXPECT_EQ(doc["trace"]["events"], 4 + 1);
    EXPECT_FALSE(warns_malformed(doc));
}

// What the element decoder hands on, copied while valid.
struct DecodedSeen : EventSink {
    struct One {
        bool element;
        EventId id;   // an element's call kind as its event id
        DataElement e;
        bool inconsistent;
    };
    void on_event(const DecodedEvent& ev) override { seen.push_back(One{false, ev.id, {}, ev.inconsistent}); }
    void on_element(const DataElement& e) override { seen.push_back(One{true, event_of(e.kind), e, false}); }
    std::vector<One> seen;
};

TEST(DeferredRecords, EachRecordBecomesItsElementsInRecordOrder) {
    using namespace records;
    // Posts 1, 2 (QP 0x1000), a poll of two, post 3 that failed (ret 12), post 4: in one carrier.
    std::vector<testing::TestRecord> recs = {post_and_poll(1, 100, 0)[0], post_and_poll(2, 200, 0)[0]};
    {  // a poll record of two completions (wr 1 and 2) at 300
        CompletionEntry c1{}, c2{};
        c1.wr_id = 1;
        c1.qp_num = 100;
        c1.opcode = 1;
        c1.byte_len = 77;
        c2.wr_id = 2;
        c2.qp_num = 100;
        c2.status = 5;
        recs.push_back(testing::TestRecord::poll(300, PollFixed{0xcc, 2, 0}, {c1, c2}));
    }
    recs.push_back(post_and_poll(3, 400, 0)[0]);
    fixed_part<SendFixed>(&recs.back().header())->ret = 12;
    recs.push_back(post_and_poll(4, 500, 0)[0]);
    const std::vector<uint64_t> words = testing::encode_words(recs);
    DecodedSeen sink;
    ElementDecoder decoder(sink);
    test::RecordFeeder feed(decoder);
    feed.emit_words(1000, kVpid, words);
    // One element per WR and per completion, in the carrier's order, each with its record's capture time; the
    // carrier last, to be counted as the trace's event.
    ASSERT_EQ(sink.seen.size(), 7u);
    const std::vector<EventId> ids = {EventId::post_send, EventId::post_send, EventId::poll_cq, EventId::poll_cq,
                                      EventId::post_send, EventId::post_send, EventId::deferred_records};
    const std::vector<uint64_t> wr_ids = {1, 2, 1, 2, 3, 4};
    const std::vector<int64_t> ts = {100, 200, 300, 300, 400, 500};
    for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(sink.seen[i].id, ids[i]) << i;
    for (std::size_t i = 0; i < wr_ids.size(); ++i) {
        const DataElement& e = sink.seen[i].e;
        ASSERT_TRUE(sink.seen[i].element) << i;
        EXPECT_EQ(e.wr_id, wr_ids[i]) << i;
        EXPECT_EQ(e.ts_ns, ts[i]) << i;
        EXPECT_FALSE(e.counts_event) << i;   // the carrier is the trace's event
        EXPECT_EQ(e.rejected, i == 4) << i;  // post 3: ret 12, bad_index unknown
        if (ids[i] == EventId::post_send) {
            EXPECT_EQ(e.handle, 0x1000u);
            EXPECT_EQ(e.qp_num, 100u);
            EXPECT_EQ(e.bytes, 4096u);
            EXPECT_EQ(e.raddr, 0xabc000u);
            EXPECT_EQ(e.rkey, 0x11u);
            EXPECT_EQ(e.send_flags, 2u);
            EXPECT_EQ(e.opcode, 0u);
        } else {
            EXPECT_EQ(e.handle, 0xccu);
            EXPECT_EQ(e.qp_num, 100u);
        }
    }
    EXPECT_EQ(sink.seen[2].e.opcode, 1u);
    EXPECT_EQ(sink.seen[2].e.bytes, 77u);
    EXPECT_EQ(sink.seen[2].e.status, 0u);
    EXPECT_EQ(sink.seen[3].e.status, 5u);
    EXPECT_FALSE(sink.seen[6].element);
    EXPECT_FALSE(sink.seen[6].inconsistent);
}

// An element indexes its extra fields (a UD send's address handle and destination QPN) within its event, up
// to DataElement::kNoExtra of them: a carrier with more (no tracer writes one: its events hold a few thousand
// calls) is marked inconsistent, and the elements past the bound go on without theirs; nothing else is lost.
TEST(DeferredRecords, ACarrierWithMoreExtraFieldsThanElementsCanIndexIsMarked) {
    using namespace records;
    constexpr std::size_t kRecords = 2100, kPerRecord = SIGMATRACE_MAX_BATCH;   // 67 200 UD sends
    static_assert(kRecords * kPerRecord > DataElement::kNoExtra);
    std::vector<testing::TestRecord> recs;
    SendFixed fixed{};
    fixed.qp = 0x1000;
    fixed.qp_num = 100;
    for (std::size_t r = 0; r < kRecords; ++r) {
        std::vector<SendEntry> wrs(kPerRecord, SendEntry{});
        for (std::size_t k = 0; k < kPerRecord; ++k) {
            wrs[k].wr_id = r * kPerRecord + k;
            wrs[k].ah = 0x10000 + wrs[k].wr_id;
            wrs[k].remote_qpn = 7;
        }
        recs.push_back(testing::TestRecord::send(100 + r, fixed, wrs));
    }
    const std::vector<uint64_t> words = testing::encode_words(recs);
    struct Extras : EventSink {
        void on_event(const DecodedEvent& ev) override { inconsistent.push_back(ev.inconsistent); }
        void on_element(const DataElement& e) override {
            wr_ids.push_back(e.wr_id);
            extras.push_back(e.extra());
        }
        std::vector<bool> inconsistent;
        std::vector<uint64_t> wr_ids;
        std::vector<ElementExtra> extras;
    } sink;
    ElementDecoder decoder(sink);
    test::RecordFeeder feed(decoder);
    feed.emit_words(1000, kVpid, words);
    ASSERT_EQ(sink.wr_ids.size(), kRecords * kPerRecord);
    std::size_t with = 0;
    for (std::size_t i = 0; i < sink.wr_ids.size(); ++i) {
        ASSERT_EQ(sink.wr_ids[i], i);
        if (i < DataElement::kNoExtra) {
            ASSERT_EQ(sink.extras[i].ah, 0x10000 + i) << i;
            ASSERT_EQ(sink.extras[i].remote_qpn, 7u) << i;
            ++with;
        } else {
            ASSERT_EQ(sink.extras[i], ElementExtra{}) << i;
        }
    }
    EXPECT_EQ(with, std::size_t{DataElement::kNoExtra});
    ASSERT_EQ(sink.inconsistent.size(), 1u);
    EXPECT_TRUE(sink.inconsistent[0]);
}

// What `sigmatrace-analyze --events` writes for a carrier: each call it holds, every field, then the carrier.
TEST(DeferredRecords, TheEventDumpShowsEachCallOfACarrierWithEveryField) {
    char* buf = nullptr;
    std::size_t len = 0;
    std::FILE* out = open_memstream(&buf, &len);
    ASSERT_NE(out, nullptr);
    std::vector<uint64_t> words;
    {
        EventDump dump(out);
        test::RecordFeeder feed(dump);
        std::vector<testing::TestRecord> recs = post_and_poll(9, 1'000, 2'500);
        recs[1] = testing::TestRecord::poll(2'500, records::PollFixed{0xcc, -5, 0}, {});  // a poll that failed
        words = testing::encode_words(recs);
        st_deferred_records_rec r{};
        r.layout = records::kLayout;
        r.n = static_cast<uint32_t>(words.size());
        r.words = words.data();
        feed.emit_with(1'700'000'000'123'456'789, kVpid, r, [](DecodedEvent& ev) { ev.vtid = kThreadA; });
        EXPECT_TRUE(dump.finish());
        EXPECT_EQ(dump.lines(), 3u);
    }
    std::fclose(out);
    std::vector<std::string> lines;
    for (std::size_t at = 0; at < len;) {
        const std::size_t nl = std::string_view(buf, len).find('\n', at);
        lines.emplace_back(buf + at, (nl == std::string_view::npos ? len : nl) - at);
        at = nl == std::string_view::npos ? len : nl + 1;
    }
    std::free(buf);
    // One line per call, in the carrier's order, then the carrier.
    ASSERT_EQ(lines.size(), 3u);
    const std::string when = "[2023-11-14 22:13:20.123456789] testhost ";
    EXPECT_EQ(lines[0],
              when + "-[800/801] sigmatrace:post_send { qp = 0x1000, qp_num = 100, ret = 0, bad_index = -1, api = 1, "
                     "batch_offset = 0, n = 1, wr_id = [ 0x9 ], opcode = [ 0 ], send_flags = [ 0x2 ], num_sge = [ 1 ], "
                     "bytes = [ 4096 ], raddr = [ 0xabc000 ], rkey = [ 0x11 ], imm = [ 0x0 ], remote_qpn = [ 0 ], "
                     "ah = [ 0x0 ], ts = [ 1000 ] } (record)");
    EXPECT_EQ(lines[1], when + "-[800/801] sigmatrace:poll_cq { cq = 0xcc, ret = -5, api = 0, n = 0, wr_id = [], "
                               "status = [], opcode = [], vendor_err = [], byte_len = [], qp_num = [], src_qp = [], "
                               "wc_flags = [], imm = [], hw_ts = [], ts = [] } (record)");
    EXPECT_EQ(lines[2], when + "-[800/801] sigmatrace:deferred_records { layout = " + std::to_string(records::kLayout) + ", n = " + std::to_string(words.size()) +
                            ", origin_pid = 0, origin_tid = 0, lost = 0 }");
}

TEST(DeferredRecords, ARecordThatDoesNotDecodeEndsTheCarrierAndIsCountedMalformed) {
    DeferredWorld w;
    w.setup();
    std::vector<std::size_t> sizes;
    std::vector<uint64_t> words = testing::encode_words(post_and_poll(9, 5'000'000, 5'001'000), {}, &sizes);
    reinterpret_cast<std::byte*>(words.data())[sizes[0]] = std::byte{9};  // the poll record's kind
    emit_records(w, 5'400'000, words);
    const nlohmann::json doc = w.finish();
    ASSERT_EQ(w.ops.ops.size(), 1u);  // the post decoded; the poll did not
    EXPECT_EQ(w.ops.ops[0].outcome, OpOutcome::InFlight);
    EXPECT_EQ(w.ops.ops[0].post_ts, 5'000'000);
    EXPECT_TRUE(warns_malformed(doc));
}

TEST(DeferredRecords, AnUnknownLayoutIsNotReadAtAll) {
    DeferredWorld w;
    w.setup();
    emit_records(w, 5'400'000, post_and_poll_words(9, 5'000'000, 5'001'000), records::kLayout + 1);
    const nlohmann::json doc = w.finish();
    EXPECT_TRUE(w.ops.ops.empty());
    EXPECT_TRUE(warns_malformed(doc));
    EXPECT_EQ(doc["trace"]["events_by_type"]["deferred_records"], 1);
}

}  // namespace
}  // namespace sigmatrace::analyzer
