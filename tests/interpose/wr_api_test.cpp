// The ibv_wr_* API: a QP created with ibv_create_qp_ex(send_ops_flags) through the wrapped verbs_context,
// lists built with the inline ibv_wr_start / ibv_wr_<opcode> / ibv_wr_set_* / ibv_wr_complete.
#include <pthread.h>

#include <cerrno>
#include <thread>
#include <vector>

#include "interpose/datapath/context_ops.h"
#include "interpose/state/object_state.h"
#include "support/shim_fixture.h"

namespace sigmatrace::testing {
namespace {

class WrApiTest : public ShimTest {};

constexpr uint64_t kOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
                          IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_IMM;

TEST_F(WrApiTest, CreateQpExIsRecordedAndItsBuildersWrapped) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(64);
    clear_events();
    ibv_qp_ex* qpx = create_ex_qp(dev, cq, kOps);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.qp_create.size(), 1u);
    EXPECT_EQ(ev.qp_create[0].kind, 1u);
    EXPECT_EQ(ev.qp_create[0].qp_num, qpx->qp_base.qp_num);
    EXPECT_EQ(ev.qp_create[0].send_cq, reinterpret_cast<uint64_t>(cq->cq()));
    EXPECT_EQ(ev.qp_create[0].max_send_wr, 64u);
    EXPECT_EQ(ev.qp_create[0].err, 0);
    // Setters of opcodes the QP was not created with stay as the provider left them (NULL here).
    EXPECT_EQ(qpx->wr_atomic_cmp_swp, nullptr);
    EXPECT_NE(qpx->wr_send, nullptr);
}

TEST_F(WrApiTest, AListIsOnePostSendEventAtComplete) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(64);
    ibv_qp_ex* qpx = create_ex_qp(dev, cq, kOps);
    clear_events();

    ibv_wr_start(qpx);
    qpx->wr_id = 11;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qpx, 0x99, 0xfeed0000);
    ibv_wr_set_sge(qpx, 0x5, 0x1000, 4096);
    qpx->wr_id = 12;
    qpx->wr_flags = 0;
    ibv_wr_send_imm(qpx, htobe32(7));
    ibv_sge sgl[2] = {{0x2000, 10, 5}, {0x3000, 20, 5}};
    ibv_wr_set_sge_list(qpx, 2, sgl);
    qpx->wr_id = 13;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_fetch_add(qpx, 0x42, 0xbeef0000, 1);
    ibv_wr_set_sge(qpx, 0x5, 0x4000, 8);
    qpx->wr_id = 14;
    ibv_wr_send(qpx);
    char payload[16] = {};
    ibv_wr_set_inline_data(qpx, payload, sizeof payload);
    EXPECT_EQ(capture_->total(), 0u) << "nothing is emitted before the doorbell (wr_complete)";
    errno = 0;
    ASSERT_EQ(ibv_wr_complete(qpx), 0);
    EXPECT_EQ(errno, kFakeSuccessErrno);

    FakeQp* q = fake_qp(&qpx->qp_base);
    EXPECT_EQ(q->posted_send_ids, (std::vector<uint64_t>{11, 12, 13, 14}));
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 1u);
    const cap_post_send& e = ev.post_send[0];
    EXPECT_EQ(e.api, 1u);
    EXPECT_EQ(e.ret, 0);
    EXPECT_EQ(e.bad_index, -1);
    EXPECT_EQ(e.wr_id, (std::vector<uint64_t>{11, 12, 13, 14}));
    EXPECT_EQ(e.opcode, (std::vector<uint8_t>{IBV_WR_RDMA_WRITE, IBV_WR_SEND_WITH_IMM, IBV_WR_ATOMIC_FETCH_AND_ADD,
                                             IBV_WR_SEND}));
    EXPECT_EQ(e.send_flags, (std::vector<uint32_t>{IBV_SEND_SIGNALED, 0, IBV_SEND_SIGNALED,
                                                   IBV_SEND_SIGNALED | IBV_SEND_INLINE}));
    EXPECT_EQ(e.num_sge, (std::vector<uint16_t>{1, 2, 1, 1}));
    EXPECT_EQ(e.bytes, (std::vector<uint32_t>{4096, 30, 8, 16}));
    EXPECT_EQ(e.raddr, (std::vector<uint64_t>{0xfeed0000, 0, 0xbeef0000, 0}));
    EXPECT_EQ(e.rkey, (std::vector<uint32_t>{0x99, 0, 0x42, 0}));
    EXPECT_EQ(e.imm, (std::vector<uint32_t>{0, htobe32(7), 0, 0}));
}

