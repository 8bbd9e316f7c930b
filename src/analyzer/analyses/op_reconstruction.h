// Operation reconstruction: turns posts and completions into operations (model.h), per QP and wr_id.
//
//   - Send queue: WRs wait in post order. A completion for wr_id W retires the first waiting WR with that
//     wr_id that was signaled (or any, for an error completion), and every WR before it: those were unsignaled
//     and complete with it (docs/analyzer.md, "Operation reconstruction").
//     Applications that give every WR the same wr_id (perftest) are handled by the same rule.
//   - Receive queue and SRQ: a receive completion retires the first waiting receive with its wr_id.
//   - Error completions carry no valid opcode: they are matched on the send queue first, then on receives.
//   - WQEs the watcher decoded from a watched ring (CPU-direct or GPU-posted) wait on their QP's send queue with
//     their ring index; a CQE the watcher read retires the WQE its wqe_counter names and the unsignaled ones
//     before it. WQEs whose CQE the watcher cannot see end as Observed. A verbs QP exported with mlx5dv_init_obj
//     is one QP: its ring WQEs resolve their peer through its qp_modify; UD and DC WQEs through their address
//     vector. A WR both posted through verbs and seen in the ring is one operation (docs/analyzer.md, "Who
//     posted").
//   - Teardown: when the owner moves a QP to ERR, the flushes that follow are its teardown's, not errors; when it
//     moves it to RESET or destroys it, the sends still waiting are unconfirmed (most likely completed: an
//     unsignaled tail), not in flight.
//   - Whatever waits at the end of the trace on a live QP, or when its process goes away, is in flight.
// Queue models are bounded (a multiple of the granted depth): memory follows live WRs, not trace length.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "analyzer/decode/data_element.h"
#include "analyzer/decode/decoded_event.h"
#include "analyzer/analyses/model.h"
#include "analyzer/analyses/topology.h"

namespace sigmatrace::analyzer {

class OpListener {
public:
    virtual ~OpListener() = default;
    virtual void on_operation(const Operation& op) = 0;
    // The operations one completion retires on one QP, in post order: the unsignaled WRs before it (implied)
    // and its own WR last. A listener that can take them together overrides this; the same as one
    // on_operation() each, in order.
    virtual void on_operations(std::span<const Operation> ops) {
        for (const Operation& op : ops) on_operation(op);
    }
};

class OpReconstruction {
public:
    OpReconstruction(Topology& topo, OpListener& out) : topo_(topo), out_(out) {}

    // One posted WR or one completion of process p.
    void on_element(const DataElement& e, ProcId p);
    // Elements of process p in order, as on_element() one by one; a stretch of verbs posts to one QP (a
    // bandwidth loop's) finds its QP once.
    void on_elements(std::span<const DataElement> es, ProcId p);

    // A QP's owner changed its state (qp_modify with IBV_QP_STATE): ERR marks it torn down, RESET also ends what
    // waits on it (a QP in RESET has no WQEs), INIT brings a reset QP back into use.
    void on_qp_state(QpId q, int32_t state);
    // A QP was destroyed (teardown = true: by its owner), or its process replaced or the trace ended: sends still
    // waiting are unconfirmed after a teardown, else in flight; receives are unused.
    void drain_qp(QpId q, bool teardown);
    void drain_process(ProcId p);
    // End of the trace.
    void finish();

    // Object-life events may change which QP a handle or QP number names: the next element looks it up again.
    void forget_lookups() {
        post_cache_ = Cached{};
        completion_cache_ = Cached{};
    }

