#include "analyzer/analyses/incast_detector.h"

#include <algorithm>

#include "analyzer/analyses/topology.h"

namespace sigmatrace::analyzer {

IncastDetector::IncastDetector(IncastOptions o, const Topology& topo)
    : o_(o), topo_(topo) {
    o_.window_ns = std::max<int64_t>(o_.window_ns, 1000);
}

void IncastDetector::add(const Operation& op, DataLink link) {
    // An unconfirmed operation moved its data at some unknown time before its QP's teardown: no interval to spread.
    if (!link.known() || !op.moved_data() || op.outcome == OpOutcome::Unconfirmed || op.bytes < o_.min_bytes ||
        !plausible_times(op))
        return;
    if (topo_.device(link.src).node == topo_.device(link.dst).node) return;   // inter-node links only
    if (keep_fans_ && link.src != last_sender_) {
        senders_.insert(link.src);
        last_sender_ = link.src;
    }
    const int64_t W = o_.window_ns;
    const int64_t w0 = floor_div(op.post_ts, W);
    const int64_t w1 = floor_div(op.done_ts, W);
    if (!started_) {
        base_ = std::min(w0, w1 - kSlackWindows);   // operations completing later may have been posted earlier
        started_ = true;
    }
    // Completions come in time order: windows far enough behind this one are final.
    close_windows_before(w1 - kSlackWindows);
    const auto bytes = static_cast<double>(op.bytes);
    if (w1 < base_) {
        // A WQE without a visible completion (Observed) has no time in flight to cut: it comes when its queue is
        // drained (ring wrap, teardown), possibly long after its windows closed, and is left out, not clipped.
        if (op.outcome != OpOutcome::Observed) clipped_ += bytes;
        return;
    }
    while (base_ + static_cast<int64_t>(windows_.size()) <= w1) windows_.emplace_back();
    const int64_t dur = op.done_ts - op.post_ts;
    if (dur <= 0) {
        cell(std::max(w0, base_), link.key()) += bytes;
        return;
    }
    const int64_t from = std::max(op.post_ts, base_ * W);
    if (from > op.post_ts) clipped_ += bytes * static_cast<double>(from - op.post_ts) / static_cast<double>(dur);
    for (int64_t w = std::max(w0, base_); w <= w1; ++w) {
        const int64_t lo = std::max(from, w * W), hi = std::min(op.done_ts, (w + 1) * W);
        if (hi <= lo) continue;
        cell(w, link.key()) += bytes * static_cast<double>(hi - lo) / static_cast<double>(dur);
    }
}

void IncastDetector::close_windows_before(int64_t index) {
    if (started_ && base_ < index) cell_ = nullptr;
    while (started_ && base_ < index) {
        if (windows_.empty()) {
            base_ = index;
            break;
        }
        evaluate(base_, windows_.front());
        windows_.pop_front();
        ++base_;
    }
}

void IncastDetector::evaluate(int64_t index, const Cells& cells) {
    std::map<DevId, double> sent;
    for (const auto& [key, b] : cells) sent[static_cast<DevId>(key >> 32)] += b;
    Fans fans;
    for (const auto& [key, b] : cells) {
        const auto s = static_cast<DevId>(key >> 32), r = static_cast<DevId>(key & 0xffffffffu);
        if (b > 0.0 && b >= o_.share * sent[s]) {
            Fan& f = fans[r];
            ++f.degree;
            f.bytes += b;
            f.senders.push_back(s);
        }
    }
    if (keep_fans_) {
        if (!fans.empty()) fans_.emplace(index, std::move(fans));
        return;
    }
    add_fans(index, fans);
}

void IncastDetector::add_fans(int64_t index, const Fans& fans) {
    for (const auto& [r, f] : fans) {
        if (f.degree < o_.min_senders) continue;
        auto it = open_.find(r);
        if (it != open_.end() && index > it->second.last + 2) {
            end_run(r, it->second);
            open_.erase(it);
            it = open_.end();
        }
        if (it == open_.end()) it = open_.emplace(r, Run{index, index, 0, 0, 0, {}, 0.0}).first;
        Run& run = it->second;
        run.last = index;
        run.max_degree = std::max(run.max_degree, f.degree);
        run.degree_sum += f.degree;
        ++run.windows;
        run.senders.insert(f.senders.begin(), f.senders.end());
        run.bytes += f.bytes;
    }
    for (auto it = open_.begin(); it != open_.end();) {
        if (it->second.last + 2 <= index) {
            end_run(it->first, it->second);
            it = open_.erase(it);
        } else {
            ++it;
        }
    }
}

void IncastDetector::end_run(DevId receiver, const Run& run) { record_run(receivers_, receiver, run); }

void IncastDetector::record_run(std::map<DevId, IncastReceiver>& receivers, DevId receiver, const Run& run) const {
    const int64_t W = o_.window_ns;
    const int64_t dur = (run.last - run.first + 1) * W;
    if (dur < o_.min_duration_ns) return;
    IncastReceiver& rcv = receivers[receiver];
    rcv.receiver = receiver;
    ++rcv.episodes;
    rcv.total_ns += dur;
    rcv.max_degree = std::max(rcv.max_degree, run.max_degree);
    IncastEpisode ep;
    ep.receiver = receiver;
    ep.start_ns = run.first * W;
    ep.end_ns = (run.last + 1) * W;
    ep.max_degree = run.max_degree;
    ep.mean_degree = run.windows ? static_cast<double>(run.degree_sum) / run.windows : 0.0;
    ep.windows = run.windows;
    ep.senders = run.senders;
    ep.bytes = run.bytes;
    rcv.kept.push_back(std::move(ep));
    if (rcv.kept.size() > kMaxEpisodesPerReceiver) {   // keep the longest
        auto shortest = std::min_element(rcv.kept.begin(), rcv.kept.end(), [](const auto& a, const auto& b) {
            return a.end_ns - a.start_ns < b.end_ns - b.start_ns;
        });
        rcv.kept.erase(shortest);
    }
}

IncastResult IncastDetector::evaluate() const {
    std::map<DevId, IncastReceiver> receivers = receivers_;
    for (const auto& [r, run] : open_) record_run(receivers, r, run);
    IncastResult out;
    out.clipped_bytes = clipped_;
    for (auto& [r, rcv] : receivers) {
        std::sort(rcv.kept.begin(), rcv.kept.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
        out.receivers.push_back(std::move(rcv));
    }
    return out;
}

bool IncastDetector::can_merge(const IncastDetector& other) const {
    for (DevId s : other.senders_)
        if (senders_.count(s) != 0) return false;
    return true;
}

void IncastDetector::merge(IncastDetector& other) {
    close_windows_before(base_ + static_cast<int64_t>(windows_.size()));
    other.close_windows_before(other.base_ + static_cast<int64_t>(other.windows_.size()));
    for (auto& [index, fans] : other.fans_) {
        Fans& mine = fans_[index];
        for (auto& [r, f] : fans) {
            Fan& m = mine[r];
            m.degree += f.degree;
            m.bytes += f.bytes;
            m.senders.insert(m.senders.end(), f.senders.begin(), f.senders.end());
        }
    }
    other.fans_.clear();
    senders_.insert(other.senders_.begin(), other.senders_.end());
    clipped_ += other.clipped_;
}

IncastResult IncastDetector::finish() {
    close_windows_before(base_ + static_cast<int64_t>(windows_.size()));
    // Runs are made window after window; windows without a fan end nothing that the next fan would not.
    for (const auto& [index, fans] : fans_) add_fans(index, fans);
    fans_.clear();
    for (const auto& [r, run] : open_) end_run(r, run);
    open_.clear();
    IncastResult out;
    out.clipped_bytes = clipped_;
    for (auto& [r, rcv] : receivers_) {
        std::sort(rcv.kept.begin(), rcv.kept.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
        out.receivers.push_back(std::move(rcv));
    }
    receivers_.clear();
    return out;
}

}  // namespace sigmatrace::analyzer
