// The watcher on host-memory rings: exact decoding and order, batching, ring and 16-bit counter wrap-around,
// overrun accounting (exact when the writer is idle during a sweep), malformed WQEs, CQEs, retirement, the
// background thread and its adaptive period, and a concurrent writer that outruns a throttled watcher.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "fake_producer.h"
#include "mlx5_format/mlx5_layout.h"
#include "gpumem/watcher.h"
#include "test_readers.h"
#include "trace_capture.h"
#include "watched_ring.h"

namespace sigmatrace::gpumem {
namespace {

using test::FailingReader;
using test::FakeProducer;
using test::InterferingReader;
using test::TraceCapture;
using test::WatchedRing;
using test::expect_exact_and_in_order;
using test::expect_write;
using test::WqeImage;
using test::write_cqe;
namespace op = mlx5::op;

WatcherConfig exact_config() {
    WatcherConfig c;
    c.guard_wqebbs = 0;  // the tests' writers never write while a sweep runs, unless stated
    return c;
}

TEST(Watcher, DecodesEveryPostedWqeExactlyAndInOrder) {
    WatchedRing r(64, 0x123, exact_config());
    auto& trace = r.trace;
    auto& prod = r.prod;
    auto& w = r.w;

    EXPECT_EQ(w.sweep_once(), 0u);  // nothing posted yet
    const uint32_t imm = 0xa1b2c3d4;
    prod.post(WqeImage(op::RDMA_WRITE_IMM, 0, 0x123, 0x08, 0, imm).raddr(0xaaa0, 11).data(64, 1, 2));
    prod.post(WqeImage(op::RDMA_READ, 1, 0x123, 0).raddr(0xbbb0, 12).data(128, 1, 2));
    prod.post(WqeImage(op::ATOMIC_MASKED_FA, 2, 0x123, 0x08, 0x08).raddr(0xccc0, 13).masked_args(4, {1, 0}).data(4, 1, 2));
    prod.post(WqeImage(op::SEND, 3, 0x123).data(10, 1, 2).data(20, 1, 2));
    EXPECT_EQ(w.sweep_once(), 4u);

    const auto wqes = trace.wqes();
    ASSERT_EQ(wqes.size(), 4u);
    EXPECT_EQ(wqes[0].opcode, op::RDMA_WRITE_IMM);
    EXPECT_EQ(wqes[0].imm, imm);
    EXPECT_EQ(wqes[0].raddr, 0xaaa0u);
    EXPECT_EQ(wqes[0].rkey, 11u);
    EXPECT_EQ(wqes[0].bytes, 64u);
    EXPECT_EQ(wqes[1].opcode, op::RDMA_READ);
    EXPECT_EQ(wqes[1].fm_ce_se, 0);
    EXPECT_EQ(wqes[1].bytes, 128u);
    EXPECT_EQ(wqes[2].opcode, op::ATOMIC_MASKED_FA);
    EXPECT_EQ(wqes[2].opmod, 0x08);
    EXPECT_EQ(wqes[2].atomic_arg, 1u);
    EXPECT_EQ(wqes[2].bytes, 4u);
    EXPECT_EQ(wqes[3].opcode, op::SEND);
    EXPECT_EQ(wqes[3].bytes, 30u);
    for (uint16_t i = 0; i < 4; ++i) EXPECT_EQ(wqes[i].index, i);

    const auto events = trace.wqe_events();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].qpn, 0x123u);
    EXPECT_EQ(events[0].pi_old, 0u);
    // A host ring with no doorbell mapped into a GPU: a CPU writes these WQEs (docs/gpumem.md, "Who posted").
    EXPECT_EQ(events[0].poster, records::Poster::cpu_direct);
    EXPECT_EQ(events[0].queue, r.prod.queue().key);
    // The verbs reading of each WQE: opcode and flags.
    EXPECT_EQ(events[0].wr_opcode, (std::vector<uint8_t>{1, 4, 6, 2}));  // WRITE_WITH_IMM, READ, FETCH_AND_ADD, SEND
    EXPECT_EQ(events[0].send_flags, (std::vector<uint8_t>{records::kRingSignaled, 0, records::kRingSignaled, records::kRingSignaled}));
    EXPECT_EQ(events[0].pi, (std::vector<uint64_t>{0, 1, 2, 3}));
    EXPECT_EQ(trace.lost_total(), 0u);
    EXPECT_EQ(w.sweep_once(), 0u);  // nothing new
    EXPECT_EQ(trace.wqe_count(), 4u);
}

TEST(Watcher, SplitsLongRunsIntoBatchesOfAtMost32) {
    WatchedRing r(256, 7, exact_config());
    auto& trace = r.trace;
    auto& prod = r.prod;
    auto& w = r.w;
    for (uint64_t i = 0; i < 100; ++i) prod.post_write(i);
    EXPECT_EQ(w.sweep_once(), 100u);
    const auto events = trace.wqe_events();
    ASSERT_EQ(events.size(), 4u);
    EXPECT_EQ(events[0].wqe_index.size(), 32u);
    EXPECT_EQ(events[3].wqe_index.size(), 4u);
    EXPECT_EQ(events[1].pi_old, 32u);
    EXPECT_EQ(events[3].pi_old, 96u);
    for (const auto& e : events) EXPECT_EQ(e.pi.back(), e.pi_old + e.pi.size() - 1);
    const auto wqes = trace.wqes();
    for (uint64_t i = 0; i < 100; ++i) expect_write(wqes[i], i, 7);
}

