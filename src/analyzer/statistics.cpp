#include "analyzer/statistics.h"

#include <algorithm>

#include "analyzer/topology.h"

namespace sigmatrace::analyzer {

OpAggregate::Bins OpAggregate::bins_of(const Operation& op) const {
    Bins b{};
    if (op.moved_data()) b.size = size_bytes.bin(static_cast<double>(op.bytes));
    if (op.outcome == OpOutcome::Completed) b.latency = latency_ns.bin(static_cast<double>(op.done_ts - op.post_ts));
    return b;
}

void OpAggregate::add(const Operation& op, const Bins& bins) {
    if (count == 0 || op.post_ts < first_ts) first_ts = op.post_ts;
    last_ts = std::max(last_ts, op.done_ts);
    ++count;
    if (op.gpu) ++gpu;
    if (op.implied) ++implied;
    switch (op.outcome) {
    case OpOutcome::Completed: ++completed; break;
    case OpOutcome::Failed: ++failed; break;
    case OpOutcome::Flushed: ++flushed; break;
    case OpOutcome::InFlight: ++in_flight; break;
    case OpOutcome::Observed: ++observed; break;
    case OpOutcome::Lost: ++lost; break;
    }
    if (op.moved_data()) {
        bytes += op.bytes;
        size_bytes.add(bins.size);
    }
    if (op.outcome == OpOutcome::Completed) latency_ns.add(bins.latency);
}

void OpAggregate::merge(const OpAggregate& o) {
    if (o.count == 0) return;
    if (count == 0 || o.first_ts < first_ts) first_ts = o.first_ts;
    last_ts = std::max(last_ts, o.last_ts);
    count += o.count;
    bytes += o.bytes;
    completed += o.completed;
    failed += o.failed;
    flushed += o.flushed;
    in_flight += o.in_flight;
    observed += o.observed;
    lost += o.lost;
    implied += o.implied;
    gpu += o.gpu;
    latency_ns.merge(o.latency_ns);
    size_bytes.merge(o.size_bytes);
}

void Statistics::add(const Operation& op) {
    const OpAggregate::Bins bins = total_.bins_of(op);  // every aggregate has the same binning
    total_.add(op, bins);
    by_opcode_[op.opcode].add(op, bins);
    if (op.qp != last_qp_) {
        last_qp_ = op.qp;
        last_qp_agg_ = &by_qp_[op.qp];
    }
    last_qp_agg_->add(op, bins);
    if (op.proc != last_proc_) {
        last_proc_ = op.proc;
        last_proc_agg_ = &by_process_[op.proc];
    }
    last_proc_agg_->add(op, bins);
    if (!op.is_recv()) {
        if (op.qp != last_send_qp_) {
            last_send_qp_ = op.qp;
            last_send_agg_ = &sends_by_qp_[op.qp];
        }
        last_send_agg_->add(op, bins);
    }
}

void Statistics::resolve_pairs(Topology& topo) {
    for (auto& [q, agg] : sends_by_qp_) {
        const Qp& qp = topo.qp(q);
        if (qp.type == 4) continue;  // UD: one QP talks to many peers; not attributable per QP
        const Peer& peer = topo.resolve_peer(q);
        if (peer.proc == kNoId) continue;
        OpAggregate& pair = by_pair_[{qp.proc, peer.proc}];
        pair.merge(agg);
    }
    sends_by_qp_.clear();
}

}  // namespace sigmatrace::analyzer
