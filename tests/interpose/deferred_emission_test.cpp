// Deferred emission (interpose/deferred_*.h): each captured call is one record, in capture order, with its own
// result and capture time in CLOCK_MONOTONIC ns; when an idle point drains; what the drain's writer holds. Runs in both test modes (the fixture switches
// deferral on itself).
#include <time.h>

#include <array>
#include <cstddef>
#include <memory>
#include <numeric>
#include <vector>

#include "interpose/capture/capture_clock.h"
#include "interpose/capture/deferred_records_writer.h"
#include "interpose/capture/deferred_ring.h"
#include "support/shim_fixture.h"

namespace sigmatrace::testing {
namespace {

uint64_t monotonic_now_ns() {
    return interpose::capture_clock::monotonic_ns();
}

class DeferredEmissionTest : public ShimTest {
protected:
    void SetUp() override {
        ShimTest::SetUp();
        interpose::capture_clock::calibrate();
        interpose::Config c = test_config();
        c.defer = true;
        // Long enough that neither the emitter nor the data path's age check drains while a test runs, even
        // under a sanitizer: the tests decide when records become events.
        c.defer_max_age_us = 1000000;
        interpose::set_config(c);
        open(dev_);
        cq_ = dev_.make_cq(256);
        qp_a_ = create_qp(dev_, cq_, cq_);
        qp_b_ = create_qp(dev_, cq_, cq_);
        clear_events();
    }

    int post(FakeQp* q, uint64_t wr_id) {
        ibv_sge sge{0x1000, 64, 0x11};
        ibv_send_wr wr{};
        wr.wr_id = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = 0;  // unsignaled: the fake completes nothing, the CQ holds only what a test pushes
        wr.wr.rdma.remote_addr = 0xabc000 + wr_id;
        wr.wr.rdma.rkey = 0x77;
        ibv_send_wr* bad = nullptr;
        return ibv_post_send(q->qp(), &wr, &bad);
    }
    // A chain of `n` WRITEs, wr_id 0..n-1.
    int post_chain(FakeQp* q, uint32_t n) {
        ibv_sge sge{0x1000, 64, 0x11};
        std::vector<ibv_send_wr> wrs(n);
        for (uint32_t i = 0; i < n; ++i) {
            wrs[i].wr_id = i;
            wrs[i].sg_list = &sge;
            wrs[i].num_sge = 1;
            wrs[i].opcode = IBV_WR_RDMA_WRITE;
            wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
        }
        ibv_send_wr* bad = nullptr;
        return ibv_post_send(q->qp(), wrs.data(), &bad);
    }
    int poll(int max, FakeCq* cq = nullptr) {
        std::array<ibv_wc, 32> wc{};
        return ibv_poll_cq((cq != nullptr ? cq : cq_)->cq(), max, wc.data());
    }
    void complete(uint64_t wr_id, FakeCq* cq = nullptr) {
        FakeCompletion c;
        c.wr_id = wr_id;
        c.opcode = IBV_WC_RDMA_WRITE;
        c.qp_num = qp_a_->qp()->qp_num;
        (cq != nullptr ? cq : cq_)->push(c);
    }

