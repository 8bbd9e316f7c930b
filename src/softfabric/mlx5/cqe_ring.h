// An mlx5 completion queue that the fabric writes, as a ConnectX would: 64-byte CQEs (struct mlx5_cqe64 layout,
// src/mlx5_format/mlx5_layout.h) with the owner bit of the pass, or a collapsed CQ whose single CQE is rewritten in
// place. Consumers are GPU-style threads polling the ring (and the SigmaTrace watcher reading it).
//
// Timestamps are CLOCK_MONOTONIC nanoseconds (the fabric's clock), where a ConnectX writes its free-running
// HCA clock.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <mutex>

namespace softfabric::mlx5 {

class CqeRing {
public:
    // `ring` holds `ncqe` (a power of two) CQEs of `cqe_size` bytes (64 or 128; the 64-byte CQE is the last 64
    // bytes of each). A collapsed CQ has one slot. The memory belongs to the caller (a UMEM or our allocation).
    CqeRing(uint32_t cqn, uint8_t* ring, uint32_t ncqe, uint32_t cqe_size, bool collapsed);

    uint32_t cqn() const { return cqn_; }
    uint8_t* ring() const { return ring_; }
    uint32_t ncqe() const { return ncqe_; }
    uint32_t cqe_size() const { return cqe_size_; }

    // Fills every slot with an invalid CQE (opcode INVALID, owner 0): what a driver does before handing a CQ out.
    void invalidate_all();

    // A requester completion of the WQE with index `wqe_counter` (its mlx5 opcode goes into sop_drop_qpn);
    // status != SUCCESS writes an error CQE (REQ_ERR with the syndrome of that status).
    struct Requester {
        uint16_t wqe_counter = 0;
        uint8_t wqe_opcode = 0;
        uint32_t qpn = 0;
        // The QP's user index (a DevX CREATE_QP's qpc.user_index) in srqn_uidx, as a ConnectX with CQE version 1
        // writes it: UCX finds the DCI a completion belongs to by it, not by the QPN.
        uint32_t user_index = 0;
        uint32_t byte_cnt = 0;
        uint64_t ts_ns = 0;
        ibv_wc_status status = IBV_WC_SUCCESS;
        uint32_t vendor_err = 0;
    };
    void requester(const Requester& r);
    // A responder completion (receive consumed by a SEND or an RDMA WRITE with immediate).
    struct Responder {
        uint16_t wqe_counter = 0;  // the receive WQE: RQ counter, or SRQ slot
        ibv_wc_opcode opcode = IBV_WC_RECV;
        uint32_t qpn = 0;          // the receiving QP (sop_drop_qpn)
        uint32_t user_index = 0;   // its user index (srqn_uidx), as for the requester
        uint32_t byte_cnt = 0;
        uint32_t imm_raw = 0;      // as the sender wrote it
        bool with_imm = false;
        uint64_t ts_ns = 0;
        ibv_wc_status status = IBV_WC_SUCCESS;
        // Where it came from (flags_rqpn, slid): the sender's QPN, LID and SL, and whether a GRH sits in front of
        // the data (UD receives).
        uint32_t src_qpn = 0;
        uint16_t slid = 0;
        uint8_t sl = 0;
        bool grh = false;
    };
    void responder(const Responder& r);

    uint64_t produced() {
        std::lock_guard lk(mu_);
        return pi_;
    }

private:
    uint8_t* next_slot(bool& owner);
    void publish(uint8_t* cqe, const uint8_t* staged, uint8_t op_own);

    uint32_t cqn_;
    uint8_t* ring_;
    uint32_t ncqe_;
    uint32_t cqe_size_;
    bool collapsed_;
    std::mutex mu_;  // completions of several QPs sharing the CQ arrive from different threads
    uint64_t pi_ = 0;
};

// The mlx5 CQE syndrome of a verbs completion status (MLX5_CQE_SYNDROME_*).
uint8_t syndrome_of(ibv_wc_status status);

}  // namespace softfabric::mlx5