TEST(Watcher, FollowsMultiBlockWqesAcrossTheRingEndAndThe16BitCounter) {
    WatchedRing r(16, 9, exact_config());
    auto& trace = r.trace;
    auto& prod = r.prod;
    auto& w = r.w;
    // 3-block WQEs (ctrl + raddr + 9 data segments = 11 units) interleaved with 1-block ones, for more than
    // 2^16 WQEBBs, sweeping every few posts: every one decoded, none lost.
    uint64_t posted = 0, bytes_expected = 0;
    std::vector<uint32_t> sizes;
    while (prod.pi() < 70000) {
        if (posted % 3 == 0) {
            WqeImage img(op::RDMA_WRITE, static_cast<uint16_t>(prod.pi()), 9);
            img.raddr(posted, 1);
            for (int s = 0; s < 9; ++s) img.data(1, 1, 0);
            prod.post(img);
            sizes.push_back(9);
        } else {
            prod.post_write(posted);
            sizes.push_back(FakeProducer::bytes_for(posted));
        }
        bytes_expected += sizes.back();
        ++posted;
        if (posted % 3 == 2) w.sweep_once();
    }
    w.sweep_once();
    const auto wqes = trace.wqes();
    ASSERT_EQ(wqes.size(), posted);
    uint64_t bytes = 0;
    for (size_t i = 0; i < wqes.size(); ++i) {
        ASSERT_EQ(wqes[i].bytes, sizes[i]) << "WQE " << i;
        bytes += wqes[i].bytes;
    }
    EXPECT_EQ(bytes, bytes_expected);
    EXPECT_EQ(trace.lost_total(), 0u);
    EXPECT_EQ(w.stats().wqes_lost, 0u);
}

TEST(Watcher, OverrunLossEqualsExactlyWhatWasOverwritten) {
    // The writer outruns a watcher throttled to one sweep per burst: each burst of 64 + k WQEs into a 64-WQEBB
    // ring overwrites exactly k of them before the watcher reads. Loss must be k, the rest decoded exactly.
    WatchedRing r(64, 0x42, exact_config());
    auto& trace = r.trace;
    auto& prod = r.prod;
    auto& w = r.w;
    uint64_t seq = 0, overwritten = 0;
    std::vector<uint64_t> expected_decoded;
    for (uint64_t k : {0u, 1u, 37u, 63u, 64u, 500u, 3u}) {
        const uint64_t burst = 64 + k;
        for (uint64_t i = 0; i < burst; ++i) {
            if (i >= k) expected_decoded.push_back(seq);
            prod.post_write(seq++);
        }
        overwritten += k;
        w.sweep_once();
        EXPECT_EQ(trace.lost_total(), overwritten) << "after a burst overwriting " << k;
    }
    const auto wqes = trace.wqes();
    ASSERT_EQ(wqes.size(), expected_decoded.size());
    for (size_t i = 0; i < wqes.size(); ++i) expect_write(wqes[i], expected_decoded[i], 0x42);
    EXPECT_EQ(w.stats().wqes_lost, overwritten);
    EXPECT_EQ(w.stats().wqes_decoded + overwritten, seq);
}

TEST(Watcher, GuardCountsWqesCloseToBeingOverwrittenAsLost) {
    // With a guard of 8 WQEBBs, a full ring has its 8 oldest WQEs within reach of a producer writing ahead of its
    // doorbell record: they are reported lost, never decoded.
    WatcherConfig cfg;
    cfg.guard_wqebbs = 8;
    WatchedRing r(64, 1, cfg);
    auto& trace = r.trace;
    auto& prod = r.prod;
    auto& w = r.w;
    for (uint64_t i = 0; i < 64; ++i) prod.post_write(i);
    EXPECT_EQ(w.sweep_once(), 56u);
    EXPECT_EQ(trace.lost_total(), 8u);
    const auto wqes = trace.wqes();
    for (size_t i = 0; i < wqes.size(); ++i) expect_write(wqes[i], i + 8, 1);
    // The automatic guard is 1/16 of the ring.
    EXPECT_EQ(WatcherConfig{}.guard_for(1024), 64u);
    EXPECT_EQ(cfg.guard_for(4), 4u);
}

TEST(Watcher, MalformedWqesAreCountedAndSkipped) {
    WatchedRing r(32, 5, exact_config());
    auto& trace = r.trace;
    auto& prod = r.prod;
    auto& w = r.w;
    prod.post_write(0);
    prod.post(WqeImage(0x07, 1, 5).data(1, 1, 1));                    // unknown opcode
    prod.post(WqeImage(op::RDMA_WRITE, 2, 5));                          // no remote address segment
    prod.post_write(3);
    EXPECT_EQ(w.sweep_once(), 2u);
    const auto wqes = trace.wqes();
    ASSERT_EQ(wqes.size(), 2u);
    expect_write(wqes[0], 0, 5);
    expect_write(wqes[1], 3, 5);
    EXPECT_EQ(trace.malformed_total(), 2u);
    EXPECT_EQ(trace.lost_total(), 0u);
}

