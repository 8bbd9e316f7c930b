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
        note_size(bins.size);
    }
    if (QuantileHistogram* h = time_histogram(*this, op)) h->add(bins.latency);
}

void OpAggregate::add_implied(std::span<const Operation> ops, QuantileHistogram::Binned& last_size) {
    int64_t first = ops.front().post_ts;
    int64_t last = ops.front().done_ts;
    uint64_t sum = 0;
    std::array<uint64_t, 3> by_poster{};   // records::Poster's values
    for (std::size_t i = 0; i < ops.size();) {
        // A stretch of one size (a bandwidth run's, all of it) is binned and noted once.
        const uint64_t size = ops[i].bytes;
        const std::size_t from = i;
        for (; i < ops.size() && ops[i].bytes == size; ++i) {
            const Operation& op = ops[i];
            first = std::min(first, op.post_ts);
            last = std::max(last, op.done_ts);
            ++by_poster[static_cast<std::size_t>(op.poster)];
        }
        sum += size * (i - from);
        if (static_cast<double>(size) != last_size.value) last_size = size_bytes.bin(static_cast<double>(size));
        note_size(last_size, i - from);
    }
    implied_latency_ns.add_integers(ops, [](const Operation& op) { return op.done_ts - op.post_ts; });
    if (count == 0 || first < first_ts) first_ts = first;
    last_ts = std::max(last_ts, last);
    const uint64_t n = ops.size();
    count += n;
    posted_bytes += sum;
    verbs_posted += by_poster[static_cast<std::size_t>(records::Poster::verbs)];
    cpu_direct += by_poster[static_cast<std::size_t>(records::Poster::cpu_direct)];
    gpu += by_poster[static_cast<std::size_t>(records::Poster::gpu)];
    implied += n;
    completed += n;
    completed_bytes += sum;
    bytes += sum;
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

void Statistics::add(std::span<const Operation> ops) {
    std::size_t i = 0;
    while (i < ops.size()) {
        const Operation& op = ops[i];
        if (op.implied && op.outcome == OpOutcome::Completed) {
            // The unsignaled WRs a completion retired, of one opcode: together.
            std::size_t j = i + 1;
            while (j < ops.size() && ops[j].implied && ops[j].outcome == OpOutcome::Completed && ops[j].opcode == op.opcode) ++j;
            cells_[cell_key(op.qp, op.opcode)].add_implied(ops.subspan(i, j - i), last_size_);
            i = j;
            continue;
        }
        const OpAggregate::Bins bins = total_.bins_of(op, last_size_);  // every aggregate has the same binning
        cells_[cell_key(op.qp, op.opcode)].add(op, bins);
        ++i;
    }
}

void Statistics::merge(Statistics& other) {
    for (auto& [key, agg] : other.cells_.m) {
        agg.flush_sizes();
        cells_[key].merge(agg);
    }
    other.cells_ = {};
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
