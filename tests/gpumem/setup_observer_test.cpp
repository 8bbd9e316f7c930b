// The set-up logic behind the hooks, through the callback backend: NVSHMEM-, MORI- and rocSHMEM-style set-ups
// built from PRM byte images and init_obj outputs, the events they produce, the queues they hand to the watcher,
// and the cases where a queue cannot be watched (with the reason reported, nothing crashing).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "fake_producer.h"
#include "mlx5_format/mlx5_layout.h"
#include "mlx5_format/prm_commands.h"
#include "gpumem/setup_observer.h"
#include "gpumem/watcher.h"
#include "prm_test_util.h"
#include "trace_capture.h"

namespace sigmatrace::gpumem {
namespace {

using test::TraceCapture;
using test::WqeImage;

constexpr uint64_t kCtx = 0xc0ffee;

// Page-aligned host memory standing in for a UMEM buffer.
struct Buffer {
    explicit Buffer(size_t n) : size(n), p(static_cast<uint8_t*>(std::aligned_alloc(65536, n))) { std::memset(p, 0, n); }
    ~Buffer() { std::free(p); }
    uint64_t addr() const { return reinterpret_cast<uint64_t>(p); }
    size_t size;
    uint8_t* p;
};

class SetupTest : public ::testing::Test {
protected:
    QueueRegistry reg;
    MemoryClassifier classifier;
    ProcessMemoryReader mem;
    Watcher watcher{reg, mem, [] {
                        WatcherConfig c;
                        c.guard_wqebbs = 0;
                        return c;
                    }()};
    SetupObserver obs{reg, classifier, &watcher};
    TraceCapture trace;

    // NVSHMEM IBGDA: WQ umem 8, DBR umem 7, CQ umem 10 with its DBR in umem 9, UAR page 0x33.
    Buffer wq{65536 * 2}, dbr{65536}, cqbuf{65536}, cqdbr{65536};
    static constexpr uint64_t kQpObj = 0x1000, kCqObj = 0x2000;