    FakeDevice dev_;
    FakeCq* cq_ = nullptr;
    FakeQp* qp_a_ = nullptr;
    FakeQp* qp_b_ = nullptr;
};

TEST_F(DeferredEmissionTest, ConsecutivePostsShareAnEventEachARecordWithItsOwnCaptureTime) {
    const uint64_t before = monotonic_now_ns();
    ASSERT_EQ(post(qp_a_, 1), 0);
    ASSERT_EQ(post(qp_a_, 2), 0);
    ASSERT_EQ(post(qp_a_, 3), 0);
    const uint64_t after = monotonic_now_ns();
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.deferred_records.size(), 1u);  // one drain, one event
    ASSERT_EQ(ev.post_send.size(), 3u);         // one record per call
    for (uint64_t k = 0; k < 3; ++k) {
        const cap_post_send& e = ev.post_send[k];
        EXPECT_EQ(e.n, 1u);
        EXPECT_EQ(e.wr_id, std::vector<uint64_t>{k + 1});
        EXPECT_EQ(e.raddr, std::vector<uint64_t>{0xabc001 + k});
        EXPECT_EQ(e.ret, 0);
        EXPECT_EQ(e.bad_index, -1);
        EXPECT_EQ(e.batch_offset, 0u);
        ASSERT_EQ(e.ts.size(), 1u);
    }
    // Each call keeps its own capture time, in CLOCK_MONOTONIC ns (the TSC conversion is good to well under a
    // microsecond over the ~µs this test takes).
    EXPECT_LE(ev.post_send[0].ts[0], ev.post_send[1].ts[0]);
    EXPECT_LE(ev.post_send[1].ts[0], ev.post_send[2].ts[0]);
    EXPECT_GE(ev.post_send[0].ts[0] + 1000, before);
    EXPECT_LE(ev.post_send[2].ts[0], after + 1000);
}

TEST_F(DeferredEmissionTest, AFailedPostIsARecordOfItsOwnWithItsResult) {
    ASSERT_EQ(post(qp_a_, 1), 0);
    qp_a_->fail_post_at = 0;
    ASSERT_NE(post(qp_a_, 2), 0);
    ASSERT_EQ(post(qp_a_, 3), 0);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 3u);
    EXPECT_EQ(ev.post_send[0].wr_id, std::vector<uint64_t>{1});
    EXPECT_EQ(ev.post_send[1].wr_id, std::vector<uint64_t>{2});
    EXPECT_NE(ev.post_send[1].ret, 0);
    EXPECT_EQ(ev.post_send[1].bad_index, 0);
    EXPECT_EQ(ev.post_send[2].wr_id, std::vector<uint64_t>{3});
    EXPECT_EQ(ev.post_send[2].ret, 0);
}

// Posts, reposts and polls of several QPs and CQs in turn (ib_write_bw's and ib_send_lat's patterns): the
// records come out in capture order, each call with its own result, whatever kind or object comes between.
TEST_F(DeferredEmissionTest, CallsOfEveryKindAndObjectComeOutInCaptureOrder) {
    FakeCq* cq2 = dev_.make_cq(64);
    clear_events();
    ASSERT_EQ(post(qp_a_, 1), 0);
    ASSERT_EQ(post(qp_b_, 2), 0);
    complete(1);
    ASSERT_EQ(poll(4), 1);
    ASSERT_EQ(post_one_recv(qp_a_, 3), 0);
    complete(4, cq2);
    complete(5, cq2);
    ASSERT_EQ(poll(1, cq2), 1);
    ASSERT_EQ(poll(4, cq2), 1);
    ASSERT_EQ(post(qp_a_, 6), 0);
    const CapturedEvents ev = events();
    const std::vector<EventId> order(ev.order.begin(), ev.order.end());
    EXPECT_EQ(order, (std::vector<EventId>{EventId::post_send, EventId::post_send, EventId::poll_cq, EventId::post_recv,
                                           EventId::poll_cq, EventId::poll_cq, EventId::post_send}));
    ASSERT_EQ(ev.post_send.size(), 3u);
    EXPECT_EQ(ev.post_send[0].qp, reinterpret_cast<uint64_t>(qp_a_->qp()));
    EXPECT_EQ(ev.post_send[1].qp, reinterpret_cast<uint64_t>(qp_b_->qp()));
    EXPECT_EQ(ev.post_send[2].wr_id, std::vector<uint64_t>{6});
    ASSERT_EQ(ev.poll_cq.size(), 3u);
    EXPECT_EQ(ev.poll_cq[0].cq, reinterpret_cast<uint64_t>(cq_->cq()));
    EXPECT_EQ(ev.poll_cq[1].cq, reinterpret_cast<uint64_t>(cq2->cq()));
    EXPECT_EQ(ev.poll_cq[1].wr_id, std::vector<uint64_t>{4});
    EXPECT_EQ(ev.poll_cq[2].wr_id, std::vector<uint64_t>{5});
    EXPECT_EQ(ev.poll_cq[2].ret, 1);
    ASSERT_EQ(ev.post_recv.size(), 1u);
    EXPECT_EQ(ev.post_recv[0].bytes, std::vector<uint32_t>{128});
    EXPECT_LE(ev.post_send[1].ts[0], ev.poll_cq[0].ts[0]);
    EXPECT_LE(ev.poll_cq[0].ts[0], ev.post_recv[0].ts[0]);
    EXPECT_LE(ev.post_recv[0].ts[0], ev.poll_cq[1].ts[0]);
    EXPECT_LE(ev.poll_cq[2].ts[0], ev.post_send[2].ts[0]);
}

