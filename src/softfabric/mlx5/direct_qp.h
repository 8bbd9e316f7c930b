// A fabric QP driven directly through an mlx5 send ring, as a GPU drives a ConnectX QP: threads write mlx5 WQEs
// into the ring and the producer index into the doorbell record; the fabric notices the record move, decodes the
// WQEs (src/mlx5_format/wqe_decoder.h), submits them to the engine (core/engine.h) and writes mlx5 CQEs for their
// completions into the QP's send CQ ring. A DBR-less QP (send_dbr_mode = NO_DBR, DOCA's GPU_SM_NO_DBR) has no
// doorbell record: its producer index is the WQE index of the last doorbell -- the 8-byte control-segment copy
// the producer writes into the UAR page -- that names this QP. (The fabric's UAR page is ordinary memory, so it
// can read what a NIC receives as an MMIO write.) Two origins:
//   - a DevX QP (mlx5dv_devx_obj_create CREATE_QP on UMEMs): the engine QP is ours;
//   - a verbs QP whose rings were exported with mlx5dv_init_obj: the engine QP is the provider's.
//
// Every mlx5 WQE becomes one engine WQE, always signalled at the engine, so completions arrive here in WQE order
// and NOP-like WQEs (NOP, NVSHMEM's DUMP) complete in order too; a CQE is written only for WQEs the producer
// marked CQ_UPDATE, and for errors (flushes included), as on hardware.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include "core/engine.h"
#include "mlx5_format/wqe_decoder.h"
#include "mlx5/cqe_ring.h"

namespace softfabric::mlx5 {

class DirectQp final : public engine::CompletionSink {
public:
    struct Geometry {
        uint8_t* sq = nullptr;        // first WQEBB
        uint32_t wqebbs = 0;          // power of two
        uint32_t* send_dbr = nullptr; // DBR[1], big-endian; null for a DBR-less QP
        uint64_t* doorbell = nullptr; // DBR-less QPs: the doorbell register in the UAR page
        // Rc, Ud or Dci: what follows the control segment (UD and DCI WQEs name their destination there).
        sigmatrace::gpumem::Transport transport = sigmatrace::gpumem::Transport::Rc;
        uint32_t user_index = 0;      // a DevX QP's qpc.user_index: written into each of its CQEs
    };
    // `owned` is null for a verbs QP (its engine QP belongs to the provider's QpImpl).
    DirectQp(engine::QueuePair& qp, std::unique_ptr<engine::QueuePair> owned, const Geometry& g);
    ~DirectQp();

    engine::QueuePair& engine() { return qp_; }
    uint32_t qpn() const { return qpn_; }
    void set_send_cq(CqeRing* cq);
    CqeRing* send_cq() const { return send_cq_; }

    // Receive side of a DevX QP: an auto-stocked receive queue (zero-length receives, the way NVSHMEM's SRQ is
    // kept full by the host) whose completions become responder CQEs in `cq`.
    void enable_auto_receive(SharedCq* recv_cq, CqeRing* cq);

    // Reads the doorbell record and submits what it covers. Returns true when it did something.
    bool pump(uint64_t now);
    // A malformed WQE was met: moves the QP to ERROR (flushing what is queued). Call without the send-queue lock.
    void enter_error_if_failed();
    // Receive completions to CQEs, and receives topped up. Returns true when it did something.
    bool pump_receives(uint64_t now);
    // A reset QP starts again at WQE 0 (a DBR-less QP's last doorbell, still in the UAR page, is cleared).
    void reset_cursor();

    // engine::CompletionSink: called under the engine QP's send-queue lock.
    void deliver(const engine::SendCompletion& c) override;

    // Malformed WQEs met (each put the QP in error, as a NIC's local QP operation error does).
    uint64_t malformed() const { return malformed_; }
    // QUERY_QP's counters: the WQEBBs executed and the producer index last read from the doorbell (mod 2^16).
    // Read under the front end's lock, which the executor holds while it pumps.
    uint16_t consumed_index() const { return static_cast<uint16_t>(next_); }
    uint16_t accepted_index() const { return static_cast<uint16_t>(seen_); }

private:
    struct LocalCompletion {  // a WQE the engine never sees (NOP): completes after `after` engine completions
        uint64_t after;
        uint16_t index;
        uint8_t opcode;
        bool signaled;
    };
    // `wqe` is the WQE's first block in the ring (UD and DC read their address vector there).
    bool submit_one(const sigmatrace::gpumem::DecodedWqe& w, const sigmatrace::gpumem::WqePayload& p,
                    const uint8_t* wqe, uint64_t now);
    // The producer index last published, modulo 2^16; false when there is none for this QP (a DBR-less QP whose
    // UAR page holds no doorbell of its own).
    bool published_index(uint16_t& index) const;
    void fail_locked(uint16_t index, uint8_t opcode);
    // A requester CQE of this QP into its send CQ.
    void complete(uint16_t index, uint8_t opcode, uint32_t byte_cnt, uint64_t ts_ns, ibv_wc_status status,
                  uint32_t vendor_err);

    engine::QueuePair& qp_;
    std::unique_ptr<engine::QueuePair> owned_;
    Geometry g_;
    uint32_t qpn_;
    CqeRing* send_cq_ = nullptr;
    uint64_t next_ = 0;      // next WQEBB to execute (extended)
    uint64_t seen_ = 0;      // extended producer index
    uint16_t last16_ = 0;
    bool failed_ = false;    // a malformed WQE put the QP in error: nothing more is submitted until reset
    bool error_pending_ = false;  // ... and the engine QP must still be moved to ERROR
    // Guarded by the engine QP's send-queue lock (submission and deliver both run under it).
    uint64_t submitted_ = 0, completed_ = 0;
    std::deque<LocalCompletion> local_;
    std::unique_ptr<sigmatrace::gpumem::WqePayload> payload_;
    uint64_t malformed_ = 0;

    // Receive side (DevX QPs).
    SharedCq* recv_shared_ = nullptr;
    CqeRing* recv_cq_ = nullptr;
    uint64_t recv_posted_ = 0, recv_done_ = 0;
};

}  // namespace softfabric::mlx5
