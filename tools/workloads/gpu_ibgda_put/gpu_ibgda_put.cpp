// Workload (1): NVSHMEM-IBGDA-style set-up (DevX RC QPs and collapsed CQs on UMEM-registered memory, a UAR,
// the PD number from mlx5dv_init_obj) driven the way DeepEP's internode kernels drive it, with CPU threads
// standing in for GPU warps: every thread puts a chunk into every PE with an RDMA WRITE followed by an 8-byte
// atomic fetch-add on the target's per-source signal (nvshmemi_ibgda_put_nbi_warp + amo_nonfetch_add), and every
// 8th iteration a 4-byte inline RDMA WRITE with immediate (DeepEP's ibgda_write_rdma_write_inl_wqe). Threads
// share each QP: slots are reserved with an atomic add and published in order, as ibgda_submit_requests does.
//
// Ground truth (--truth DIR): DIR/truth-<pe>.txt lists every WQE posted (qpn, index, opcode, size, remote address,
// rkey, immediate). The run checks its own result: every signal holds threads x iters, every slot its writer's
// pattern, and every immediate arrived exactly once. Exit 0 when all hold.
//
// --nic-handler cpu: NVSHMEM's CPU NIC handler (NVSHMEM_IBGDA_NIC_HANDLER=cpu): the "GPU" threads only publish
// their producer index in host memory, and a CPU proxy thread writes the doorbell records and rings.
// --rq-log L gives each QP a receive queue of 2^L entries before its send queue in the WQ buffer, as MORI creates
// its QPs (the send queue then starts past the QP's wq_umem_offset).
// --transport dc: NVSHMEM's DC transport: each PE creates one DCT (CREATE_DCT with NVSHMEM's access key) and
// --dcis D DCIs (CREATE_QP st 0x5, default 2) that every thread shares (thread t posts on DCI t mod D); each WQE
// names its destination PE's DCT in a 48-byte address vector (two WQEBBs per WQE). No immediates: the DCT has no
// receive queue.
//
//   mpirun -np 4 sigmatrace fabric --node rank -- gpu_ibgda_put [--iters N] [--threads T] [--bytes B] [--rq-log L]
//       [--nic-handler gpu|cpu] [--transport rc|dc] [--dcis D]
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gpu_common/cpu_proxy.h"
#include "gpu_common/gpu_qp.h"
#include "gpu_common/ibgda_setup.h"
#include "gpu_common/mpi_boot.h"
#include "gpu_common/workload_main.h"

using namespace sigmatrace::workloads;

namespace {

struct Layout {
    size_t bytes, npes, threads;
    size_t send() const { return 0; }                                     // our outgoing chunk
    size_t recv(size_t src) const { return bytes + src * bytes; }         // one slot per source
    size_t signal(size_t src) const { return bytes * (npes + 1) + src * 8; }
    size_t inline_word(size_t src, size_t t) const { return signal(npes) + (src * threads + t) * 4; }
    size_t fetch(size_t t) const { return inline_word(npes, 0) + 64 + t * 8; }  // atomic results (ignored)
    size_t total() const { return fetch(threads) + 64; }
};

uint8_t pattern(size_t src, size_t i) { return static_cast<uint8_t>(src * 37 + i * 11 + 5); }
uint32_t imm_of(int pe, size_t t, size_t i) {
    return __builtin_bswap32(static_cast<uint32_t>(pe) << 24 | static_cast<uint32_t>(t) << 16 | static_cast<uint32_t>(i));
}

}  // namespace

