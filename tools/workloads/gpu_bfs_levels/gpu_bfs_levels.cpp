// Workload (3): a persistent-kernel BFS-like level loop, GPU-initiated. Each level, every PE's "kernel" (CPU
// threads standing in for GPU threads) pushes its frontier chunks to every other PE with RDMA WRITEs through
// DevX QPs (the NVSHMEM-IBGDA set-up of gpu_common), then enters an in-kernel barrier built from atomics: every
// PE fetch-adds 1 on one barrier word on PE 0 (PE 0 through its loopback QP), PE 0 waits for npes x (level + 1)
// and releases everyone with a 4-byte inline RDMA WRITE of the level number into each PE's release word, and
// every PE spins on its own release word. One designed late participant (--late, default the last PE) sleeps
// --delay-ms before signalling, on every level (or only on odd levels with --late-levels odd).
//
// Ground truth (--truth DIR): the WQE files (truth-<pe>.txt) and DIR/barrier.txt, written by PE 0:
//   "levels L late PE delay_ms D" then, per level, "level l last PE spread_ns S arrivals t_0 ... t_n-1"
// with the CLOCK_MONOTONIC time each PE posted its barrier signal. Exit 0 when every frontier chunk arrived.
//
//   mpirun -np 4 sigmatrace fabric --node rank -- gpu_bfs_levels [--levels L] [--late PE] [--delay-ms D]
#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpu_common/gpu_qp.h"
#include "gpu_common/ibgda_setup.h"
#include "gpu_common/mpi_boot.h"
#include "gpu_common/workload_main.h"

using namespace sigmatrace::workloads;

namespace {

constexpr size_t kMaxChunk = 4096;

uint64_t monotonic_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The frontier a PE sends a peer at a level: grows then shrinks over the levels, like a BFS.
size_t chunk_bytes(size_t level, size_t levels, size_t src, size_t dst) {
    const size_t mid = levels / 2;
    const size_t shape = level <= mid ? level + 1 : levels - level;
    return std::min(kMaxChunk, 64 * shape * (1 + (src * 3 + dst * 5 + level) % 4));
}
uint8_t pattern(size_t level, size_t src, size_t i) { return static_cast<uint8_t>(level * 17 + src * 5 + i); }

uint64_t load(const uint8_t* p) { return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE); }

}  // namespace

