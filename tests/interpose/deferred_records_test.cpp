// Deferred emission (interpose/deferred_records_writer.h): a drain
// encodes the ring's records into `deferred_records` events (<sigmatrace/deferred_records_wire.h>), and a reader
// decodes each record and expands it into the event the tracer wrote for the same call before it wrote records
// (<sigmatrace/deferred_records.h>). The capture (support/captured_events.h) reads them as the analyzer and the
// tests' trace reader do, so these tests check the writer, the encoding and the reading functions.
#include <array>
#include <cstring>
#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include <sigmatrace/deferred_records.h>
#include <sigmatrace/deferred_records_wire.h>

#include "interpose/capture/capture_clock.h"
#include "interpose/capture/deferred_records_writer.h"
#include "interpose/capture/ring_file.h"

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include "support/records_words.h"
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
    ASSERT_EQ(ev.deferred_records.size(), 1u);  // one drain: one event
    EXPECT_EQ(ev.deferred_records[0].layout, records::kLayout);
    // 96 + 48 + 64 bytes in the ring. The first record of each kind in an event writes every field that is not
    // at its initial value (zero mostly), so these three shrink only by the fields at zero and the padding;
    // DeferredRecordsWire.ARecordCarriesOnlyWhatChanged checks what later records cost.
    EXPECT_LT(ev.deferred_records[0].n * 8, 208u);
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
    constexpr int kPosts = 3000;
    for (int i = 0; i < kPosts; ++i) ASSERT_EQ(post_chain(static_cast<uint64_t>(i), 1), 0);
    const CapturedEvents ev = events();
    // Only wr_id and the capture time change from one post to the next: 4 + 8 + a varint of 1..3 bytes each.
    uint64_t words = 0;
    for (const cap_deferred_records& r : ev.deferred_records) {
        EXPECT_LE(r.n, interpose::deferred::RecordsWriter::kBytes / 8);
        words += r.n;
    }
    EXPECT_GE(ev.deferred_records.size(), 2u);
    EXPECT_LE(words * 8, uint64_t{kPosts} * 16) << "each event restarts from initial values; still <= 16 bytes a post";
    ASSERT_EQ(ev.post_send.size(), static_cast<size_t>(kPosts));
    for (int i = 0; i < kPosts; ++i) {
        const cap_post_send& s = ev.post_send[static_cast<size_t>(i)];
        ASSERT_EQ(s.wr_id, (std::vector<uint64_t>{static_cast<uint64_t>(i)}));
        ASSERT_EQ(s.rkey, (std::vector<uint32_t>{0x77}));  // carried over from the event's earlier records
        ASSERT_EQ(s.imm, (std::vector<uint32_t>{0x5500}));
        ASSERT_EQ(s.qp_num, qp_->qp()->qp_num);
        if (i > 0) {
            ASSERT_GE(s.ts[0], ev.post_send[static_cast<size_t>(i - 1)].ts[0]);
        }
    }
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

// ---- the encoding, on hand-made records

using records::CompletionEntry;
using records::PollFixed;
using records::RecordKind;
using records::RecvEntry;
using records::RecvFixed;
using records::SendEntry;
using records::SendFixed;