int main(int argc, char** argv) {
    const PeIdentity id = start_pe(&argc, &argv);
    const int me = id.me, npes = id.npes;
    size_t iters = 64, threads = 4, bytes = 4096;
    uint32_t log_sq = 10;  // NVSHMEM_QP_DEPTH default: 1024 WQEBBs
    QpFlavor flavor;
    std::string handler = "gpu", transport = "rc";
    uint32_t dcis = 2;
    const CommonOptions common = WorkloadOptions("gpu_ibgda_put")
                                     .add("--nic-handler", "gpu|cpu", handler)
                                     .add("--iters", "N", iters)
                                     .add("--threads", "T", threads)
                                     .add("--bytes", "B", bytes)
                                     .add("--log-sq", "L", log_sq)
                                     .add("--rq-log", "L", flavor.rq_log)
                                     .add("--transport", "rc|dc", transport)
                                     .add("--dcis", "D", dcis)
                                     .parse(argc, argv);
    if (handler != "gpu" && handler != "cpu") die("gpu_ibgda_put: --nic-handler is gpu or cpu, not '" + handler + "'");
    if (transport != "rc" && transport != "dc") die("gpu_ibgda_put: --transport is rc or dc, not '" + transport + "'");
    const bool dc = transport == "dc";
    if (dc && (dcis == 0 || dcis > static_cast<uint32_t>(PeInfo::kMaxPes)))
        die("gpu_ibgda_put: --dcis is 1 to " + std::to_string(PeInfo::kMaxPes));
    if (dc) flavor.dcis = dcis;
    const Layout lay{bytes, static_cast<size_t>(npes), threads};
    IbgdaTransport t;
    TruthLog truth;
    std::vector<PeInfo> peers = connect_all(t, common.device, npes, me, log_sq, lay.total(), flavor);
    t.set_truth(&truth);
    uint8_t* heap = t.heap();
    for (size_t i = 0; i < bytes; ++i) heap[lay.send() + i] = pattern(static_cast<size_t>(me), i);
    MPI_Barrier(MPI_COMM_WORLD);
    // NVSHMEM_IBGDA_NIC_HANDLER=cpu: the "GPU" publishes producer indices, a CPU thread rings for every QP.
    std::unique_ptr<CpuProxy> proxy;
    if (handler == "cpu") {
        std::vector<GpuQp*> qps;
        for (size_t i = 0; i < t.qp_count(); ++i) qps.push_back(&t.qp(static_cast<int>(i)));
        proxy = std::make_unique<CpuProxy>(std::move(qps));
    }

    // The "kernel": every thread posts to every PE.
    std::vector<std::thread> warps;
    for (size_t th = 0; th < threads; ++th) {
        warps.emplace_back([&, th] {
            for (size_t it = 0; it < iters; ++it) {
                for (int k = 0; k < npes; ++k) {
                    const int pe = (me + 1 + k + static_cast<int>(th)) % npes;
                    const PeInfo& p = peers[static_cast<size_t>(pe)];
                    if (dc) {
                        GpuQp& q = t.qp(static_cast<int>(th % dcis));
                        const DcTarget to{p.dctn, static_cast<uint16_t>(p.lid), kDcAccessKey};
                        const uint64_t base = q.reserve(2 * GpuQp::kDcWqebbs);
                        q.write_dc_rdma_write(base, to, reinterpret_cast<uint64_t>(heap + lay.send()), t.heap_lkey(),
                                              p.heap_addr + lay.recv(static_cast<size_t>(me)), p.heap_rkey,
                                              static_cast<uint32_t>(bytes), true);
                        q.write_dc_fetch_add(base + GpuQp::kDcWqebbs, to, reinterpret_cast<uint64_t>(heap + lay.fetch(th)),
                                             t.heap_lkey(), p.heap_addr + lay.signal(static_cast<size_t>(me)), p.heap_rkey,
                                             1, true);
                        q.submit(base, 2 * GpuQp::kDcWqebbs);
                        continue;
                    }
                    GpuQp& q = t.qp(pe);
                    const uint64_t base = q.reserve(2);
                    q.write_rdma_write(base, reinterpret_cast<uint64_t>(heap + lay.send()), t.heap_lkey(),
                                       p.heap_addr + lay.recv(static_cast<size_t>(me)), p.heap_rkey,
                                       static_cast<uint32_t>(bytes), true);
                    q.write_fetch_add(base + 1, reinterpret_cast<uint64_t>(heap + lay.fetch(th)), t.heap_lkey(),
                                      p.heap_addr + lay.signal(static_cast<size_t>(me)), p.heap_rkey, 1, true);
                    q.submit(base, 2);
                    if (it % 8 == 7) {
                        const uint64_t b = q.reserve(1);
                        q.write_rdma_write_inline(b, static_cast<uint32_t>(it), p.heap_addr + lay.inline_word(static_cast<size_t>(me), th),
                                                  p.heap_rkey, true, imm_of(me, th, it), true);
                        q.submit(b, 1);
                    }
                }
            }
        });
    }
    for (auto& w : warps) w.join();
    for (size_t i = 0; i < t.qp_count(); ++i) {  // nvshmem_quiet
        GpuQp& q = t.qp(static_cast<int>(i));
        q.quiet(q.ready_head.load());
    }
    MPI_Barrier(MPI_COMM_WORLD);  // every PE's puts are complete everywhere
    proxy.reset();

    int bad = 0;
    for (size_t src = 0; src < static_cast<size_t>(npes); ++src) {
        uint64_t signal;
        std::memcpy(&signal, heap + lay.signal(src), 8);
        if (signal != threads * iters) {
            std::fprintf(stderr, "PE %d: signal from PE %zu is %llu, expected %zu\n", me, src,
                         static_cast<unsigned long long>(signal), threads * iters);
            ++bad;
        }
        for (size_t i = 0; i < bytes; ++i)
            if (heap[lay.recv(src) + i] != pattern(src, i)) {
                std::fprintf(stderr, "PE %d: slot of PE %zu differs at byte %zu\n", me, src, i);
                ++bad;
                break;
            }
    }
    std::set<uint32_t> expected;
    for (int src = 0; src < npes; ++src)
        for (size_t th = 0; th < threads && !dc; ++th)
            for (size_t it = 7; it < iters; it += 8) expected.insert(imm_of(src, th, it));
    // The responder completions may trail the requesters' (a receiver polls until it has what it waits for).
    std::vector<uint32_t> imms;
    for (int waited_ms = 0; imms.size() < expected.size() && waited_ms < 10'000; ++waited_ms) {
        const auto more = t.drain_receive_completions();
        imms.insert(imms.end(), more.begin(), more.end());
        if (imms.size() < expected.size()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const std::set<uint32_t> got(imms.begin(), imms.end());
    if (got != expected || imms.size() != expected.size()) {
        std::fprintf(stderr, "PE %d: %zu immediates received (%zu distinct), expected %zu\n", me, imms.size(), got.size(),
                     expected.size());
        ++bad;
    }
    write_truth(common, truth, me);
    std::printf("gpu_ibgda_put PE %d: %zu WQEs posted on %zu %s; signals, data and %zu immediates %s\n", me,
                truth.size(), t.qp_count(), dc ? "DCIs" : "QPs", imms.size(), bad ? "WRONG" : "correct");
    return job_exit_status(bad);
}
