// Workload (3) with a real persistent kernel: the level loop of gpu_bfs_levels in one kernel launch per PE.
// Each level, thread t != me pushes its frontier chunk to PE t (RDMA WRITE posted from the GPU) and waits for its
// completion on the collapsed CQE; then thread 0 runs the in-kernel barrier: fetch-add 1 on PE 0's barrier word,
// PE 0 waits for npes x (level + 1) and releases every PE with an RDMA WRITE of the level into its release word,
// every PE spins on its own. The designed late PE (--late, default the last) sleeps --delay-ms in the kernel
// before signalling. Barrier arrival times come from the GPU's global timer (one GPU: one time base for all
// PEs). Ground truth as gpu_bfs_levels (DIR/truth-<pe>.txt, DIR/barrier.txt). Exit 0 when every chunk arrived.
//
//   mpirun -np 4 sigmatrace fabric --node rank -- gpu_bfs_levels_cuda [--levels L] [--late PE] [--delay-ms D]
#include <mpi.h>

#include <algorithm>
#include <cstring>

#include "cuda_common.cuh"

using namespace sigmatrace;
using namespace sigmatrace::workloads;
using namespace sigmatrace::workloads::cuda;

namespace {

constexpr size_t kChunk = 1024;

__device__ inline uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

struct Args {
    gpu::DeviceQp* qps;
    const uint8_t* const* cqes;
    DeviceRecord* records;
    size_t max_records;
    int me, npes, late, delay_ms, levels;
    uint8_t* heap_dev;           // our heap, as the GPU addresses it
    uint64_t heap_host;          // ... and as the NIC does
    uint32_t lkey;
    const uint64_t* heap_remote;
    const uint32_t* rkey_remote;
    uint64_t inbox, barrier, release, release_src, fetch;
    uint64_t* arrivals;          // per level
};

__global__ void bfs_kernel(Args a) {
    const int t = static_cast<int>(threadIdx.x);
    volatile uint64_t* barrier_word = reinterpret_cast<volatile uint64_t*>(a.heap_dev + a.barrier);
    volatile uint64_t* release_word = reinterpret_cast<volatile uint64_t*>(a.heap_dev + a.release);
    for (int level = 0; level < a.levels; ++level) {
        for (size_t i = t; i < kChunk; i += blockDim.x) a.heap_dev[i] = static_cast<uint8_t>(level * 17 + a.me * 5 + i);
        __threadfence_system();
        __syncthreads();
        if (t < a.npes && t != a.me) {
            const gpu::DeviceQp& q = a.qps[t];
            const uint64_t b = gpu::reserve(q, 1);
            const uint64_t raddr = a.heap_remote[t] + a.inbox + (static_cast<uint64_t>(level % 2) * a.npes + a.me) * kChunk;
            gpu::write_rdma_write(q, b, a.heap_host, a.lkey, raddr, a.rkey_remote[t], kChunk);
            record(a.records, a.max_records, t, b, 0x08, kChunk, raddr, a.rkey_remote[t], 0);
            gpu::submit(q, b, 1);
            wait_completion(a.cqes[t], b);
        }
        __syncthreads();
        if (t == 0) {
            if (a.me == a.late)
                for (int ms = 0; ms < a.delay_ms; ++ms) __nanosleep(1'000'000);
            const gpu::DeviceQp& q0 = a.qps[0];
            const uint64_t b = gpu::reserve(q0, 1);
            const uint64_t baddr = a.heap_remote[0] + a.barrier;
            gpu::write_fetch_add(q0, b, a.heap_host + a.fetch, a.lkey, baddr, a.rkey_remote[0], 1);
            record(a.records, a.max_records, 0, b, 0x12, 8, baddr, a.rkey_remote[0], 1);
            a.arrivals[level] = global_ns();
            gpu::submit(q0, b, 1);
            if (a.me == 0) {
                while (*barrier_word < static_cast<uint64_t>(a.npes) * (level + 1)) __nanosleep(1000);
                *reinterpret_cast<volatile uint64_t*>(a.heap_dev + a.release_src) = level + 1;
                __threadfence_system();
                for (int pe = 0; pe < a.npes; ++pe) {
                    const gpu::DeviceQp& q = a.qps[pe];
                    const uint64_t r = gpu::reserve(q, 1);
                    const uint64_t raddr = a.heap_remote[pe] + a.release;
                    gpu::write_rdma_write(q, r, a.heap_host + a.release_src, a.lkey, raddr, a.rkey_remote[pe], 8);
                    record(a.records, a.max_records, pe, r, 0x08, 8, raddr, a.rkey_remote[pe], 0);
                    gpu::submit(q, r, 1);
                    wait_completion(a.cqes[pe], r);  // the source word is rewritten next level
                }
            }
            while (*release_word < static_cast<uint64_t>(level + 1)) __nanosleep(1000);
        }
        __syncthreads();
    }
}

}  // namespace

