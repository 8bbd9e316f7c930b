// The engine API for front ends other than verbs (docs/softfabric.md, "Engine API for other front ends"):
// queue pairs, CQs, receive rings and memory keys created without libibverbs, operations submitted with
// reserve/commit/progress, send completions delivered to a custom sink. Both QPs live in this process (rails 0
// and 1 of node 0), on a fabric of its own.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/engine.h"
#include "core/fabric_objects.h"
#include "core/runtime.h"

namespace softfabric {
namespace {

// What a front end might do with completions: record them (e.g. to write mlx5 CQEs).
struct RecordingSink final : engine::CompletionSink {
    void deliver(const engine::SendCompletion& c) override {
        std::lock_guard lock(mutex);
        got.push_back(c);
    }
    std::vector<engine::SendCompletion> wait(size_t n) {
        uint64_t end = now_ns() + 5'000'000'000ull;
        while (now_ns() < end) {
            {
                std::lock_guard lock(mutex);
                if (got.size() >= n) return got;
            }
            usleep(100);
        }
        std::lock_guard lock(mutex);
        return got;
    }
    std::mutex mutex;
    std::vector<engine::SendCompletion> got;
};

class EngineApi : public ::testing::Test {
protected:
    static inline std::string name = "engine-api-" + std::to_string(getpid());
    static void TearDownTestSuite() { shm_unlink(Fabric::shm_name(name).c_str()); }
    static Runtime& rt() { return Runtime::attach(name, 0); }

