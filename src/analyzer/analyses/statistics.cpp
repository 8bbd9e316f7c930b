#include "analyzer/analyses/statistics.h"

#include <algorithm>

#include "analyzer/analyses/topology.h"

namespace sigmatrace::analyzer {

OpAggregate::Bins OpAggregate::bins_of(const Operation& op, QuantileHistogram::Binned& last_size) const {
    Bins b{};
    if (op.moved_data()) {
        const auto size = static_cast<double>(op.bytes);
        if (size != last_size.value) last_size = size_bytes.bin(size);
        b.size = last_size;
    }
    if (op.outcome == OpOutcome::Completed) b.latency = latency_ns.bin(static_cast<double>(op.done_ts - op.post_ts));
    return b;
}

namespace {
// The histogram of `agg` an operation's post -> completion time belongs to, or null (no completion).
QuantileHistogram* time_histogram(OpAggregate& agg, const Operation& op) {
    if (op.outcome != OpOutcome::Completed) return nullptr;
    if (op.is_recv()) return &agg.time_posted_ns;
    return op.implied ? &agg.implied_latency_ns : &agg.latency_ns;
}
}  // namespace

void OpAggregate::add(const Operation& op, const Bins& bins) {
    if (count == 0 || op.post_ts < first_ts) first_ts = op.post_ts;
    last_ts = std::max(last_ts, op.done_ts);
    ++count;
    posted_bytes += op.bytes;
    switch (op.poster) {
    case records::Poster::verbs: ++verbs_posted; break;
    case records::Poster::cpu_direct: ++cpu_direct; break;
    case records::Poster::gpu: ++gpu; break;
    }
    if (op.implied) ++implied;
    switch (op.outcome) {
    case OpOutcome::Completed:
        ++completed;
        completed_bytes += op.bytes;
        break;
    case OpOutcome::Failed: ++failed; break;
    case OpOutcome::Flushed: ++flushed; break;
    case OpOutcome::FlushedAtTeardown: ++flushed_at_teardown; break;
    case OpOutcome::InFlight:
        ++in_flight;
        in_flight_bytes += op.bytes;
        break;
    case OpOutcome::Unconfirmed:
        ++unconfirmed;
        unconfirmed_bytes += op.bytes;
        break;
    case OpOutcome::Observed: ++observed; break;
    case OpOutcome::Lost: ++lost; break;
    }
    if (op.moved_data()) {
        bytes += op.bytes;
        if (size_run_count_ != 0 && bins.size.value == size_run_.value) {
            ++size_run_count_;
        } else {
            flush_sizes();
            size_run_ = bins.size;
            size_run_count_ = 1;
        }
    }
    if (QuantileHistogram* h = time_histogram(*this, op)) h->add(bins.latency);
}

void OpAggregate::flush_sizes() {
    size_bytes.add(size_run_, size_run_count_);
    size_run_count_ = 0;
}

void OpAggregate::merge(const OpAggregate& o) {
    if (o.count == 0) return;
    if (count == 0 || o.first_ts < first_ts) first_ts = o.first_ts;
    last_ts = std::max(last_ts, o.last_ts);
    count += o.count;
    bytes += o.bytes;
    posted_bytes += o.posted_bytes;
    completed_bytes += o.completed_bytes;
    in_flight_bytes += o.in_flight_bytes;
    unconfirmed_bytes += o.unconfirmed_bytes;
    completed += o.completed;
    failed += o.failed;
    flushed += o.flushed;
    flushed_at_teardown += o.flushed_at_teardown;
    in_flight += o.in_flight;
    unconfirmed += o.unconfirmed;
    observed += o.observed;
    lost += o.lost;
    implied += o.implied;
    gpu += o.gpu;
    cpu_direct += o.cpu_direct;
    verbs_posted += o.verbs_posted;
    latency_ns.merge(o.latency_ns);
    implied_latency_ns.merge(o.implied_latency_ns);
    time_posted_ns.merge(o.time_posted_ns);
    size_bytes.merge(o.size_bytes);
}

void Statistics::add(const Operation& op) {
    const OpAggregate::Bins bins = total_.bins_of(op, last_size_);  // every aggregate has the same binning
    cells_[cell_key(op.qp, op.opcode)].add(op, bins);
}

void Statistics::finish(Topology& topo) {
    std::map<QpId, OpAggregate> sends_by_qp;   // initiator-side operations (also folded into by_pair_)
    std::map<QpId, OpAggregate> recvs_by_qp;
    for (auto& [key, agg] : cells_.m) {
        agg.flush_sizes();
        const auto q = static_cast<QpId>(key >> 8);
        const auto opcode = static_cast<uint8_t>(key & 0xff);
        by_opcode_[opcode].merge(agg);
        (is_recv_opcode(opcode) ? recvs_by_qp : sends_by_qp)[q].merge(agg);
    }
    cells_ = {};
    for (const auto& [code, agg] : by_opcode_) total_.merge(agg);
    for (const auto& [q, agg] : recvs_by_qp) {
        by_qp_[q].merge(agg);
        by_process_[topo.qp(q).proc].merge(agg);
    }
    for (const auto& [q, agg] : sends_by_qp) {
        by_qp_[q].merge(agg);
        const Qp& qp = topo.qp(q);
        by_process_[qp.proc].merge(agg);
        if (qp.type == 4) continue;  // UD: one QP talks to many peers; not attributable per QP
        const Peer& peer = topo.resolve_peer(q);
        if (peer.proc == kNoId) continue;
        by_pair_[{qp.proc, peer.proc}].merge(agg);
    }
}

}  // namespace sigmatrace::analyzer
