#include "analyzer/analyses/time_windows.h"

#include <algorithm>

namespace sigmatrace::analyzer {

QuantileHistogram window_latency_histogram() { return QuantileHistogram(1.0, 1e13, 20); }

void Window::merge(Window&& other) {
    for (auto& [key, c] : other.links) {
        auto [it, inserted] = links.try_emplace(key, std::move(c));
        if (inserted) continue;
        WindowLinkCell& mine = it->second;
        mine.bytes += c.bytes;
        mine.ops += c.ops;
        mine.busy_ns += c.busy_ns;
        mine.latency.merge(c.latency);
    }
    for (auto& [opcode, h] : other.latency_by_opcode) {
        auto [it, inserted] = latency_by_opcode.try_emplace(opcode, std::move(h));
        if (!inserted) it->second.merge(h);
    }
}

TimeWindows::TimeWindows(WindowOptions o)
    : o_(o),
      bound_(o.window_ns > 0 ? kMaxFixedWindows : std::max<uint32_t>(o.max_windows, 2)),
      width_(o.window_ns > 0 ? o.window_ns : kStartWidthNs) {}

void TimeWindows::cover(int64_t lo_ts, int64_t hi_ts) {
    for (;;) {
        const int64_t lo = lo_ts / width_, hi = hi_ts / width_;
        if (windows_.empty()) {
            if (hi - lo + 1 > bound_) {
                double_width();
                continue;
            }
            base_ = lo;
            windows_.resize(static_cast<std::size_t>(hi - lo + 1));
            return;
        }
        const int64_t last = base_ + static_cast<int64_t>(windows_.size()) - 1;
        const int64_t new_lo = std::min(lo, base_), new_hi = std::max(hi, last);
        if (new_hi - new_lo + 1 > bound_) {
            double_width();
            continue;
        }
        for (; base_ > new_lo; --base_) windows_.emplace_front();
        if (new_hi > last) windows_.resize(static_cast<std::size_t>(new_hi - base_ + 1));
        return;
    }
}

void TimeWindows::double_width() {
    if (!windows_.empty()) {
        // Pairs start at even indexes, so that the merged windows start at multiples of the doubled length.
        if (base_ % 2 != 0) {
            windows_.emplace_front();
            --base_;
        }
        if (windows_.size() % 2 != 0) windows_.emplace_back();
        std::deque<Window> merged;
        for (std::size_t i = 0; i < windows_.size(); i += 2) {
            merged.push_back(std::move(windows_[i]));
            merged.back().merge(std::move(windows_[i + 1]));
        }
        windows_ = std::move(merged);
        base_ /= 2;
    }
    width_ *= 2;
}

template <class Put>
void TimeWindows::spread(int64_t from, int64_t to, Put&& put) {
    const double dur = static_cast<double>(to - from);
    for (int64_t w = from / width_; w * width_ < to; ++w) {
        const int64_t lo = std::max(from, w * width_), hi = std::min(to, (w + 1) * width_);
        if (hi > lo) put(windows_[static_cast<std::size_t>(w - base_)], static_cast<double>(hi - lo) / dur, hi - lo);
    }
}

void TimeWindows::add(const Operation& op, DataLink link) {
    if (!o_.enabled || op.is_recv() || !plausible_times(op)) return;
    const bool traffic = link.known() && op.moved_data();
    const bool latency = op.observed_completion();
    if (!traffic && !latency) return;
    cover(op.post_ts, op.done_ts);
    // An unconfirmed operation moved its data at some unknown time before its QP's teardown: no interval.
    const bool interval = op.outcome != OpOutcome::Unconfirmed && op.done_ts > op.post_ts;
    WindowLinkCell* done_cell = nullptr;
    if (traffic) {
        const uint64_t key = link.key();
        done_cell = &at(interval ? op.done_ts : op.post_ts).links[key];
        ++done_cell->ops;
        const auto bytes = static_cast<double>(op.bytes);
        if (!interval) {
            done_cell->bytes += bytes;
        } else {
            spread(op.post_ts, op.done_ts, [&](Window& w, double share, int64_t) { w.links[key].bytes += bytes * share; });
            int64_t& covered = covered_until_[key];
            const int64_t from = std::max(op.post_ts, covered);
            if (op.done_ts > from) {
                spread(from, op.done_ts, [&](Window& w, double, int64_t ns) { w.links[key].busy_ns += ns; });
                covered = op.done_ts;
            }
        }
    }
    if (latency) {
        const QuantileHistogram::Binned b = binner_.bin(static_cast<double>(op.done_ts - op.post_ts));
        Window& w = at(op.done_ts);
        auto it = w.latency_by_opcode.find(op.opcode);
        if (it == w.latency_by_opcode.end()) it = w.latency_by_opcode.emplace(op.opcode, window_latency_histogram()).first;
        it->second.add(b);
        if (done_cell != nullptr) done_cell->latency.add(b);
    }
}

}  // namespace sigmatrace::analyzer
