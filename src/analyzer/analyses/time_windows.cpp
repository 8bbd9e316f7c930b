#include "analyzer/analyses/time_windows.h"

#include <algorithm>
#include <bit>

namespace sigmatrace::analyzer {

void WindowQpCell::merge(const WindowQpCell& o) {
    max_wrs = std::max(max_wrs, o.max_wrs);
    max_bytes = std::max(max_bytes, o.max_bytes);
    bytes.merge(o.bytes);
    wrs_ns += o.wrs_ns;
    bytes_ns += o.bytes_ns;
    recv_max_posted = std::max(recv_max_posted, o.recv_max_posted);
    recv_min_posted = std::min(recv_min_posted, o.recv_min_posted);
    rnr_events += o.rnr_events;
}

void Window::merge(Window&& other) {
    for (auto& [q, c] : other.qps) {
        auto [it, inserted] = qps.try_emplace(q, std::move(c));
        if (!inserted) it->second.merge(c);
    }
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
      width_(o.window_ns > 0 ? o.window_ns : kStartWidthNs) {
    if (std::has_single_bit(static_cast<uint64_t>(width_))) shift_ = std::countr_zero(static_cast<uint64_t>(width_));
}

void TimeWindows::grow(int64_t lo_ts, int64_t hi_ts) {
    for (;;) {
        const int64_t lo = index(lo_ts), hi = index(hi_ts);
        if (windows_.empty()) {
            if (hi - lo + 1 > bound_) {
                double_width();
                continue;
            }
            base_ = lo;
            windows_.resize(static_cast<std::size_t>(hi - lo + 1));
            break;
        }
        const int64_t last = base_ + static_cast<int64_t>(windows_.size()) - 1;
        const int64_t new_lo = std::min(lo, base_), new_hi = std::max(hi, last);
        if (new_hi - new_lo + 1 > bound_) {
            double_width();
            continue;
        }
        for (; base_ > new_lo; --base_) windows_.emplace_front();
        if (new_hi > last) windows_.resize(static_cast<std::size_t>(new_hi - base_ + 1));
        break;
    }
    covered_lo_ = base_ * width_;
    covered_hi_ = (base_ + static_cast<int64_t>(windows_.size())) * width_ - 1;
}

WindowLinkCell& TimeWindows::cell(int64_t w, uint64_t key) {
    if (cached_cell_ == nullptr || w != cached_window_ || key != cached_key_) {
        cached_cell_ = &windows_[static_cast<std::size_t>(w - base_)].links[key];
        cached_window_ = w;
        cached_key_ = key;
    }
    return *cached_cell_;
}

void TimeWindows::double_width() {
    cached_cell_ = nullptr;
    latency_ = nullptr;
    for (QpSeries& q : series_) q.cell = nullptr;
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
    if (shift_ >= 0) ++shift_;
    refresh_fast();
}

void TimeWindows::after_load() {
    shift_ = std::has_single_bit(static_cast<uint64_t>(width_)) ? std::countr_zero(static_cast<uint64_t>(width_)) : -1;
    covered_lo_ = windows_.empty() ? 0 : base_ * width_;
    covered_hi_ = windows_.empty() ? -1 : (base_ + static_cast<int64_t>(windows_.size())) * width_ - 1;
    cached_window_ = -1;
    cached_cell_ = nullptr;
    covered_ = nullptr;
    latency_window_ = -1;
    latency_ = nullptr;
    refresh_fast();
}

void TimeWindows::refresh_fast() {
    const bool valid = cached_cell_ != nullptr && covered_ != nullptr && covered_key_ == cached_key_;
    fast_lo_ = valid ? cached_window_ * width_ : 0;
    fast_hi_ = valid ? fast_lo_ + width_ : 0;
    fast_key_ = cached_key_;
    fast_opcode_ = latency_ != nullptr && latency_window_ == cached_window_ ? latency_opcode_ : kNoOpcode;
}

void TimeWindows::enter(QpSeries& s, QpId q, int64_t ts) {
    cover(ts, ts);
    const int64_t w = index(ts);
    s.cell = &windows_[static_cast<std::size_t>(w - base_)].qps[q];
    s.window = w;
    s.send_here = false;
}

void TimeWindows::hold_send_across(QpId q, const Level& l, int64_t to) {
    spread(l.since, to, [&](int64_t w, double, int64_t ns) {
        WindowQpCell& c = windows_[static_cast<std::size_t>(w - base_)].qps[q];
        integrate(c, l, ns);
        c.max_wrs = std::max(c.max_wrs, l.wrs);
        c.max_bytes = std::max(c.max_bytes, l.bytes);
    });
}

void TimeWindows::hold_recv(QpId q, const Level& l, int64_t to) {
    if (l.since < 0 || l.wrs == 0 || index(to - 1) <= index(l.since)) return;   // its own window has its sample
    spread(l.since, to, [&](int64_t w, double, int64_t) {
        WindowQpCell& c = windows_[static_cast<std::size_t>(w - base_)].qps[q];
        c.recv_max_posted = std::max(c.recv_max_posted, l.wrs);
    });
}

void TimeWindows::sample_recv(QpId q, int64_t ts, uint32_t posted, bool consumed) {
    QpSeries* s = series_at(q, ts);
    if (s == nullptr) return;
    WindowQpCell* c = s->cell;
    hold_recv(q, s->recv, ts);
    s->recv = {ts, posted, 0};
    latest_ts_ = std::max(latest_ts_, ts);
    c->recv_max_posted = std::max(c->recv_max_posted, posted);
    if (consumed) c->recv_min_posted = std::min(c->recv_min_posted, posted);
}

void TimeWindows::merge(TimeWindows& other) {
    if (!o_.enabled || !other.o_.enabled) return;
    while (other.width_ < width_) other.double_width();
    while (width_ < other.width_) double_width();
    if (!other.windows_.empty()) {
        for (;;) {   // covering the other's windows may double ours, and then theirs must follow
            const auto n = static_cast<int64_t>(other.windows_.size());
            cover(other.base_ * width_, (other.base_ + n) * width_ - 1);
            if (other.width_ == width_) break;
            while (other.width_ < width_) other.double_width();
        }
        for (std::size_t i = 0; i < other.windows_.size(); ++i)
            windows_[static_cast<std::size_t>(other.base_ - base_) + i].merge(std::move(other.windows_[i]));
    }
    if (series_.size() < other.series_.size()) series_.resize(other.series_.size());
    for (std::size_t q = 0; q < other.series_.size(); ++q)
        if (other.series_[q].send.since >= 0 || other.series_[q].recv.since >= 0) series_[q] = other.series_[q];
    for (QpSeries& s : series_) {   // their cells were the other windows', or are where they were before merging
        s.cell = nullptr;
        s.window = -1;
        s.send_here = false;
    }
    for (const auto& [key, until] : other.covered_until_) covered_until_[key] = std::max(covered_until_[key], until);
    latest_ts_ = std::max(latest_ts_, other.latest_ts_);
    cached_cell_ = nullptr;
    latency_ = nullptr;
    covered_ = nullptr;
    refresh_fast();
    other.windows_.clear();
    other.series_.clear();
    other.covered_until_.clear();
}

void TimeWindows::finish() {
    for (QpId q = 0; q < series_.size(); ++q) {
        hold_send(q, series_[q].send, latest_ts_, -1, nullptr);
        hold_recv(q, series_[q].recv, latest_ts_ + 1);
    }
    series_.clear();
}

void TimeWindows::rnr(QpId q, int64_t ts) {
    if (QpSeries* s = series_at(q, ts)) ++s->cell->rnr_events;
}

template <class Put>
void TimeWindows::spread(int64_t from, int64_t to, Put&& put) {
    const int64_t w0 = index(from), w1 = index(to - 1);
    if (w0 == w1) {   // the common case: inside one window
        put(w0, 1.0, to - from);
        return;
    }
    const double dur = static_cast<double>(to - from);
    for (int64_t w = w0; w <= w1; ++w) {
        const int64_t lo = std::max(from, w * width_), hi = std::min(to, (w + 1) * width_);
        if (hi > lo) put(w, static_cast<double>(hi - lo) / dur, hi - lo);
    }
}

void TimeWindows::add_slow(const Operation& op, DataLink link) {
    if (!o_.enabled || op.is_recv() || !plausible_times(op)) return;
    const bool traffic = link.known() && op.moved_data();
    const bool latency = op.observed_completion();
    if (!traffic && !latency) return;
    cover(op.post_ts, op.done_ts);
    latest_ts_ = std::max(latest_ts_, op.done_ts);
    const int64_t done_window = index(op.done_ts);
    // An unconfirmed operation moved its data at some unknown time before its QP's teardown: no interval.
    const bool interval = op.outcome != OpOutcome::Unconfirmed && op.done_ts > op.post_ts;
    WindowLinkCell* done_cell = nullptr;
    if (traffic) {
        const uint64_t key = link.key();
        const auto bytes = static_cast<double>(op.bytes);
        if (covered_ == nullptr || covered_key_ != key) {
            covered_ = &covered_until_[key];
            covered_key_ = key;
        }
        if (!interval) {
            done_cell = &cell(index(op.post_ts), key);
            done_cell->bytes += bytes;
        } else if (index(op.post_ts) == done_window) {   // the common case: one window, one cell
            done_cell = &cell(done_window, key);
            put_in_one_window(*done_cell, op.bytes, op.post_ts, op.done_ts);
        } else {
            spread(op.post_ts, op.done_ts, [&](int64_t w, double share, int64_t) { cell(w, key).bytes += bytes * share; });
            const int64_t from = std::max(op.post_ts, *covered_);
            if (op.done_ts > from) {
                spread(from, op.done_ts, [&](int64_t w, double, int64_t ns) { cell(w, key).busy_ns += ns; });
                *covered_ = op.done_ts;
            }
            done_cell = &cell(done_window, key);
        }
        ++done_cell->ops;
    }
    if (latency) {
        const auto ns = static_cast<uint64_t>(op.done_ts - op.post_ts);
        if (latency_ == nullptr || done_window != latency_window_ || op.opcode != latency_opcode_) {
            latency_ = &windows_[static_cast<std::size_t>(done_window - base_)].latency_by_opcode[op.opcode];
            latency_window_ = done_window;
            latency_opcode_ = op.opcode;
        }
        latency_->add(ns);
        if (done_cell != nullptr) done_cell->latency.add(ns);
    }
    refresh_fast();
}

}  // namespace sigmatrace::analyzer
