// Workload (5): NCCL GIN's GPU-initiated backend on DOCA GPUNetIO verbs (GDAKI), with CPU threads standing in
// for the GPU's channels, in one of GIN's NIC handler modes (NCCL_GIN_GDAKI_NIC_HANDLER, --nic-handler):
//   - no_dbr (GPU_SM_NO_DBR, the default): DevX RC QPs with qpc.send_dbr_mode = NO_DBR, one UAR each whose
//     DBR-less doorbell (base + 0x600) is the only thing a producer rings -- the doorbell record is never
//     written (doca_gpu_dev_verbs_submit_db_no_dbr);
//   - db (GPU_SM_DB): a doorbell record; the producer rings the doorbell, writes the record, rings again;
//   - bf (GPU_SM_BF): a doorbell record and a BlueFlame UAR; the producer writes the record, then stores the
//     whole last WQE into the BlueFlame register, alternating between its two buffers;
//   - cpu_proxy (CPU_PROXY): the producer only publishes its producer index in host memory (cpu_db); a CPU
//     thread (ncclGinGdakiProgress) writes the doorbell record and rings, one ring often covering several
//     submissions (the record lags the WQEs written).
// In every mode the set-up is DOCA's: DevX QPs on UMEM-registered memory, a normal send CQ as deep as the send
// queue (every WQE signalled, CQE i in slot i, polled by index like doca_gpu_dev_verbs_poll_one_cq_at).
//
// The "kernel" is a ring allgather made of GIN primitives, repeated for --rounds: per step each channel puts its
// slice of the chunk it holds to the right neighbour (put), adds 1 to the neighbour's per-channel signal (signal),
// and waits until its own signal shows the left neighbour's slice arrived (waitSignal); after the last step of a
// round it writes the round number into the neighbour's flag word (putValue, an inline RDMA WRITE). Channels share
// the QP: slots are reserved with an atomic add and published in order.
//
// Ground truth (--truth DIR): DIR/truth-<pe>.txt lists every WQE posted. The run checks its own result: every
// round's gather buffer holds every PE's chunk, every signal and flag its final value. Exit 0 when all hold.
//
//   mpirun -np 4 sigmatrace fabric --node rank -- gpu_gin [--nic-handler no_dbr|db|bf|cpu_proxy] [--rounds R]
//       [--channels C] [--bytes B]
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
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
    size_t rounds, npes, channels, slice;  // slice: bytes per channel per chunk
    size_t gather(size_t round, size_t src, size_t ch) const { return ((round * npes + src) * channels + ch) * slice; }
    size_t signal(size_t ch) const { return gather(rounds, 0, 0) + ch * 8; }
    size_t flag(size_t ch) const { return signal(channels) + ch * 8; }
    size_t fetch(size_t ch) const { return flag(channels) + ch * 8; }  // atomic results (ignored)
    size_t total() const { return fetch(channels) + 64; }
};

uint8_t pattern(size_t round, size_t src, size_t ch, size_t i) {
    return static_cast<uint8_t>(round * 29 + src * 37 + ch * 13 + i * 7 + 1);
}

uint64_t load_u64(const uint8_t* p) { return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE); }

}  // namespace