// A post of three WRs, a receive whose capture time is earlier than the post's, an SRQ receive of two, a poll of
// two (one an error with every field set), a poll that failed (n 0, ret -5), a failed post and the second part
// of a long chain.
std::vector<TestRecord> varied_records() {
    std::vector<TestRecord> r;
    r.push_back(TestRecord::send(1'000'000, SendFixed{0x1234, 7, 0, -1, 1, 0, 0},
                                 {SendEntry{10, 0xabc000, 0, IBV_SEND_SIGNALED, 64, 0x11, 0, 0, 1, IBV_WR_RDMA_WRITE, 0},
                                  SendEntry{11, 0xabc040, 0, 0, 64, 0x11, 0x99, 0, 1, IBV_WR_RDMA_WRITE_WITH_IMM, 0},
                                  SendEntry{12, 0, 0xfeed0000, IBV_SEND_SIGNALED, 8, 0, 0, 0x42, 2, IBV_WR_SEND, 0}}));
    r.push_back(TestRecord::recv(RecordKind::post_recv, 999'000, RecvFixed{0x2000, 8, 0, -1, 0}, {RecvEntry{20, 4096, 1, 0}}));
    r.push_back(TestRecord::recv(RecordKind::post_srq_recv, 1'001'000, RecvFixed{0x3000, 0, 0, -1, 0},
                                 {RecvEntry{30, 512, 2, 0}, RecvEntry{31, 512, 2, 0}}));
    CompletionEntry c1{}, c2{};
    c1.wr_id = 10;
    c1.qp_num = 7;
    c1.opcode = IBV_WC_RDMA_WRITE;
    c1.hw_ts = 123456789;
    c2.wr_id = 20;
    c2.qp_num = 8;
    c2.byte_len = 4096;
    c2.opcode = IBV_WC_RECV;
    c2.status = IBV_WC_LOC_LEN_ERR;
    c2.vendor_err = 0x51;
    c2.wc_flags = IBV_WC_WITH_IMM;
    c2.imm = 0x99;
    c2.src_qp = 5;
    r.push_back(TestRecord::poll(1'002'000, PollFixed{0xcc, 2, 0}, {c1, c2}));
    r.push_back(TestRecord::poll(1'003'000, PollFixed{0xcc, -5, 0}, {}));
    r.push_back(TestRecord::send(1'004'000, SendFixed{0x1234, 7, 12, 0, 1, 0, 0},
                                 {SendEntry{13, 0xabc080, 0, 0, 64, 0x11, 0, 0, 1, IBV_WR_RDMA_WRITE, 0}}));
    r.push_back(TestRecord::send(1'005'000, SendFixed{0x1234, 7, 0, -1, 1, 32, 0},
                                 {SendEntry{14, 0xabc0c0, 0, 0, 64, 0x11, 0, 0, 1, IBV_WR_RDMA_WRITE, 0}}));
    return r;
}

// Decodes `words`, keeping each record's bytes.
records::WalkResult decode(const std::vector<uint64_t>& words, std::vector<std::vector<std::byte>>& out) {
    return records::walk_records(words.data(), words.size(), [&](const records::RecordHeader& h) {
        const auto* b = reinterpret_cast<const std::byte*>(&h);
        out.emplace_back(b, b + h.size);
    });
}

TEST(DeferredRecordsWire, EveryRecordDecodesToTheRingRecordItWasEncodedFrom) {
    const std::vector<TestRecord> recs = varied_records();
    const std::vector<uint64_t> words = encode_words(recs);
    std::vector<std::vector<std::byte>> got;
    const records::WalkResult r = decode(words, got);
    EXPECT_EQ(r.status, records::WalkStatus::ok);
    ASSERT_EQ(got.size(), recs.size());
    for (std::size_t i = 0; i < recs.size(); ++i) EXPECT_EQ(got[i], recs[i].image()) << "record " << i;
}

TEST(DeferredRecordsWire, ARecordCarriesOnlyWhatChanged) {
    // Two one-WR posts on one QP, 1 us apart, differing only in wr_id; then one on another QP.
    const SendEntry e{1, 0xabc000, 0, IBV_SEND_SIGNALED, 65536, 0x11, 0, 0, 1, IBV_WR_RDMA_WRITE, 0};
    SendEntry e2 = e, e3 = e;
    e2.wr_id = 2;
    e3.wr_id = 3;
    const std::vector<TestRecord> recs = {TestRecord::send(1'000'000, SendFixed{0x1234, 7, 0, -1, 1, 0, 0}, {e}),
                                          TestRecord::send(1'001'000, SendFixed{0x1234, 7, 0, -1, 1, 0, 0}, {e2}),
                                          TestRecord::send(1'001'001, SendFixed{0x5678, 9, 0, -1, 1, 0, 0}, {e3})};
    std::vector<std::size_t> sizes;
    const std::vector<uint64_t> words = encode_words(recs, {}, &sizes);
    // The first: kind, n, present (4); ts 1,000,000 (zigzag 2,000,000: 3 bytes); qp, qp_num, api (16: ret 0,
    // bad_index -1 and batch_offset 0 are their initial values); wr_id, raddr, send_flags, bytes, rkey, num_sge
    // (30: ah, imm, remote_qpn and the opcode, RDMA_WRITE = 0, are zero). The second: 4, ts +1000 (2 bytes),
    // wr_id (8). The third: 4, ts +1 (1 byte), qp and qp_num (12), wr_id (8).
    EXPECT_EQ(sizes, (std::vector<std::size_t>{53, 14, 25}));
    EXPECT_EQ(words.size(), (53u + 14 + 25 + 7) / 8);
    std::vector<std::vector<std::byte>> got;
    EXPECT_EQ(decode(words, got).status, records::WalkStatus::ok);
    ASSERT_EQ(got.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(got[i], recs[i].image()) << "record " << i;
}

TEST(DeferredRecordsWire, ARecordShorterThanAWordAtTheEndIsARecordNotFill) {
    // The same post three times: 53 bytes, then 6 (ts +1000) and 5 (ts +1): 64 bytes, the last record inside the
    // last word.
    const SendEntry e{1, 0xabc000, 0, IBV_SEND_SIGNALED, 65536, 0x11, 0, 0, 1, IBV_WR_RDMA_WRITE, 0};
    const SendFixed f{0x1234, 7, 0, -1, 1, 0, 0};
    const std::vector<TestRecord> recs = {TestRecord::send(1'000'000, f, {e}), TestRecord::send(1'001'000, f, {e}),
                                          TestRecord::send(1'001'001, f, {e})};
    std::vector<std::size_t> sizes;
    const std::vector<uint64_t> words = encode_words(recs, {}, &sizes);
    EXPECT_EQ(sizes, (std::vector<std::size_t>{53, 6, 5}));
    ASSERT_EQ(words.size(), 8u);
    std::vector<std::vector<std::byte>> got;
    const records::WalkResult r = decode(words, got);
    EXPECT_EQ(r.status, records::WalkStatus::ok);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[2], recs[2].image());
}

// Random records of every kind, with field values drawn so that repeats, zeros and changes all occur: each
// decodes to the record it was encoded from, and every prefix of the words decodes to the records it holds whole.
TEST(DeferredRecordsWire, RandomRecordsRoundTripAndEveryPrefixDecodesToThoseItHoldsWhole) {
    std::mt19937_64 rng(20261201);
    auto pick = [&rng](uint64_t previous) -> uint64_t {
        switch (rng() % 4) {
        case 0: return 0;
        case 1: return previous;
        case 2: return rng() % 8;
        default: return rng();
        }
    };
    for (int trial = 0; trial < 100; ++trial) {
        SCOPED_TRACE(trial);
        std::vector<TestRecord> recs;
        uint64_t ts = rng() >> 8, prev = 0;
        const int count = 1 + static_cast<int>(rng() % 40);
        for (int i = 0; i < count; ++i) {
            const auto kind = static_cast<RecordKind>(1 + rng() % 4);
            const records::KindSpec& k = *records::spec_of(kind);
            const auto n = static_cast<uint32_t>(rng() % (SIGMATRACE_MAX_BATCH + 1));
            TestRecord r;
            const uint32_t size = *records::expected_size(kind, n);
            r.header() = records::RecordHeader{size, kind, static_cast<uint16_t>(n), ts};
            ts += rng() % 3 == 0 ? 0 : rng() % 100000 - 20000;  // repeats, steps forward and back
            std::byte* fixed = r.bytes.data() + sizeof(records::RecordHeader);
            auto put = [&](std::byte* at, const records::FieldSpec& f) {
                prev = pick(prev);
                std::memcpy(at + f.offset, &prev, f.width);  // the low bytes
            };
            for (uint32_t i2 = 0; i2 < k.n_fixed; ++i2) put(fixed, k.fixed[i2]);
            for (uint32_t e = 0; e < n; ++e)
                for (uint32_t c = 0; c < k.n_entry; ++c) put(fixed + k.fixed_size + e * k.entry_size, k.entry[c]);
            recs.push_back(r);
        }
        std::vector<std::size_t> sizes;
        const std::vector<uint64_t> words = encode_words(recs, {}, &sizes);
        std::vector<std::vector<std::byte>> got;
        ASSERT_EQ(decode(words, got).status, records::WalkStatus::ok);
        ASSERT_EQ(got.size(), recs.size());
        for (std::size_t i = 0; i < recs.size(); ++i) ASSERT_EQ(got[i], recs[i].image()) << "record " << i;
        std::vector<std::size_t> ends;
        for (std::size_t at = 0; const std::size_t size : sizes) ends.push_back(at += size);
        for (std::size_t cut = 0; cut < words.size(); ++cut) {
            const std::vector<uint64_t> prefix(words.begin(), words.begin() + static_cast<long>(cut));
            got.clear();
            const records::WalkResult r = decode(prefix, got);
            const auto whole = static_cast<std::size_t>(std::upper_bound(ends.begin(), ends.end(), cut * 8) - ends.begin());
            ASSERT_EQ(r.records, whole) << "cut at word " << cut;
            const bool at_boundary = cut == 0 || (whole > 0 && ends[whole - 1] == cut * 8);
            ASSERT_EQ(r.status, at_boundary ? records::WalkStatus::ok : records::WalkStatus::truncated) << "cut at word " << cut;
            for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], recs[i].image());
        }
    }
}