TEST_F(DeferredEmissionTest, AChainLongerThanTheBatchLimitIsOneRecordPerPart) {
    constexpr uint32_t kWrs = SIGMATRACE_MAX_BATCH + 1;
    ASSERT_EQ(post_chain(qp_a_, kWrs), 0);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 2u);
    EXPECT_EQ(ev.post_send[0].n, static_cast<uint32_t>(SIGMATRACE_MAX_BATCH));
    EXPECT_EQ(ev.post_send[0].batch_offset, 0u);
    EXPECT_EQ(ev.post_send[1].n, 1u);
    EXPECT_EQ(ev.post_send[1].batch_offset, static_cast<uint32_t>(SIGMATRACE_MAX_BATCH));
    EXPECT_EQ(ev.post_send[1].wr_id, std::vector<uint64_t>{SIGMATRACE_MAX_BATCH});
    EXPECT_EQ(ev.post_send[0].ts[0], ev.post_send[1].ts[0]);  // one call, one capture time
}

TEST_F(DeferredEmissionTest, AnEmptyPollDrainsOnlyOnceEnoughWaits) {
    ASSERT_EQ(post(qp_a_, 1), 0);
    for (uint32_t i = 0; i < 2 * interpose::kIdleAgeCheckEvery; ++i) ASSERT_EQ(poll(4), 0);
    EXPECT_EQ(capture_->total(), 0u);  // idle points with one young record waiting: it stays captured
    // Post until the threshold is passed (96-byte records), and a little more.
    const uint64_t posts = interpose::kIdleDrainBytes / 96 + 8;
    for (uint64_t id = 2; id <= posts; ++id) ASSERT_EQ(post(qp_a_, id), 0);
    EXPECT_EQ(capture_->total(), 0u);  // posting alone never drains below the age bound
    ASSERT_EQ(poll(4), 0);
    const CapturedEvents ev = capture_->snapshot();  // no drain of our own: what the idle point emitted
    ASSERT_EQ(ev.post_send.size(), posts);
    for (uint64_t k = 0; k < posts; ++k) ASSERT_EQ(ev.post_send[k].wr_id, std::vector<uint64_t>{k + 1});
}

// The drain's writer alone: what it holds is emitted by flush() and forgotten by discard() (a forked child must
// not emit the event a thread of its parent was writing).
TEST_F(DeferredEmissionTest, TheWriterFlushesWhatItHoldsAndDiscardForgetsIt) {
    using namespace interpose::deferred;
    alignas(kAlign) std::array<std::byte, record_size<SendFixed, SendEntry>(1)> memory{};
    auto* rec = reinterpret_cast<RecordHeader*>(memory.data());
    *rec = RecordHeader{static_cast<uint32_t>(memory.size()), RecordKind::post_send, 1,
                        interpose::capture_clock::now_ticks()};
    *fixed_part<SendFixed>(rec) = SendFixed{0x1234, 77, 0, -1, 0, 0, 0};
    *entries<SendFixed, SendEntry>(rec) = SendEntry{7, 0xabc, 0, 0, 64, 0x11, 0, 0, 1, IBV_WR_RDMA_WRITE, 0};
    auto writer = std::make_unique<RecordsWriter>();
    writer->start_run(interpose::capture_clock::anchor_now());
    EXPECT_FALSE(writer->add(rec));
    writer->discard();
    writer->flush();
    EXPECT_EQ(capture_->total(), 0u);
    writer->start_run(interpose::capture_clock::anchor_now());
    writer->add(rec);
    writer->add(rec);
    EXPECT_EQ(capture_->total(), 0u);  // pending until flushed
    writer->flush();
    const CapturedEvents ev = capture_->snapshot();
    ASSERT_EQ(ev.deferred_records.size(), 1u);
    ASSERT_EQ(ev.post_send.size(), 2u);
    for (const cap_post_send& e : ev.post_send) {
        EXPECT_EQ(e.qp_num, 77u);
        EXPECT_EQ(e.wr_id, std::vector<uint64_t>{7});
        EXPECT_EQ(e.bytes, std::vector<uint32_t>{64});
    }
}

