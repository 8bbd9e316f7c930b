// GPU checks of the watcher with real kernels writing mlx5 WQEs (run by tests/gpu/device-check.sh on a machine
// with an NVIDIA GPU; exits 77 elsewhere). No NIC is needed: the rings are the watcher's input, not a NIC's.
//
//   classify        cudaMalloc -> GPU memory, cudaHostAlloc(mapped) -> host-mapped, malloc -> host
//   device-exact    ring + doorbell record in GPU memory, a kernel posting slowly enough that nothing is overwritten:
//                   every WQE decoded, exactly, in order, read through the CUDA copy on the watcher's own stream
//   device-overrun  the same ring, 256 GPU threads posting as fast as they can: decoded + lost = posted, and every
//                   decoded WQE is exactly the one written at its index (the ordering of WQE stores, fence and
//                   doorbell record as seen through copies from GPU memory)
//   mapped-exact / mapped-overrun   the same with the ring in host memory mapped into the GPU (NVSHMEM hostmem)
//   *-dbrless-*     the four above with a DBR-less queue (DOCA GPU_SM_NO_DBR: no doorbell record, read by index
//                   scanning, src/gpumem/index_scanner.h): checks on hardware that real GPU stores never make the
//                   two-read rule commit a torn WQE, and that loss is accounted exactly under overrun
//   cost-device / cost-mapped   the watcher's cost on the kernel: 256 GPU threads posting 51 200 WQEs as fast as
//                   they can into a ring that never wraps, timed with CUDA events, alone and watched, interleaved
//                   (7 rounds, medians); the watched runs must decode every WQE. The ratio is reported, not judged.
//
// What the watcher decodes is read as the analyzer reads it: its ring_post records, out of the deferred_records
// events it emits (include/sigmatrace/deferred_records_wire.h).
//
// Prints one line per check: "CHECK <name> PASS|FAIL <details>". Exit 0 when all pass, 1 otherwise, 77 without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "device_wqe.cuh"
#include "gpumem/cuda_driver.h"
#include "gpumem/memory_classifier.h"
#include "gpumem/watcher.h"
#include "ring_capture.h"

using namespace sigmatrace;
using namespace sigmatrace::gpumem;
using sigmatrace::gpu_check::Captured;

namespace {

constexpr uint64_t kRaddrBase = 0x100000000ull;
__host__ __device__ inline uint32_t rkey_for(uint64_t seq) { return static_cast<uint32_t>(seq * 2654435761ull) | 1; }
__host__ __device__ inline uint32_t bytes_for(uint64_t seq) { return static_cast<uint32_t>(seq % 65536) + 1; }

__global__ void post_kernel(gpu::DeviceQp q, uint64_t per_thread, unsigned spin_ns) {
    for (uint64_t k = 0; k < per_thread; ++k) {
        const uint64_t b = gpu::reserve(q, 1);
        gpu::write_rdma_write(q, b, 0x2000 + b, 0x77, kRaddrBase + b * 64, rkey_for(b), bytes_for(b));
        gpu::submit(q, b, 1);
        if (spin_ns) __nanosleep(spin_ns);
    }
}

int failures = 0;
void report(const char* name, bool ok, const std::string& detail) {
    std::printf("CHECK %-16s %s %s\n", name, ok ? "PASS" : "FAIL", detail.c_str());
    std::fflush(stdout);
    if (!ok) ++failures;
}

#define CUDA_OK(call)                                                                                          \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) {                                                                               \
            std::printf("CHECK %-16s FAIL %s: %s\n", "cuda", #call, cudaGetErrorString(e_));                   \
            std::exit(1);                                                                                      \
        }                                                                                                      \
    } while (0)

// A send ring and its doorbell record, in GPU memory (the watcher reads them through CUDA copies) or in host memory
// mapped into the GPU (NVSHMEM hostmem); zeroed.
struct GpuRing {
    uint8_t* host = nullptr;  // what the watcher reads
    uint8_t* dev = nullptr;   // what the kernel writes
    uint32_t* dbr_host = nullptr;
    uint32_t* dbr_dev = nullptr;
    size_t bytes;
    bool device_memory;
    GpuRing(bool device, size_t ring_bytes) : bytes(ring_bytes), device_memory(device) {
        if (device_memory) {
            CUDA_OK(cudaMalloc(&dev, bytes));
            CUDA_OK(cudaMalloc(&dbr_dev, 64));
            host = dev;
            dbr_host = dbr_dev;
        } else {
            CUDA_OK(cudaHostAlloc(&host, bytes, cudaHostAllocMapped));
            CUDA_OK(cudaHostAlloc(&dbr_host, 64, cudaHostAllocMapped));
            CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), host, 0));
            CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dbr_dev), dbr_host, 0));
        }
        clear();
    }
    ~GpuRing() {
        if (device_memory) {
            cudaFree(dev);
            cudaFree(dbr_dev);
        } else {
            cudaFreeHost(host);
            cudaFreeHost(dbr_host);
        }
    }
    GpuRing(const GpuRing&) = delete;
    GpuRing& operator=(const GpuRing&) = delete;
    void clear() {
        CUDA_OK(cudaMemset(dev, 0, bytes));
        CUDA_OK(cudaMemset(dbr_dev, 0, 64));
        CUDA_OK(cudaDeviceSynchronize());
    }
    // The queue as the set-up observer would have learned it.
    SendQueue queue(uint32_t wqebbs, bool dbr_less) const {
        SendQueue q;
        q.key = 1;
        q.qpn = 0x1234;
        q.ring_addr = reinterpret_cast<uint64_t>(host);
        q.wqebbs = wqebbs;
        q.ring_mem = device_memory ? MemType::Device : MemType::HostMapped;
        q.dbr_addr = dbr_less ? 0 : reinterpret_cast<uint64_t>(dbr_host + 1);
        q.dbr_mem = q.ring_mem;
        q.dbr_less = dbr_less;
        return q;
    }
};