TEST(Watcher, WaitsForTheRestOfAWqeTheDoorbellRecordHasNotCoveredYet) {
    // A doorbell record that stops inside a multi-block WQE (a producer publishing block by block): the WQE is
    // decoded once the record covers all of it, not before, and not as garbage.
    WatchedRing r(16, 3, exact_config());
    auto& trace = r.trace;
    auto& prod = r.prod;
    auto& w = r.w;
    WqeImage img(op::SEND, 0, 3);
    for (int s = 0; s < 5; ++s) img.data(2, 1, 0);  // 6 units: 2 blocks
    prod.post(img, false);
    // Publish only the first block by hand.
    auto q = prod.queue();
    __atomic_store_n(reinterpret_cast<uint32_t*>(q.dbr_addr), __builtin_bswap32(1), __ATOMIC_RELEASE);
    EXPECT_EQ(w.sweep_once(), 0u);
    prod.ring();
    EXPECT_EQ(w.sweep_once(), 1u);
    ASSERT_EQ(trace.wqes().size(), 1u);
    EXPECT_EQ(trace.wqes()[0].bytes, 10u);
    EXPECT_EQ(trace.lost_total() + trace.malformed_total(), 0u);
}

TEST(Watcher, NothingIsReadWhenNobodyRecords) {
    FakeProducer prod(16, 3);
    QueueRegistry reg;
    reg.add_send_queue(prod.queue());
    ProcessMemoryReader mem;
    Watcher w(reg, mem, exact_config());
    for (int i = 0; i < 10; ++i) prod.post_write(i);
    EXPECT_EQ(w.sweep_once(), 0u);  // no callback set: tracing disabled, the cursor just follows
    TraceCapture trace;
    prod.post_write(10);
    EXPECT_EQ(w.sweep_once(), 1u);
    ASSERT_EQ(trace.wqes().size(), 1u);
    expect_write(trace.wqes()[0], 10, 3);
    EXPECT_EQ(trace.lost_total(), 0u);
}

TEST(Watcher, UnreadableMemoryIsCountedNotFatal) {
    TraceCapture trace;
    FakeProducer prod(16, 3);
    QueueRegistry reg;
    auto q = prod.queue();
    q.ring_mem = q.dbr_mem = MemType::Device;  // no CUDA driver in this process
    reg.add_send_queue(q);
    ProcessMemoryReader mem;
    Watcher w(reg, mem, exact_config());
    prod.post_write(0);
    EXPECT_EQ(w.sweep_once(), 0u);
    EXPECT_GE(w.stats().read_failures, 1u);
    EXPECT_GE(mem.failures(), 1u);

    FailingReader failing;
    QueueRegistry reg2;
    reg2.add_send_queue(prod.queue());
    Watcher w2(reg2, failing, exact_config());
    EXPECT_EQ(w2.sweep_once(), 0u);
    EXPECT_EQ(w2.stats().read_failures, 1u);
    EXPECT_TRUE(trace.wqes().empty());
}

TEST(Watcher, RetiringAQueueSweepsItOneLastTime) {
    TraceCapture trace;
    FakeProducer prod(16, 3);
    QueueRegistry reg;
    reg.add_send_queue(prod.queue(77));
    ProcessMemoryReader mem;
    Watcher w(reg, mem, exact_config());
    w.sweep_once();
    prod.post_write(0);
    prod.post_write(1);
    ASSERT_TRUE(reg.remove_send_queue(77));
    w.sync();  // what a destroy hook does before the real destroy frees the ring
    EXPECT_EQ(trace.wqes().size(), 2u);
    prod.post_write(2);
    EXPECT_EQ(w.sweep_once(), 0u);  // no longer watched
}

TEST(Watcher, LearnsQueuesAtTheirCurrentProducerIndex) {
    TraceCapture trace;
    FakeProducer prod(16, 3);
    for (int i = 0; i < 5; ++i) prod.post_write(i);  // posted before the queue was learned
    QueueRegistry reg;
    auto q = prod.queue();
    q.initial_pi = 5;
    reg.add_send_queue(q);
    ProcessMemoryReader mem;
    Watcher w(reg, mem, exact_config());
    prod.post_write(5);
    EXPECT_EQ(w.sweep_once(), 1u);
    expect_write(trace.wqes().at(0), 5, 3);
}

TEST(Watcher, GuardKeepsATornCopyOfTheOldestSlotFromBeingDecoded) {
    // The ring is full (WQEs 0..15 in 16 slots, doorbell record at 16). While the watcher copies slot 0, the
    // producer writes WQE 16 into it without ringing yet. The copy holds WQE 0's control segment with WQE 16's
    // remote address: a torn WQE that no check on the copy itself can detect. With the writer's true window
    // (guard 1) slot 0 is counted lost; with guard 0 the torn WQE would be decoded with the wrong address --
    // which is why the guard exists.
    for (int64_t guard : {1, 0}) {
        SCOPED_TRACE(guard);
        TraceCapture trace;
        FakeProducer prod(16, 4);
        for (uint64_t i = 0; i < 16; ++i) prod.post_write(i);
        QueueRegistry reg;
        reg.add_send_queue(prod.queue());
        InterferingReader mem([&] { prod.post_write(16, /*ring_doorbell=*/false); });
        WatcherConfig cfg;
        cfg.guard_wqebbs = guard;
        Watcher w(reg, mem, cfg);
        w.sweep_once();
        const auto wqes = trace.wqes();
        if (guard == 1) {
            ASSERT_EQ(wqes.size(), 15u);
            EXPECT_EQ(trace.lost_total(), 1u);
            for (size_t i = 0; i < wqes.size(); ++i) expect_write(wqes[i], i + 1, 4);
        } else {
            ASSERT_EQ(wqes.size(), 16u);
            EXPECT_EQ(wqes[0].index, 0);
            EXPECT_EQ(wqes[0].raddr, 0x100000000ull + 16 * 64) << "expected the torn decode guard 0 allows";
        }
    }
}

