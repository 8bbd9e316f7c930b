#include "analyzer/analyses/gray_link_detector.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>

namespace sigmatrace::analyzer {

namespace {

constexpr std::size_t kOwnHistory = 16;   // healthy windows the own reference is the median of
constexpr std::size_t kOwnMinHistory = 3; // before this many, a link has no own reference yet

double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    const std::size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
    if (v.size() % 2 == 1) return v[mid];
    const double hi = v[mid];
    const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
    return (lo + hi) / 2.0;
}

// The median of sorted `v` without one element equal to `self` (the link's own value): O(log n), so that the
// peer comparison stays linear in the number of links per window.
double median_without(const std::vector<double>& v, double self) {
    if (v.size() < 2) return 0.0;
    const auto skip = static_cast<std::size_t>(std::lower_bound(v.begin(), v.end(), self) - v.begin());
    const std::size_t m = v.size() - 1;
    auto at = [&](std::size_t j) { return v[j < skip ? j : j + 1]; };
    return m % 2 == 1 ? at(m / 2) : (at(m / 2 - 1) + at(m / 2)) / 2.0;
}

}  // namespace

GrayLinkDetector::GrayLinkDetector(GrayLinkOptions o) : o_(o), window_ns_(std::max<int64_t>(o.window_ns, 1000)) {}

void GrayLinkDetector::add(const Operation& op, DataLink link) {
    if (!link.known() || op.outcome != OpOutcome::Completed || op.bytes < o_.min_bytes || !plausible_times(op)) return;
    auto [it, inserted] = index_.try_emplace(link.key(), links_.size());
    if (inserted) {
        links_.emplace_back();
        links_.back().link = link;
    }
    LinkState& s = links_[it->second];
    ++s.large_ops;
    // Queued: posted while an earlier operation on the link was still outstanding. Measured only when it was
    // queued behind at least a whole earlier completion interval (posted before the completion before the
    // previous one): then the link had work waiting all through its interval, whatever the poller's delay on one
    // completion. One posted just before the previous completion was seen means the queue had run (nearly) dry:
    // the sender or poller set the pace (a descheduled qperf, a poller that polls late), not the link.
    const bool queued = s.any && op.post_ts < s.last_done;
    const bool deep = queued && s.prev_any && op.post_ts < s.prev_done;
    const int64_t done = s.any ? std::max(op.done_ts, s.last_done) : op.done_ts;
    if (!s.any || done != s.last_done) {
        flush_batch(s);
        // A batch measures [previous completion, this one] only when the link was busy all along; one that
        // starts a busy period (and what completes with it) measures latency, not bandwidth.
        s.batch_from = s.last_done;
        s.batch_valid = deep;
        if (s.any) {
            s.prev_done = s.last_done;
            s.prev_any = true;
        }
    }
    if (deep && s.batch_valid) {
        s.batch_bytes += op.bytes;
        ++s.batch_ops;
        ++s.queued_ops;
    } else if (queued) {
        ++s.sender_bound_ops;
    }
    s.last_done = done;
    s.any = true;
}

void GrayLinkDetector::flush_batch(LinkState& s) {
    if (s.batch_ops == 0) return;
    const int64_t a = s.batch_from, b = s.last_done;
    const auto bytes = static_cast<double>(s.batch_bytes);
    const uint32_t ops = s.batch_ops;
    s.batch_bytes = 0;
    s.batch_ops = 0;
    // Spread over the windows [a, b] covers; the operations count in the window of their completion.
    const int64_t wa = floor_div(a, window_ns_), wb = floor_div(b, window_ns_);
    for (int64_t w = wa; w <= wb; ++w) {
        const int64_t lo = std::max(a, w * window_ns_), hi = std::min(b, (w + 1) * window_ns_);
        if (hi <= lo && !(w == wb && a == b)) continue;
        if (w != s.cur.index) {
            close_window(s);
            s.cur = Window{w, 0.0, 0, 0};
        }
        s.cur.bytes += b > a ? bytes * static_cast<double>(hi - lo) / static_cast<double>(b - a) : bytes;
        s.cur.busy_ns += hi - lo;
        if (w == wb) s.cur.ops += ops;
    }
}