// One ring, one kernel, one watcher thread; returns true when the capture is consistent.
void ring_check(const char* name, bool device_memory, uint32_t wqebbs, int blocks, int threads, uint64_t per_thread,
                unsigned spin_ns, bool expect_no_loss, bool dbr_less = false) {
    GpuRing ring(device_memory, size_t{wqebbs} * 64);
    unsigned long long* mvars = nullptr;
    CUDA_OK(cudaMalloc(&mvars, 64));
    CUDA_OK(cudaMemset(mvars, 0, 64));

    QueueRegistry reg;
    reg.add_send_queue(ring.queue(wqebbs, dbr_less));
    ProcessMemoryReader mem;
    WatcherConfig cfg;
    cfg.min_period_ns = 2'000;
    cfg.max_period_ns = 20'000;
    cfg.idle_period_ns = 20'000;
    // GPU writers may be up to blocks x threads WQEs ahead of the doorbell record.
    cfg.guard_wqebbs = blocks * threads;
    Watcher w(reg, mem, cfg);
    Captured cap;
    gpu_check::start_capture(cap);
    if (!w.start()) return report(name, false, "cannot start the watcher thread");

    gpu::DeviceQp dq{0x1234, ring.dev, wqebbs, dbr_less ? nullptr : ring.dbr_dev + 1, nullptr, mvars, mvars + 1,
                     reinterpret_cast<int*>(mvars + 2)};
    const auto t0 = std::chrono::steady_clock::now();
    post_kernel<<<blocks, threads>>>(dq, per_thread, spin_ns);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    w.stop();  // final sweep
    gpu_check::stop_capture();

    const uint64_t posted = uint64_t{static_cast<uint32_t>(blocks * threads)} * per_thread;
    const WatcherStats st = w.stats();
    std::string why;
    uint64_t prev = 0;
    bool first = true;
    for (size_t i = 0; i < cap.raddr.size() && why.empty(); ++i) {
        const uint64_t seq = (cap.raddr[i] - kRaddrBase) / 64;
        if (cap.raddr[i] != kRaddrBase + seq * 64 || cap.index[i] != static_cast<uint16_t>(seq) ||
            cap.rkey[i] != rkey_for(seq) || cap.bytes[i] != bytes_for(seq))
            why = "WQE #" + std::to_string(i) + " decoded wrong (seq " + std::to_string(seq) + ")";
        else if (!first && seq <= prev)
            why = "out of order at #" + std::to_string(i);
        prev = seq;
        first = false;
    }
    if (why.empty() && cap.raddr.size() + cap.lost != posted)
        why = "decoded " + std::to_string(cap.raddr.size()) + " + lost " + std::to_string(cap.lost) + " != posted " + std::to_string(posted);
    if (why.empty() && cap.malformed) why = std::to_string(cap.malformed) + " malformed";
    if (why.empty() && expect_no_loss && cap.lost) why = std::to_string(cap.lost) + " lost where none should be";
    if (why.empty() && !expect_no_loss && cap.lost == 0) why = "nothing lost: the writer did not outrun the watcher";
    char detail[256];
    std::snprintf(detail, sizeof detail, "%s(posted %llu, decoded %zu, lost %llu, %.0f WQE/s, %llu copies, %llu sweeps)",
                  why.empty() ? "" : (why + " ").c_str(), static_cast<unsigned long long>(posted), cap.raddr.size(),
                  static_cast<unsigned long long>(cap.lost), posted / secs,
                  static_cast<unsigned long long>(CudaDriver::if_loaded() ? CudaDriver::if_loaded()->copies() : 0),
                  static_cast<unsigned long long>(st.sweeps));
    report(name, why.empty(), detail);
    cudaFree(mvars);
}