TEST_F(WrApiTest, ProviderRewritingWrCompleteOnModifyIsRewrapped) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(64);
    ibv_qp_ex* qpx = create_ex_qp(dev, cq, kOps);
    // The provider replaces wr_complete during ibv_modify_qp (as mlx5 does on RTS): our wrapper is gone...
    const auto ours = qpx->wr_complete;
    fake_provider_rewrites_wr_complete(qpx);
    ASSERT_NE(qpx->wr_complete, ours);
    // ...until the modify wrapper re-applies it, keeping the provider's new function as the original.
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTS;
    interpose::on_qp_modified(&qpx->qp_base, &attr, IBV_QP_STATE, 0);
    EXPECT_EQ(qpx->wr_complete, ours);
    clear_events();
    const int before = fake_rts_complete_calls();
    ibv_wr_start(qpx);
    qpx->wr_id = 77;
    qpx->wr_flags = 0;
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, 1, 0x1000, 10);
    ASSERT_EQ(ibv_wr_complete(qpx), 0);
    EXPECT_EQ(fake_rts_complete_calls(), before + 1) << "the provider's new wr_complete must be the one called";
    ASSERT_EQ(events().post_send.size(), 1u);
    EXPECT_EQ(events().post_send[0].wr_id, (std::vector<uint64_t>{77}));
}

TEST_F(WrApiTest, FailedCompleteAndAbort) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(64);
    ibv_qp_ex* qpx = create_ex_qp(dev, cq, kOps);
    clear_events();
    ibv_wr_start(qpx);
    qpx->wr_id = 1;
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, 1, 0x1000, 10);
    ibv_wr_abort(qpx);
    EXPECT_EQ(capture_->total(), 0u) << "an aborted list posts nothing and records nothing";

    fake_qp(&qpx->qp_base)->fail_complete = true;
    ibv_wr_start(qpx);
    qpx->wr_id = 2;
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, 1, 0x1000, 10);
    errno = 0;
    EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
    EXPECT_EQ(errno, kFakeFailureErrno);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 1u);
    EXPECT_EQ(ev.post_send[0].ret, EINVAL);
    EXPECT_EQ(ev.post_send[0].bad_index, 0);
    EXPECT_EQ(ev.post_send[0].wr_id, (std::vector<uint64_t>{2}));
}

// wr_start is the provider's own: what a list records is decided at its first WR. Recording turned on after
// wr_start but before the first WR records that list; turned off after its first WR, the list is still
// recorded whole; a list whose first WR came while recording was off is not recorded at all.
TEST_F(WrApiTest, WhatAListRecordsIsDecidedAtItsFirstWr) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(64);
    ibv_qp_ex* qpx = create_ex_qp(dev, cq, kOps);
    interpose::Config off = test_config();
    off.categories &= ~interpose::kCategorySend;
    auto post_one = [qpx](uint64_t wr_id, uint32_t bytes) {
        qpx->wr_id = wr_id;
        qpx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_send(qpx);
        ibv_wr_set_sge(qpx, 1, 0x1000, bytes);
    };
    clear_events();

    interpose::set_config(off);
    ibv_wr_start(qpx);
    interpose::set_config(test_config());  // before the first WR: this list is recorded
    post_one(1, 10);
    post_one(2, 20);
    interpose::set_config(off);  // after it: still the whole list
    EXPECT_EQ(ibv_wr_complete(qpx), 0);

    ibv_wr_start(qpx);
    post_one(3, 30);  // first WR while off: not recorded, even though recording is back on at wr_complete
    interpose::set_config(test_config());
    post_one(4, 40);
    EXPECT_EQ(ibv_wr_complete(qpx), 0);

    ibv_wr_start(qpx);
    post_one(5, 50);
    EXPECT_EQ(ibv_wr_complete(qpx), 0);

    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 2u);
    EXPECT_EQ(ev.post_send[0].wr_id, (std::vector<uint64_t>{1, 2}));
    EXPECT_EQ(ev.post_send[0].bytes, (std::vector<uint32_t>{10, 20}));
    EXPECT_EQ(ev.post_send[0].ret, 0);
    EXPECT_EQ(ev.post_send[1].wr_id, (std::vector<uint64_t>{5}));
    EXPECT_EQ(ev.post_send[1].bytes, (std::vector<uint32_t>{50}));
    EXPECT_EQ(fake_qp(&qpx->qp_base)->posted_send_ids, (std::vector<uint64_t>{1, 2, 3, 4, 5}))
        << "the provider posted every list";
}