    // An RC QP on rail `rail` of node 0.
    static engine::QueuePairConfig rc_config(uint64_t pd, uint32_t rail) {
        engine::QueuePairConfig cfg;
        cfg.type = IBV_QPT_RC;
        cfg.nic = {0, rail};
        cfg.pd_id = pd;
        cfg.sq_depth = 16;
        cfg.max_inline = 64;
        return cfg;
    }
    // Connects a -> b and b -> a, accepting remote writes, and moves both to RTS (what modify_qp does for verbs
    // QPs).
    static void connect(engine::QueuePair& a, engine::QueuePair& b) {
        a.transport().dest_nic = b.nic();
        a.transport().dest_qpn = b.qpn();
        b.transport().dest_nic = a.nic();
        b.transport().dest_qpn = a.qpn();
        for (engine::QueuePair* q : {&a, &b}) {
            q->shared().access_flags = IBV_ACCESS_REMOTE_WRITE;
            q->shared().min_rnr_timer = 1;  // 10 us (the IB encoding's 0 would be 655 ms)
            q->set_state(IBV_QPS_RTS);
        }
    }
};

TEST_F(EngineApi, WriteAndSendThroughTheEngineWithoutVerbs) {
    Runtime& r = rt();
    uint64_t pd = r.new_pd_id();
    ArenaBlock rcq_block = create_shared_cq(r, 64);
    ASSERT_NE(rcq_block.offset, 0u);
    SharedCq* rcq = r.arena().at<SharedCq>(rcq_block.offset);

    engine::QueuePairConfig a_cfg = rc_config(pd, 0);
    a_cfg.rq_depth = 4;
    a_cfg.recv_cq_offset = rcq_block.offset;
    engine::QueuePairConfig b_cfg = a_cfg;
    b_cfg.nic = {0, 1};
    engine::QueuePair a(r, a_cfg), b(r, b_cfg);
    RecordingSink sink;
    a.set_completion_sink(&sink);

    std::vector<unsigned char> src(4096), dst(4096);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 13);
    uint32_t lkey = register_memory(r, pd, src.data(), src.size(), reinterpret_cast<uint64_t>(src.data()),
                                    IBV_ACCESS_LOCAL_WRITE);
    uint32_t rkey = register_memory(r, pd, dst.data(), dst.size(), reinterpret_cast<uint64_t>(dst.data()),
                                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(lkey, 0u);
    ASSERT_NE(rkey, 0u);

    connect(a, b);

    {
        std::lock_guard lock(a.sq_lock());
        engine::Wqe* w = a.reserve();
        ASSERT_NE(w, nullptr);
        w->id = 42;
        w->opcode = engine::Opcode::RdmaWrite;
        w->flags = engine::kSignaled;
        w->num_sge = 1;
        w->sges()[0] = {reinterpret_cast<uint64_t>(src.data()), 4096, lkey};
        w->remote_addr = reinterpret_cast<uint64_t>(dst.data());
        w->rkey = rkey;
        // And a SEND with immediate, inline, into b's receive ring.
        engine::Wqe* s = a.reserve();
        ASSERT_NE(s, nullptr);
        s->id = 43;
        s->opcode = engine::Opcode::SendWithImm;
        s->flags = engine::kSignaled | engine::kInline;
        std::memcpy(s->inline_data(a.config().max_send_sge), "hello", 5);
        s->inline_length = 5;
        s->imm_data = 0x01020304;
        a.commit(now_ns());
        a.progress(now_ns());
    }
    std::vector<unsigned char> inbox(64);
    ibv_sge rsge{reinterpret_cast<uint64_t>(inbox.data()), 64, rkey};
    // The receive is posted after the send: the engine's RNR retries deliver it (rnr_retry 7 = forever).
    rsge.lkey = register_memory(r, pd, inbox.data(), inbox.size(), reinterpret_cast<uint64_t>(inbox.data()),
                                IBV_ACCESS_LOCAL_WRITE);
    ASSERT_EQ(b.post_receive(7, &rsge, 1), 0);

    auto done = sink.wait(2);
    ASSERT_EQ(done.size(), 2u);
    EXPECT_EQ(done[0].id, 42u);
    EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(done[0].opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(done[0].qp_num, a.qpn());
    EXPECT_EQ(done[1].id, 43u);
    EXPECT_EQ(done[1].status, IBV_WC_SUCCESS);
    EXPECT_EQ(dst, src);
    ibv_wc wc{};
    uint64_t ts = 0;
    ASSERT_EQ(rcq->pop(1, &wc, &ts), 1);
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, 5u);
    EXPECT_EQ(wc.imm_data, 0x01020304u);
    EXPECT_EQ(wc.qp_num, b.qpn());
    EXPECT_EQ(wc.src_qp, a.qpn());
    EXPECT_GT(ts, 0u);
    EXPECT_EQ(std::memcmp(inbox.data(), "hello", 5), 0);

    // Errors reach the sink too: a bad rkey, then a flush.
    {
        std::lock_guard lock(a.sq_lock());
        for (uint64_t id : {50, 51}) {
            engine::Wqe* w = a.reserve();
            w->id = id;
            w->opcode = engine::Opcode::RdmaWrite;
            w->flags = engine::kSignaled;
            w->num_sge = 1;
            w->sges()[0] = {reinterpret_cast<uint64_t>(src.data()), 64, lkey};
            w->remote_addr = reinterpret_cast<uint64_t>(dst.data());
            w->rkey = id == 50 ? rkey ^ 0x100 : rkey;
        }
        a.commit(now_ns());
        a.progress(now_ns());
    }
    done = sink.wait(4);
    ASSERT_EQ(done.size(), 4u);
    EXPECT_EQ(done[2].status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(done[3].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(a.state(), IBV_QPS_ERR);

    deregister_memory(r, lkey);
    deregister_memory(r, rkey);
    deregister_memory(r, rsge.lkey);
    release_block(r, rcq_block);
}

// An application thread that posts and polls in a loop (what ibv_post_send and ibv_poll_cq do) progresses its QP
// itself: the engine thread must stay out of its way, not look at every operation's due time (a wake every few
// us preempts busy-polling threads pinned to its CPU), nor every 200 us for as long as the application keeps at
// it (a 64 KiB ib_write_bw loses ~12% of its bandwidth to such looks; docs/PERFORMANCE.md, "Software fabric").
// The QP's application window doubles at each look that finds the application busy, up to kAppWindowMaxNs
// (3.2 ms): over 40 ms, ~5 looks to get there and one per 3.2 ms after, 14-15 in all, where a fixed 200 us
// window makes 193. The bound, one look per ms plus 8, is relative to the elapsed time so that a
// slow machine does not fail it.
// And when the application stops progressing the QP with work still due, the engine thread takes it over.
TEST_F(EngineApi, EngineLeavesAQpItsApplicationProgressesAloneAndTakesOverWhenItStops) {
    Runtime& r = rt();
    uint64_t pd = r.new_pd_id();
    engine::QueuePair a(r, rc_config(pd, 0)), b(r, rc_config(pd, 1));
    RecordingSink sink;
    a.set_completion_sink(&sink);
    std::vector<unsigned char> dst(64);
    uint32_t rkey = register_memory(r, pd, dst.data(), dst.size(), reinterpret_cast<uint64_t>(dst.data()),
                                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(rkey, 0u);
    connect(a, b);

    // ibv_post_send: one signaled inline WRITE, executed at once; its completion is due a link latency later.
    auto post = [&](uint64_t id) {
        std::lock_guard lock(a.sq_lock());
        const uint64_t now = now_ns();
        a.note_app_progress(now);
        engine::Wqe* w = a.reserve();
        ASSERT_NE(w, nullptr);
        w->id = id;
        w->opcode = engine::Opcode::RdmaWrite;
        w->flags = engine::kSignaled | engine::kInline;
        std::memcpy(w->inline_data(a.config().max_send_sge), &id, sizeof id);
        w->inline_length = sizeof id;
        w->remote_addr = reinterpret_cast<uint64_t>(dst.data());
        w->rkey = rkey;
        a.commit(now);
        a.progress(now);
    };
    auto completions = [&] {
        std::lock_guard lock(sink.mutex);
        return sink.got.size();
    };

    // Busy for 40 ms: two operations in flight at all times, so that something is always due a few us ahead.
    constexpr uint64_t kBusyNs = 40'000'000;
    const uint64_t passes_before = r.engine_passes();
    const uint64_t t0 = now_ns();
    uint64_t posted = 0;
    for (;;) {
        const bool busy = now_ns() - t0 < kBusyNs;
        const uint64_t completed = completions();
        if (!busy && completed == posted) break;
        while (busy && posted - completed < 2) post(posted++);
        const uint64_t now = now_ns();  // ibv_poll_cq
        a.note_app_progress(now);
        if (a.next_due() <= now) {
            std::unique_lock sq(a.sq_lock(), std::try_to_lock);
            if (sq.owns_lock()) a.progress(now);
        }
    }
    const uint64_t elapsed_ns = now_ns() - t0;
    const uint64_t passes = r.engine_passes() - passes_before;
    {
        std::lock_guard lock(sink.mutex);
        ASSERT_EQ(sink.got.size(), posted);
        EXPECT_EQ(sink.got.back().id, posted - 1);
        EXPECT_EQ(sink.got.back().status, IBV_WC_SUCCESS);
    }
    // An engine that did not back off would pass every few microseconds (thousands here); one that does passes
    // about once per millisecond, and a loaded machine (other tests, a build) bunches a few more.
    EXPECT_LE(passes, 2 * (elapsed_ns / 1'000'000) + 16) << posted << " operations in " << elapsed_ns / 1000 << " us";

    // One more, and the application stops: its completion is not yet due when the post returns, so only the
    // engine thread can deliver it, within the window it grew to (plenty of slack for a loaded machine).
    const uint64_t stop = now_ns();
    post(posted);
    ASSERT_EQ(completions(), posted) << "the completion was due a link latency after the post";
    auto done = sink.wait(posted + 1);
    const uint64_t took_ns = now_ns() - stop;
    ASSERT_EQ(done.size(), posted + 1);
    EXPECT_EQ(done.back().id, posted);
    EXPECT_EQ(done.back().status, IBV_WC_SUCCESS);
    EXPECT_LE(took_ns, engine::kAppWindowMaxNs + 200'000'000) << "the engine thread took it over late";
    uint64_t written = 0;
    std::memcpy(&written, dst.data(), sizeof written);
    EXPECT_EQ(written, posted);
    deregister_memory(r, rkey);
}

}  // namespace
}  // namespace softfabric