int main(int argc, char** argv) {
    const PeIdentity id = start_pe(&argc, &argv);
    const int me = id.me, npes = id.npes;
    int levels = 8, late = npes - 1, delay_ms = 20;
    const CommonOptions common = WorkloadOptions("gpu_bfs_levels_cuda")
                                     .add("--levels", "L", levels)
                                     .add("--late", "PE", late)
                                     .add("--delay-ms", "D", delay_ms)
                                     .parse(argc, argv);
    if (!have_cuda_device(me)) return 77;
    const size_t n = static_cast<size_t>(npes);
    const uint64_t inbox = kChunk, barrier = inbox + 2 * n * kChunk, release = barrier + 64, release_src = release + 64,
                   fetch = release_src + 64;
    IbgdaTransport t;
    std::vector<PeInfo> peers = connect_all(t, common.device, npes, me, 10, fetch + 64);
    DeviceQps d = map_for_gpu(t, npes, 1024);
    std::vector<const uint8_t*> cqes = device_cqes(t, npes);
    std::vector<uint64_t> heap_remote(n);
    std::vector<uint32_t> rkeys(n);
    for (size_t pe = 0; pe < n; ++pe) heap_remote[pe] = peers[pe].heap_addr, rkeys[pe] = peers[pe].heap_rkey;
    Args a{};
    a.qps = d.qps;
    a.records = d.records;
    a.max_records = d.max_records;
    a.me = me, a.npes = npes, a.late = late, a.delay_ms = delay_ms, a.levels = levels;
    a.heap_dev = device_pointer(t.heap());
    a.heap_host = reinterpret_cast<uint64_t>(t.heap());
    a.lkey = t.heap_lkey();
    a.inbox = inbox, a.barrier = barrier, a.release = release, a.release_src = release_src, a.fetch = fetch;
    const uint8_t** d_cqes = nullptr;
    uint64_t* d_remote = nullptr;
    uint32_t* d_rkeys = nullptr;
    CUDA_CHECK(cudaMalloc(&d_cqes, n * sizeof(uint8_t*)));
    CUDA_CHECK(cudaMalloc(&d_remote, n * 8));
    CUDA_CHECK(cudaMalloc(&d_rkeys, n * 4));
    CUDA_CHECK(cudaMalloc(&a.arrivals, static_cast<size_t>(levels) * 8));
    CUDA_CHECK(cudaMemcpy(d_cqes, cqes.data(), n * sizeof(uint8_t*), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_remote, heap_remote.data(), n * 8, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_rkeys, rkeys.data(), n * 4, cudaMemcpyHostToDevice));
    a.cqes = d_cqes, a.heap_remote = d_remote, a.rkey_remote = d_rkeys;
    MPI_Barrier(MPI_COMM_WORLD);

    bfs_kernel<<<1, static_cast<unsigned>(std::max(npes, 32))>>>(a);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint64_t> posted = posted_counts(d);
    quiet_all(t, posted);
    MPI_Barrier(MPI_COMM_WORLD);

    int bad = 0;
    const int last_level = levels - 1;
    for (size_t src = 0; src < n; ++src) {
        if (src == static_cast<size_t>(me)) continue;
        const uint8_t* chunk = t.heap() + inbox + ((static_cast<size_t>(last_level) % 2) * n + src) * kChunk;
        for (size_t i = 0; i < kChunk; ++i)
            if (chunk[i] != static_cast<uint8_t>(last_level * 17 + src * 5 + i)) {
                std::fprintf(stderr, "PE %d: last chunk of PE %zu differs at byte %zu\n", me, src, i);
                ++bad;
                break;
            }
    }
    std::vector<uint64_t> mine(static_cast<size_t>(levels)), all(n * static_cast<size_t>(levels));
    CUDA_CHECK(cudaMemcpy(mine.data(), a.arrivals, mine.size() * 8, cudaMemcpyDeviceToHost));
    MPI_Gather(mine.data(), levels, MPI_UINT64_T, all.data(), levels, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    TruthLog truth;
    collect_truth(d, posted, truth);
    if (!common.truth_dir.empty()) {
        write_truth(common, truth, me);
        if (me == 0) {
            FILE* f = std::fopen((common.truth_dir + "/barrier.txt").c_str(), "w");
            if (!f) die("Cannot write barrier.txt");
            std::fprintf(f, "levels %d late %d delay_ms %d odd_only 0\n", levels, late, delay_ms);
            for (int l = 0; l < levels; ++l) {
                uint64_t first = ~0ull, last = 0;
                size_t last_pe = 0;
                for (size_t pe = 0; pe < n; ++pe) {
                    const uint64_t at = all[pe * static_cast<size_t>(levels) + static_cast<size_t>(l)];
                    first = std::min(first, at);
                    if (at >= last) last = at, last_pe = pe;
                }
                std::fprintf(f, "level %d last %zu spread_ns %llu\n", l, last_pe, static_cast<unsigned long long>(last - first));
            }
            std::fclose(f);
        }
    }
    std::printf("gpu_bfs_levels_cuda PE %d: %d levels, %zu WQEs posted by the GPU; frontiers %s\n", me, levels,
                truth.size(), bad ? "WRONG" : "correct");
    return job_exit_status(bad);
}