// The ring alone: after its own thread emptied it, the next record starts at the buffer's beginning again.
TEST(DeferredRing, RewindsToItsStartWhenItsProducerEmptiedIt) {
    alignas(64) static std::array<std::byte, 64 * 1024> memory{};
    interpose::deferred::Ring ring(memory.data(), memory.size());
    auto put = [&ring] {
        interpose::deferred::RecordHeader* h = ring.reserve(64);
        EXPECT_NE(h, nullptr);
        if (h == nullptr) return static_cast<std::byte*>(nullptr);
        h->size = 64;
        h->kind = interpose::deferred::RecordKind::post_recv;
        h->n = 0;
        h->ts = 1;
        ring.commit(h);
        return reinterpret_cast<std::byte*>(h);
    };
    EXPECT_EQ(put(), memory.data());
    EXPECT_EQ(put(), memory.data() + 64);
    ASSERT_TRUE(ring.try_lock_consumer());
    ring.rewind_if_empty_by_producer();  // not empty: nothing moves
    EXPECT_EQ(ring.pending_bytes(), 128u);
    EXPECT_EQ(ring.consume(UINT64_MAX, UINT32_MAX, [](const interpose::deferred::RecordHeader*) {}), 2u);
    ring.rewind_if_empty_by_producer();
    ring.unlock_consumer();
    EXPECT_FALSE(ring.has_pending());
    EXPECT_EQ(put(), memory.data());
    EXPECT_EQ(ring.pending_bytes(), 64u);
}

// The ring alone: a record committed unfinished (written before the doorbell, its result still to come) holds
// itself and every later record back from consumers until its producer finishes it; it counts as the oldest.
// A ring has one unfinished record at most; one its thread leaves behind (abandon) becomes a pad record.
TEST(DeferredRing, AnUnfinishedRecordHoldsItselfAndLaterRecordsBackUntilFinished) {
    using interpose::deferred::RecordHeader;
    using interpose::deferred::RecordKind;
    alignas(64) static std::array<std::byte, 64 * 1024> memory{};
    interpose::deferred::Ring ring(memory.data(), memory.size());
    auto fill = [&ring](RecordKind kind, uint64_t ts) {
        RecordHeader* h = ring.reserve(64);
        EXPECT_NE(h, nullptr);
        if (h == nullptr) return h;
        h->size = 64;
        h->kind = kind;
        h->n = 0;
        h->ts = ts;
        return h;
    };
    std::vector<std::pair<RecordKind, uint64_t>> seen;
    auto consume = [&ring, &seen] {
        EXPECT_TRUE(ring.try_lock_consumer());
        const uint32_t n = ring.consume(UINT64_MAX, UINT32_MAX, [&seen](const RecordHeader* h) { seen.emplace_back(h->kind, h->ts); });
        ring.rewind_if_empty_by_producer();  // not while a record is unfinished: it stays where it is
        ring.unlock_consumer();
        return n;
    };
    ring.commit(fill(RecordKind::post_recv, 1));
    ASSERT_TRUE(ring.commit_unfinished(fill(RecordKind::post_send, 2)));
    RecordHeader* second = fill(RecordKind::post_send, 99);
    EXPECT_FALSE(ring.commit_unfinished(second)) << "one unfinished record at a time; nothing published";
    ring.commit(fill(RecordKind::poll_cq, 3));  // reserved again where `second` was
    EXPECT_EQ(ring.pending_bytes(), 192u);
    EXPECT_EQ(consume(), 1u);
    EXPECT_EQ(ring.pending_bytes(), 128u);
    EXPECT_EQ(ring.oldest_ts(), 2u);
    EXPECT_EQ(consume(), 0u) << "still unfinished";
    ring.finish();
    EXPECT_EQ(consume(), 2u);
    EXPECT_EQ(seen, (std::vector<std::pair<RecordKind, uint64_t>>{
                        {RecordKind::post_recv, 1}, {RecordKind::post_send, 2}, {RecordKind::poll_cq, 3}}));
    EXPECT_FALSE(ring.has_pending());

    EXPECT_FALSE(ring.abandon_unfinished());
    ASSERT_TRUE(ring.commit_unfinished(fill(RecordKind::post_send, 4)));
    ring.commit(fill(RecordKind::post_recv, 5));
    EXPECT_EQ(consume(), 0u);
    EXPECT_TRUE(ring.abandon_unfinished());
    EXPECT_EQ(consume(), 1u) << "the abandoned record is skipped as a pad record";
    EXPECT_EQ(seen.back(), (std::pair<RecordKind, uint64_t>{RecordKind::post_recv, 5}));
    EXPECT_FALSE(ring.has_pending());
}