// Lists built on two QPs in turn by one thread: every wrapped call misses the thread's one-entry state cache
// (the other QP's state is in it) and re-enters after the lookup. Each list records exactly its own WRs.
TEST_F(WrApiTest, ListsOnTwoQpsBuiltInTurnEachRecordTheirOwnWrs) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(64);
    ibv_qp_ex* a = create_ex_qp(dev, cq, kOps);
    ibv_qp_ex* b = create_ex_qp(dev, cq, kOps);
    clear_events();
    ibv_wr_start(a);
    ibv_wr_start(b);
    for (uint64_t i = 0; i < 3; ++i) {
        a->wr_id = 100 + i;
        a->wr_flags = IBV_SEND_SIGNALED;
        b->wr_id = 200 + i;
        b->wr_flags = 0;
        ibv_wr_rdma_write(a, 0x10, 0xa000 + i);
        ibv_wr_send(b);
        ibv_wr_set_sge(a, 1, 0x1000, static_cast<uint32_t>(10 + i));
        ibv_wr_set_sge(b, 1, 0x2000, static_cast<uint32_t>(20 + i));
    }
    EXPECT_EQ(ibv_wr_complete(b), 0);
    EXPECT_EQ(ibv_wr_complete(a), 0);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 2u);
    const auto& eb = ev.post_send[0];  // b completed first
    const auto& ea = ev.post_send[1];
    EXPECT_EQ(eb.qp_num, b->qp_base.qp_num);
    EXPECT_EQ(eb.wr_id, (std::vector<uint64_t>{200, 201, 202}));
    EXPECT_EQ(eb.bytes, (std::vector<uint32_t>{20, 21, 22}));
    EXPECT_EQ(eb.opcode, (std::vector<uint8_t>{IBV_WR_SEND, IBV_WR_SEND, IBV_WR_SEND}));
    EXPECT_EQ(ea.qp_num, a->qp_base.qp_num);
    EXPECT_EQ(ea.wr_id, (std::vector<uint64_t>{100, 101, 102}));
    EXPECT_EQ(ea.bytes, (std::vector<uint32_t>{10, 11, 12}));
    EXPECT_EQ(ea.raddr, (std::vector<uint64_t>{0xa000, 0xa001, 0xa002}));
    EXPECT_EQ(ea.send_flags, (std::vector<uint32_t>{IBV_SEND_SIGNALED, IBV_SEND_SIGNALED, IBV_SEND_SIGNALED}));
}