// ------------------------------------------------------------------------------------------ CQEs

// A collapsed CQ (one CQE slot, as NVSHMEM makes them) over `cqe`, number 0x77.
CompletionQueue collapsed_cq(uint8_t* cqe) {
    CompletionQueue cq;
    cq.key = 5;
    cq.cqn = 0x77;
    cq.ring_addr = reinterpret_cast<uint64_t>(cqe);
    cq.ncqe = 1;
    cq.collapsed = true;
    return cq;
}

// A send queue of `slots` WQEBBs (QPN 0x55) whose CQ is a one-slot CQ over `cqe` (0xff-filled: INVALID, as
// NVSHMEM and UCX initialise it), collapsed or 1-entry, both registered.
struct QueueWithOneSlotCq {
    FakeProducer prod;
    alignas(64) uint8_t cqe[64];
    QueueRegistry reg;
    QueueWithOneSlotCq(uint32_t slots, bool collapsed) : prod(slots, 0x55) {
        std::memset(cqe, 0xff, sizeof cqe);
        auto q = prod.queue();
        q.cqn = 0x77;
        reg.add_send_queue(q);
        CompletionQueue cq = collapsed_cq(cqe);
        cq.collapsed = collapsed;
        reg.add_completion_queue(cq);
    }
};

TEST(WatcherCq, CollapsedCqReportsEachNewCompletionOnce) {
    TraceCapture trace;
    alignas(64) uint8_t cqe[64];
    std::memset(cqe, 0xff, sizeof cqe);  // NVSHMEM initialises the CQ buffer to 0xff: INVALID
    QueueRegistry reg;
    reg.add_completion_queue(collapsed_cq(cqe));
    ProcessMemoryReader mem;
    Watcher w(reg, mem, exact_config());
    w.sweep_once();
    EXPECT_TRUE(trace.cqe_events().empty());
    write_cqe(cqe, mlx5::cqe_op::REQ, false, 41, 0x123, 4096, 1000);
    w.sweep_once();
    w.sweep_once();  // unchanged: not reported again
    cqe[63] ^= 1;    // the same completion read again after its writer flipped the owner bit last: not again either
    w.sweep_once();
    write_cqe(cqe, mlx5::cqe_op::REQ_ERR, false, 42, 0x123, 0, 0, 0x13);
    w.sweep_once();
    const auto ev = trace.cqe_events();
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0].cq, 5u);  // the CQ's key
    EXPECT_EQ(ev[0].wqe_counter.at(0), 41);
    EXPECT_EQ(ev[0].status.at(0), 0);  // IBV_WC_SUCCESS
    EXPECT_EQ(ev[0].byte_cnt.at(0), 4096u);
    EXPECT_EQ(ev[0].qpn.at(0), 0x123u);
    EXPECT_EQ(ev[0].hw_ts.at(0), 1000u);
    EXPECT_EQ(ev[0].syndrome.at(0), 0);
    EXPECT_EQ(ev[1].wqe_counter.at(0), 42);
    EXPECT_EQ(ev[1].status.at(0), 10);  // REMOTE_ACCESS_ERR (syndrome 0x13) -> IBV_WC_REM_ACCESS_ERR
    EXPECT_EQ(ev[1].syndrome.at(0), 0x13);
    EXPECT_EQ(ev[1].hw_ts.at(0), 0u);  // an error CQE's timestamp bytes hold the syndromes
}

// UCX GDAKI's 1-entry CQ, not collapsed, overrun ignored: the NIC writes each CQE into the one slot with the owner
// bit of its pass (flipping every write). Two writes between sweeps leave the owner bit as it started: followed
// by owner bit like a ring, the CQ would look unwritten from then on. Each new completion is reported once.
TEST(WatcherCq, OneEntryCqReportsTheLatestCompletionWhateverItsOwnerBit) {
    TraceCapture trace;
    alignas(64) uint8_t cqe[64];
    std::memset(cqe, 0xff, sizeof cqe);
    CompletionQueue cq = collapsed_cq(cqe);
    cq.collapsed = false;   // log_cq_size 0
    QueueRegistry reg;
    reg.add_completion_queue(cq);
    ProcessMemoryReader mem;
    Watcher w(reg, mem, exact_config());
    write_cqe(cqe, mlx5::cqe_op::REQ, false, 7, 0x123, 64, 100);   // pass 0
    w.sweep_once();
    write_cqe(cqe, mlx5::cqe_op::REQ, true, 8, 0x123, 64, 200);    // pass 1, overwritten unread by
    write_cqe(cqe, mlx5::cqe_op::REQ, false, 9, 0x123, 64, 300);   // pass 2: owner bit as in pass 0
    w.sweep_once();
    w.sweep_once();
    write_cqe(cqe, mlx5::cqe_op::REQ, true, 10, 0x123, 64, 400);
    w.sweep_once();
    const auto ev = trace.cqe_events();
    ASSERT_EQ(ev.size(), 3u);
    EXPECT_EQ(ev[0].wqe_counter.at(0), 7);
    EXPECT_EQ(ev[1].wqe_counter.at(0), 9);
    EXPECT_EQ(ev[2].wqe_counter.at(0), 10);
}