int main(int argc, char** argv) {
    const PeIdentity id = start_pe(&argc, &argv);
    const int me = id.me, npes = id.npes;
    size_t levels = 10;
    int late = npes - 1;
    int delay_ms = 20;
    std::string late_levels = "all";
    const CommonOptions common = WorkloadOptions("gpu_bfs_levels")
                                     .add("--levels", "L", levels)
                                     .add("--late", "PE", late)
                                     .add("--delay-ms", "D", delay_ms)
                                     .add("--late-levels", "all|odd", late_levels)
                                     .parse(argc, argv);
    const bool odd_only = late_levels == "odd";
    const size_t n = static_cast<size_t>(npes);
    // Heap: [send chunk][inbox: two banks (level parity) of one chunk per source][barrier word (PE 0)]
    // [release word][fetch result]. Two banks: a PE already in level l + 1 never overwrites what a slower PE is
    // still checking from level l.
    const size_t inbox = kMaxChunk, barrier = inbox + 2 * n * kMaxChunk, release = barrier + 64, fetch = release + 64;
    auto slot = [&](size_t level, size_t src) { return inbox + ((level % 2) * n + src) * kMaxChunk; };
    IbgdaTransport t;
    TruthLog truth;
    std::vector<PeInfo> peers = connect_all(t, common.device, npes, me, 10, fetch + 64);
    t.set_truth(&truth);
    uint8_t* heap = t.heap();
    const uint64_t heap_base = reinterpret_cast<uint64_t>(heap);
    std::vector<uint64_t> my_arrivals;
    int bad = 0;
    for (size_t i = 0; i < kMaxChunk; ++i) heap[i] = pattern(0, static_cast<size_t>(me), i);

    for (size_t level = 0; level < levels; ++level) {
        // Frontier exchange: one "warp" per peer.
        std::vector<std::thread> warps;
        for (size_t dst = 0; dst < n; ++dst) {
            if (dst == static_cast<size_t>(me)) continue;
            warps.emplace_back([&, dst] {
                const size_t bytes = chunk_bytes(level, levels, static_cast<size_t>(me), dst);
                GpuQp& q = t.qp(static_cast<int>(dst));
                const uint64_t b = q.reserve(1);
                q.write_rdma_write(b, heap_base, t.heap_lkey(), peers[dst].heap_addr + slot(level, static_cast<size_t>(me)),
                                   peers[dst].heap_rkey, static_cast<uint32_t>(bytes), true);
                q.submit(b, 1);
                q.quiet(b + 1);  // the chunk has landed before this PE signals the barrier
            });
        }
        // The send buffer is rewritten per level only after the previous level's puts completed (quiet above).
        for (auto& w : warps) w.join();

        // The barrier.
        if (me == late && (!odd_only || level % 2 == 1)) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        GpuQp& q0 = t.qp(0);
        const uint64_t b = q0.reserve(1);
        q0.write_fetch_add(b, heap_base + fetch, t.heap_lkey(), peers[0].heap_addr + barrier, peers[0].heap_rkey, 1, true);
        my_arrivals.push_back(monotonic_ns());
        q0.submit(b, 1);
        if (me == 0) {
            while (load(heap + barrier) < n * (level + 1)) std::this_thread::yield();
            for (size_t pe = 0; pe < n; ++pe) {
                GpuQp& q = t.qp(static_cast<int>(pe));
                const uint64_t r = q.reserve(1);
                q.write_rdma_write_inline(r, static_cast<uint32_t>(level + 1), peers[pe].heap_addr + release,
                                          peers[pe].heap_rkey, false, 0, true);
                q.submit(r, 1);
            }
        }
        while (load(heap + release) < level + 1) std::this_thread::yield();
        // Everything addressed to us this level has arrived: check it, and prepare the next level's chunk.
        for (size_t src = 0; src < n; ++src) {
            if (src == static_cast<size_t>(me)) continue;
            const size_t bytes = chunk_bytes(level, levels, src, static_cast<size_t>(me));
            for (size_t i = 0; i < bytes; ++i)
                if (heap[slot(level, src) + i] != pattern(level, src, i)) {
                    std::fprintf(stderr, "PE %d: level %zu chunk from PE %zu differs at byte %zu\n", me, level, src, i);
                    ++bad;
                    break;
                }
        }
        for (size_t i = 0; i < kMaxChunk; ++i) heap[i] = pattern(level + 1, static_cast<size_t>(me), i);
    }
    for (int pe = 0; pe < npes; ++pe) t.qp(pe).quiet(t.qp(pe).ready_head.load());

    std::vector<uint64_t> all(n * levels);
    MPI_Gather(my_arrivals.data(), static_cast<int>(levels), MPI_UINT64_T, all.data(), static_cast<int>(levels),
               MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (!common.truth_dir.empty()) {
        write_truth(common, truth, me);
        if (me == 0) {
            FILE* f = std::fopen((common.truth_dir + "/barrier.txt").c_str(), "w");
            if (!f) die("Cannot write " + common.truth_dir + "/barrier.txt");
            std::fprintf(f, "levels %zu late %d delay_ms %d odd_only %d\n", levels, late, delay_ms, odd_only ? 1 : 0);
            for (size_t l = 0; l < levels; ++l) {
                uint64_t first = ~0ull, last = 0;
                size_t last_pe = 0;
                for (size_t pe = 0; pe < n; ++pe) {
                    const uint64_t at = all[pe * levels + l];
                    first = std::min(first, at);
                    if (at >= last) last = at, last_pe = pe;
                }
                std::fprintf(f, "level %zu last %zu spread_ns %llu arrivals", l, last_pe,
                             static_cast<unsigned long long>(last - first));
                for (size_t pe = 0; pe < n; ++pe) std::fprintf(f, " %llu", static_cast<unsigned long long>(all[pe * levels + l]));
                std::fprintf(f, "\n");
            }
            std::fclose(f);
        }
    }
    std::printf("gpu_bfs_levels PE %d: %zu levels, %zu WQEs posted; frontiers %s\n", me, levels, truth.size(),
                bad ? "WRONG" : "correct");
    return job_exit_status(bad);
}