TEST(DeferredRecordsWire, RedactionClearsAddressesAndKeysOnly) {
    const std::vector<TestRecord> recs = varied_records();
    const std::vector<uint64_t> words = encode_words(recs, records::EncodeOptions{true, true});
    std::vector<std::vector<std::byte>> got;
    EXPECT_EQ(decode(words, got).status, records::WalkStatus::ok);
    ASSERT_EQ(got.size(), recs.size());
    for (std::size_t i = 0; i < recs.size(); ++i) {
        TestRecord want = recs[i];
        if (want.header().kind == RecordKind::post_send) {
            SendEntry* e = records::entries<SendFixed, SendEntry>(&want.header());
            for (uint32_t k = 0; k < want.header().n; ++k) e[k].raddr = 0, e[k].rkey = 0;
        }
        EXPECT_EQ(got[i], want.image()) << "record " << i;
    }
}

// The bytes of `words`, to corrupt one; and back.
std::vector<std::byte> bytes_of(const std::vector<uint64_t>& w) {
    const auto* b = reinterpret_cast<const std::byte*>(w.data());
    return {b, b + w.size() * 8};
}
std::vector<uint64_t> words_of(const std::vector<std::byte>& b) {
    std::vector<uint64_t> w((b.size() + 7) / 8);
    std::memcpy(w.data(), b.data(), b.size());
    return w;
}

