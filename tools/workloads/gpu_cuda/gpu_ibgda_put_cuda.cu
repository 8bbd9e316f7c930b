// Workload (1) with real GPU kernels: the set-up of gpu_ibgda_put (DevX RC QPs, collapsed CQs, UMEMs, a UAR),
// its NIC buffers and heap in host memory registered for the GPU (NVSHMEM hostmem placement), and a kernel whose
// threads each put a chunk into every PE with an RDMA WRITE then an 8-byte atomic signal, posting mlx5 WQEs into
// the rings and ringing the doorbells themselves (device_wqe.cuh: the NVSHMEM/DeepEP posting protocol). Ground
// truth as gpu_ibgda_put (recorded by the kernel). Exit 0 when every signal and chunk arrived.
//
//   mpirun -np 2 sigmatrace fabric --node rank -- gpu_ibgda_put_cuda [--iters N] [--threads T] [--bytes B]
#include <mpi.h>

#include <cstring>

#include "cuda_common.cuh"

using namespace sigmatrace;
using namespace sigmatrace::workloads;
using namespace sigmatrace::workloads::cuda;

namespace {

__global__ void put_kernel(gpu::DeviceQp* qps, DeviceRecord* records, size_t max_records, int me, int npes,
                           uint64_t iters, uint64_t heap_local, uint32_t lkey, const uint64_t* heap_remote,
                           const uint32_t* rkey_remote, uint64_t bytes, uint64_t recv_off, uint64_t signal_off,
                           uint64_t fetch_off) {
    const int th = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    for (uint64_t it = 0; it < iters; ++it)
        for (int k = 0; k < npes; ++k) {
            const int pe = (me + 1 + k + th) % npes;
            const gpu::DeviceQp& q = qps[pe];
            const uint64_t b = gpu::reserve(q, 2);
            const uint64_t raddr = heap_remote[pe] + recv_off + static_cast<uint64_t>(me) * bytes;
            const uint64_t saddr = heap_remote[pe] + signal_off + static_cast<uint64_t>(me) * 8;
            gpu::write_rdma_write(q, b, heap_local, lkey, raddr, rkey_remote[pe], static_cast<uint32_t>(bytes));
            record(records, max_records, pe, b, 0x08, static_cast<uint32_t>(bytes), raddr, rkey_remote[pe], 0);
            gpu::write_fetch_add(q, b + 1, heap_local + fetch_off + static_cast<uint64_t>(th) * 8, lkey, saddr, rkey_remote[pe], 1);
            record(records, max_records, pe, b + 1, 0x12, 8, saddr, rkey_remote[pe], 1);
            gpu::submit(q, b, 2);
        }
}

}  // namespace

int main(int argc, char** argv) {
    const PeIdentity id = start_pe(&argc, &argv);
    const int me = id.me, npes = id.npes;
    size_t iters = 16, threads = 32, bytes = 4096;
    const CommonOptions common = WorkloadOptions("gpu_ibgda_put_cuda")
                                     .add("--iters", "N", iters)
                                     .add("--threads", "T", threads)
                                     .add("--bytes", "B", bytes)
                                     .parse(argc, argv);
    if (!have_cuda_device(me)) return 77;
    const size_t n = static_cast<size_t>(npes);
    const size_t recv_off = bytes, signal_off = recv_off + n * bytes, fetch_off = signal_off + n * 8;
    const size_t heap_bytes = fetch_off + threads * 8 + 64;
    const size_t per_qp = iters * threads * 2;  // WQEBBs each QP receives
    uint32_t log_sq = 10;
    while ((size_t{1} << log_sq) < per_qp && log_sq < 14) ++log_sq;  // the kernel never waits for ring space
    if ((size_t{1} << log_sq) < per_qp) die("too many WQEs per QP for one kernel: lower --iters or --threads");
    IbgdaTransport t;
    std::vector<PeInfo> peers = connect_all(t, common.device, npes, me, log_sq, heap_bytes);
    uint8_t* heap = t.heap();
    for (size_t i = 0; i < bytes; ++i) heap[i] = static_cast<uint8_t>(me * 37 + i * 11 + 5);
    DeviceQps d = map_for_gpu(t, npes, per_qp);
    std::vector<uint64_t> heap_remote(n);
    std::vector<uint32_t> rkeys(n);
    for (size_t pe = 0; pe < n; ++pe) heap_remote[pe] = peers[pe].heap_addr, rkeys[pe] = peers[pe].heap_rkey;
    uint64_t* d_heap_remote = nullptr;
    uint32_t* d_rkeys = nullptr;
    CUDA_CHECK(cudaMalloc(&d_heap_remote, n * 8));
    CUDA_CHECK(cudaMalloc(&d_rkeys, n * 4));
    CUDA_CHECK(cudaMemcpy(d_heap_remote, heap_remote.data(), n * 8, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_rkeys, rkeys.data(), n * 4, cudaMemcpyHostToDevice));
    MPI_Barrier(MPI_COMM_WORLD);

    put_kernel<<<1, static_cast<unsigned>(threads)>>>(d.qps, d.records, d.max_records, me, npes, iters,
                                                      reinterpret_cast<uint64_t>(heap), t.heap_lkey(), d_heap_remote,
                                                      d_rkeys, bytes, recv_off, signal_off, fetch_off);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint64_t> posted = posted_counts(d);
    quiet_all(t, posted);
    MPI_Barrier(MPI_COMM_WORLD);

    int bad = 0;
    for (size_t src = 0; src < n; ++src) {
        uint64_t signal;
        std::memcpy(&signal, heap + signal_off + src * 8, 8);
        if (signal != threads * iters) {
            std::fprintf(stderr, "PE %d: signal from PE %zu is %llu, expected %zu\n", me, src,
                         static_cast<unsigned long long>(signal), threads * iters);
            ++bad;
        }
        for (size_t i = 0; i < bytes; ++i)
            if (heap[recv_off + src * bytes + i] != static_cast<uint8_t>(src * 37 + i * 11 + 5)) {
                ++bad;
                break;
            }
    }
    TruthLog truth;
    collect_truth(d, posted, truth);
    write_truth(common, truth, me);
    std::printf("gpu_ibgda_put_cuda PE %d: %zu WQEs posted by the GPU on %d QPs; signals and data %s\n", me, truth.size(),
                npes, bad ? "WRONG" : "correct");
    return job_exit_status(bad);
}