// A list of one WR (w_complete copies it itself) and an empty list (complete_list's path with n = 0).
TEST_F(WrApiTest, AOneWrListAndAnEmptyListAreRecordedWithTheirResults) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(64);
    ibv_qp_ex* qpx = create_ex_qp(dev, cq, kOps);
    clear_events();
    char payload[2] = {'h', 'i'};
    ibv_wr_start(qpx);
    qpx->wr_id = 0xabc;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send_imm(qpx, htobe32(5));
    ibv_wr_set_inline_data(qpx, payload, sizeof payload);
    ASSERT_EQ(ibv_wr_complete(qpx), 0);
    ibv_wr_start(qpx);
    ASSERT_EQ(ibv_wr_complete(qpx), 0);

    EXPECT_EQ(fake_qp(&qpx->qp_base)->posted_send_ids, (std::vector<uint64_t>{0xabc}));
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 2u);
    const cap_post_send& one = ev.post_send[0];
    EXPECT_EQ(one.ret, 0);
    EXPECT_EQ(one.bad_index, -1);
    EXPECT_EQ(one.wr_id, (std::vector<uint64_t>{0xabc}));
    EXPECT_EQ(one.opcode, (std::vector<uint8_t>{IBV_WR_SEND_WITH_IMM}));
    EXPECT_EQ(one.send_flags, (std::vector<uint32_t>{IBV_SEND_SIGNALED | IBV_SEND_INLINE}));
    EXPECT_EQ(one.bytes, (std::vector<uint32_t>{2}));
    EXPECT_EQ(one.imm, (std::vector<uint32_t>{htobe32(5)}));
    const cap_post_send& empty = ev.post_send[1];
    EXPECT_EQ(empty.ret, 0);
    EXPECT_TRUE(empty.wr_id.empty()) << "an empty list is one call that posted nothing";
}

// Posts a one-WR list: an RDMA WRITE of `length` bytes to 0xab000000 + wr_id, rkey 0x77. Returns wr_complete's result.
int write_one(ibv_qp_ex* qpx, uint64_t wr_id, unsigned flags, uint32_t length) {
    ibv_wr_start(qpx);
    qpx->wr_id = wr_id;
    qpx->wr_flags = flags;
    ibv_wr_rdma_write(qpx, 0x77, 0xab000000 + wr_id);
    ibv_wr_set_sge(qpx, 0x5, 0x1000, length);
    return ibv_wr_complete(qpx);
}

// Deferred, a one-WR list's record is published before the doorbell, unfinished, and finished with the result
// after it (deferred_capture.h). Inside the provider's wr_complete: another consumer (what the emitter thread
// does) emits nothing of it, and a record the same thread captures there waits behind it; both come out after
// the call, the list's with its result, success or failure, and the caller sees the provider's errno.
TEST_F(WrApiTest, AOneWrListRecordedBeforeTheDoorbellIsEmittedOnlyWithItsResult) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(64);
    ibv_qp_ex* qpx = create_ex_qp(dev, cq, kOps);
    FakeQp* other = create_qp(dev, cq, cq);
    ASSERT_EQ(post_one_recv(other, 99), 0);  // this thread's ring exists from here on (its first capture makes it)
    clear_events();
    std::vector<uint64_t> emitted_inside;
    uint64_t next_recv = 100;
    std::vector<uint64_t> pending_inside;  // bytes left in this thread's ring after that consumer ran
    fake_qp(&qpx->qp_base)->during_complete = [&] {
        interpose::deferred::drain_all(interpose::deferred::Wait::no);
        emitted_inside.push_back(capture_->total());
        const interpose::deferred::Ring* ring = interpose::deferred::tls_ring;
        pending_inside.push_back(ring != nullptr ? ring->pending_bytes() : 0);
        ASSERT_EQ(post_one_recv(other, next_recv++), 0);
    };
    errno = 0;
    EXPECT_EQ(write_one(qpx, 1, IBV_SEND_SIGNALED, 65536), 0);
    EXPECT_EQ(errno, kFakeSuccessErrno);
    fake_qp(&qpx->qp_base)->fail_complete = true;
    EXPECT_EQ(write_one(qpx, 2, IBV_SEND_SIGNALED, 65536), EINVAL);
    EXPECT_EQ(errno, kFakeFailureErrno);
    // Inside the second call the first list and the first receive are out (2 events), the second list is not.
    EXPECT_EQ(emitted_inside, (std::vector<uint64_t>{0, 2})) << "a list's record waits for its result";

    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_send.size(), 2u);
    ASSERT_EQ(ev.post_recv.size(), 2u);
    EXPECT_EQ(ev.post_send[0].ret, 0);
    EXPECT_EQ(ev.post_send[0].bad_index, -1);
    EXPECT_EQ(ev.post_send[0].wr_id, (std::vector<uint64_t>{1}));
    EXPECT_EQ(ev.post_send[0].raddr, (std::vector<uint64_t>{0xab000001}));
    EXPECT_EQ(ev.post_send[0].rkey, (std::vector<uint32_t>{0x77}));
    EXPECT_EQ(ev.post_send[0].bytes, (std::vector<uint32_t>{65536}));
    EXPECT_EQ(ev.post_send[1].ret, EINVAL);
    EXPECT_EQ(ev.post_send[1].bad_index, 0);
    EXPECT_EQ(ev.post_send[1].wr_id, (std::vector<uint64_t>{2}));
    EXPECT_EQ(ev.post_recv[0].wr_id, (std::vector<uint64_t>{100}));
    EXPECT_EQ(ev.post_recv[1].wr_id, (std::vector<uint64_t>{101}));
    if (test_defer_mode()) {
        EXPECT_EQ(pending_inside, (std::vector<uint64_t>{96, 96})) << "the list's record, in the ring, held back";
        EXPECT_LT(ev.post_send[0].ts, ev.post_recv[0].ts);
        EXPECT_LT(ev.post_recv[0].ts, ev.post_send[1].ts);
        EXPECT_LT(ev.post_send[1].ts, ev.post_recv[1].ts);
    }
    fake_qp(&qpx->qp_base)->during_complete = nullptr;
}