// The NIC writes a CQE's body, then its last 8 bytes (opcode, QPN, wqe_counter, op_own) in one store. A one-slot
// CQ read between the two shows the next CQE's body under the last one's tail: still the last completion, not a
// new one (traced twice, its second copy would match no work request). A read that takes the old body and the
// new tail is the new completion, traced with its own body.
TEST(WatcherCq, OneSlotCqReadMidWriteTracesEachCompletionOnceWithItsOwnBody) {
    for (const bool collapsed : {true, false}) {
        SCOPED_TRACE(collapsed ? "collapsed" : "1-entry");
        TraceCapture trace;
        alignas(64) uint8_t cqe[64];
        std::memset(cqe, 0xff, sizeof cqe);
        CompletionQueue cq = collapsed_cq(cqe);
        cq.collapsed = collapsed;
        QueueRegistry reg;
        reg.add_completion_queue(cq);
        InterferingReader mem;
        Watcher w(reg, mem, exact_config());
        write_cqe(cqe, mlx5::cqe_op::REQ, false, 7, 0x123, 64, 100);
        w.sweep_once();
        // The next CQE's body is in, its tail not yet.
        alignas(64) uint8_t next[64];
        write_cqe(next, mlx5::cqe_op::REQ, true, 8, 0x123, 128, 200);
        std::memcpy(cqe, next, 56);
        w.sweep_once();
        w.sweep_once();
        std::memcpy(cqe + 56, next + 56, 8);
        w.sweep_once();
        // A read that has the body before the NIC writes the next CQE and the tail after.
        mem.arm([&] { write_cqe(cqe, mlx5::cqe_op::REQ, false, 9, 0x123, 256, 300); }, 56);
        w.sweep_once();
        w.sweep_once();
        const auto ev = trace.cqe_events();
        ASSERT_EQ(ev.size(), 3u);
        EXPECT_EQ(ev[0].wqe_counter.at(0), 7);
        EXPECT_EQ(ev[1].wqe_counter.at(0), 8);
        EXPECT_EQ(ev[1].byte_cnt.at(0), 128u);
        EXPECT_EQ(ev[1].hw_ts.at(0), 200u);
        EXPECT_EQ(ev[2].wqe_counter.at(0), 9);
        EXPECT_EQ(ev[2].byte_cnt.at(0), 256u);  // not the 128 of the body the torn read took
        EXPECT_EQ(ev[2].hw_ts.at(0), 300u);
    }
}

// A producer batching its doorbells (guard 4 here, 128 for UCX GDAKI) fills its ring between two sweeps: the guard
// alone would count its 4 oldest WQEs lost, since the producer may be writing the next lap over them. But it reuses
// a slot only after the WQE in it completed, and its CQ (collapsed or 1-entry, its own) says how far that is:
// only the completed WQEs among those 4 are lost, none while the CQ is as initialised. A completion of another QP,
// or a slot invalidated after a completion was seen (written back by the application), bounds nothing; and a slot
// whose WQE did complete and was overwritten during the copy is still not decoded.
TEST(WatcherCq, UncompletedWqesOfAFullRingAreDecodedDespiteTheGuard) {
    struct Case {
        const char* what;
        int completed;        // the CQE's WQE index, -1: none written
        uint32_t cqe_qpn;
        bool tear_slot_0;     // the producer writes WQE 16 into slot 0 while the watcher copies
        bool written_back;    // a completion was seen, then the slot was invalidated
        size_t lost;
    };
    for (const Case& k : {Case{"WQE 1 completed", 1, 0x55, false, false, 2}, Case{"no completion yet", -1, 0x55, false, false, 0},
                          Case{"another QP's completion", 1, 0x66, false, false, 4},
                          Case{"WQE 0 completed, slot 0 torn", 0, 0x55, true, false, 1},
                          Case{"slot written back", -1, 0x55, false, true, 4}}) {
        SCOPED_TRACE(k.what);
        TraceCapture trace;
        QueueWithOneSlotCq sq(16, /*collapsed=*/false);  // UCX GDAKI's 1-entry CQ
        auto& prod = sq.prod;
        auto& cqe = sq.cqe;
        InterferingReader mem;
        WatcherConfig cfg;
        cfg.guard_wqebbs = 4;
        Watcher w(sq.reg, mem, cfg);
        if (k.written_back) {
            write_cqe(cqe, mlx5::cqe_op::REQ, false, 0xffff, 0x55, 64, 10);  // the last lap's
            w.sweep_once();
            std::memset(cqe, 0xff, sizeof cqe);
        }
        for (uint64_t i = 0; i < 16; ++i) prod.post_write(i);
        if (k.completed >= 0) write_cqe(cqe, mlx5::cqe_op::REQ, false, static_cast<uint16_t>(k.completed), k.cqe_qpn, 64, 10);
        if (k.tear_slot_0) mem.arm([&] { prod.post_write(16, /*ring_doorbell=*/false); });
        w.sweep_once();
        const auto wqes = trace.wqes();
        EXPECT_EQ(trace.lost_total(), k.lost);
        ASSERT_EQ(wqes.size(), 16 - k.lost);
        for (size_t i = 0; i < wqes.size(); ++i) expect_write(wqes[i], k.lost + i, 0x55);
    }
}