void GrayLinkDetector::close_window(LinkState& s) {
    if (s.cur.ops == 0 && s.cur.busy_ns == 0) return;
    if (!s.windows.empty() && s.windows.back().index == s.cur.index) {
        Window& w = s.windows.back();   // after a doubling, the open window may fall into the last closed one
        w.bytes += s.cur.bytes;
        w.busy_ns += s.cur.busy_ns;
        w.ops += s.cur.ops;
    } else {
        s.windows.push_back(s.cur);
    }
    s.cur = Window{s.cur.index, 0.0, 0, 0};
    if (s.windows.size() > kMaxWindows) {
        // Doubling merges neighbours; windows far apart (corrupt times) may need many doublings, so it stops at
        // 2^40 ns (18 minutes) and the oldest windows are given up instead.
        if (window_ns_ < (int64_t{1} << 40)) coarsen();
        if (s.windows.size() > kMaxWindows) s.windows.erase(s.windows.begin());
    }
}

void GrayLinkDetector::coarsen() {
    // Long trace: double the window for every link so that windows stay comparable across links.
    window_ns_ *= 2;
    for (LinkState& s : links_) {
        std::vector<Window> merged;
        merged.reserve(s.windows.size() / 2 + 1);
        for (const Window& w : s.windows) {
            const int64_t idx = floor_div(w.index, 2);
            if (!merged.empty() && merged.back().index == idx) {
                merged.back().bytes += w.bytes;
                merged.back().busy_ns += w.busy_ns;
                merged.back().ops += w.ops;
            } else {
                merged.push_back(Window{idx, w.bytes, w.busy_ns, w.ops});
            }
        }
        s.windows = std::move(merged);
        s.cur.index = floor_div(s.cur.index, 2);
    }
}

bool GrayLinkDetector::can_merge(const GrayLinkDetector& other) const {
    for (const auto& [key, i] : other.index_)
        if (index_.count(key)) return false;
    return true;
}

void GrayLinkDetector::merge(GrayLinkDetector& other) {
    while (other.window_ns_ < window_ns_) other.coarsen();
    while (window_ns_ < other.window_ns_) coarsen();
    for (LinkState& s : other.links_) {
        index_.emplace(s.link.key(), links_.size());
        links_.push_back(std::move(s));
    }
    other.links_.clear();
    other.index_.clear();
}

GrayLinkResult GrayLinkDetector::finish() {
    for (LinkState& s : links_) {
        flush_batch(s);
        close_window(s);
    }
    return evaluate();
}

