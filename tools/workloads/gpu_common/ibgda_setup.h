// The host side of an NVSHMEM-IBGDA-style transport on one NIC: RC QPs and collapsed CQs created with DevX on
// UMEM-registered host memory ("NVSHMEM_IBGDA_FORCE_NIC_BUF_MEMTYPE=hostmem"), a UAR for doorbells, the PD's
// number from mlx5dv_init_obj, a symmetric heap registered with ibv_reg_mr, and the RST->INIT->RTR->RTS
// transitions as DevX MODIFY commands -- the calls ibgda.cpp makes, in its order. Commands are built with the
// PRM field table of src/mlx5_format/prm_commands.h (NVSHMEM's DEVX_SET).
#pragma once

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu_common/gpu_qp.h"

namespace sigmatrace::workloads {

// What a peer needs to connect to us and to address our heap (exchanged with MPI_Allgather).
struct PeInfo {
    static constexpr int kMaxPes = 64;
    uint32_t lid = 0;
    uint32_t qpn[kMaxPes] = {};  // our QP connected to PE i (RC)
    uint32_t dctn = 0;           // our DC target (DC: every peer's DCIs address it)
    uint64_t heap_addr = 0;
    uint32_t heap_rkey = 0;
};

// The kind of QP and send CQ: NVSHMEM/DeepEP's (doorbell record, collapsed CQ, the default) or DOCA GPUNetIO's
// as NCCL GIN sets it up for GPU_SM_NO_DBR (send_dbr_mode = NO_DBR, the doorbell at UAR base + 0x600, a normal
// send CQ as deep as the send queue, every WQE signalled).
// UCX GDAKI's (one_umem + cq_one_entry): the send rings, the CQs and every doorbell record in one UMEM at per-queue
// offsets, and a 1-entry send CQ that ignores overrun (not collapsed: its owner bit flips with every write).
struct QpFlavor {
    bool dbr_less = false;
    bool cq_per_wqe = false;
    bool one_umem = false;
    bool cq_one_entry = false;
    // MORI's: a receive queue of 2^rq_log 64-byte entries comes first in each QP's WQ buffer, the send queue after
    // it (0: a zero-size RQ, NVSHMEM's).
    uint32_t rq_log = 0;
    bool blueflame = false;   // a BlueFlame UAR (DOCA's GPU_SM_BF) instead of a non-cached one
    // NVSHMEM's DC transport (NVSHMEM_IBGDA_DC): this many DCIs (CREATE_QP st 0x5) shared by every peer, each WQE
    // naming its destination DCT in an address vector, and one DCT per PE (CREATE_DCT). 0: RC QPs, one per peer.
    uint32_t dcis = 0;
};

// NVSHMEM's DC access key (IBGDA_DC_ACCESS_KEY): every DCT is created with it and every DCI WQE carries it.
inline constexpr uint64_t kDcAccessKey = 0x5623CEAF;

class IbgdaTransport {
public:
    IbgdaTransport() = default;
    ~IbgdaTransport();
    IbgdaTransport(const IbgdaTransport&) = delete;
    IbgdaTransport& operator=(const IbgdaTransport&) = delete;

    // Opens `device` (e.g. "sfab_0"), the PD, the heap (heap_bytes, zeroed) and the NIC buffers for npes QPs
    // of 2^log_sq_size WQEBBs. False with a message in `error`.
    bool open(const std::string& device, int npes, int my_pe, uint32_t log_sq_size, size_t heap_bytes,
              std::string& error, const QpFlavor& flavor = {});
    // Creates, per peer (including itself: a loopback QP), a send CQ and an RC QP of the flavor given to open();
    // DC: a DCT, and a send CQ and a DCI per DCI asked for.
    bool create_qps(std::string& error);
    // Connects our QP for `pe` to the peer's QP for us. DC: a DCI connects to nobody; the call for PE 0 moves
    // every DCI to RTS (RST2INIT, INIT2RTR without a path, RTR2RTS), the others do nothing.
    bool connect(int pe, const PeInfo& peer, std::string& error);
    PeInfo local_info() const;
    // QUERY_QP of our QP for `pe` (DOCA's doca_verbs_qp_query): qpc.state and the send counters.
    struct QpQuery {
        uint32_t state = 0;               // PRM: 3 RTS, 6 ERR, ...
        uint32_t hw_sq_wqebb_counter = 0;
        uint32_t sw_sq_wqebb_counter = 0;
    };
    bool query(int pe, QpQuery& q, std::string& error);