TEST(WatcherCq, ACompletionNeverPrecedesTheWqesItCompletes) {
    // A sweep reads the send queues, then the CQs. Here the producer posts WQEs 1..40 and the NIC completes them
    // between those two reads (a watcher preempted mid-sweep: gpu_moe_dispatch under ASan on a loaded machine).
    // The CQE must not reach the trace before WQEs 1..40: the analyzer would match it to nothing and leave every
    // WQE of the QP in flight. Then a CQE naming a WQE the producer never published is still emitted, at once.
    TraceCapture trace;
    QueueWithOneSlotCq sq(64, /*collapsed=*/true);
    auto& prod = sq.prod;
    auto& cqe = sq.cqe;
    auto& reg = sq.reg;
    test::ActBeforeReadOf mem(reinterpret_cast<uint64_t>(cqe), [&] {
        for (uint64_t i = 1; i <= 40; ++i) prod.post_write(i);
        write_cqe(cqe, mlx5::cqe_op::REQ, false, 40, 0x55, 64, 1000);
    });
    Watcher w(reg, mem, exact_config());
    prod.post_write(0);
    w.sweep_once();

    const auto wqe_events = trace.wqe_events();
    const auto cqe_events = trace.cqe_events();
    ASSERT_EQ(cqe_events.size(), 1u);
    EXPECT_EQ(cqe_events[0].wqe_counter.at(0), 40);
    const auto wqes = trace.wqes();
    ASSERT_EQ(wqes.size(), 41u);
    for (size_t i = 0; i < wqes.size(); ++i) expect_write(wqes[i], i, 0x55);
    for (const auto& e : wqe_events)
        EXPECT_LT(e.order, cqe_events[0].order) << "WQEs " << e.wqe_index.front() << ".." << e.wqe_index.back()
                                                << " traced after the CQE that completes them";
    EXPECT_EQ(trace.lost_total(), 0u);

    write_cqe(cqe, mlx5::cqe_op::REQ, false, 1000, 0x55, 64, 2000);
    w.sweep_once();
    ASSERT_EQ(trace.cqe_events().size(), 2u);
    EXPECT_EQ(trace.cqe_events()[1].wqe_counter.at(0), 1000);
    EXPECT_EQ(trace.wqes().size(), 41u);
}

TEST(WatcherCq, ACompletionOfAQueueRegisteredMidSweepWaitsForItsWqes) {
    // The CQ is known; the send queue is registered after the sweep's sync and, before the CQ is read, posts
    // WQEs 0..7 that the NIC completes. The CQE names a QPN the sweep does not know yet: it must not reach the
    // trace before the WQEs, which the next sweep reads once it has learned the queue.
    TraceCapture trace;
    FakeProducer prod(64, 0x55);
    alignas(64) uint8_t cqe[64];
    std::memset(cqe, 0xff, sizeof cqe);
    QueueRegistry reg;
    reg.add_completion_queue(collapsed_cq(cqe));
    test::ActBeforeReadOf mem(reinterpret_cast<uint64_t>(cqe), [&] {
        auto q = prod.queue();
        q.cqn = 0x77;
        reg.add_send_queue(q);
        for (uint64_t i = 0; i < 8; ++i) prod.post_write(i);
        write_cqe(cqe, mlx5::cqe_op::REQ, false, 7, 0x55, 64, 1000);
    });
    Watcher w(reg, mem, exact_config());
    w.sweep_once();
    EXPECT_EQ(trace.cqe_events().size(), 0u) << "the CQE of a queue not learned yet was emitted before its WQEs";
    EXPECT_EQ(trace.wqes().size(), 0u);

    w.sweep_once();
    const auto cqe_events = trace.cqe_events();
    ASSERT_EQ(cqe_events.size(), 1u);
    EXPECT_EQ(cqe_events[0].wqe_counter.at(0), 7);
    const auto wqes = trace.wqes();
    ASSERT_EQ(wqes.size(), 8u);
    for (size_t i = 0; i < wqes.size(); ++i) expect_write(wqes[i], i, 0x55);
    for (const auto& e : trace.wqe_events()) EXPECT_LT(e.order, cqe_events[0].order);

    // With the registry unchanged, a completion naming an unknown queue is emitted at once (the analyzer counts
    // it): holding waits only for a queue that may have just been learned.
    write_cqe(cqe, mlx5::cqe_op::REQ, false, 3, 0x66, 64, 2000);
    w.sweep_once();
    ASSERT_EQ(trace.cqe_events().size(), 2u);
    EXPECT_EQ(trace.cqe_events()[1].wqe_counter.at(0), 3);
}