GrayLinkResult GrayLinkDetector::evaluate() const {
    GrayLinkResult r;
    r.window_ns = window_ns_;
    const int64_t W = window_ns_;

    // Measured windows of every link, and by window index for the peer comparison.
    struct Measured {
        const Window* w;
        double thr;
    };
    std::vector<std::vector<Measured>> measured(links_.size());
    std::map<int64_t, std::vector<double>> by_window;   // every link's throughput in the window, sorted
    for (std::size_t i = 0; i < links_.size(); ++i)
        for (const Window& w : links_[i].windows)
            if (w.busy_ns > 0 && (w.ops >= kMinQueuedOps || w.busy_ns * 4 >= W)) {
                const double thr = w.bytes * 1e9 / static_cast<double>(w.busy_ns);
                measured[i].push_back({&w, thr});
                by_window[w.index].push_back(thr);
            }

    for (auto& [index, v] : by_window) std::sort(v.begin(), v.end());

    // Links in the order of their keys, not of their first operation: the same whichever share of a trace read
    // which link first (merge()).
    std::vector<std::size_t> order(links_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return links_[a].link.key() < links_[b].link.key(); });
    for (const std::size_t i : order) {
        const LinkState& s = links_[i];
        const std::vector<Measured>& m = measured[i];
        LinkThroughput lt;
        lt.link = s.link;
        lt.large_ops = s.large_ops;
        lt.queued_ops = s.queued_ops;
        lt.sender_bound_ops = s.sender_bound_ops;
        lt.measured_windows = m.size();
        {
            std::vector<double> v;
            for (const Measured& x : m) v.push_back(x.thr);
            lt.p50_bytes_per_s = median(v);
            lt.max_bytes_per_s = v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
        }
        r.links.push_back(lt);

        // Classify each measured window against the link's own earlier level and its peers.
        std::vector<double> own_ref(m.size(), 0.0), peer_ref(m.size(), 0.0);
        std::vector<bool> slow(m.size(), false);
        std::deque<double> healthy;
        for (std::size_t k = 0; k < m.size(); ++k) {
            peer_ref[k] = median_without(by_window[m[k].w->index], m[k].thr);
            own_ref[k] = healthy.size() >= kOwnMinHistory ? median({healthy.begin(), healthy.end()}) : 0.0;
            const double ref = std::max(own_ref[k], peer_ref[k]);
            slow[k] = ref > 0.0 && m[k].thr < o_.fraction * ref;
            if (!slow[k]) {
                healthy.push_back(m[k].thr);
                if (healthy.size() > kOwnHistory) healthy.pop_front();
            }
        }

        // Runs of slow measured windows.
        for (std::size_t k = 0; k < m.size();) {
            if (!slow[k]) {
                ++k;
                continue;
            }
            std::size_t e = k;
            while (e < m.size() && slow[e]) ++e;   // [k, e) slow
            if (e - k >= o_.min_windows) {
                GrayEpisode ep;
                ep.link = s.link;
                ep.slow_windows = static_cast<uint32_t>(e - k);
                std::vector<double> slow_thr, peers;
                for (std::size_t x = k; x < e; ++x) {
                    slow_thr.push_back(m[x].thr);
                    if (peer_ref[x] > 0.0) peers.push_back(peer_ref[x]);
                    ep.bytes += static_cast<uint64_t>(std::llround(m[x].w->bytes));
                }
                ep.slow_bytes_per_s = median(slow_thr);
                ep.own_bytes_per_s = own_ref[k];
                ep.peers_bytes_per_s = median(peers);
                const double R = std::max(ep.own_bytes_per_s, ep.peers_bytes_per_s);
                const double S = ep.slow_bytes_per_s;
                ep.slowdown = S > 0.0 ? R / S : 0.0;
                // Onset: the slow fraction a of the span [previous adjacent window, first slow window], from its
                // mixed throughput R(1-a) + S a; likewise the recovery in [last slow window, next adjacent window].
                auto slow_fraction = [&](std::initializer_list<const Window*> ws) {
                    double b = 0.0;
                    int64_t t = 0;
                    for (const Window* w : ws) {
                        b += w->bytes;
                        t += w->busy_ns;
                    }
                    const double thr = t > 0 ? b * 1e9 / static_cast<double>(t) : S;
                    return R > S ? std::clamp((R - thr) / (R - S), 0.0, 1.0) : 1.0;
                };
                const Window* first = m[k].w;
                const Window* last = m[e - 1].w;
                if (k > 0 && m[k - 1].w->index == first->index - 1) {
                    const double a = slow_fraction({m[k - 1].w, first});
                    ep.start_ns = (first->index + 1) * W - static_cast<int64_t>(a * 2.0 * static_cast<double>(W));
                } else {
                    const double a = slow_fraction({first});
                    ep.start_ns = (first->index + 1) * W - static_cast<int64_t>(a * static_cast<double>(W));
                }
                if (e < m.size() && m[e].w->index == last->index + 1) {
                    const double b = slow_fraction({last, m[e].w});
                    ep.end_ns = last->index * W + static_cast<int64_t>(b * 2.0 * static_cast<double>(W));
                } else {
                    ep.until_end = e == m.size();
                    const double b = slow_fraction({last});
                    ep.end_ns = last->index * W + static_cast<int64_t>(b * static_cast<double>(W));
                }
                // Evidence: the measured windows around the episode.
                const int64_t lo = first->index - 4, hi = last->index + 4;
                std::vector<LinkWindowSample> samples;
                for (std::size_t x = 0; x < m.size(); ++x)
                    if (m[x].w->index >= lo && m[x].w->index <= hi)
                        samples.push_back({m[x].w->index * W, m[x].thr, std::max(own_ref[x], peer_ref[x]), slow[x]});
                if (samples.size() > kMaxSamples) {
                    samples.erase(samples.begin() + static_cast<std::ptrdiff_t>(kMaxSamples / 2),
                                  samples.end() - static_cast<std::ptrdiff_t>(kMaxSamples / 2));
                }
                ep.samples = std::move(samples);
                r.episodes.push_back(std::move(ep));
            }
            k = e;
        }
    }
    return r;
}

}  // namespace sigmatrace::analyzer
