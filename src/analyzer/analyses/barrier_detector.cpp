#include "analyzer/analyses/barrier_detector.h"

#include <sigmatrace/opcodes.h>

#include <algorithm>
#include <functional>
#include <queue>

namespace sigmatrace::analyzer {

void BarrierDetector::SignalCounts::add_new() {
    if (by_count.empty() || by_count.front().first != 0) by_count.insert(by_count.begin(), {0, 0});
    ++by_count.front().second;
}

void BarrierDetector::SignalCounts::move(uint32_t from, uint32_t to) {
    auto at = [&](uint32_t c) {
        return std::lower_bound(by_count.begin(), by_count.end(), c, [](const auto& e, uint32_t v) { return e.first < v; });
    };
    auto it = at(from);  // present: the participant has `from` signals
    if (--it->second == 0) it = by_count.erase(it);
    if (it == by_count.end() || it->first != to) it = by_count.insert(at(to), {to, 0});
    ++it->second;
}

BarrierDetector::OpenEpoch& BarrierDetector::OpenEpochs::at(uint32_t k) {
    if (epochs.empty()) {
        base = k;
        epochs.emplace_back();
    } else if (k < base) {
        epochs.insert(epochs.begin(), base - k, OpenEpoch{});
        base = k;
    } else if (k - base >= epochs.size()) {
        epochs.resize(static_cast<std::size_t>(k - base) + 1);
    }
    return epochs[k - base];
}

BarrierDetector::OpenEpoch& BarrierDetector::OpenEpochs::lowest() {
    while (epochs.front().count == 0) {
        epochs.pop_front();
        ++base;
    }
    return epochs.front();
}

void BarrierDetector::OpenEpochs::pop_lowest() {
    epochs.pop_front();
    ++base;
    --size;
}

namespace {
// KeyHash combines the fields by XOR; the index needs its high bits spread (64-byte strided addresses differ
// only above bit 5).
uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}
}  // namespace

BarrierDetector::Word* BarrierDetector::find_word(const Key& key, uint64_t hash) const {
    const std::size_t mask = index_.size() - 1;
    for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
        const Slot& s = index_[i];
        if (s.word == nullptr) return nullptr;
        if (s.hash == hash && s.word->key == key) return s.word;
    }
}

uint32_t BarrierDetector::new_target_id(QpId q, const Target& t) {
    const auto [it, inserted] = target_ids_.try_emplace(t, static_cast<uint32_t>(targets_.size()));
    if (inserted) targets_.push_back(t);
    if (q != kNoId) {
        if (q >= target_of_qp_.size()) target_of_qp_.resize(static_cast<std::size_t>(q) + 1, kNoTarget);
        target_of_qp_[q] = it->second;
    }
    return it->second;
}

void BarrierDetector::add(std::span<const Operation> ops, const Qp& qp, const SendRun* run) {
    if (ops.empty()) return;
    // A run of one opcode, all completed, none larger than a signal: every operation is a signal, or none is.
    bool all_signals = false;
    if (run != nullptr && run->max_bytes <= options_.max_signal_bytes && !options_.word) {
        if (!is_signal(ops.front())) return;
        all_signals = true;
    }
    const bool addressed = !qp.dgid.empty() || qp.dlid != 0;
    // The run is one QP's: only rkey and raddr differ between its operations' keys.
    const Target t{qp.dgid, qp.dgid.empty() ? qp.dlid : 0, addressed ? kNoId : ops.front().qp};
    const uint32_t target = target_id(ops.front().qp, t);
    for (const Operation& op : ops) {
        if (!(all_signals || is_signal(op)) || op.ud_ah != 0) continue;
        // Most small writes of a bandwidth run go to words that can no longer be barriers: answered here, the
        // rest in add_signal() (a detector that logs fills no slot).
        const std::size_t slot = recent_slot(op.raddr, op.rkey, target);
        const Recent& r = recent_[slot];
        if (r.raddr == op.raddr && r.rkey == op.rkey && r.target == (target | kDead)) continue;
        const Key key{t, op.rkey, op.raddr};
        if (log_) [[unlikely]]
            log_signal(op, key);
        else
            add_signal(op, key, target, slot);
    }
}