// The ring alone, at its limits: full, a record that would straddle the end (a pad record, then offset 0), and
// the fast reserve, which hands out only space known free before the end and leaves the rest to reserve().
TEST(DeferredRing, FillsUpPadsAtTheEndAndTheFastReserveStopsWhereReserveMustDecide) {
    using interpose::deferred::RecordHeader;
    using interpose::deferred::RecordKind;
    alignas(64) static std::array<std::byte, 64 * 1024> memory{};
    interpose::deferred::Ring ring(memory.data(), memory.size());
    constexpr uint32_t kSize = 96;
    auto fill = [](RecordHeader* h, uint64_t ts) {
        h->size = kSize;
        h->kind = RecordKind::post_recv;
        h->n = 0;
        h->ts = ts;
    };
    EXPECT_EQ(ring.reserve_fast(kSize), nullptr);  // nothing known yet: reserve() decides first
    const uint32_t fits = static_cast<uint32_t>(memory.size() / kSize);  // 682, 64 bytes left at the end
    for (uint32_t i = 0; i < fits; ++i) {
        RecordHeader* h = i % 2 == 0 ? ring.reserve(kSize) : ring.reserve_fast(kSize);
        ASSERT_NE(h, nullptr) << i;
        ASSERT_EQ(reinterpret_cast<std::byte*>(h), memory.data() + uint64_t{i} * kSize) << i;
        fill(h, i + 1);
        ring.commit(h);
    }
    EXPECT_EQ(ring.reserve_fast(kSize), nullptr);
    EXPECT_EQ(ring.reserve(kSize), nullptr);  // 64 bytes free, at the end: full
    std::vector<uint64_t> seen;
    auto collect = [&seen](const RecordHeader* h) { seen.push_back(h->ts); };
    ASSERT_TRUE(ring.try_lock_consumer());
    EXPECT_EQ(ring.consume(UINT64_MAX, 2, collect), 2u);  // frees 192 bytes at the start
    ring.unlock_consumer();
    EXPECT_EQ(ring.reserve_fast(kSize), nullptr);  // would straddle the end
    RecordHeader* wrapped = ring.reserve(kSize);   // a 64-byte pad record, then offset 0
    ASSERT_EQ(reinterpret_cast<std::byte*>(wrapped), memory.data());
    fill(wrapped, 1000);
    ring.commit(wrapped);
    RecordHeader* next = ring.reserve_fast(kSize);  // 96..192: freed, before the end
    ASSERT_EQ(reinterpret_cast<std::byte*>(next), memory.data() + kSize);
    fill(next, 1001);
    ring.commit(next);
    EXPECT_EQ(ring.reserve_fast(kSize), nullptr);  // 192.. is the oldest unconsumed record
    EXPECT_EQ(ring.reserve(kSize), nullptr);
    ASSERT_TRUE(ring.try_lock_consumer());
    EXPECT_EQ(ring.consume(UINT64_MAX, UINT32_MAX, collect), fits - 2 + 2);  // the pad record is skipped
    ring.unlock_consumer();
    ASSERT_EQ(seen.size(), fits + 2);
    for (uint32_t i = 0; i < fits; ++i) EXPECT_EQ(seen[i], i + 1) << i;
    EXPECT_EQ(seen[fits], 1000u);
    EXPECT_EQ(seen[fits + 1], 1001u);
    EXPECT_FALSE(ring.has_pending());
}

}  // namespace
}  // namespace sigmatrace::testing