TEST(WatcherCq, NormalCqFollowsOwnerBitsAcrossLapsAndSkipsWhatTheConsumerInvalidated) {
    TraceCapture trace;
    constexpr uint32_t n = 8;
    std::vector<uint8_t> ring(n * 64);
    for (uint32_t i = 0; i < n; ++i) ring[i * 64 + 63] = mlx5::cqe_op::INVALID << 4;  // rdma-core's initial state
    alignas(8) uint32_t dbr[2] = {0, 0};
    QueueRegistry reg;
    CompletionQueue cq;
    cq.key = 6;
    cq.cqn = 0x78;
    cq.ring_addr = reinterpret_cast<uint64_t>(ring.data());
    cq.ncqe = n;
    cq.dbr_addr = reinterpret_cast<uint64_t>(&dbr[0]);
    reg.add_completion_queue(cq);
    ProcessMemoryReader mem;
    Watcher w(reg, mem, exact_config());

    // The NIC writes CQEs 0..5 (first lap: owner 0).
    for (uint16_t i = 0; i < 6; ++i) write_cqe(&ring[i * 64], mlx5::cqe_op::REQ, false, i, 1, 8, i);
    w.sweep_once();
    // Then 6..11: 8..11 land in slots 0..3 with owner 1 (second lap).
    for (uint16_t i = 6; i < 12; ++i) write_cqe(&ring[(i % n) * 64], mlx5::cqe_op::REQ, (i / n) & 1, i, 1, 8, i);
    w.sweep_once();
    // A consumer that invalidates what it consumed (rocSHMEM) got 12..13 before the watcher did.
    for (uint16_t i = 12; i < 14; ++i) ring[(i % n) * 64 + 63] = static_cast<uint8_t>(mlx5::cqe_op::INVALID << 4 | 1);
    dbr[0] = __builtin_bswap32(14);
    write_cqe(&ring[(14 % n) * 64], mlx5::cqe_op::REQ, 1, 14, 1, 8, 14);
    w.sweep_once();

    std::vector<uint16_t> counters;
    for (const auto& e : trace.cqe_events()) counters.insert(counters.end(), e.wqe_counter.begin(), e.wqe_counter.end());
    const std::vector<uint16_t> expect = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14};
    EXPECT_EQ(counters, expect);
    EXPECT_EQ(w.stats().cqes_seen, 13u);
    EXPECT_EQ(w.stats().cqes_missed, 2u);
    // And the trace says so, once, for this CQ (the analyzer warns; their WQEs may stay "in flight").
    const auto reports = trace.cq_stats();
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_EQ(reports[0].cqn, 0x78u);
    EXPECT_EQ(reports[0].missed_cqes, 2u);
    EXPECT_GT(reports[0].period_ns, 0u);
    w.sweep_once();
    EXPECT_EQ(trace.cq_stats().size(), 1u) << "nothing new missed: no new report";
}

// ------------------------------------------------------------------------------------------ the thread

