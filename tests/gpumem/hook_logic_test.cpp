// The logic behind the exported hooks that does not need libsigmatrace.so: what mlx5dv_init_obj outputs turn
// into, and how cuGetProcAddress results are replaced by observing wrappers (process-wide slots: this test
// binary owns them).
#include <gtest/gtest.h>

#include <infiniband/mlx5dv.h>

#include <cstring>

#include "fake_producer.h"
#include "gpumem/cuda_driver.h"
#include "gpumem/cuda_proc_hooks.h"
#include "gpumem/gpumem_runtime.h"
#include "gpumem/init_obj_observer.h"
#include "gpumem/setup_observer.h"
#include "trace_capture.h"

namespace sigmatrace::gpumem {
namespace {

TEST(InitObj, QpAndCqOutputsBecomeWatchedQueues) {
    test::TraceCapture trace;
    QueueRegistry reg;
    MemoryClassifier classifier;
    SetupObserver obs(reg, classifier, nullptr);
    test::FakeProducer prod(128, 0x77);
    const auto pq = prod.queue();
    std::vector<uint8_t> cqes(64 * 64);

    ibv_context ctx{};
    ibv_cq cq{};
    cq.context = &ctx;
    ibv_qp qp{};
    qp.context = &ctx;
    qp.qp_num = 0x77;
    qp.qp_type = IBV_QPT_RC;
    qp.send_cq = &cq;
    mlx5dv_qp qp_out{};
    qp_out.dbrec = reinterpret_cast<__be32*>(pq.dbr_addr - 4);
    qp_out.sq.buf = reinterpret_cast<void*>(pq.ring_addr);
    qp_out.sq.wqe_cnt = 128;
    qp_out.sq.stride = 64;
    mlx5dv_cq cq_out{};
    cq_out.buf = cqes.data();
    cq_out.cqe_cnt = 64;
    cq_out.cqe_size = 64;
    cq_out.cqn = 0x99;
    mlx5dv_obj obj{};
    obj.qp.in = &qp;
    obj.qp.out = &qp_out;
    obj.cq.in = &cq;
    obj.cq.out = &cq_out;
    observe_init_obj(obs, &obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ);

    const auto sq = reg.find_send_queue(reinterpret_cast<uint64_t>(&qp));
    ASSERT_TRUE(sq);
    EXPECT_EQ(sq->qpn, 0x77u);
    EXPECT_EQ(sq->ring_addr, pq.ring_addr);
    EXPECT_EQ(sq->wqebbs, 128u);
    EXPECT_EQ(sq->dbr_addr, pq.dbr_addr);
    EXPECT_EQ(sq->cqn, 0x99u);  // the CQ exported in the same call
    EXPECT_EQ(sq->transport, Transport::Rc);
    const auto c = reg.find_completion_queue(reinterpret_cast<uint64_t>(&cq));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->ncqe, 64u);
    ASSERT_EQ(trace.qps().size(), 1u);
    EXPECT_EQ(trace.qps()[0].ctx, reinterpret_cast<uint64_t>(&ctx));

