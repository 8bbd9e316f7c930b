// The receive side of a queue that the application drives through mlx5 rings (mlx5dv_init_obj on a verbs QP's
// RQ or on an SRQ): the driver writes receive WQEs and counts them in the doorbell record, as for a ConnectX;
// the fabric copies each newly counted WQE into the fabric receive queue it stands for, with the WQE's index as
// wr_id, so that the completion a sender later pushes names the WQE (the CQE's wqe_counter).
//   - RQ: a cyclic array of WQEs, each `stride` bytes of data segments; WQE n sits at slot n % wqe_cnt, and the
//     CQE reports n modulo 2^16.
//   - SRQ: a linked list (struct mlx5_wqe_srq_next_seg, 16 bytes, then data segments): the first WQE is slot 0
//     (the head), each later one is named by the next_wqe_index of the one before, read when the later one is
//     counted (the driver links a freed WQE in only then). The CQE reports the slot.
// A data segment whose lkey is MLX5_INVALID_LKEY ends a WQE's list early, as on hardware.
#pragma once

#include <cstdint>
#include <mutex>

#include "core/engine.h"

namespace softfabric::mlx5 {

class RecvMirror {
public:
    enum class Kind { Rq, Srq };
    struct Target {
        engine::QueuePair* qp = nullptr;  // an RQ: posts with qp->post_receive
        RecvRing* ring = nullptr;         // an SRQ: posts with engine::post_to_ring under *lock
        std::mutex* lock = nullptr;
    };
    RecvMirror(Kind kind, uint8_t* buf, uint32_t wqe_cnt, uint32_t stride, const uint32_t* dbrec, Target target);

    // Copies what the doorbell record newly counts. Returns true when it copied something.
    bool pump();
    // The queue starts again at WQE 0 with a zero counter (its QP was reset).
    void reset();
    // WQEs that could not be copied because a data segment was malformed (more segments than the queue takes).
    uint64_t dropped() const { return dropped_; }

private:
    bool post(uint32_t slot);

    Kind kind_;
    uint8_t* buf_;
    uint32_t wqe_cnt_;
    uint32_t stride_;
    const uint32_t* dbrec_;
    Target target_;
    uint16_t seen16_ = 0;   // the doorbell record's counter as last read
    uint64_t pending_ = 0;  // counted, not yet copied (the fabric queue was full)
    uint64_t posted_ = 0;   // RQ: WQEs copied
    bool have_last_ = false;
    uint32_t last_slot_ = 0;  // SRQ: the slot copied last
    uint64_t dropped_ = 0;
};

}  // namespace softfabric::mlx5