// The kernel's time with and without the watcher reading its ring (device or host-mapped memory).
void watcher_cost(const char* name, bool device_memory) {
    constexpr uint32_t kWqebbs = 65536;   // never wraps: the kernel waits on nothing
    constexpr int kBlocks = 8, kThreads = 32;
    constexpr uint64_t kPerThread = 200;
    constexpr uint64_t kPosted = uint64_t{kBlocks} * kThreads * kPerThread;
    constexpr int kRounds = 7;
    GpuRing ring(device_memory, size_t{kWqebbs} * 64);
    unsigned long long* mvars = nullptr;
    CUDA_OK(cudaMalloc(&mvars, 64));
    cudaEvent_t begin, end;
    CUDA_OK(cudaEventCreate(&begin));
    CUDA_OK(cudaEventCreate(&end));
    std::vector<float> alone_ms, watched_ms;
    std::string why;
    for (int round = 0; round < 2 * kRounds + 1 && why.empty(); ++round) {
        const bool watched = round % 2 == 1;   // round 0 warms up (not timed)
        ring.clear();
        CUDA_OK(cudaMemset(mvars, 0, 64));
        CUDA_OK(cudaDeviceSynchronize());
        QueueRegistry reg;
        reg.add_send_queue(ring.queue(kWqebbs, false));
        ProcessMemoryReader mem;
        WatcherConfig cfg;
        cfg.guard_wqebbs = kBlocks * kThreads;
        Watcher w(reg, mem, cfg);
        Captured cap;
        gpu_check::start_capture(cap);
        if (watched && !w.start()) why = "cannot start the watcher thread";
        gpu::DeviceQp dq{0x1234, ring.dev, kWqebbs, ring.dbr_dev + 1, nullptr, mvars, mvars + 1, reinterpret_cast<int*>(mvars + 2)};
        CUDA_OK(cudaEventRecord(begin));
        post_kernel<<<kBlocks, kThreads>>>(dq, kPerThread, 0);
        CUDA_OK(cudaEventRecord(end));
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaEventSynchronize(end));
        float ms = 0;
        CUDA_OK(cudaEventElapsedTime(&ms, begin, end));
        if (watched) w.stop();   // final sweep
        gpu_check::stop_capture();
        if (round == 0) continue;
        (watched ? watched_ms : alone_ms).push_back(ms);
        if (watched && cap.raddr.size() + cap.lost != kPosted)
            why = "decoded " + std::to_string(cap.raddr.size()) + " + lost " + std::to_string(cap.lost) + " of " +
                  std::to_string(kPosted);
    }
    auto median = [](std::vector<float> v) {
        if (v.empty()) return 0.0f;
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    const float a = median(alone_ms), b = median(watched_ms);
    char detail[256];
    std::snprintf(detail, sizeof detail, "%s(%llu WQEs: kernel %.3f ms alone, %.3f ms watched, %+.1f%%; medians of %d)",
                  why.empty() ? "" : (why + " ").c_str(), static_cast<unsigned long long>(kPosted), a, b,
                  a > 0 ? (b / a - 1) * 100 : 0.0, kRounds);
    report(name, why.empty(), detail);
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
    cudaFree(mvars);
}

}  // namespace

int main() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        std::printf("SKIP: no CUDA device (%s)\n", cudaGetErrorString(cudaGetDeviceCount(&n)));
        return 77;
    }
    CUDA_OK(cudaFree(nullptr));  // create the primary context: libcuda is now loaded
    {
        void* d = nullptr;
        void* h = nullptr;
        CUDA_OK(cudaMalloc(&d, 4096));
        CUDA_OK(cudaHostAlloc(&h, 4096, cudaHostAllocMapped));
        std::vector<char> plain(4096);
        MemoryClassifier c;
        const MemType md = c.classify(reinterpret_cast<uint64_t>(d)), mh = c.classify(reinterpret_cast<uint64_t>(h)),
                      mp = c.classify(reinterpret_cast<uint64_t>(plain.data()));
        report("classify", md == MemType::Device && mh == MemType::HostMapped && mp == MemType::Host,
               std::string("cudaMalloc=") + mem_type_name(md) + " cudaHostAlloc=" + mem_type_name(mh) + " malloc=" + mem_type_name(mp));
        cudaFree(d);
        cudaFreeHost(h);
    }
    ring_check("device-exact", true, 4096, 1, 32, 64, 200'000, true);
    ring_check("device-overrun", true, 256, 8, 32, 2000, 0, false);
    ring_check("mapped-exact", false, 4096, 1, 32, 64, 200'000, true);
    ring_check("mapped-overrun", false, 256, 8, 32, 2000, 0, false);
    ring_check("device-dbrless-exact", true, 4096, 1, 32, 64, 200'000, true, true);
    ring_check("device-dbrless-overrun", true, 256, 8, 32, 2000, 0, false, true);
    ring_check("mapped-dbrless-exact", false, 4096, 1, 32, 64, 200'000, true, true);
    ring_check("mapped-dbrless-overrun", false, 256, 8, 32, 2000, 0, false, true);
    watcher_cost("cost-device", true);
    watcher_cost("cost-mapped", false);
    return failures ? 1 : 0;
}
