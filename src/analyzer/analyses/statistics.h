// Statistics of reconstructed operations: count, bytes, outcome counts, latency and size distributions, per
// opcode, per QP, per peer pair (source process -> destination process) and per process.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "analyzer/analyses/model.h"
#include "analyzer/analyses/quantile_histogram.h"

namespace sigmatrace::analyzer {

class Topology;

struct OpAggregate {
    uint64_t count = 0;         // every operation, whatever its outcome
    uint64_t bytes = 0;         // bytes of operations that moved data (completed, or observed on a GPU ring)
    uint64_t posted_bytes = 0;  // bytes of every operation (receives: what arrived, or the buffer posted)
    uint64_t completed_bytes = 0;
    uint64_t in_flight_bytes = 0;
    uint64_t unconfirmed_bytes = 0;
    uint64_t completed = 0;
    uint64_t failed = 0;
    uint64_t flushed = 0;
    uint64_t flushed_at_teardown = 0;   // flushes after the owner's own teardown: not errors
    uint64_t in_flight = 0;
    uint64_t unconfirmed = 0;   // no completion, QP torn down by its owner (model.h OpOutcome::Unconfirmed)
    uint64_t observed = 0;      // GPU WQEs without a visible CQE
    uint64_t lost = 0;
    uint64_t implied = 0;       // unsignaled WRs completed by a later signaled completion
    uint64_t gpu = 0;           // GPU-posted (decoded from a watched ring)
    uint64_t cpu_direct = 0;    // CPU-direct: WQEs a CPU thread wrote into a watched ring itself (UCX rc_mlx5 ...)
    uint64_t verbs_posted = 0;  // through the verbs API (receives included)
    int64_t first_ts = 0;
    int64_t last_ts = 0;
    // Successful sends (and GPU WQEs) whose own completion was seen: post -> completion.
    QuantileHistogram latency_ns;
    // Unsignaled sends retired by a later signaled completion: post -> that completion (an upper bound).
    QuantileHistogram implied_latency_ns;
    // Successful receives: post -> completion, the time the receive sat posted (mostly waiting for a sender).
    QuantileHistogram time_posted_ns;
    QuantileHistogram size_bytes{1.0, 1e10, 20};

    // An operation's latency and size in this binning, found once for all the aggregates it is added to.
    // `latency` is the post -> completion time in whichever of the three time histograms the operation goes to.
    struct Bins {
        QuantileHistogram::Binned latency;
        QuantileHistogram::Binned size;
    };
    // `last_size`: the bin of the size the previous operation had (value -1: none yet), reused when the size
    // repeats, as a benchmark's does: the same bin the logarithm would give, without it.
    Bins bins_of(const Operation& op, QuantileHistogram::Binned& last_size) const;

    // add() keeps a run of equal sizes out of size_bytes until the size changes (most traffic repeats its
    // size): flush_sizes() adds it, and must come before size_bytes is read or the aggregate merged
    // (Statistics::finish does it for every aggregate it built).
    void add(const Operation& op, const Bins& bins);
    // Unsignaled sends that one completion retired (implied successes, op_reconstruction.h): the same as add()
    // for each, the counts and sums taken once. `last_size` as for bins_of().
    void add_implied(std::span<const Operation> ops, QuantileHistogram::Binned& last_size);
    void flush_sizes();
    void merge(const OpAggregate& other);
    // share_codec.cpp: a share's aggregate, its size run flushed first (Statistics::serialize()).
    template <class Archive> void serialize(Archive& ar) {
        ar(count, bytes, posted_bytes, completed_bytes, in_flight_bytes, unconfirmed_bytes, completed, failed, flushed,
           flushed_at_teardown, in_flight, unconfirmed, observed, lost, implied, gpu, cpu_direct, verbs_posted,
           first_ts, last_ts, latency_ns, implied_latency_ns, time_posted_ns, size_bytes);
    }
    uint64_t errors() const { return failed + flushed; }

private:
    // A size joins the run of equal sizes, or ends it and starts the next.
    void note_size(const QuantileHistogram::Binned& size, uint64_t n = 1) {
        if (size_run_count_ != 0 && size.value == size_run_.value) {
            size_run_count_ += n;
        } else {
            flush_sizes();
            size_run_ = size;
            size_run_count_ = n;
        }
    }

    QuantileHistogram::Binned size_run_{-1.0, 0};
    uint64_t size_run_count_ = 0;
};

// Aggregates of every operation by opcode, QP, process and process pair, and in total. Streaming adds only
// what cannot be derived later (per QP and opcode); finish() merges the rest: an opcode from its QPs' cells, a
// QP's sends and receives from its cells, the total from the opcodes, a process from its QPs (an operation's QP
// always belongs to the operation's process), a pair from its initiator's QPs. Histogram merges are exact and
// every value is an integer (sums of doubles below 2^53 do not depend on order), so the result is the same as
// adding each operation to all five aggregates, at a fifth of the per-operation cost.
class Statistics {
public:
    void add(const Operation& op) { add(std::span<const Operation>(&op, 1)); }
    void add(std::span<const Operation> ops);
    // Adds what `other` gathered from another share of the trace's operations (analysis.h, merge_share), over
    // the same topology's ids; `other` is left empty. Before finish(). Every merge is exact (see the class
    // comment), so the result does not depend on how the operations were shared out.
    void merge(Statistics& other);
    // A share in bytes (share_codec.cpp): what merge() takes, its cells (their size runs flushed first).
    template <class Archive> void serialize(Archive& ar) {
        if constexpr (Archive::is_saving::value)
            for (auto& [key, agg] : cells_.m) agg.flush_sizes();
        ar(cells_.m);
        cells_.last_agg = nullptr;
    }
    // Builds the total, the per-QP table and the per-pair table (once peers are resolved). Call once, at the end.
    void finish(Topology& topo);

    const OpAggregate& total() const { return total_; }
    // Opcode code (ibv_wr_opcode, kOpRecv, kOpRecvRdmaWithImm) -> aggregate, for the opcodes seen.
    const std::map<uint8_t, OpAggregate>& by_opcode() const { return by_opcode_; }
    const std::map<QpId, OpAggregate>& by_qp() const { return by_qp_; }
    const std::map<std::pair<ProcId, ProcId>, OpAggregate>& by_pair() const { return by_pair_; }
    const std::map<ProcId, OpAggregate>& by_process() const { return by_process_; }

private:
    // The aggregate of `key` in `m`, through a one-entry cache: consecutive operations usually share it.
    template <typename Key> struct Cached {
        std::map<Key, OpAggregate> m;
        Key last{};
        OpAggregate* last_agg = nullptr;
        OpAggregate& operator[](const Key& k) {
            if (last_agg == nullptr || k != last) {
                last = k;
                last_agg = &m[k];
            }
            return *last_agg;
        }
    };

    OpAggregate total_;
    std::map<uint8_t, OpAggregate> by_opcode_;
    std::map<QpId, OpAggregate> by_qp_;
    std::map<std::pair<ProcId, ProcId>, OpAggregate> by_pair_;
    std::map<ProcId, OpAggregate> by_process_;
    // Each operation goes to one aggregate, of its QP and opcode (cell_key()): finish() derives the opcodes'
    // aggregates and the QPs' (their sends, folded into by_pair_ too, and their receives) from these.
    static uint64_t cell_key(QpId q, uint8_t opcode) { return static_cast<uint64_t>(q) << 8 | opcode; }
    Cached<uint64_t> cells_;
    QuantileHistogram::Binned last_size_{-1.0, 0};
};

}  // namespace sigmatrace::analyzer