    void register_nvshmem_memory() {
        obs.umem_registered(kCtx, 0xa8, 8, wq.addr(), wq.size, -1, 0);
        obs.umem_registered(kCtx, 0xa7, 7, dbr.addr(), dbr.size, -1, 0);
        obs.umem_registered(kCtx, 0xaa, 10, cqbuf.addr(), cqbuf.size, -1, 0);
        obs.umem_registered(kCtx, 0xa9, 9, cqdbr.addr(), cqdbr.size, -1, 0);
        obs.uar_allocated(kCtx, 0xbb, 0x33, 0x7f0000000800, 0x7f0000000000, 1u << 31, 0);
    }
    void create_cq() {
        std::memset(cqbuf.p + 0x200, 0xff, 64);  // NVSHMEM fills CQ buffers with 0xff (opcode INVALID)
        const auto in = test::build_create_cq({});
        const auto out = test::build_create_out(0x401);
        obs.devx_created(kCtx, kCqObj, in.data(), in.size(), out.data(), out.size());
    }
    void create_qp(const test::CreateQpSpec& spec = {}) {
        const auto in = test::build_create_qp(spec);
        const auto out = test::build_create_out(0xabc);
        obs.devx_created(kCtx, kQpObj, in.data(), in.size(), out.data(), out.size());
    }
    // Writes RDMA WRITE WQE `i` into the learned ring and publishes it, as a GPU thread would.
    void gpu_post_write(const SendQueue& q, uint32_t i) {
        auto img = WqeImage(mlx5::op::RDMA_WRITE, static_cast<uint16_t>(i), q.qpn).raddr(0x9000 + i, 0x77).data(100 + i, 1, 0);
        test::place(reinterpret_cast<uint8_t*>(q.ring_addr), q.wqebbs, i, img.finish());
        __atomic_store_n(reinterpret_cast<uint32_t*>(q.dbr_addr), __builtin_bswap32((i + 1) & 0xffff), __ATOMIC_RELEASE);
    }
};

TEST_F(SetupTest, NvshmemStyleDevxSetupIsLearnedAndWatched) {
    register_nvshmem_memory();
    create_cq();
    create_qp();

    const auto umems = trace.umems();
    ASSERT_EQ(umems.size(), 4u);
    EXPECT_EQ(umems[0].umem_id, 8u);
    EXPECT_EQ(umems[0].addr, wq.addr());
    EXPECT_EQ(umems[0].size, wq.size);
    EXPECT_EQ(umems[0].mem_type, 0u);  // host
    EXPECT_EQ(umems[0].dmabuf_fd, -1);
    ASSERT_EQ(trace.uars().size(), 1u);
    EXPECT_EQ(trace.uars()[0].page_id, 0x33u);
    EXPECT_EQ(trace.uars()[0].reg_addr, 0x7f0000000800u);

    ASSERT_EQ(trace.cqs().size(), 1u);
    const auto cq = trace.cqs()[0];
    EXPECT_EQ(cq.cqn, 0x401u);
    EXPECT_EQ(cq.ring_addr, cqbuf.addr() + 0x200);
    EXPECT_EQ(cq.ncqe, 1u);
    EXPECT_EQ(cq.cqe_size, 64u);
    EXPECT_EQ(cq.dbr_addr, cqdbr.addr());
    EXPECT_EQ(cq.collapsed, 1u);
    EXPECT_EQ(cq.source, 0u);

    ASSERT_EQ(trace.qps().size(), 1u);
    const auto qp = trace.qps()[0];
    EXPECT_EQ(qp.ctx, kCtx);
    EXPECT_EQ(qp.qpn, 0xabcu);
    EXPECT_EQ(qp.st, 0u);
    EXPECT_EQ(qp.sq_addr, wq.addr() + 0x10000);
    EXPECT_EQ(qp.sq_wqebb, 1024u);
    EXPECT_EQ(qp.dbr_addr, dbr.addr() + 0x40 + 4);
    EXPECT_EQ(qp.dbr_mode, 0u);
    EXPECT_EQ(qp.cqn_snd, 0x401u);
    EXPECT_EQ(qp.uar_page, 0x33u);
    EXPECT_EQ(qp.mem_type, 0u);
    EXPECT_EQ(obs.problems(), 0u);

    // The GPU posts: the watcher decodes from the learned geometry.
    const auto q = reg.find_send_queue(kQpObj);
    ASSERT_TRUE(q);
    for (uint32_t i = 0; i < 3; ++i) gpu_post_write(*q, i);
    EXPECT_EQ(watcher.sweep_once(), 3u);
    const auto wqes = trace.wqes();
    ASSERT_EQ(wqes.size(), 3u);
    EXPECT_EQ(wqes[2].qpn, 0xabcu);
    EXPECT_EQ(wqes[2].raddr, 0x9002u);
    EXPECT_EQ(wqes[2].bytes, 102u);

    // The NIC completes WQE 2 in the collapsed CQE: the watcher reports it.
    auto* cqe = cqbuf.p + 0x200;
    test::put_be16(cqe + 60, 2);
    std::memset(cqe, 0, 64);
    test::put_be32(cqe + 56, 0xabc);
    test::put_be16(cqe + 60, 2);
    cqe[63] = 0;  // REQ, owner 0
    watcher.sweep_once();
    ASSERT_EQ(trace.cqe_events().size(), 1u);
    EXPECT_EQ(trace.cqe_events()[0].qpn.at(0), 0xabcu);
    EXPECT_EQ(trace.cqe_events()[0].wqe_counter.at(0), 2);

    // Connect, then destroy: WQEs posted just before the destroy are still traced.
    const uint8_t gid[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
    const auto rtr = test::build_init2rtr(0xabc, 0xdef, 7, gid);
    obs.devx_modified(kQpObj, rtr.data(), rtr.size(), nullptr, 0, 0);
    ASSERT_EQ(trace.modifies().size(), 1u);
    EXPECT_EQ(trace.modifies()[0].qpn, 0xabcu);
    EXPECT_EQ(trace.modifies()[0].command, 0x503u);
    EXPECT_EQ(trace.modifies()[0].remote_qpn, 0xdefu);
    EXPECT_EQ(trace.modifies()[0].rlid, 7u);
    EXPECT_EQ(trace.modifies()[0].rgid_prefix, 0xfe80000000000000ull);
    EXPECT_EQ(trace.modifies()[0].rgid_iid, 0x0102030405060708ull);
    EXPECT_EQ(trace.modifies()[0].ctx, kCtx);

    // A QUERY_QP of it (a watchdog's): reported with the QP's context and number, the state and the counters;
    // a failed one with its error; other query commands not at all.
    {
        namespace pf = prm::f;
        std::vector<uint8_t> in(16, 0), out(512, 0);
        prm::set_field(in.data(), in.size(), pf::opcode, prm::cmd::QUERY_QP);
        prm::set_field(in.data(), in.size(), pf::obj_number, 0xabc);
        prm::set_field(out.data(), out.size(), pf::qpc_state, 6);
        prm::set_field(out.data(), out.size(), pf::qpc_hw_sq_wqebb_counter, 3);
        prm::set_field(out.data(), out.size(), pf::qpc_sw_sq_wqebb_counter, 4);
        obs.devx_queried(kQpObj, in.data(), in.size(), out.data(), out.size(), 0);
        obs.devx_queried(kQpObj, in.data(), in.size(), out.data(), out.size(), EIO);
        obs.devx_queried(kQpObj, in.data(), in.size(), out.data(), 8, 0);  // output cut short
        prm::set_field(in.data(), in.size(), pf::opcode, 0x402);  // QUERY_CQ
        obs.devx_queried(kQpObj, in.data(), in.size(), out.data(), out.size(), 0);
        const auto qs = trace.queries();
        ASSERT_EQ(qs.size(), 3u);
        EXPECT_EQ(qs[0].ctx, kCtx);
        EXPECT_EQ(qs[0].qpn, 0xabcu);
        EXPECT_EQ(qs[0].state, 6u);
        EXPECT_EQ(qs[0].hw_sq_wqebb_counter, 3u);
        EXPECT_EQ(qs[0].sw_sq_wqebb_counter, 4u);
        EXPECT_EQ(qs[0].err, 0);
        EXPECT_EQ(qs[1].err, EIO);
        EXPECT_EQ(qs[2].err, EPROTO);
    }

    gpu_post_write(*q, 3);
    test::put_be16(cqe + 60, 3);  // completed, and the QP destroyed before the next sweep
    cqe[63] = 1;
    obs.devx_destroying(kQpObj);
    EXPECT_EQ(trace.wqes().size(), 4u);
    ASSERT_EQ(trace.destroys().size(), 1u);
    EXPECT_EQ(trace.destroys()[0].qpn, 0xabcu);
    // The final sweep's WQE and the completion its CQ (still alive) holds come before the destroy: after it, the
    // analyzer no longer knows the QP's number.
    ASSERT_FALSE(trace.wqe_events().empty());
    ASSERT_EQ(trace.cqe_events().size(), 2u);
    EXPECT_EQ(trace.cqe_events()[1].wqe_counter.at(0), 3);
    EXPECT_LT(trace.wqe_events().back().order, trace.cqe_events()[1].order);
    EXPECT_LT(trace.cqe_events()[1].order, trace.destroy_orders().at(0));
    EXPECT_FALSE(reg.find_send_queue(kQpObj));
    obs.devx_destroying(kCqObj);
    EXPECT_EQ(reg.send_queue_count(), 0u);
    EXPECT_EQ(trace.destroys().size(), 1u);  // CQs have no destroy event
}

// NVSHMEM's DC target: nothing to watch, but its number must reach the trace (st 0x100), and its destroy too.
TEST_F(SetupTest, DevxDctIsReportedWithItsNumberAndNotWatched) {
    register_nvshmem_memory();
    const auto in = test::build_create_dct({});
    const auto out = test::build_create_out(0x5d1);
    constexpr uint64_t kDctObj = 0x3000;
    obs.devx_created(kCtx, kDctObj, in.data(), in.size(), out.data(), out.size());
    ASSERT_EQ(trace.qps().size(), 1u);
    EXPECT_EQ(trace.qps()[0].ctx, kCtx);
    EXPECT_EQ(trace.qps()[0].qpn, 0x5d1u);
    EXPECT_EQ(trace.qps()[0].st, kGpuQpStDct);
    EXPECT_EQ(trace.qps()[0].sq_wqebb, 0u);
    EXPECT_EQ(trace.qps()[0].source, 0u);   // DevX
    EXPECT_FALSE(reg.find_send_queue(kDctObj));
    EXPECT_EQ(obs.problems(), 0u);   // not watching it is no problem: it has no send queue
    obs.devx_destroying(kDctObj);
    ASSERT_EQ(trace.destroys().size(), 1u);
    EXPECT_EQ(trace.destroys()[0].qpn, 0x5d1u);
}

TEST_F(SetupTest, MoriStyleReceiveQueueComesFirstInTheWorkQueueBuffer) {
    register_nvshmem_memory();
    test::CreateQpSpec mori;
    mori.rq_type = 0;
    mori.log_rq_size = 6;
    mori.log_rq_stride = 2;  // 64 x 64 B = 4 KiB of RQ
    mori.wq_umem_offset = 0;
    mori.log_sq_size = 8;
    create_qp(mori);
    ASSERT_EQ(trace.qps().size(), 1u);
    EXPECT_EQ(trace.qps()[0].sq_addr, wq.addr() + 4096);
    EXPECT_EQ(trace.qps()[0].sq_wqebb, 256u);
    ASSERT_TRUE(reg.find_send_queue(kQpObj));
}

TEST_F(SetupTest, DbrLessQpIsWatchedByIndexScanning) {
    // DOCA GPUNetIO / NCCL GIN (send_dbr_mode = NO_DBR): no doorbell record to follow, the ring is scanned.
    register_nvshmem_memory();
    test::CreateQpSpec dbrless;
    dbrless.send_dbr_mode = 1;
    create_qp(dbrless);
    ASSERT_EQ(trace.qps().size(), 1u);
    EXPECT_EQ(trace.qps()[0].dbr_mode, 1u);
    EXPECT_EQ(trace.qps()[0].dbr_addr, 0u);
    EXPECT_EQ(obs.problems(), 0u);
    const auto q = reg.find_send_queue(kQpObj);
    ASSERT_TRUE(q);
    EXPECT_TRUE(q->dbr_less);
    EXPECT_EQ(q->dbr_addr, 0u);
    // The "GPU" writes two WQEs and rings only the doorbell (nothing a host can see): two sweeps find them.
    for (uint32_t i = 0; i < 2; ++i) {
        auto img = WqeImage(mlx5::op::RDMA_WRITE, static_cast<uint16_t>(i), q->qpn).raddr(0x9000 + i, 0x77).data(100 + i, 1, 0);
        test::place(reinterpret_cast<uint8_t*>(q->ring_addr), q->wqebbs, i, img.finish());
    }
    WatcherConfig cfg;
    cfg.guard_wqebbs = 0;
    cfg.settle_ns = 0;
    Watcher w(reg, mem, cfg);
    EXPECT_EQ(w.sweep_once(), 0u);  // seen once: not yet known to be complete
    EXPECT_EQ(w.sweep_once(), 2u);
    const auto wqes = trace.wqes();
    ASSERT_EQ(wqes.size(), 2u);
    EXPECT_EQ(wqes[1].raddr, 0x9001u);
    EXPECT_EQ(wqes[1].bytes, 101u);
}

TEST_F(SetupTest, UnwatchableQueuesAreReportedAndSkipped) {
    // Unknown UMEM: reported, traced as created, not watched.
    create_qp();
    EXPECT_EQ(trace.qps().size(), 1u);
    EXPECT_EQ(trace.qps()[0].sq_addr, 0u);
    EXPECT_EQ(reg.send_queue_count(), 0u);
    EXPECT_EQ(obs.problems(), 1u);

    // A send queue larger than its UMEM.
    register_nvshmem_memory();
    test::CreateQpSpec huge;
    huge.log_sq_size = 15;  // 2 MiB of WQEs in a 128 KiB UMEM
    create_qp(huge);
    EXPECT_EQ(reg.send_queue_count(), 0u);
    EXPECT_EQ(obs.problems(), 2u);

    // A truncated CREATE_QP, and a failed command (status != 0): nothing crashes, nothing is watched.
    const auto in = test::build_create_qp({});
    const auto out = test::build_create_out(0x55);
    obs.devx_created(kCtx, 0x3000, in.data(), 100, out.data(), out.size());
    const auto failed = test::build_create_out(0x56, 1);
    obs.devx_created(kCtx, 0x3001, in.data(), in.size(), failed.data(), failed.size());
    obs.devx_created(kCtx, 0x3002, in.data(), in.size(), nullptr, 0);
    obs.devx_created(kCtx, 0x3003, nullptr, 0, out.data(), out.size());
    EXPECT_EQ(reg.send_queue_count(), 0u);
    EXPECT_EQ(obs.problems(), 5u);
    // Destroying or modifying objects we never learned is harmless.
    obs.devx_destroying(0x3001);
    obs.devx_modified(0x4444, in.data(), in.size(), nullptr, 0, 0);
    EXPECT_TRUE(trace.destroys().empty());
}

TEST_F(SetupTest, DmabufRegistrationLearnsItsAddressFromTheExport) {
    obs.dmabuf_exported(42, 0x7e0000000000, 1 << 20);
    obs.umem_registered(kCtx, 0xd1, 11, 0, 1 << 20, 42, 0);
    ASSERT_EQ(trace.umems().size(), 1u);
    EXPECT_EQ(trace.umems()[0].addr, 0u);        // the schema's address is the one passed
    EXPECT_EQ(trace.umems()[0].mem_type, 1u);    // but it is known to be GPU memory
    EXPECT_EQ(trace.umems()[0].dmabuf_fd, 42);
    const auto u = reg.find_umem(kCtx, 11);
    ASSERT_TRUE(u);
    EXPECT_EQ(u->addr, 0x7e0000000000u);
    // An fd nobody exported: address unknown, memory unknown.
    obs.umem_registered(kCtx, 0xd2, 12, 0, 4096, 43, 0);
    EXPECT_EQ(trace.umems()[1].mem_type, 3u);
    // A failed registration is traced with its error and not recorded.
    obs.umem_registered(kCtx, 0, 13, 0x1000, 4096, -1, 22);
    EXPECT_EQ(trace.umems()[2].err, 22);
    EXPECT_FALSE(reg.find_umem(kCtx, 13));
}

TEST_F(SetupTest, RocshmemStyleInitObjQpAndCq) {
    // A verbs QP whose rings (host memory, hipHostMalloc on AMD) are exported through mlx5dv_init_obj.
    test::FakeProducer prod(64, 0x321);
    for (int i = 0; i < 7; ++i) prod.post_write(i);  // used by the CPU before being handed to the GPU
    const auto pq = prod.queue();
    std::vector<uint8_t> cqe_ring(256 * 64);
    for (size_t i = 0; i < 256; ++i) cqe_ring[i * 64 + 63] = mlx5::cqe_op::INVALID << 4;
    alignas(8) uint32_t cq_dbrec[2] = {0, 0};

    ExportedCq c;
    c.ctx = kCtx;
    c.cq = 0x5000;
    c.cqn = 0x88;
    c.buf = reinterpret_cast<uint64_t>(cqe_ring.data());
    c.dbrec = reinterpret_cast<uint64_t>(cq_dbrec);
    c.cqe_cnt = 256;
    c.cqe_size = 64;
    obs.verbs_cq_exported(c);
    ExportedQp e;
    e.ctx = kCtx;
    e.qp = 0x6000;
    e.qpn = 0x321;
    e.qp_type = 2;  // IBV_QPT_RC
    e.send_cq = 0x5000;
    e.dbrec = pq.dbr_addr - 4;
    e.sq_buf = pq.ring_addr;
    e.sq_wqe_cnt = 64;
    e.sq_stride = 64;
    obs.verbs_qp_exported(e);

    ASSERT_EQ(trace.qps().size(), 1u);
    EXPECT_EQ(trace.qps()[0].source, 1u);
    EXPECT_EQ(trace.qps()[0].st, 2u);
    EXPECT_EQ(trace.qps()[0].cqn_snd, 0x88u);
    EXPECT_EQ(trace.qps()[0].sq_addr, pq.ring_addr);
    EXPECT_EQ(trace.qps()[0].dbr_addr, pq.dbr_addr);
    ASSERT_EQ(trace.cqs().size(), 1u);
    EXPECT_EQ(trace.cqs()[0].source, 1u);
    EXPECT_EQ(trace.cqs()[0].collapsed, 0u);

    // Learned at producer index 7: only what the GPU posts from now on is traced.
    for (int i = 7; i < 10; ++i) prod.post_write(i);
    EXPECT_EQ(watcher.sweep_once(), 3u);
    ASSERT_EQ(trace.wqes().size(), 3u);
    EXPECT_EQ(trace.wqes()[0].index, 7);
    // init_obj called again on the same QP (rocSHMEM does per context): nothing is re-read.
    obs.verbs_qp_exported(e);
    EXPECT_EQ(watcher.sweep_once(), 0u);

    prod.post_write(10);
    obs.verbs_object_destroying(0x6000);
    ASSERT_EQ(trace.destroys().size(), 1u);
    EXPECT_EQ(trace.destroys()[0].qpn, 0x321u);
    ASSERT_EQ(trace.wqes().size(), 4u);  // the final sweep's, traced before the destroy
    EXPECT_LT(trace.wqe_events().back().order, trace.destroy_orders().at(0));
    obs.verbs_object_destroying(0x5000);
    EXPECT_EQ(reg.send_queue_count(), 0u);
    EXPECT_FALSE(reg.find_completion_queue(0x5000));

    // Exports that cannot be watched: no send queue (a DCT), a ring that is not a power of two.
    ExportedQp dct = e;
    dct.qp = 0x7000;
    dct.sq_wqe_cnt = 0;
    obs.verbs_qp_exported(dct);
    ExportedQp odd = e;
    odd.qp = 0x7001;
    odd.sq_wqe_cnt = 48;
    obs.verbs_qp_exported(odd);
    EXPECT_EQ(reg.send_queue_count(), 0u);
    EXPECT_EQ(obs.problems(), 1u);  // the DCT is not a problem
}

TEST_F(SetupTest, ResetQpStartsAgainAtWqeZero) {
    register_nvshmem_memory();
    create_qp();
    const auto q = reg.find_send_queue(kQpObj);
    ASSERT_TRUE(q);
    for (uint32_t i = 0; i < 5; ++i) gpu_post_write(*q, i);
    EXPECT_EQ(watcher.sweep_once(), 5u);
    const auto rst = test::build_qp_command(prm::cmd::QP_2RST, 0xabc, 16);
    obs.devx_modified(kQpObj, rst.data(), rst.size(), nullptr, 0, 0);
    // After the reset the application starts over at 0 (and rewrites the doorbell record).
    __atomic_store_n(reinterpret_cast<uint32_t*>(q->dbr_addr), 0u, __ATOMIC_RELEASE);
    for (uint32_t i = 0; i < 2; ++i) gpu_post_write(*q, i);
    EXPECT_EQ(watcher.sweep_once(), 2u);
    const auto wqes = trace.wqes();
    ASSERT_EQ(wqes.size(), 7u);
    EXPECT_EQ(wqes[5].index, 0);
    EXPECT_EQ(wqes[6].index, 1);
    EXPECT_EQ(trace.lost_total(), 0u);
}

TEST_F(SetupTest, DeregisteringAUmemRetiresItsQueues) {
    register_nvshmem_memory();
    create_qp();
    ASSERT_EQ(reg.send_queue_count(), 1u);
    obs.umem_deregistering(0xa8);
    EXPECT_EQ(reg.send_queue_count(), 0u);
    EXPECT_FALSE(reg.find_umem(kCtx, 8));
}

TEST_F(SetupTest, IoMemoryRegistrationMarksTheUarGpuMapped) {
    register_nvshmem_memory();
    obs.host_registered(0x7f0000000000, 4096, true, 0);
    auto u = reg.find_uar_page(kCtx, 0x33);
    ASSERT_TRUE(u);
    EXPECT_TRUE(u->gpu_mapped);
    // A plain (not IoMemory) registration of host memory makes it "host mapped" for later classification.
    Buffer b(65536);
    obs.host_registered(b.addr(), b.size, false, 0);
    EXPECT_EQ(classifier.classify(b.addr() + 100), MemType::HostMapped);
    obs.host_unregistered(b.addr());
    EXPECT_EQ(classifier.classify(b.addr() + 100), MemType::Host);
    // Failed registrations change nothing.
    obs.host_registered(b.addr(), b.size, false, 1);
    EXPECT_EQ(classifier.classify(b.addr()), MemType::Host);
}

}  // namespace
}  // namespace sigmatrace::gpumem
