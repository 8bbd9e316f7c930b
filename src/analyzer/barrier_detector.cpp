#include "analyzer/barrier_detector.h"

#include <sigmatrace/opcodes.h>

#include <algorithm>

namespace sigmatrace::analyzer {

bool BarrierDetector::is_signal(const Operation& op) const {
    if (op.is_recv() || op.outcome == OpOutcome::Failed || op.outcome == OpOutcome::Flushed ||
        op.outcome == OpOutcome::Lost)
        return false;
    const auto code = static_cast<WrOpcode>(op.opcode);
    const bool atomic = code == WrOpcode::ATOMIC_CMP_AND_SWP || code == WrOpcode::ATOMIC_FETCH_AND_ADD ||
                        code == WrOpcode::ATOMIC_WRITE;
    const bool small_write = (code == WrOpcode::RDMA_WRITE || code == WrOpcode::RDMA_WRITE_WITH_IMM) &&
                             op.bytes <= options_.max_signal_bytes;
    if (!atomic && !small_write) return false;
    if (options_.word) {
        if (op.raddr != options_.word->raddr) return false;
        if (options_.word->rkey && op.rkey != *options_.word->rkey) return false;
    }
    return true;
}

void BarrierDetector::add(const Operation& op, const Qp& qp) {
    if (!is_signal(op) || op.ud_ah != 0) return;
    const bool addressed = !qp.dgid.empty() || qp.dlid != 0;
    const Key key{qp.dgid, qp.dgid.empty() ? qp.dlid : 0, addressed ? kNoId : op.qp, op.rkey, op.raddr};
    auto it = words_.find(key);
    if (it == words_.end()) {
        if (words_.size() >= kMaxWords) {
            ++dropped_;
            return;
        }
        auto w = std::make_unique<Word>();
        w->via = op.qp;
        w->rkey = op.rkey;
        w->raddr = op.raddr;
        it = words_.emplace(key, std::move(w)).first;
    }
    Word& w = *it->second;

    auto [sig, inserted] = w.signals.try_emplace(op.proc, 0);
    if (inserted) {
        // A participant appearing after epochs were closed without it: not the barrier pattern.
        if (w.closed_any) w.irregular = true;
        w.min_signals = 0;
        ++w.at_count[0];
    }
    const uint32_t k = sig->second++;
    if (--w.at_count[k] == 0) w.at_count.erase(k);
    ++w.at_count[k + 1];

    OpenEpoch& e = w.open[k];
    if (e.count == 0 || op.post_ts < e.first) {
        e.first = op.post_ts;
        e.first_proc = op.proc;
    }
    if (e.count == 0 || op.post_ts >= e.last) {
        e.last = op.post_ts;
        e.last_proc = op.proc;
    }
    ++e.count;

    // Every participant has signalled epochs below the smallest signal count: those epochs are final, once the
    // busiest participant is kCloseLag rounds further. The lag absorbs operations reconstructed out of order
    // (a slow poller's epoch-k signal can be read after others' epoch k+1), and participants that show up
    // for the first time while others are still within the lag.
    w.min_signals = w.at_count.begin()->first;
    const uint32_t max_signals = w.at_count.rbegin()->first;
    while (!w.open.empty() &&
           ((w.open.begin()->first < w.min_signals && w.open.begin()->first + kCloseLag < max_signals) ||
            w.open.size() > kMaxOpenEpochs)) {
        close_epoch(w, w.open.begin()->second);
        w.open.erase(w.open.begin());
    }
}

void BarrierDetector::close_epoch(Word& w, const OpenEpoch& e) {
    w.closed_any = true;
    if (e.count != w.signals.size() || w.signals.size() < 2) {
        ++w.result.incomplete;
        return;
    }
    ++w.result.epochs;
    const int64_t spread = e.last - e.first;
    w.result.spread_ns.add(static_cast<double>(spread));
    ++w.result.times_last[e.last_proc];
    if (w.result.samples.size() < kMaxSamples) w.result.samples.push_back({e.first, spread, e.last_proc, e.first_proc});
}

BarrierResult BarrierDetector::finish(Topology& topo) {
    BarrierResult r;
    r.candidate_words = words_.size();
    r.dropped_candidates = dropped_;
    for (auto& [key, wp] : words_) {
        Word& w = *wp;
        for (auto& [k, e] : w.open) close_epoch(w, e);
        w.open.clear();
        const uint64_t seen = w.result.epochs + w.result.incomplete;
        bool barrier;
        if (options_.word)
            barrier = w.result.epochs >= 1;
        else
            barrier = w.signals.size() >= 2 && w.result.epochs >= 2 && !w.irregular &&
                      w.result.epochs * 10 >= seen * 9;  // at most 10% incomplete (a trace cut mid-round)
        if (!barrier) continue;
        w.result.target = topo.resolve_peer(w.via);
        w.result.rkey = w.rkey;
        w.result.raddr = w.raddr;
        for (const auto& [p, n] : w.signals) w.result.participants.push_back(p);
        std::sort(w.result.participants.begin(), w.result.participants.end());
        r.words.push_back(std::move(w.result));
    }
    // Deterministic order (reports are diffed in tests): busiest word first, then by address.
    std::sort(r.words.begin(), r.words.end(), [](const BarrierWord& a, const BarrierWord& b) {
        if (a.epochs != b.epochs) return a.epochs > b.epochs;
        if (a.raddr != b.raddr) return a.raddr < b.raddr;
        return a.rkey < b.rkey;
    });
    words_.clear();
    return r;
}

}  // namespace sigmatrace::analyzer
