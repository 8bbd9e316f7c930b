// Device-side mlx5 WQE writers, as NVSHMEM's ibgda_device.cuh and DeepEP's ibgda_device.cuh write them from GPU
// threads (layouts: src/mlx5_format/mlx5_layout.h): relaxed 16-byte segment stores, slots reserved with atomicAdd,
// published in reservation order (atomicCAS on ready_head), then the doorbell record with system-scope release
// ordering and the 8-byte doorbell. Used by the GPU checks (tests/gpu) and the CUDA workloads.
#pragma once

#include <cstdint>

namespace sigmatrace::gpu {

struct DeviceQp {
    uint32_t qpn;
    uint8_t* wqe;                     // the send ring, as the GPU addresses it
    uint32_t nwqes;                   // WQEBBs, power of two
    uint32_t* dbrec;                  // DBR[1]; null for a DBR-less QP (DOCA's GPU_SM_NO_DBR: never written)
    unsigned long long* bf;           // doorbell register (may be null: no NIC to ring)
    unsigned long long* resv_head;    // mvars, in GPU memory
    unsigned long long* ready_head;
    int* post_lock;                   // NVSHMEM's mvars.post_send_lock: one doorbell writer at a time
};

__device__ inline uint32_t bswap32(uint32_t v) { return __byte_perm(v, 0, 0x0123); }
__device__ inline uint64_t bswap64(uint64_t v) {
    return (static_cast<uint64_t>(bswap32(static_cast<uint32_t>(v))) << 32) | bswap32(static_cast<uint32_t>(v >> 32));
}

// One 16-byte segment, four relaxed 4-byte stores (DeepEP stores int4 vectors; either is a relaxed store).
__device__ inline void store_segment(uint8_t* dst, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
    volatile uint32_t* d = reinterpret_cast<volatile uint32_t*>(dst);
    d[0] = w0;
    d[1] = w1;
    d[2] = w2;
    d[3] = w3;
}

__device__ inline uint8_t* wqe_slot(const DeviceQp& q, uint64_t idx) { return q.wqe + ((idx & (q.nwqes - 1)) << 6); }

__device__ inline uint64_t reserve(const DeviceQp& q, uint32_t n) { return atomicAdd(q.resv_head, static_cast<unsigned long long>(n)); }

// ctrl + raddr + data: an RDMA WRITE (opcode 0x08), signalled.
__device__ inline void write_rdma_write(const DeviceQp& q, uint64_t idx, uint64_t laddr, uint32_t lkey, uint64_t raddr,
                                        uint32_t rkey, uint32_t bytes) {
    uint8_t* w = wqe_slot(q, idx);
    const uint64_t ra = bswap64(raddr), la = bswap64(laddr);
    store_segment(w + 16, static_cast<uint32_t>(ra), static_cast<uint32_t>(ra >> 32), bswap32(rkey), 0);
    store_segment(w + 32, bswap32(bytes), bswap32(lkey), static_cast<uint32_t>(la), static_cast<uint32_t>(la >> 32));
    store_segment(w, bswap32((static_cast<uint32_t>(idx & 0xffff) << 8) | 0x08), bswap32((q.qpn << 8) | 3),
                  0x08000000u /* fm_ce_se = CQ_UPDATE at byte 11 */, 0);
}

// ctrl + raddr + atomic + data: an 8-byte fetch-add (0x12), signalled.
__device__ inline void write_fetch_add(const DeviceQp& q, uint64_t idx, uint64_t laddr, uint32_t lkey, uint64_t raddr,
                                       uint32_t rkey, uint64_t add) {
    uint8_t* w = wqe_slot(q, idx);
    const uint64_t ra = bswap64(raddr), la = bswap64(laddr), ad = bswap64(add);
    store_segment(w + 16, static_cast<uint32_t>(ra), static_cast<uint32_t>(ra >> 32), bswap32(rkey), 0);
    store_segment(w + 32, static_cast<uint32_t>(ad), static_cast<uint32_t>(ad >> 32), 0, 0);
    store_segment(w + 48, bswap32(8), bswap32(lkey), static_cast<uint32_t>(la), static_cast<uint32_t>(la >> 32));
    store_segment(w, bswap32((static_cast<uint32_t>(idx & 0xffff) << 8) | 0x12), bswap32((q.qpn << 8) | 4), 0x08000000u, 0);
}

// ibgda_submit_requests + ibgda_post_send: in-order publication, doorbell record, doorbell.
__device__ inline void submit(const DeviceQp& q, uint64_t base, uint32_t n) {
    __threadfence_system();  // WQE stores before the publication
    while (atomicCAS(q.ready_head, static_cast<unsigned long long>(base), static_cast<unsigned long long>(base + n)) != base) {
    }
    // The doorbell record must never move backwards: read the head and write it under the post lock.
    while (atomicCAS(q.post_lock, 0, 1) != 0) {
    }
    __threadfence_system();
    const unsigned long long head = atomicAdd(q.ready_head, 0ull);
    if (q.dbrec) *reinterpret_cast<volatile uint32_t*>(q.dbrec) = bswap32(static_cast<uint32_t>(head & 0xffff));
    __threadfence_system();
    if (q.bf)
        *reinterpret_cast<volatile unsigned long long*>(q.bf) =
            (static_cast<unsigned long long>(bswap32(q.qpn << 8)) << 32) | bswap32(static_cast<uint32_t>(head & 0xffff) << 8);
    __threadfence_system();
    atomicExch(q.post_lock, 0);
}

}  // namespace sigmatrace::gpu