    // Only what obj_type asks for is read (the other members may be garbage).
    QueueRegistry reg2;
    SetupObserver obs2(reg2, classifier, nullptr);
    mlx5dv_obj only_cq{};
    only_cq.cq = obj.cq;
    only_cq.qp.in = reinterpret_cast<ibv_qp*>(0x8);  // would crash if dereferenced
    observe_init_obj(obs2, &only_cq, MLX5DV_OBJ_CQ);
    EXPECT_EQ(reg2.send_queue_count(), 0u);
    EXPECT_TRUE(reg2.find_completion_queue(reinterpret_cast<uint64_t>(&cq)));
    observe_init_obj(obs2, nullptr, MLX5DV_OBJ_QP);
}

// Stand-ins for driver entry points.
struct Calls {
    void* p = nullptr;
    size_t bytes = 0;
    unsigned flags = 0;
    int n = 0;
} g_calls;
int fake_register(void* p, size_t bytes, unsigned flags) {
    g_calls = {p, bytes, flags, g_calls.n + 1};
    return 0;
}
int fake_register_b(void* p, size_t bytes, unsigned flags) { return fake_register(p, bytes, flags) + 0; }
int fake_register_c(void*, size_t, unsigned) { return 7; }
int fake_register_d(void*, size_t, unsigned) { return 8; }
int fake_register_e(void*, size_t, unsigned) { return 9; }
int fake_unregister(void* p) {
    g_calls.p = p;
    ++g_calls.n;
    return 0;
}
int fake_get_handle(void* handle, unsigned long long, size_t, int, unsigned long long) {
    const int fd = 1234;
    std::memcpy(handle, &fd, sizeof fd);
    return 0;
}

TEST(CudaProcHooks, HostRegistrationsThroughGetProcAddressAreObserved) {
    auto& rt = GpuMemRuntime::instance();
    void* w = hook_cuda_proc("cuMemHostRegister", reinterpret_cast<void*>(&fake_register));
    ASSERT_NE(w, reinterpret_cast<void*>(&fake_register));
    EXPECT_EQ(hook_cuda_proc("cuMemHostRegister_v2", reinterpret_cast<void*>(&fake_register)), w);  // same slot

    alignas(4096) static uint8_t page[4096];
    const int rc = reinterpret_cast<CuMemHostRegisterFn>(w)(page, sizeof page, cu::kHostRegisterIoMemory | 1);
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(g_calls.p, page);
    EXPECT_EQ(g_calls.bytes, sizeof page);
    EXPECT_EQ(g_calls.flags, cu::kHostRegisterIoMemory | 1);
    EXPECT_EQ(rt.classifier().classify(reinterpret_cast<uint64_t>(page) + 8), MemType::HostMapped);

    void* u = hook_cuda_proc("cuMemHostUnregister", reinterpret_cast<void*>(&fake_unregister));
    reinterpret_cast<CuMemHostUnregisterFn>(u)(page);
    EXPECT_EQ(rt.classifier().classify(reinterpret_cast<uint64_t>(page) + 8), MemType::Host);

    // Other symbols pass through untouched; a null result stays null.
    EXPECT_EQ(hook_cuda_proc("cuMemAlloc_v2", reinterpret_cast<void*>(&fake_register)), reinterpret_cast<void*>(&fake_register));
    EXPECT_EQ(hook_cuda_proc("cuMemHostRegisterX", reinterpret_cast<void*>(&fake_register)), reinterpret_cast<void*>(&fake_register));
    EXPECT_EQ(hook_cuda_proc("cuMemHostRegister", nullptr), nullptr);
    EXPECT_EQ(hook_cuda_proc(nullptr, reinterpret_cast<void*>(&fake_register)), reinterpret_cast<void*>(&fake_register));

    // Distinct driver functions get distinct wrappers, each calling its own; beyond the slots, the real one.
    void* wb = hook_cuda_proc("cuMemHostRegister", reinterpret_cast<void*>(&fake_register_b));
    void* wc = hook_cuda_proc("cuMemHostRegister", reinterpret_cast<void*>(&fake_register_c));
    void* wd = hook_cuda_proc("cuMemHostRegister", reinterpret_cast<void*>(&fake_register_d));
    EXPECT_NE(wb, w);
    EXPECT_NE(wc, wb);
    EXPECT_EQ(reinterpret_cast<CuMemHostRegisterFn>(wc)(page, 1, 0), 7);
    EXPECT_EQ(reinterpret_cast<CuMemHostRegisterFn>(wd)(page, 1, 0), 8);
    EXPECT_EQ(hook_cuda_proc("cuMemHostRegister", reinterpret_cast<void*>(&fake_register_e)),
              reinterpret_cast<void*>(&fake_register_e));
}

TEST(CudaProcHooks, DmabufExportNamesTheAddressOfALaterUmemRegistration) {
    auto& rt = GpuMemRuntime::instance();
    void* g = hook_cuda_proc("cuMemGetHandleForAddressRange", reinterpret_cast<void*>(&fake_get_handle));
    int fd = -1;
    ASSERT_EQ(reinterpret_cast<CuMemGetHandleForAddressRangeFn>(g)(&fd, 0x7a0000000000ull, 1 << 16,
                                                                   cu::kRangeHandleTypeDmaBufFd, 0),
              0);
    EXPECT_EQ(fd, 1234);
    rt.observer().umem_registered(0x1, 0xfeed, 77, 0, 1 << 16, 1234, 0);
    const auto u = rt.registry().find_umem(0x1, 77);
    ASSERT_TRUE(u);
    EXPECT_EQ(u->addr, 0x7a0000000000u);
    EXPECT_EQ(u->mem, MemType::Device);
}

TEST(CudaDriverAbsent, NothingLoadsCuda) {
    // This process never loaded libcuda: the module must not have loaded it either.
    EXPECT_EQ(CudaDriver::if_loaded(), nullptr);
    MemoryClassifier c;
    int x = 0;
    EXPECT_EQ(c.classify(reinterpret_cast<uint64_t>(&x)), MemType::Host);
    EXPECT_EQ(c.classify(0), MemType::Unknown);
    MemType m;
    EXPECT_FALSE(classify_with_hsa(reinterpret_cast<uint64_t>(&x), m));  // no ROCm either
}

}  // namespace
}  // namespace sigmatrace::gpumem
