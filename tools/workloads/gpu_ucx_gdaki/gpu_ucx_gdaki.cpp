// Workload: UCX's GPU device API over GDAKI (uct/ib/mlx5/gdaki), with CPU threads standing in for the GPU's
// threads. Set-up as gdaki.c lays it out: one buffer registered as a single UMEM holds every QP's send ring, its
// 1-entry send CQ (overrun ignored: not collapsed, the owner bit flips with each write) and every doorbell record,
// each at its own offset (CREATE_QP with a non-zero wq_umem_offset for all but the first QP). The device side
// (gdaki.cuh) rings the doorbell only when its producer index crosses a multiple of --ring-every WQEBBs (128 in
// UCX) unless asked to flush, so the doorbell record lags the WQEs written; completion progress is the 1-entry
// CQ's latest wqe_counter.
//
// Each PE puts --bytes to every other PE per iteration and channel (RDMA WRITE), then adds 1 to that PE's counter
// word for it (ATOMIC_FETCH_AND_ADD); channels share the QP of a peer. At the end every QP is flushed and quiet.
//
// Ground truth (--truth DIR): DIR/truth-<pe>.txt lists every WQE posted. The run checks its own result: every
// chunk from every PE arrived, every counter equals iterations x channels. Exit 0 when all hold.
//
//   mpirun -np 4 sigmatrace fabric --node rank -- gpu_ucx_gdaki [--iters N] [--channels C] [--bytes B]
//       [--ring-every W]
#include <mpi.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gpu_common/gpu_qp.h"
#include "gpu_common/ibgda_setup.h"
#include "gpu_common/mpi_boot.h"
#include "gpu_common/workload_main.h"

using namespace sigmatrace::workloads;

namespace {

struct Layout {
    size_t iters, npes, channels, bytes;
    size_t chunk(size_t iter, size_t src, size_t ch) const { return ((iter * npes + src) * channels + ch) * bytes; }
    size_t counter(size_t src) const { return chunk(iters, 0, 0) + src * 8; }
    size_t fetch(size_t ch) const { return counter(npes) + ch * 8; }  // atomic results (ignored)
    size_t total() const { return fetch(channels) + 64; }
};

uint8_t pattern(size_t iter, size_t src, size_t ch, size_t i) {
    return static_cast<uint8_t>(iter * 31 + src * 41 + ch * 11 + i * 3 + 5);
}

}  // namespace

int main(int argc, char** argv) {
    const PeIdentity id = start_pe(&argc, &argv);
    const int me = id.me, npes = id.npes;
    size_t iters = 64, channels = 2, bytes = 512;
    uint32_t ring_every = 128, log_sq = 8;
    const CommonOptions common = WorkloadOptions("gpu_ucx_gdaki")
                                     .add("--iters", "N", iters)
                                     .add("--channels", "C", channels)
                                     .add("--bytes", "B", bytes)
                                     .add("--ring-every", "W", ring_every)
                                     .add("--log-sq", "L", log_sq)
                                     .parse(argc, argv);
    if (npes < 2) die("gpu_ucx_gdaki needs at least 2 PEs");
    const Layout lay{iters, static_cast<size_t>(npes), channels, bytes};
    IbgdaTransport t;
    TruthLog truth;
    QpFlavor gdaki;
    gdaki.one_umem = true;
    gdaki.cq_one_entry = true;
    std::vector<PeInfo> peers = connect_all(t, common.device, npes, me, log_sq, lay.total(), gdaki);
    t.set_truth(&truth);
    uint8_t* heap = t.heap();
    for (int pe = 0; pe < npes; ++pe) t.qp(pe).ring_every = ring_every;

    std::vector<std::thread> threads;
    for (size_t ch = 0; ch < channels; ++ch) {
        threads.emplace_back([&, ch] {
            for (size_t it = 0; it < iters; ++it) {
                uint8_t* src = heap + lay.chunk(it, static_cast<size_t>(me), ch);
                for (size_t i = 0; i < bytes; ++i) src[i] = pattern(it, static_cast<size_t>(me), ch, i);
                for (int pe = 0; pe < npes; ++pe) {
                    if (pe == me) continue;
                    const PeInfo& far = peers[static_cast<size_t>(pe)];
                    GpuQp& q = t.qp(pe);
                    const uint64_t base = q.reserve(2);
                    q.write_rdma_write(base, reinterpret_cast<uint64_t>(src), t.heap_lkey(),
                                       far.heap_addr + lay.chunk(it, static_cast<size_t>(me), ch), far.heap_rkey,
                                       static_cast<uint32_t>(bytes), true);
                    q.write_fetch_add(base + 1, reinterpret_cast<uint64_t>(heap + lay.fetch(ch)), t.heap_lkey(),
                                      far.heap_addr + lay.counter(static_cast<size_t>(me)), far.heap_rkey, 1, true);
                    q.submit(base, 2);
                }
            }
        });
    }
    for (auto& th : threads) th.join();
    for (int pe = 0; pe < npes; ++pe)
        if (pe != me) t.qp(pe).quiet(t.qp(pe).ready_head.load());   // flushes, then waits for the last CQE
    MPI_Barrier(MPI_COMM_WORLD);

    int bad = 0;
    for (size_t src = 0; src < lay.npes; ++src) {
        if (src == static_cast<size_t>(me)) continue;
        for (size_t it = 0; it < iters && !bad; ++it)
            for (size_t ch = 0; ch < channels; ++ch)
                for (size_t i = 0; i < bytes; ++i)
                    if (heap[lay.chunk(it, src, ch) + i] != pattern(it, src, ch, i)) {
                        std::fprintf(stderr, "PE %d: iteration %zu, chunk of PE %zu, channel %zu differs at byte %zu\n",
                                     me, it, src, ch, i);
                        ++bad;
                        i = bytes;
                    }
        const uint64_t count = __atomic_load_n(reinterpret_cast<const uint64_t*>(heap + lay.counter(src)), __ATOMIC_ACQUIRE);
        if (count != iters * channels) {
            std::fprintf(stderr, "PE %d: counter of PE %zu is %llu (expected %zu)\n", me, src,
                         static_cast<unsigned long long>(count), iters * channels);
            ++bad;
        }
    }
    write_truth(common, truth, me);
    std::printf("gpu_ucx_gdaki PE %d: %zu WQEs posted (one UMEM, 1-entry CQs, a doorbell every %u WQEBBs); %s\n", me,
                truth.size(), ring_every, bad ? "WRONG" : "every chunk and counter arrived");
    return job_exit_status(bad);
}