// A thread that exits inside the provider's wr_complete (pthread_exit from the provider) leaves its list's record
// unfinished: at its exit the record is dropped and counted, what it captured before still comes out, and the
// ring it frees records normally for the next thread.
TEST_F(WrApiTest, AThreadThatExitsInsideWrCompleteHasThatListDroppedAndCounted) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(64);
    ibv_qp_ex* qpx = create_ex_qp(dev, cq, kOps);
    FakeQp* other = create_qp(dev, cq, cq);
    clear_events();
    const uint64_t dropped_before = interpose::deferred::ring_stats().dropped_records;
    FakeQp* fq = fake_qp(&qpx->qp_base);
    fq->during_complete = [fq] {
        fq->during_complete = nullptr;
        fq->mutex.unlock();  // the provider's send-queue lock, which its wr_complete would have released
        pthread_exit(nullptr);
    };
    std::thread([&] {
        ASSERT_EQ(post_one_recv(other, 7), 0);  // this thread's first capture: it makes its ring
        ASSERT_EQ(post_one_recv(other, 8), 0);
        (void)write_one(qpx, 1, 0, 64);
        ADD_FAILURE() << "pthread_exit returned";
    }).join();
    // Likely given the ring the first thread freed.
    std::thread([&] { EXPECT_EQ(write_one(qpx, 2, 0, 64), 0); }).join();

    const CapturedEvents ev = events();
    ASSERT_EQ(ev.post_recv.size(), 2u);
    EXPECT_EQ(ev.post_recv[0].wr_id, (std::vector<uint64_t>{7}));
    EXPECT_EQ(ev.post_recv[1].wr_id, (std::vector<uint64_t>{8}));
    if (test_defer_mode()) {
        EXPECT_EQ(interpose::deferred::ring_stats().dropped_records, dropped_before + 1);
        ASSERT_EQ(ev.post_send.size(), 1u) << "the list whose thread exited in its call is not emitted";
        EXPECT_EQ(ev.post_send[0].wr_id, (std::vector<uint64_t>{2}));
        EXPECT_EQ(ev.post_send[0].ret, 0);
    } else {
        ASSERT_EQ(ev.post_send.size(), 1u);  // immediate: the event is written after the call, which never returned
        EXPECT_EQ(ev.post_send[0].wr_id, (std::vector<uint64_t>{2}));
    }
}