    // Posted receives never consumed (normal: applications pre-post receives); not operations.
    uint64_t unconsumed_receives() const { return unconsumed_receives_; }
    // What another share's reconstruction left unconsumed at its end (analysis.h, merge_share).
    void merge_unconsumed(const OpReconstruction& other) { unconsumed_receives_ += other.unconsumed_receives_; }
    void set_unconsumed_receives(uint64_t n) { unconsumed_receives_ = n; }   // a share loaded from bytes

private:
    // What an operation takes from its WR: opcode, poster, signaling, times (completion no earlier than the
    // post), bytes, wr_id and remote address. Inline, as make_op.
    [[gnu::always_inline]] static inline void fill_from_wr(Operation& op, const PendingWr& wr, int64_t done_ts,
                                                           uint8_t opcode_override = 0,
                                                           uint64_t bytes_override = UINT64_MAX);
    // The operation of `wr`; false for a ring WQE that moves no data (NOP, DUMP ...): retired with the others
    // but no operation. Inline: called once per operation, mostly from retire_through's loop.
    [[gnu::always_inline]] inline bool make_op(Operation& op, ProcId p, QpId q, const PendingWr& wr, OpOutcome outcome,
                                               uint8_t status, int64_t done_ts, bool implied,
                                               uint8_t opcode_override = 0, uint64_t bytes_override = UINT64_MAX);
    void emit(ProcId p, QpId q, const PendingWr& wr, OpOutcome outcome, uint8_t status, int64_t done_ts, bool implied,
              uint8_t opcode_override = 0, uint64_t bytes_override = UINT64_MAX);
    // A send completion at `ts` retires sq[0..j]: the WRs before j implied, j itself with `status`. They go to
    // the listener as one run.
    void retire_through(ProcId p, QpId q, std::size_t j, uint8_t status, int64_t ts);
    // The implied part of that run, sq[0..j), into run_ from n on (n advanced past what it added).
    void retire_implied(ProcId p, QpId q, std::size_t j, int64_t ts, std::size_t& n);
    void on_ring_send(const DataElement& e, ProcId p);
    void on_ring_completion(const DataElement& e, ProcId p);
    QpId qp_of_ring(ProcId p, uint64_t handle, uint32_t qpn);
    // Once-only bookkeeping of a WR leaving a watched QP's send queue, and the WR of the other view to merge with.
    static void forget_pending(Qp& qp, const PendingWr& wr);
    std::size_t same_wr(const Qp& qp, const PendingWr& wr, bool want_verbs) const;
    bool complete_send(ProcId p, QpId q, uint64_t wr_id, uint8_t status, int64_t ts);
    bool complete_recv(ProcId p, QpId q, uint64_t wr_id, uint8_t status, uint8_t wc_opcode, uint32_t byte_len, int64_t ts);
    // Drops the oldest WRs of `queue` beyond `limit` (lost, or observed: gpu_sq).
    void bound_queue(ProcId p, QpId q, FifoRing<PendingWr>& queue, std::size_t limit, bool gpu_sq) {
        if (queue.size() > limit) drop_beyond(p, q, queue, limit, gpu_sq);
    }
    void drop_beyond(ProcId p, QpId q, FifoRing<PendingWr>& queue, std::size_t limit, bool gpu_sq);
    QpId qp_for_post(ProcId p, uint64_t handle, uint32_t qpn);
    void on_send(const DataElement& e, ProcId p);
    // The verbs posts at the start of `es` to the QP of its first element, when that QP's ring is not watched
    // (no WR to pair with its ring view): returns how many it took, 0 for none.
    std::size_t on_verbs_sends(std::span<const DataElement> es, ProcId p);
    // The pending form of verbs post `e` to `qp`, written into `wr` (a queue's new slot: no copy per post).
    static void pending_of_post(const DataElement& e, const Qp& qp, PendingWr& wr);
    // Posts receive `e` to `queue` (a QP's or an SRQ's), the oldest beyond `limit` counted lost.
    void post_recv(FifoRing<PendingWr>& queue, const DataElement& e, std::size_t limit);
    void on_recv(const DataElement& e, ProcId p);
    void on_srq_recv(const DataElement& e, ProcId p);
    void on_completion(const DataElement& e, ProcId p);
    // The QP of the last post and of the last completion: a thread posts to one QP and polls one CQ for long
    // stretches, and each of these lookups is two hash probes.
    struct Cached {
        ProcId proc = kNoId;
        uint64_t key = 0;
        uint32_t qpn = 0;
        QpId qp = kNoId;
    };
    QpId qp_of_post(ProcId p, uint64_t handle, uint32_t qpn) {
        if (post_cache_.proc == p && post_cache_.key == handle && post_cache_.qpn == qpn) return post_cache_.qp;
        return qp_of_post_slow(p, handle, qpn);
    }
    QpId qp_of_post_slow(ProcId p, uint64_t handle, uint32_t qpn);

    Topology& topo_;
    OpListener& out_;
    uint64_t unconsumed_receives_ = 0;
    Cached post_cache_;
    Cached completion_cache_;
    // The completion element being applied: what its error operation carries besides the status (set by
    // on_completion/on_ring_completion for the duration of one element, read by emit).
    uint32_t applying_vendor_err_ = 0;
    bool applying_ring_cqe_ = false;
    // The run retire_through() hands over; keeps its capacity (a queue's depth at most), so that no operation
    // allocates.
    std::vector<Operation> run_;
};

}  // namespace sigmatrace::analyzer