TEST(DeferredRecordsWire, StopsAtTheFirstRecordThatDoesNotDecodeKeepingWhatCameBefore) {
    std::vector<std::size_t> sizes;
    const std::vector<uint64_t> good = encode_words(varied_records(), {}, &sizes);
    const std::size_t second = sizes[0];  // where the post_recv record starts
    struct Case {
        const char* what;
        std::function<void(std::vector<std::byte>&)> corrupt;
        records::WalkStatus status;
    };
    const Case cases[] = {
        {"pad kind", [&](auto& b) { b[second] = std::byte{0}; }, records::WalkStatus::bad_kind},
        {"kind 9", [&](auto& b) { b[second] = std::byte{9}; }, records::WalkStatus::bad_kind},
        {"n 33", [&](auto& b) { b[second + 1] = std::byte{33}; }, records::WalkStatus::bad_count},
        // post_recv has 5 fixed fields and 3 columns: bit 8 names nothing.
        {"present bit 8", [&](auto& b) { b[second + 3] |= std::byte{1}; }, records::WalkStatus::bad_fields},
        {"cut inside it", [&](auto& b) { b.resize((second + 10 + 7) / 8 * 8); }, records::WalkStatus::truncated},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        std::vector<std::byte> b = bytes_of(good);
        c.corrupt(b);
        std::vector<std::vector<std::byte>> got;
        const records::WalkResult r = decode(words_of(b), got);
        EXPECT_EQ(r.status, c.status);
        EXPECT_EQ(r.records, 1u);
        ASSERT_EQ(got.size(), 1u);
        EXPECT_EQ(got[0], varied_records()[0].image());
    }
}

