// Deferred emission in the `records` format (interpose/deferred_records_writer.h, SIGMATRACE_DEFER_FORMAT=records): a drain writes
// the ring's records as `deferred_records` events, and a reader (<sigmatrace/deferred_records.h>) expands each
// record into the event immediate emission writes for the same call. The capture (support/captured_events.h)
// expands them as the analyzer and the tests' trace reader do, so these tests check both the writer and the
// layout's reading functions.
#include <array>
#include <cstring>
#include <vector>

#include <sigmatrace/deferred_records.h>

#include "interpose/capture_clock.h"
#include "interpose/deferred_records_writer.h"
#include "support/shim_fixture.h"

namespace sigmatrace::testing {
namespace {

class DeferredRecordsTest : public ShimTest {
protected:
    void SetUp() override {
        ShimTest::SetUp();
        configure(0);
        open(dev_);
        cq_ = dev_.make_cq(256);
        qp_ = create_qp(dev_, cq_, cq_);
        clear_events();
    }
    void configure(uint32_t redact) {
        interpose::Config c = test_config();
        c.defer = true;
        c.defer_records = true;
        c.defer_max_age_us = 1000000;  // the tests decide when records become events
        c.redact = redact;
        interpose::set_config(c);
    }
    int post_chain(uint64_t first_id, int n) {
        std::vector<ibv_sge> sge(static_cast<size_t>(n));
        std::vector<ibv_send_wr> wr(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
            sge[i] = ibv_sge{0x1000, static_cast<uint32_t>(64 * (i + 1)), 0x11};
            wr[i].wr_id = first_id + static_cast<uint64_t>(i);
            wr[i].sg_list = &sge[i];
            wr[i].num_sge = 1;
            wr[i].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr[i].imm_data = 0x5500 + static_cast<uint32_t>(i);
            wr[i].send_flags = i == n - 1 ? IBV_SEND_FENCE : 0;  // unsignaled: the fake completes nothing
            wr[i].wr.rdma.remote_addr = 0xabc000 + static_cast<uint64_t>(i);
            wr[i].wr.rdma.rkey = 0x77;
            wr[i].next = i + 1 < n ? &wr[i + 1] : nullptr;
        }
        ibv_send_wr* bad = nullptr;
        return ibv_post_send(qp_->qp(), wr.data(), &bad);
    }
    int poll(int max) {
        std::array<ibv_wc, 32> wc{};
        return ibv_poll_cq(cq_->cq(), max, wc.data());
    }