void BarrierDetector::add_signal(const Operation& op, const Key& key, uint32_t target, std::size_t slot) {
    Recent& r = recent_[slot];
    Word*& word = recent_word_[slot];
    if (word == nullptr || (r.target & ~kDead) != target || r.raddr != key.raddr || r.rkey != key.rkey) {
        const uint64_t hash = mix(KeyHash{}(key));
        Word* found = find_word(key, hash);
        if (found == nullptr) {
            if (words_.size() >= kMaxWords) {
                ++dropped_;
                return;
            }
            auto w = std::make_unique<Word>();
            w->key = key;
            w->via = op.qp;
            w->rkey = op.rkey;
            w->raddr = op.raddr;
            found = w.get();
            words_.emplace(key, std::move(w));
            const std::size_t mask = index_.size() - 1;
            std::size_t i = hash & mask;
            while (index_[i].word != nullptr) i = (i + 1) & mask;
            index_[i] = Slot{hash, found};
        }
        r = Recent{key.raddr, key.rkey, target};
        word = found;
    }
    Word& w = *word;
    if (w.dead) {
        r.target = target | kDead;
        return;
    }

    auto [sig, inserted] = w.signals.try_emplace(op.proc, 0);
    if (inserted) {
        // A participant appearing after epochs were closed without it: not the barrier pattern.
        if (w.closed_any) w.irregular = true;
        w.min_signals = 0;
        w.counts.add_new();
    }
    const uint32_t k = sig->second++;
    w.counts.move(k, k + 1);

    OpenEpoch& e = w.open.at(k);
    if (e.count == 0) ++w.open.size;
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
    w.min_signals = w.counts.min();
    const uint32_t max_signals = w.counts.max();
    while (w.open.size > 0) {
        const OpenEpoch& low = w.open.lowest();
        const uint32_t low_k = w.open.base;
        if (!((low_k < w.min_signals && low_k + kCloseLag < max_signals) || w.open.size > kMaxOpenEpochs)) break;
        close_epoch(w, low);
        w.open.pop_lowest();
    }
    bury_if_dead(w);
    if (w.dead) r.target = target | kDead;
}