    GpuQp& qp(int pe) { return *qps_[pe]; }   // RC: our QP to `pe`; DC: DCI number `pe`
    size_t qp_count() const { return qps_.size(); }
    uint8_t* heap() { return heap_; }
    uint32_t heap_lkey() const { return heap_mr_->lkey; }
    // A normal (not collapsed) CQ that receives the responder completions of RDMA WRITE with immediate.
    // Returns the immediates it holds, in arrival order, and advances past them.
    std::vector<uint32_t> drain_receive_completions();
    void set_truth(TruthLog* log);

    // The host memory the NIC and the "GPU" share (send rings, doorbell records, CQs, heap) and the doorbell
    // page: what a CUDA program registers with cudaHostRegister to address it from kernels (NVSHMEM hostmem).
    struct Region {
        void* addr;
        size_t bytes;
    };
    std::vector<Region> shared_regions() const;
    Region doorbell_page() const;

private:
    // CQ buffer layout: per-QP send CQs first, then (page-aligned) the receive CQ.
    size_t send_cq_bytes() const { return flavor_.cq_per_wqe ? (size_t{1} << log_sq_size_) * 64 : 64; }
    // Send queues: one per peer (RC) or one per DCI.
    size_t queues() const { return flavor_.dcis ? flavor_.dcis : static_cast<size_t>(npes_); }
    bool bring_up_dcis(std::string& error);
    size_t recv_cq_offset() const;
    // Where the CQ buffer and the doorbell records start in their UMEMs (one_umem: after the send rings).
    size_t cq_base_ = 0, dbr_base_ = 0;
    // One QP's share of the WQ buffer: its receive queue (rq_log), then its send ring.
    size_t rq_bytes() const { return flavor_.rq_log ? (size_t{1} << flavor_.rq_log) * 64 : 0; }
    size_t wq_stride() const { return rq_bytes() + (size_t{1} << log_sq_size_) * 64; }

    QpFlavor flavor_;
    int npes_ = 0, me_ = 0;
    uint32_t log_sq_size_ = 0;
    ibv_context* ctx_ = nullptr;
    ibv_pd* pd_ = nullptr;
    uint32_t pdn_ = 0;
    uint16_t lid_ = 0;
    uint8_t* heap_ = nullptr;
    size_t heap_bytes_ = 0;
    ibv_mr* heap_mr_ = nullptr;
    // NIC buffers: send rings, doorbell records, CQ buffers (host memory, 64 KiB aligned like NVSHMEM's).
    uint8_t* wq_buf_ = nullptr;
    uint8_t* dbr_buf_ = nullptr;
    uint8_t* cq_buf_ = nullptr;
    size_t wq_bytes_ = 0, dbr_bytes_ = 0, cq_bytes_ = 0;
    mlx5dv_devx_umem* wq_umem_ = nullptr;
    mlx5dv_devx_umem* dbr_umem_ = nullptr;
    mlx5dv_devx_umem* cq_umem_ = nullptr;
    mlx5dv_devx_uar* uar_ = nullptr;
    std::vector<mlx5dv_devx_uar*> qp_uars_;  // DBR-less flavor: one doorbell page per QP
    std::vector<mlx5dv_devx_obj*> cq_objs_, qp_objs_;
    mlx5dv_devx_obj* recv_cq_obj_ = nullptr;
    mlx5dv_devx_obj* dct_obj_ = nullptr;
    uint32_t dctn_ = 0;
    uint32_t recv_cq_ci_ = 0;
    static constexpr uint32_t kRecvCqes = 1024;
    std::vector<std::unique_ptr<GpuQp>> qps_;
};

}  // namespace sigmatrace::workloads