// Opens a list of `n` unsignaled one-SGE RDMA WRITEs on `qpx` (wr_id i, 64 bytes to 0x1000 * i); the caller
// completes it.
void start_write_list(ibv_qp_ex* qpx, uint64_t n) {
    ibv_wr_start(qpx);
    for (uint64_t i = 0; i < n; ++i) {
        qpx->wr_id = i;
        qpx->wr_flags = 0;
        ibv_wr_rdma_write(qpx, 1, 0x1000 * i);
        ibv_wr_set_sge(qpx, 1, 0x1000, 64);
    }
}

TEST_F(WrApiTest, ListsLongerThanAnEventAreSplitAndLongerThanTheQueueFlushEarly) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(256);
    ibv_qp_ex* qpx = create_ex_qp(dev, cq, kOps, /*depth=*/32);
    clear_events();
    start_write_list(qpx, 70);
    ASSERT_EQ(ibv_wr_complete(qpx), 0);
    const CapturedEvents ev = events();
    uint32_t total = 0;
    uint32_t expect_offset = 0;
    for (const auto& e : ev.post_send) {
        EXPECT_EQ(e.batch_offset, expect_offset);
        EXPECT_LE(e.n, 32u);
        EXPECT_EQ(e.wr_id.front(), expect_offset);
        expect_offset += e.n;
        total += e.n;
    }
    EXPECT_EQ(total, 70u) << "every WR of the list is recorded exactly once";
}

// A list longer than one event but within the queue: wr_complete takes its last part (up to 32 WRs) out of the
// QP's state before the provider's call, and reports the earlier parts first with ret 0; the last part's event
// carries the provider's result.
TEST_F(WrApiTest, AFailedLongListReportsItsResultOnItsLastPart) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(256);
    ibv_qp_ex* qpx = create_ex_qp(dev, cq, kOps, /*depth=*/128);
    clear_events();
    fake_qp(&qpx->qp_base)->fail_complete = true;
    start_write_list(qpx, 70);
    EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
    const CapturedEvents ev = events();
    ASSERT_FALSE(ev.post_send.empty());
    uint32_t expect_offset = 0;
    for (size_t i = 0; i < ev.post_send.size(); ++i) {
        const auto& e = ev.post_send[i];
        EXPECT_EQ(e.batch_offset, expect_offset);
        EXPECT_EQ(e.wr_id.front(), expect_offset);
        const bool last = i + 1 == ev.post_send.size();
        EXPECT_EQ(e.ret, last ? EINVAL : 0) << "event " << i;
        EXPECT_EQ(e.bad_index, last ? 0 : -1) << "event " << i;
        expect_offset += e.n;
    }
    EXPECT_EQ(expect_offset, 70u) << "every WR of the list is recorded exactly once";
    EXPECT_EQ(ev.post_send.back().batch_offset, 64u) << "the last part is the list's last 70 % 32 WRs";
}

TEST_F(WrApiTest, QpToQpExOnAQpWrapsTheClassicBuilders) {
    FakeDevice dev;
    open(dev);
    FakeCq* cq = dev.make_cq(64);
    // A QP whose creation the tracer did not see with its send_ops_flags.
    ibv_qp_init_attr_ex attr{};
    attr.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    attr.send_cq = cq->cq();
    attr.recv_cq = cq->cq();
    attr.send_ops_flags = IBV_QP_EX_WITH_SEND;
    ibv_qp* qp = interpose::context_originals(dev.ctx())->create_qp_ex(dev.ctx(), &attr);
    ibv_qp_ex* qpx = &fake_qp(qp)->qpx;
    const auto provider_send = qpx->wr_send;
    interpose::on_qp_ex_obtained(qp, qpx);
    EXPECT_NE(qpx->wr_send, provider_send);
    clear_events();
    ibv_wr_start(qpx);
    qpx->wr_id = 5;
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, 1, 0x1000, 3);
    ASSERT_EQ(ibv_wr_complete(qpx), 0);
    ASSERT_EQ(events().post_send.size(), 1u);
    EXPECT_EQ(events().post_send[0].bytes, (std::vector<uint32_t>{3}));
}

}  // namespace
}  // namespace sigmatrace::testing