void BarrierDetector::bury_if_dead(Word& w) const {
    if (options_.word || !(w.irregular || (w.closed_any && w.signals.size() == 1))) return;
    w.dead = true;
    // What finish() would have read of it: never a barrier. Its memory goes now.
    w.signals = {};
    w.counts = {};
    w.open = {};
    w.result = BarrierWord();
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

void BarrierDetector::log_signal(const Operation& op, const Key& key) {
    if (log_full_) return;
    if (last_log_ == nullptr || !(*last_log_key_ == key)) {
        auto it = logs_.find(key);
        if (it == logs_.end()) {
            if (logs_.size() >= kMaxWords) {
                ++dropped_;
                return;
            }
            it = logs_.emplace(key, WordLog{op.qp, op.rkey, op.raddr, {}}).first;
        }
        last_log_key_ = &it->first;
        last_log_ = &it->second;
    }
    WordLog& w = *last_log_;
    ParticipantLog& p = w.by_proc[op.proc];
    if (p.cut) return;
    if (logged_ == kMaxLogged) {
        log_full_ = true;
        return;
    }
    p.signals.push_back({std::max(op.done_ts, op.post_ts), op.post_ts});
    ++logged_;
    if (p.signals.size() > kLogCap && w.by_proc.size() == 1 && !options_.word) {
        // A word one participant has signalled this often alone here: a buffer a bandwidth run writes, most
        // likely. One detector buries it at its (kCloseLag + 1)-th signal unless another participant came first.
        logged_ -= p.signals.size() - (kCloseLag + 1);
        p.signals.resize(kCloseLag + 1);
        p.signals.shrink_to_fit();
        p.cut = true;
    }
}

bool BarrierDetector::decided(const WordLog& a, const WordLog* b) {
    const auto check = [&](const ParticipantLog& cut, ProcId who) {
        const int64_t buried = cut.signals[kCloseLag].arrival;
        for (const WordLog* w : {&a, b}) {
            if (w == nullptr) continue;
            for (const auto& [p, log] : w->by_proc)
                if (p != who && !log.signals.empty() && log.signals.front().arrival <= buried) return false;
        }
        return true;
    };
    for (const WordLog* w : {&a, b}) {
        if (w == nullptr) continue;
        for (const auto& [p, log] : w->by_proc)
            if (log.cut && !check(log, p)) return false;
    }
    return true;
}

bool BarrierDetector::can_merge(const BarrierDetector& other) const {
    if (log_full_ || other.log_full_ || dropped_ != 0 || other.dropped_ != 0) return false;
    std::size_t words = logs_.size();
    for (const auto& [key, w] : other.logs_) {
        const auto it = logs_.find(key);
        if (it == logs_.end()) {
            ++words;
            if (!decided(w, nullptr)) return false;
        } else if (!decided(it->second, &w)) {
            return false;
        }
    }
    if (words > kMaxWords) return false;
    for (const auto& [key, w] : logs_)
        if (!other.logs_.contains(key) && !decided(w, nullptr)) return false;
    return true;
}

void BarrierDetector::merge(BarrierDetector& other) {
    for (auto& [key, w] : other.logs_) {
        auto [it, fresh] = logs_.try_emplace(key, std::move(w));
        if (fresh) continue;
        for (auto& [p, log] : w.by_proc) it->second.by_proc.emplace(p, std::move(log));   // a process is in one share
    }
    other.logs_.clear();
    logged_ += other.logged_;
    last_log_ = nullptr;
}

void BarrierDetector::replay() {
    // Each word's participants' signals in arrival order (each participant's own order kept; equal times in
    // process order), through the detector, word by word: words do not interact (logs past kMaxWords words are
    // not merged).
    using Head = std::pair<int64_t, std::size_t>;   // (arrival of its next signal, participant)
    std::vector<const ParticipantLog*> logs;
    std::vector<ProcId> procs;
    std::vector<std::size_t> next;
    for (auto& [key, w] : logs_) {
        logs.clear();
        procs.clear();
        std::priority_queue<Head, std::vector<Head>, std::greater<>> heads;
        for (const auto& [p, log] : w.by_proc) {
            if (log.signals.empty()) continue;
            heads.emplace(log.signals.front().arrival, logs.size());
            logs.push_back(&log);
            procs.push_back(p);
        }
        next.assign(logs.size(), 0);
        Operation op;
        op.qp = w.via;
        op.rkey = w.rkey;
        op.raddr = w.raddr;
        const uint32_t target = target_id(kNoId, key.target);
        const std::size_t slot = recent_slot(key.raddr, key.rkey, target);
        while (!heads.empty()) {
            const std::size_t i = heads.top().second;
            heads.pop();
            op.proc = procs[i];
            op.post_ts = logs[i]->signals[next[i]++].post;
            add_signal(op, key, target, slot);
            if (next[i] < logs[i]->signals.size()) heads.emplace(logs[i]->signals[next[i]].arrival, i);
        }
    }
    logs_.clear();
    last_log_ = nullptr;
}

BarrierResult BarrierDetector::finish(Topology& topo) {
    if (log_) replay();
    BarrierResult r;
    r.candidate_words = words_.size();
    r.dropped_candidates = dropped_;
    for (auto& [key, wp] : words_) {
        Word& w = *wp;
        if (w.dead) continue;
        for (const OpenEpoch& e : w.open.epochs)
            if (e.count > 0) close_epoch(w, e);
        w.open = {};
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
    index_.assign(index_.size(), Slot{});
    recent_.fill(Recent{});
    recent_word_.fill(nullptr);
    return r;
}

}  // namespace sigmatrace::analyzer