TEST(DeferredRecordsWire, BadTailsTimesAndColumnsAreRefused) {
    // A non-zero byte in the last word's fill, after two good records (53 bytes, then 6: the same post again,
    // 1 us later; 5 bytes of fill).
    const SendEntry e{1, 0xabc000, 0, IBV_SEND_SIGNALED, 65536, 0x11, 0, 0, 1, IBV_WR_RDMA_WRITE, 0};
    std::vector<uint64_t> words = encode_words({TestRecord::send(1'000'000, SendFixed{0x1234, 7, 0, -1, 1, 0, 0}, {e}),
                                                TestRecord::send(1'001'000, SendFixed{0x1234, 7, 0, -1, 1, 0, 0}, {e})});
    ASSERT_EQ(words.size(), 8u);
    std::vector<std::byte> b = bytes_of(words);
    b[63] = std::byte{1};
    std::vector<std::vector<std::byte>> got;
    records::WalkResult r = decode(words_of(b), got);
    EXPECT_EQ(r.status, records::WalkStatus::bad_tail);
    EXPECT_EQ(r.records, 2u);
    // A capture time of eleven varint bytes.
    b.assign(24, std::byte{0});
    b[0] = std::byte{1};
    for (int i = 4; i < 15; ++i) b[static_cast<std::size_t>(i)] = std::byte{0xff};
    got.clear();
    r = decode(words_of(b), got);
    EXPECT_EQ(r.status, records::WalkStatus::bad_fields);
    EXPECT_EQ(r.records, 0u);
    // A poll of no completions that says it carries its wr_id column (bit 3: after cq, ret, api).
    b.assign(16, std::byte{0});
    b[0] = std::byte{4};
    b[2] = std::byte{1 << 3};
    got.clear();
    r = decode(words_of(b), got);
    EXPECT_EQ(r.status, records::WalkStatus::bad_fields);
    EXPECT_EQ(r.records, 0u);
    // Only zero fill after the last record is fine; eight zero bytes are not fill but a record of kind 0.
    EXPECT_EQ(decode(std::vector<uint64_t>{0}, got).status, records::WalkStatus::bad_kind);
    EXPECT_EQ(decode(std::vector<uint64_t>{}, got).status, records::WalkStatus::ok);
}

// A process that ends without emitting (here: exit_group from a thread, which runs no handler at all, as after
// SIGKILL) leaves its records in its ring file (SIGMATRACE_SALVAGE_DIR, interpose/ring_file.h); the salvage emits
// them with the process's pid and thread as their origin, and counts what it cannot read (a damaged record).
TEST_F(DeferredRecordsTest, SalvageEmitsWhatAnEndedProcessLeftAndCountsTheRest) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("salvage-test-" + std::to_string(getpid()));
    fs::create_directories(dir);
    interpose::Config c = interpose::config();
    c.salvage_dir = dir.string();
    c.defer_ring_kb = 64;  // a ring size no earlier test used: the thread below gets a new ring, in a file
    interpose::set_config(c);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        std::thread([&] {
            if (post_chain(10, 3) != 0 || post_one_recv(qp_, 20) != 0) syscall(SYS_exit_group, 2);
            syscall(SYS_exit_group, 0);
        }).join();
        syscall(SYS_exit_group, 3);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    // The child's ring: damage its second record (the receive) so that it does not parse.
    fs::path ring;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string().find("ring-" + std::to_string(child) + "-") == 0) ring = e.path();
    ASSERT_FALSE(ring.empty()) << "no ring file of the child in " << dir;
    {
        std::fstream f(ring, std::ios::in | std::ios::out | std::ios::binary);
        const uint32_t bad_size = 7;
        f.seekp(static_cast<std::streamoff>(interpose::deferred::kDataOffset +
                                            records::record_size<records::SendFixed, records::SendEntry>(3)));
        f.write(reinterpret_cast<const char*>(&bad_size), sizeof bad_size);
    }
    clear_events();
    interpose::deferred::SalvageCounts counts;
    const char* error = nullptr;
    ASSERT_TRUE(interpose::deferred::salvage_rings(dir.c_str(), &counts, &error)) << error;
    EXPECT_EQ(counts.records, 1u);
    EXPECT_EQ(counts.lost, 1u);
    EXPECT_EQ(counts.processes, 1u);
    EXPECT_FALSE(fs::exists(ring)) << "a salvaged ring's file is removed";
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.deferred_records.size(), 1u);
    EXPECT_EQ(ev.deferred_records[0].origin_pid, child);
    EXPECT_GT(ev.deferred_records[0].origin_tid, child) << "the thread that captured them";
    EXPECT_EQ(ev.deferred_records[0].lost, 1u);
    ASSERT_EQ(ev.post_send.size(), 1u);
    EXPECT_EQ(ev.post_send[0].wr_id, (std::vector<uint64_t>{10, 11, 12}));
    EXPECT_TRUE(ev.post_recv.empty());
    std::error_code ec;
    fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace sigmatrace::testing
