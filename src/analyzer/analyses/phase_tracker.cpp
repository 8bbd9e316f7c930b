#include "analyzer/analyses/phase_tracker.h"

#include <algorithm>
#include <iterator>
#include <limits>

namespace sigmatrace::analyzer {

void PortTally::merge(const PortTally& o) {
    first_ns = std::min(first_ns, o.first_ns);
    last_ns = std::max(last_ns, o.last_ns);
    bytes += o.bytes;
}

void PhaseSegment::merge(PhaseSegment&& o) {
    start_ns = std::min(start_ns, o.start_ns);
    end_ns = std::max(end_ns, o.end_ns);
    ops += o.ops;
    for (auto& [key, t] : o.ports) {
        auto [it, inserted] = ports.try_emplace(key, t);
        if (!inserted) it->second.merge(t);
    }
}

void PhaseTracker::add_slow(const Operation& op, DataLink link, int64_t trace_start_ns) {
    if (!o_.enabled || op.is_recv() || !plausible_times(op)) return;
    if (o_.split == PhaseOptions::Split::Opcode && op.opcode == o_.opcode) {
        if (marks_.size() < kMaxMarks)
            marks_.push_back(op.post_ts);
        else
            marks_dropped_ = true;
    }
    if (!link.known() || !op.moved_data()) return;
    // An unconfirmed operation moved its data at some unknown time before its QP's teardown: its post stands
    // for the interval.
    const int64_t from = op.post_ts;
    const int64_t to = op.outcome == OpOutcome::Unconfirmed ? op.post_ts : op.done_ts;
    const auto bytes = static_cast<double>(op.bytes);
    if (o_.split != PhaseOptions::Split::Times || o_.times_ns.empty()) {
        insert(from, to, 0, link, bytes, true);
        return;
    }
    // Time split: the interval cut at the cut points, its bytes shared in proportion to the time.
    const auto slot_of = [&](int64_t ts) {
        return static_cast<uint32_t>(std::upper_bound(o_.times_ns.begin(), o_.times_ns.end(), ts - trace_start_ns) -
                                     o_.times_ns.begin());
    };
    const uint32_t s0 = slot_of(from), s1 = slot_of(to);
    if (s0 == s1) {
        insert(from, to, s0, link, bytes, true);
        return;
    }
    const double dur = static_cast<double>(to - from);
    for (uint32_t s = s0; s <= s1; ++s) {
        const int64_t lo = s == s0 ? from : trace_start_ns + o_.times_ns[s - 1];
        const int64_t hi = s == s1 ? to : trace_start_ns + o_.times_ns[s] - 1;
        if (hi < lo) continue;
        insert(lo, hi, s, link, bytes * static_cast<double>(hi - lo + (s == s1 ? 0 : 1)) / dur, s == s1);
    }
}

void PhaseTracker::insert(int64_t from, int64_t to, uint32_t slot, DataLink link, double bytes, bool count) {
    PhaseSegment* seg = nullptr;
    if (have_last_ && extends_last(from, to, slot)) {
        // The hot path: inside the current segment, or extending its end without reaching the next one.
        seg = &last_->second;
        seg->end_ns = std::max(seg->end_ns, to);
    } else {
        tx_ = rx_ = nullptr;
        last_ = absorb(PhaseSegment{from, to, slot, 0, {}});
        have_last_ = true;
        const auto next = std::next(last_);
        next_start_ = next == segments_.end() ? INT64_MAX : next->second.start_ns;
        seg = &last_->second;
    }
    if (count) ++seg->ops;
    if (tx_ == nullptr || tallies_link_ != link.key()) {
        tx_ = &seg->ports[port_key(link.src, false)];
        rx_ = &seg->ports[port_key(link.dst, true)];
        tallies_link_ = link.key();
    }
    tx_->add(bytes, from, to);
    rx_->add(bytes, from, to);
    if (segments_.size() > kMaxSegments) bound();
    refresh_fast();
}

void PhaseTracker::refresh_fast() {
    const bool valid = plain_split_ && have_last_ && tx_ != nullptr && last_->second.slot == 0;
    fast_lo_ = valid ? std::max<int64_t>(last_->first, 0) : INT64_MAX;
    fast_to_limit_ = valid ? std::min(std::max(last_->second.end_ns + 1, next_start_ - gap_), kMaxPlausibleTs) : 0;
}

std::map<int64_t, PhaseSegment>::iterator PhaseTracker::absorb(PhaseSegment merged) {
    // The segments it touches (same slot, within the gap) are merged into one.
    auto it = segments_.upper_bound(merged.end_ns + gap_);
    while (it != segments_.begin()) {
        auto prev = std::prev(it);
        if (prev->second.end_ns + gap_ < merged.start_ns || prev->second.slot != merged.slot) break;
        merged.merge(std::move(prev->second));
        it = segments_.erase(prev);
    }
    const int64_t start = merged.start_ns;
    return segments_.insert_or_assign(start, std::move(merged)).first;
}

void PhaseTracker::coalesce() {
    for (auto it = segments_.begin(); it != segments_.end();) {
        auto next = std::next(it);
        if (next == segments_.end()) break;
        if (next->second.slot == it->second.slot && it->second.end_ns + gap_ >= next->second.start_ns) {
            it->second.merge(std::move(next->second));
            segments_.erase(next);
        } else {
            it = next;
        }
    }
}

void PhaseTracker::bound() {
    have_last_ = false;
    tx_ = rx_ = nullptr;
    while (segments_.size() > kMaxSegments) {
        gap_ *= 2;
        coalesce();
    }
}

void PhaseTracker::merge(const PhaseTracker& other) {
    // Segments are the closure of the operations' intervals under the gap, whatever the order they came in: the
    // other share's segments join this one's as its operations would have, at the larger of the two gaps.
    have_last_ = false;
    tx_ = rx_ = nullptr;
    if (other.gap_ > gap_) {
        gap_ = other.gap_;
        coalesce();
    }
    for (const auto& [start, seg] : other.segments_) absorb(seg);
    if (segments_.size() > kMaxSegments) bound();
    for (int64_t m : other.marks_) {
        if (marks_.size() == kMaxMarks) {
            marks_dropped_ = true;
            break;
        }
        marks_.push_back(m);
    }
    marks_dropped_ = marks_dropped_ || other.marks_dropped_;
    refresh_fast();
}

std::vector<Phase> build_phases(const PhaseTracker& t, const std::vector<int64_t>& boundaries, const char* delimiter) {
    std::vector<Phase> out;
    const PhaseOptions::Split split = t.options().split;
    bool have_group = false;
    std::size_t group = 0;
    for (const auto& [start, seg] : t.segments()) {
        std::size_t g = 0;
        if (split == PhaseOptions::Split::Times)
            g = seg.slot;
        else if (!boundaries.empty())
            g = static_cast<std::size_t>(std::upper_bound(boundaries.begin(), boundaries.end(), seg.start_ns) - boundaries.begin());
        const bool by_segment = boundaries.empty() && split != PhaseOptions::Split::Times;
        if (by_segment || !have_group || g != group) {
            out.push_back(Phase{seg.start_ns, seg.end_ns, 0, delimiter, {}});
            group = g;
            have_group = true;
        }
        Phase& p = out.back();
        p.start_ns = std::min(p.start_ns, seg.start_ns);
        p.end_ns = std::max(p.end_ns, seg.end_ns);
        p.ops += seg.ops;
        for (const auto& [key, tally] : seg.ports) {
            auto [it, inserted] = p.ports.try_emplace(key, tally);
            if (!inserted) it->second.merge(tally);
        }
    }
    return out;
}

std::map<uint64_t, double> observed_peaks(const PhaseTracker& t) {
    std::map<uint64_t, double> peak;
    for (const auto& [start, seg] : t.segments())
        for (const auto& [key, tally] : seg.ports)
            if (tally.last_ns > tally.first_ns)
                peak[key] = std::max(peak[key], tally.bytes * 1e9 / static_cast<double>(tally.last_ns - tally.first_ns));
    return peak;
}

std::optional<Straggler> straggler_of(const Phase& p, bool rx, double share) {
    const int64_t duration = p.end_ns - p.start_ns;
    constexpr int64_t kNone = std::numeric_limits<int64_t>::min();
    uint64_t who = 0;
    int64_t latest = kNone, second = kNone;
    for (const auto& [key, tally] : p.ports) {
        if (port_rx(key) != rx) continue;
        if (tally.last_ns > latest) {
            second = latest;
            latest = tally.last_ns;
            who = key;
        } else {
            second = std::max(second, tally.last_ns);
        }
    }
    if (second == kNone || duration <= 0 || !(static_cast<double>(latest - second) > share * static_cast<double>(duration)))
        return std::nullopt;
    return Straggler{who, latest - second};
}

}  // namespace sigmatrace::analyzer