    FakeDevice dev_;
    FakeCq* cq_ = nullptr;
    FakeQp* qp_ = nullptr;
};

TEST_F(DeferredRecordsTest, EachCallIsOneRecordReadBackAsImmediateEmissionWritesIt) {
    const uint64_t before = interpose::capture_clock::monotonic_ns();
    ASSERT_EQ(post_chain(10, 3), 0);
    ASSERT_EQ(post_one_recv(qp_, 20), 0);
    FakeCompletion c;
    c.wr_id = 20;
    c.opcode = IBV_WC_RECV;
    c.byte_len = 96;
    c.qp_num = qp_->qp()->qp_num;
    cq_->push(c);
    ASSERT_EQ(poll(4), 1);
    const uint64_t after = interpose::capture_clock::monotonic_ns();

    const CapturedEvents ev = events();
    ASSERT_EQ(ev.deferred_records.size(), 1u);  // one drain, 96 + 48 + 64 bytes: one event
    EXPECT_EQ(ev.deferred_records[0].layout, records::kLayout);
    EXPECT_EQ(ev.deferred_records[0].n, (records::record_size<records::SendFixed, records::SendEntry>(3) +
                                         records::record_size<records::RecvFixed, records::RecvEntry>(1) +
                                         records::record_size<records::PollFixed, records::CompletionEntry>(1)) / 8);
    EXPECT_EQ(ev.malformed_records, 0u);
    EXPECT_EQ(ev.order, (std::vector<EventId>{EventId::post_send, EventId::post_recv, EventId::poll_cq}));

    ASSERT_EQ(ev.post_send.size(), 1u);
    const cap_post_send& s = ev.post_send[0];
    EXPECT_EQ(s.qp_num, qp_->qp()->qp_num);
    EXPECT_EQ(s.ret, 0);
    EXPECT_EQ(s.bad_index, -1);
    EXPECT_EQ(s.n, 3u);
    EXPECT_EQ(s.wr_id, (std::vector<uint64_t>{10, 11, 12}));
    EXPECT_EQ(s.bytes, (std::vector<uint32_t>{64, 128, 192}));
    EXPECT_EQ(s.raddr, (std::vector<uint64_t>{0xabc000, 0xabc001, 0xabc002}));
    EXPECT_EQ(s.rkey, (std::vector<uint32_t>{0x77, 0x77, 0x77}));
    EXPECT_EQ(s.imm, (std::vector<uint32_t>{0x5500, 0x5501, 0x5502}));
    EXPECT_EQ(s.send_flags, (std::vector<uint32_t>{0, 0, IBV_SEND_FENCE}));
    EXPECT_EQ(s.opcode, (std::vector<uint8_t>(3, IBV_WR_RDMA_WRITE_WITH_IMM)));
    ASSERT_EQ(ev.post_recv.size(), 1u);
    EXPECT_EQ(ev.post_recv[0].wr_id, (std::vector<uint64_t>{20}));
    EXPECT_EQ(ev.post_recv[0].bytes, (std::vector<uint32_t>{128}));
    ASSERT_EQ(ev.poll_cq.size(), 1u);
    EXPECT_EQ(ev.poll_cq[0].ret, 1);
    EXPECT_EQ(ev.poll_cq[0].wr_id, (std::vector<uint64_t>{20}));
    EXPECT_EQ(ev.poll_cq[0].byte_len, (std::vector<uint32_t>{96}));
    EXPECT_EQ(ev.poll_cq[0].opcode, (std::vector<uint8_t>{IBV_WC_RECV}));
    // Capture times in CLOCK_MONOTONIC ns, converted by the drain: one per call, in call order.
    ASSERT_EQ(s.ts.size(), 3u);
    EXPECT_EQ(s.ts[0], s.ts[2]);  // one call, one capture time
    EXPECT_GE(s.ts[0] + 1000, before);
    EXPECT_LE(s.ts[0], ev.post_recv[0].ts[0]);
    EXPECT_LE(ev.post_recv[0].ts[0], ev.poll_cq[0].ts[0]);
    EXPECT_LE(ev.poll_cq[0].ts[0], after + 1000);
}

TEST_F(DeferredRecordsTest, EventsHoldWholeRecordsWithinTheReadersLimit) {
    constexpr int kPosts = 200;
    for (int i = 0; i < kPosts; ++i) ASSERT_EQ(post_chain(static_cast<uint64_t>(i), 1), 0);
    const CapturedEvents ev = events();
    const uint32_t record_words = records::record_size<records::SendFixed, records::SendEntry>(1) / 8;  // 12
    const uint32_t per_event = interpose::deferred::RecordsWriter::kWords / record_words;             // 85
    ASSERT_EQ(ev.deferred_records.size(), (kPosts + per_event - 1) / per_event);
    for (const cap_deferred_records& r : ev.deferred_records) {
        EXPECT_LE(r.n, interpose::deferred::RecordsWriter::kWords);
        EXPECT_EQ(r.n % record_words, 0u);
    }
    ASSERT_EQ(ev.post_send.size(), static_cast<size_t>(kPosts));
    for (int i = 0; i < kPosts; ++i) EXPECT_EQ(ev.post_send[static_cast<size_t>(i)].wr_id, (std::vector<uint64_t>{static_cast<uint64_t>(i)}));
    EXPECT_EQ(ev.malformed_records, 0u);
}

TEST_F(DeferredRecordsTest, RedactionZeroesAddressesAndKeysInTheRecords) {
    configure(interpose::kRedactAddresses | interpose::kRedactKeys);
    ASSERT_EQ(post_chain(1, 2), 0);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 1u);
    EXPECT_EQ(ev.post_send[0].raddr, (std::vector<uint64_t>{0, 0}));
    EXPECT_EQ(ev.post_send[0].rkey, (std::vector<uint32_t>{0, 0}));
    EXPECT_EQ(ev.post_send[0].bytes, (std::vector<uint32_t>{64, 128}));  // the rest as captured
}

TEST_F(DeferredRecordsTest, TheEventsFormatMergesCalls) {
    interpose::Config c = test_config();
    c.defer = true;
    c.defer_records = false;
    c.defer_max_age_us = 1000000;
    interpose::set_config(c);
    ASSERT_EQ(post_chain(1, 1), 0);
    ASSERT_EQ(post_chain(2, 1), 0);
    const CapturedEvents ev = events();
    EXPECT_TRUE(ev.deferred_records.empty());
    ASSERT_EQ(ev.post_send.size(), 1u);  // merged by the builder
    EXPECT_EQ(ev.post_send[0].wr_id, (std::vector<uint64_t>{1, 2}));
}

// ---- the reading functions on hand-made words

// Words holding a one-WR send record (wr_id `id`) and a one-completion poll record.
std::vector<uint64_t> two_records(uint64_t id) {
    using namespace records;
    const uint32_t send = record_size<SendFixed, SendEntry>(1);
    const uint32_t poll = record_size<PollFixed, CompletionEntry>(1);
    alignas(16) std::array<std::byte, 512> buf{};
    auto* h = reinterpret_cast<RecordHeader*>(buf.data());
    *h = RecordHeader{send, RecordKind::post_send, 1, 1000};
    *fixed_part<SendFixed>(h) = SendFixed{0x1234, 7, 0, -1, 0, 0, 0};
    *entries<SendFixed, SendEntry>(h) = SendEntry{id, 0xabc, 0, 2, 64, 0x11, 0, 0, 1, IBV_WR_RDMA_WRITE, 0};
    auto* p = reinterpret_cast<RecordHeader*>(buf.data() + send);
    *p = RecordHeader{poll, RecordKind::poll_cq, 1, 2000};
    *fixed_part<PollFixed>(p) = PollFixed{0x5678, 1, 0};
    CompletionEntry c{};
    c.wr_id = id;
    c.byte_len = 64;
    *entries<PollFixed, CompletionEntry>(p) = c;
    std::vector<uint64_t> words((send + poll) / 8);
    std::memcpy(words.data(), buf.data(), send + poll);
    return words;
}

struct Seen {
    std::vector<uint64_t> send_ids, poll_ids, send_ts;
};
records::WalkResult read(const std::vector<uint64_t>& words, Seen& seen) {
    records::Scratch scratch;
    return records::walk_records(words.data(), words.size(), [&](const records::RecordHeader& h) {
        records::expand_record(h, scratch, [&](const auto& rec) {
            using R = std::decay_t<decltype(rec)>;
            if constexpr (std::is_same_v<R, st_post_send_rec>) {
                seen.send_ids.push_back(rec.wr_id[0]);
                seen.send_ts.push_back(rec.ts[0]);
            } else if constexpr (std::is_same_v<R, st_poll_cq_rec>) {
                seen.poll_ids.push_back(rec.wr_id[0]);
            }
        });
    });
}

TEST(DeferredRecordsLayout, ReadsWellFormedRecords) {
    std::vector<uint64_t> words = two_records(5);
    const std::vector<uint64_t> more = two_records(6);
    words.insert(words.end(), more.begin(), more.end());
    Seen seen;
    const records::WalkResult r = read(words, seen);
    EXPECT_EQ(r.status, records::WalkStatus::ok);
    EXPECT_EQ(r.records, 4u);
    EXPECT_EQ(seen.send_ids, (std::vector<uint64_t>{5, 6}));
    EXPECT_EQ(seen.poll_ids, (std::vector<uint64_t>{5, 6}));
    EXPECT_EQ(seen.send_ts, (std::vector<uint64_t>{1000, 1000}));
}

TEST(DeferredRecordsLayout, StopsAtTheFirstInconsistentRecordKeepingWhatCameBefore) {
    struct Case {
        const char* what;
        void (*corrupt)(std::vector<uint64_t>&);  // applied to the second pair's first record
        records::WalkStatus status;
    };
    const Case cases[] = {
        {"size off by 16", [](std::vector<uint64_t>& w) { w[22] += 16; }, records::WalkStatus::bad_size},
        {"size 0", [](std::vector<uint64_t>& w) { w[22] &= ~uint64_t{0xffffffff}; }, records::WalkStatus::bad_size},
        {"pad kind", [](std::vector<uint64_t>& w) { w[22] &= ~(uint64_t{0xffff} << 32); }, records::WalkStatus::bad_kind},
        {"kind 9", [](std::vector<uint64_t>& w) { w[22] = (w[22] & ~(uint64_t{0xffff} << 32)) | (uint64_t{9} << 32); },
         records::WalkStatus::bad_kind},
        {"n 33", [](std::vector<uint64_t>& w) { w[22] = (w[22] & ~(uint64_t{0xffff} << 48)) | (uint64_t{33} << 48); },
         records::WalkStatus::bad_count},
        {"cut short", [](std::vector<uint64_t>& w) { w.resize(w.size() - 1); }, records::WalkStatus::truncated},
        {"half a header", [](std::vector<uint64_t>& w) { w.resize(23); }, records::WalkStatus::truncated},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        std::vector<uint64_t> words = two_records(5);
        ASSERT_EQ(words.size(), 22u);  // 96 + 80 bytes: the second pair starts at word 22
        const std::vector<uint64_t> more = two_records(6);
        words.insert(words.end(), more.begin(), more.end());
        c.corrupt(words);
        Seen seen;
        const records::WalkResult r = read(words, seen);
        EXPECT_EQ(r.status, c.status);
        // The first pair decoded; nothing of the corrupt record or after it did, unless the cut left it whole.
        EXPECT_EQ(seen.send_ids.front(), 5u);
        EXPECT_EQ(seen.poll_ids.front(), 5u);
        EXPECT_LE(r.records, 3u);
        EXPECT_GE(r.records, 2u);
    }
}

}  // namespace
}  // namespace sigmatrace::testing