TEST(WatcherThread, BackgroundSweepsCatchEveryWqeAndThePeriodAdapts) {
    TraceCapture trace;
    FakeProducer prod(1024, 0x99);
    QueueRegistry reg;
    reg.add_send_queue(prod.queue());
    ProcessMemoryReader mem;
    WatcherConfig cfg = exact_config();
    cfg.min_period_ns = 10'000;
    cfg.max_period_ns = 200'000;
    cfg.idle_period_ns = 2'000'000;
    Watcher w(reg, mem, cfg);
    ASSERT_TRUE(w.start());
    ASSERT_TRUE(w.start());  // idempotent
    for (uint64_t i = 0; i < 500; ++i) prod.post_write(i);
    w.wake();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (trace.wqe_count() < 500 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(trace.wqe_count(), 500u);
    // Idle: the period backs off to the idle period.
    const auto idle_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (w.period_ns() < cfg.idle_period_ns && std::chrono::steady_clock::now() < idle_deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(w.period_ns(), cfg.idle_period_ns);
    // A wake (new queue, retire, test) sweeps at once. GPU writers cannot wake it: their first WQE after idling
    // waits out at most the idle period.
    prod.post_write(500);
    w.wake();
    const auto busy_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (trace.wqe_count() < 501 && std::chrono::steady_clock::now() < busy_deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(trace.wqe_count(), 501u);
    EXPECT_GT(w.thread_cpu_ns(), 0u);
    w.stop();
    EXPECT_FALSE(w.running());
    const auto wqes = trace.wqes();
    for (uint64_t i = 0; i < 501; ++i) expect_write(wqes[i], i, 0x99);
}

TEST(WatcherPeriod, AdaptsToTheRiskOfLosingWqes) {
    WatcherConfig c;
    c.min_period_ns = 5'000;
    c.max_period_ns = 100'000;
    c.idle_period_ns = 1'000'000;
    c.linger_ns = 20'000'000;
    constexpr uint64_t kBusy = 0, kQuiet = 30'000'000;  // time since a sweep last found WQEs
    EXPECT_EQ(next_sweep_period(c, 80'000, Backlog::High, true, kBusy), 5'000u);     // a ring half full: hurry
    EXPECT_EQ(next_sweep_period(c, 80'000, Backlog::Rising, true, kBusy), 40'000u);  // filling up: twice as often
    EXPECT_EQ(next_sweep_period(c, 6'000, Backlog::Rising, true, kBusy), 5'000u);    // never under the minimum
    EXPECT_EQ(next_sweep_period(c, 40'000, Backlog::None, true, kBusy), 80'000u);    // keeping up: relax...
    EXPECT_EQ(next_sweep_period(c, 80'000, Backlog::None, true, kBusy), 100'000u);   // ...to the maximum while busy
    EXPECT_EQ(next_sweep_period(c, 100'000, Backlog::None, false, kQuiet), 200'000u);  // idle: on to the idle period
    EXPECT_EQ(next_sweep_period(c, 800'000, Backlog::None, false, kQuiet), 1'000'000u);
    EXPECT_EQ(next_sweep_period(c, 1'000'000, Backlog::None, false, kQuiet), 1'000'000u);
    EXPECT_EQ(next_sweep_period(c, 1'000'000, Backlog::None, true, kBusy), 100'000u);  // busy again: back at once
    c.idle_period_ns = 0;  // an idle period under the maximum means the maximum
    EXPECT_EQ(next_sweep_period(c, 100'000, Backlog::None, false, kQuiet), 100'000u);
}

TEST(WatcherPeriod, StaysAtTheBusyMaximumBetweenBurstsUntilQuietForTheLingerTime) {
    WatcherConfig c;
    c.min_period_ns = 5'000;
    c.max_period_ns = 100'000;
    c.idle_period_ns = 1'000'000;
    c.linger_ns = 20'000'000;
    // Empty sweeps between a producer's bursts: no relaxing past the busy maximum...
    EXPECT_EQ(next_sweep_period(c, 100'000, Backlog::None, false, 150'000), 100'000u);
    EXPECT_EQ(next_sweep_period(c, 100'000, Backlog::None, false, 19'999'999), 100'000u);
    EXPECT_EQ(next_sweep_period(c, 50'000, Backlog::None, false, 1'000'000), 100'000u);
    // ...a period above it (an idle one) comes back to it at once...
    EXPECT_EQ(next_sweep_period(c, 1'000'000, Backlog::None, false, 0), 100'000u);
    // ...and only a quiet linger time lets it relax towards the idle period.
    EXPECT_EQ(next_sweep_period(c, 100'000, Backlog::None, false, 20'000'000), 200'000u);
    c.linger_ns = 0;  // no lingering: the first empty sweep relaxes
    EXPECT_EQ(next_sweep_period(c, 100'000, Backlog::None, false, 0), 200'000u);
}

TEST(WatcherThread, StopSweepsWhatWasPostedLast) {
    TraceCapture trace;
    FakeProducer prod(64, 0x98);
    QueueRegistry reg;
    reg.add_send_queue(prod.queue());
    ProcessMemoryReader mem;
    WatcherConfig cfg = exact_config();
    cfg.min_period_ns = cfg.max_period_ns = 10'000'000'000ull;  // the thread itself would wait 10 s
    Watcher w(reg, mem, cfg);
    ASSERT_TRUE(w.start());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (uint64_t i = 0; i < 3; ++i) prod.post_write(i);
    w.stop();
    EXPECT_EQ(trace.wqe_count(), 3u);
}

TEST(WatcherThread, ConcurrentWriterOutrunningAThrottledWatcherIsNeverDecodedWrong) {
    // A writer thread posts in bursts of random length (up to twice the ring) with short pauses, for 300 ms,
    // while the watcher sweeps only every 100 us: many WQEs are overwritten before they are read, many are not.
    // Whatever is decoded must be exactly what was written at that index, and decoded + lost must account for
    // every WQE. The writer writes one WQE ahead of its doorbell record, so a guard of 1 WQEBB is its window.
    WatcherConfig cfg;
    cfg.guard_wqebbs = 1;
    cfg.min_period_ns = cfg.max_period_ns = 100'000;
    WatchedRing r(32, 0x55, cfg);
    auto& trace = r.trace;
    auto& prod = r.prod;
    auto& w = r.w;
    ASSERT_TRUE(w.start());
    const uint64_t total = test::run_bursty_writer(
        7, [&](uint64_t seq) { prod.post_write(seq); }, [](std::mt19937& rng) { return std::chrono::microseconds(rng() % 60); });
    w.stop();
    const uint64_t kTotal = total;
    const auto wqes = trace.wqes();
    const auto st = w.stats();
    EXPECT_EQ(st.wqes_decoded, wqes.size());
    EXPECT_EQ(st.wqes_decoded + st.wqes_lost, kTotal);
    EXPECT_EQ(trace.lost_total(), st.wqes_lost);
    EXPECT_GT(st.wqes_lost, 0u) << "the watcher was not outrun: the test proves nothing";
    EXPECT_GT(st.wqes_decoded, 1000u) << "too few WQEs decoded concurrently to prove anything";
    expect_exact_and_in_order(wqes);  // each decoded WQE carries its own sequence in raddr
}

}  // namespace
}  // namespace sigmatrace::gpumem