int main(int argc, char** argv) {
    const PeIdentity id = start_pe(&argc, &argv);
    const int me = id.me, npes = id.npes;
    size_t rounds = 48, channels = 2, slice = 1024;
    uint32_t log_sq = 8;
    std::string handler = "no_dbr";
    const CommonOptions common = WorkloadOptions("gpu_gin")
                                     .add("--nic-handler", "no_dbr|db|bf|cpu_proxy", handler)
                                     .add("--rounds", "R", rounds)
                                     .add("--channels", "C", channels)
                                     .add("--bytes", "B", slice)
                                     .add("--log-sq", "L", log_sq)
                                     .parse(argc, argv);
    if (npes < 2) die("gpu_gin needs at least 2 PEs");
    if (handler != "no_dbr" && handler != "db" && handler != "bf" && handler != "cpu_proxy")
        die("gpu_gin: --nic-handler is no_dbr, db, bf or cpu_proxy, not '" + handler + "'");
    const Layout lay{rounds, static_cast<size_t>(npes), channels, slice};
    IbgdaTransport t;
    TruthLog truth;
    QpFlavor gin;
    gin.dbr_less = handler == "no_dbr";
    gin.cq_per_wqe = true;
    gin.blueflame = handler == "bf";
    std::vector<PeInfo> peers = connect_all(t, common.device, npes, me, log_sq, lay.total(), gin);
    t.set_truth(&truth);
    uint8_t* heap = t.heap();
    const int right = (me + 1) % npes;
    const PeInfo& r = peers[static_cast<size_t>(right)];
    GpuQp& q = t.qp(right);
    q.ring_twice = handler == "db";
    // CPU_PROXY: the producer index in host memory, and the proxy thread that rings for it.
    std::unique_ptr<CpuProxy> proxy;
    if (handler == "cpu_proxy") proxy = std::make_unique<CpuProxy>(std::vector<GpuQp*>{&q});

    std::vector<std::thread> ctas;
    for (size_t ch = 0; ch < channels; ++ch) {
        ctas.emplace_back([&, ch] {
            for (size_t round = 0; round < rounds; ++round) {
                for (size_t i = 0; i < slice; ++i) heap[lay.gather(round, static_cast<size_t>(me), ch) + i] = pattern(round, me, ch, i);
                for (size_t step = 0; step + 1 < static_cast<size_t>(npes); ++step) {
                    const size_t src = (static_cast<size_t>(me) + lay.npes - step) % lay.npes;  // the chunk we hold
                    const uint64_t base = q.reserve(2);
                    q.write_rdma_write(base, reinterpret_cast<uint64_t>(heap + lay.gather(round, src, ch)), t.heap_lkey(),
                                       r.heap_addr + lay.gather(round, src, ch), r.heap_rkey, static_cast<uint32_t>(slice),
                                       true);
                    q.write_fetch_add(base + 1, reinterpret_cast<uint64_t>(heap + lay.fetch(ch)), t.heap_lkey(),
                                      r.heap_addr + lay.signal(ch), r.heap_rkey, 1, true);
                    q.submit(base, 2);
                    // waitSignal: the left neighbour's chunk of this step has arrived.
                    const uint64_t want = round * (lay.npes - 1) + step + 1;
                    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
                    while (load_u64(heap + lay.signal(ch)) < want) {
                        if (std::chrono::steady_clock::now() > deadline)
                            die("PE " + std::to_string(me) + ": channel " + std::to_string(ch) + " waited 60 s for signal " +
                                std::to_string(want) + " (round " + std::to_string(round) + ")");
                        std::this_thread::yield();
                    }
                }
                const uint64_t b = q.reserve(1);
                q.write_rdma_write_inline(b, static_cast<uint32_t>(round + 1), r.heap_addr + lay.flag(ch), r.heap_rkey,
                                          false, 0, true);
                q.submit(b, 1);
            }
        });
    }
    for (auto& c : ctas) c.join();
    q.quiet(q.ready_head.load());  // the GIN flush: every WQE of the QP completed
    MPI_Barrier(MPI_COMM_WORLD);   // every PE's puts are complete everywhere
    proxy.reset();

    int bad = 0;
    for (size_t round = 0; round < rounds && !bad; ++round)
        for (size_t src = 0; src < lay.npes; ++src)
            for (size_t ch = 0; ch < channels; ++ch)
                for (size_t i = 0; i < slice; ++i)
                    if (heap[lay.gather(round, src, ch) + i] != pattern(round, src, ch, i)) {
                        std::fprintf(stderr, "PE %d: round %zu, chunk of PE %zu, channel %zu differs at byte %zu\n", me,
                                     round, src, ch, i);
                        ++bad;
                        i = slice;
                    }
    for (size_t ch = 0; ch < channels; ++ch) {
        const uint64_t signal = load_u64(heap + lay.signal(ch));
        uint32_t flag = 0;
        std::memcpy(&flag, heap + lay.flag(ch), 4);
        if (signal != rounds * (lay.npes - 1) || flag != rounds) {
            std::fprintf(stderr, "PE %d: channel %zu: signal %llu (expected %zu), flag %u (expected %zu)\n", me, ch,
                         static_cast<unsigned long long>(signal), rounds * (lay.npes - 1), flag, rounds);
            ++bad;
        }
    }
    write_truth(common, truth, me);
    std::printf("gpu_gin PE %d: %zu WQEs posted (NIC handler %s); %zu rounds gathered %s\n", me, truth.size(),
                handler.c_str(), rounds, bad ? "WRONG" : "correctly");
    return job_exit_status(bad);
}
