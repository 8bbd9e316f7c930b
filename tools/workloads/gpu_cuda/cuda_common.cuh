// Shared by the CUDA builds of the GPU-style workloads: the host set-up of gpu_common (DevX QPs on UMEMs) with its
// NIC buffers and heap in host memory registered for the GPU (cudaHostRegister Portable|Mapped, NVSHMEM's
// "hostmem" placement: the software fabric reads rings from host memory), device views of the QPs, and the
// device-side record of every WQE posted (the ground truth).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../../../tests/gpu/device_wqe.cuh"
#include "gpu_common/gpu_qp.h"
#include "gpu_common/ibgda_setup.h"
#include "gpu_common/mpi_boot.h"
#include "gpu_common/workload_main.h"

namespace sigmatrace::workloads::cuda {

#define CUDA_CHECK(call)                                                                                       \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) ::sigmatrace::workloads::die(std::string(#call) + ": " + cudaGetErrorString(e_)); \
    } while (0)

// One posted WQE, as the kernel records it (indexed by the WQE's extended index).
struct DeviceRecord {
    uint32_t opcode, bytes, rkey, imm;
    uint64_t raddr, atomic_arg;
};

// Device pointers for what the GPU addresses: the QP views, their mvars and record arrays.
struct DeviceQps {
    std::vector<gpu::DeviceQp> host_view;
    gpu::DeviceQp* qps = nullptr;          // device copy of host_view
    DeviceRecord* records = nullptr;       // npes x max_records
    size_t max_records = 0;
};

// False (MPI finalized, "SKIP" said once) when this machine has no CUDA device: the caller exits 77.
inline bool have_cuda_device(int me) {
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) == cudaSuccess && ngpu > 0) return true;
    if (me == 0) std::printf("SKIP: no CUDA device\n");
    MPI_Finalize();
    return false;
}

template <typename T> T* device_pointer(T* host) {
    void* d = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&d, const_cast<void*>(static_cast<const void*>(host)), 0));
    return static_cast<T*>(d);
}

// Registers the transport's shared memory and doorbell page for the GPU and builds the device QP views.
inline DeviceQps map_for_gpu(IbgdaTransport& t, int npes, size_t max_records) {
    for (const auto& r : t.shared_regions())
        CUDA_CHECK(cudaHostRegister(r.addr, r.bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
    // A real ConnectX UAR needs cudaHostRegisterIoMemory; the fabric's doorbell page is ordinary memory.
    const auto db = t.doorbell_page();
    CUDA_CHECK(cudaHostRegister(db.addr, db.bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
    DeviceQps d;
    d.max_records = max_records;
    unsigned long long* mvars = nullptr;
    CUDA_CHECK(cudaMalloc(&mvars, static_cast<size_t>(npes) * 64));
    CUDA_CHECK(cudaMemset(mvars, 0, static_cast<size_t>(npes) * 64));
    for (int pe = 0; pe < npes; ++pe) {
        GpuQp& q = t.qp(pe);
        unsigned long long* m = mvars + static_cast<size_t>(pe) * 8;
        d.host_view.push_back({q.qpn, device_pointer(q.wqe), q.nwqes, device_pointer(q.dbrec),
                               reinterpret_cast<unsigned long long*>(device_pointer(q.bf)), m, m + 1,
                               reinterpret_cast<int*>(m + 2)});
    }
    CUDA_CHECK(cudaMalloc(&d.qps, d.host_view.size() * sizeof(gpu::DeviceQp)));
    CUDA_CHECK(cudaMemcpy(d.qps, d.host_view.data(), d.host_view.size() * sizeof(gpu::DeviceQp), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMalloc(&d.records, static_cast<size_t>(npes) * max_records * sizeof(DeviceRecord)));
    CUDA_CHECK(cudaMemset(d.records, 0, static_cast<size_t>(npes) * max_records * sizeof(DeviceRecord)));
    return d;
}

// The collapsed CQE of QP `pe`, as the GPU addresses it (NVSHMEM's ibgda_poll_cq reads its wqe_counter).
inline std::vector<const uint8_t*> device_cqes(IbgdaTransport& t, int npes) {
    std::vector<const uint8_t*> out;
    for (int pe = 0; pe < npes; ++pe) out.push_back(device_pointer(t.qp(pe).cqe));
    return out;
}

// Waits until the collapsed CQE reports WQE `idx` (or later, modulo 2^16) complete.
__device__ inline void wait_completion(const uint8_t* cqe, uint64_t idx) {
    for (;;) {
        const volatile uint8_t* c = cqe;
        const uint8_t op_own = c[63];
        const uint16_t counter = static_cast<uint16_t>(c[60] << 8 | c[61]);
        if ((op_own >> 4) != 0xf && static_cast<uint16_t>(counter - static_cast<uint16_t>(idx)) < 0x8000) return;
        __nanosleep(1000);
    }
}

// How many WQEBBs the kernel posted on each QP (its ready_head).
inline std::vector<uint64_t> posted_counts(const DeviceQps& d) {
    std::vector<uint64_t> out;
    for (const auto& q : d.host_view) {
        unsigned long long v = 0;
        CUDA_CHECK(cudaMemcpy(&v, q.ready_head, sizeof v, cudaMemcpyDeviceToHost));
        out.push_back(v);
    }
    return out;
}

// The device records of every posted WQE into the TruthLog (one WQEBB per WQE in these workloads).
inline void collect_truth(const DeviceQps& d, const std::vector<uint64_t>& posted, TruthLog& truth) {
    std::vector<DeviceRecord> rec(d.max_records);
    for (size_t pe = 0; pe < d.host_view.size(); ++pe) {
        CUDA_CHECK(cudaMemcpy(rec.data(), d.records + pe * d.max_records, rec.size() * sizeof(DeviceRecord),
                              cudaMemcpyDeviceToHost));
        for (uint64_t i = 0; i < posted[pe] && i < d.max_records; ++i)
            truth.add({d.host_view[pe].qpn, i, static_cast<uint8_t>(rec[i].opcode), 0, rec[i].bytes, rec[i].raddr,
                       rec[i].rkey, rec[i].imm, rec[i].atomic_arg, true});
    }
}

// The host view of each QP learns how far the kernel got, then waits for the NIC (nvshmem_quiet).
inline void quiet_all(IbgdaTransport& t, const std::vector<uint64_t>& posted) {
    for (size_t pe = 0; pe < posted.size(); ++pe) {
        GpuQp& q = t.qp(static_cast<int>(pe));
        q.ready_head.store(posted[pe]);
        q.quiet(posted[pe]);
    }
}

__device__ inline void record(DeviceRecord* records, size_t max_records, int pe, uint64_t idx, uint32_t opcode,
                              uint32_t bytes, uint64_t raddr, uint32_t rkey, uint64_t arg) {
    if (idx < max_records) records[static_cast<size_t>(pe) * max_records + idx] = {opcode, bytes, rkey, 0, raddr, arg};
}

}  // namespace sigmatrace::workloads::cuda
