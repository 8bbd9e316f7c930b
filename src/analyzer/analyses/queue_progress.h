// Progress of each queue pair's send queue, for hang diagnosis (docs/analyzer.md, "Queue progress and stalls"):
// how much was posted and how much completed, the last work request that completed and the first one not
// acknowledged since, the last error completion, and the QP's state changes (its owner's modify_qp, or an error
// completion that put it in ERR). One path for every poster: verbs WRs and WQEs the watcher decoded from a
// directly driven ring arrive as the same operations.
//
// Reconstruction hands over a queue's operations in post order (op_reconstruction.h), so "the first one not
// acknowledged since the last completed one" is the first operation after the latest success. A queue is stalled
// when, at the end of the trace, such work is in flight or failed and nothing completed for longer than the
// threshold: measured from the later of the first unacknowledged post and the last success, to the end (or to
// its owner's reset, move to ERR or destroy, when that came later: the stall ended there).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "analyzer/analyses/model.h"

namespace sigmatrace::analyzer {

struct QpStateChange {
    enum class Source : uint8_t { modify_qp, error_completion, query_qp };
    int64_t ts = 0;
    int32_t state = 0;            // enum ibv_qp_state
    Source source = Source::modify_qp;  // its owner's modify_qp, an error completion (ERR), or a QUERY_QP's answer
};

// What the NIC said of the QP when its owner last queried it (QUERY_QP, gpu_qp_query).
struct NicQuery {
    int64_t ts = 0;
    int32_t state = 0;            // enum ibv_qp_state
    uint32_t consumed_index = 0;  // WQEBBs the NIC consumed (hw_sq_wqebb_counter), mod 2^16
    uint32_t producer_index = 0;  // the last doorbell it accepted (sw_sq_wqebb_counter), mod 2^16
};

struct QpProgress {
    uint64_t posted = 0;          // send-queue operations (WRs or WQEs)
    uint64_t completed = 0;       // success (signaled or implied by a later signaled completion)
    uint64_t failed = 0;          // error completion other than a flush
    uint64_t flushed = 0;         // IBV_WC_WR_FLUSH_ERR not caused by the owner's teardown
    uint64_t in_flight = 0;       // no completion at the end of the trace (or of the process)
    uint64_t other = 0;           // observed without a visible CQ, unconfirmed tail, flushed at teardown, lost
    std::optional<Operation> last_completed;
    std::optional<Operation> first_unacknowledged;  // first after last_completed that did not complete
    uint64_t unacknowledged = 0;  // operations from first_unacknowledged on (failed, flushed, in flight)
    uint64_t stuck = 0;           // of those: failed or in flight (what makes a stall)
    std::optional<Operation> last_error;            // latest failed operation
    int64_t first_flush_ts = -1;  // when the first flush since the last success completed (-1: none)
    int64_t owner_teardown_ts = -1;                 // latest modify to RESET/ERR or destroy by its owner
    std::vector<QpStateChange> states;              // bounded: the first kMaxStates changes
    std::optional<NicQuery> nic;                    // the latest QUERY_QP answer
    template <class Archive> void serialize(Archive& ar) {   // share_codec.cpp
        ar(posted, completed, failed, flushed, in_flight, other, last_completed, first_unacknowledged, unacknowledged,
           stuck, last_error, first_flush_ts, owner_teardown_ts, states, nic);
    }
};

struct StalledQueue {
    QpId qp = kNoId;
    int64_t since = 0;            // no progress from here to the end
    int64_t stalled_ns = 0;
    bool ended_by_owner = false;  // the owner tore the QP down after stalled_ns
};

class QueueProgress {
public:
    static constexpr std::size_t kMaxStates = 16;

    void add(const Operation& op);
    // One QP's operations in post order (op_reconstruction.h).
    void add(std::span<const Operation> ops) {
        if (ops.size() == 1) add(ops.front());
        else add_run(ops);
    }
    // The owner changed the QP's state (qp_modify), or destroyed it (destroyed: state ignored).
    void on_owner_state(QpId q, int32_t state, int64_t ts);
    void on_owner_destroy(QpId q, int64_t ts);
    // Its owner queried the QP (QUERY_QP): the NIC's view. A state it did not know from the trace is a change
    // (the NIC moves a QP to ERR by itself).
    void on_query(QpId q, const NicQuery& n);
    // QP q's progress as `owner`, the share of the trace that read its data events, has it (analysis.h,
    // merge_share): its operations, and its owner's state changes in time order among them.
    void take(QpId q, const QueueProgress& owner);
    // A share in bytes (share_codec.cpp): what take() takes.
    template <class Archive> void serialize(Archive& ar) {
        ar(qps_, procs_, used_);
        last_qp_ = UINT64_MAX;
        last_ = nullptr;
    }

    // nullptr when the QP had no send-queue operation and no state change.
    const QpProgress* of(QpId q) const { return q < qps_.size() && used_[q] ? &qps_[q] : nullptr; }
    // Queues stalled for at least stall_ns at end_ts, in QP id order.
    std::vector<StalledQueue> stalled(int64_t end_ts, int64_t stall_ns) const;
    // Other QPs of the same process with flushes since their last success (the companions an error flushed).
    std::vector<QpId> flushed_companions(QpId q, ProcId proc) const;

private:
    void add_run(std::span<const Operation> ops);
    QpProgress& at(QpId q);
    void note_state(QpProgress& p, int32_t state, int64_t ts, QpStateChange::Source source);

    std::vector<QpProgress> qps_;
    std::vector<ProcId> procs_;
    std::vector<bool> used_;
    // The previous operation's QP and its progress (no QP: wider than QpId), reset when qps_ grows.
    uint64_t last_qp_ = UINT64_MAX;
    QpProgress* last_ = nullptr;
};

}  // namespace sigmatrace::analyzer
