#include "analyzer/analyses/clock_alignment.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace sigmatrace::analyzer {
namespace {

// The fit looks for drifts within this (1000 ppm: a quartz off by far more is broken, not drifting).
constexpr double kMaxDrift = 1e-3;
// A drift is fitted only when it widens the band by more than this fraction over no drift: bounds clustered in
// time, or loose ones, cannot tell a drift, and any tilt that happens to fit their noise a little better would
// move every time far from them.
constexpr double kDriftGain = 0.1;
// And only when the bounds span long enough for a drift of this size (a quartz far off) to move the skew by more
// than the band's half-width: over a short stretch, delays that grow (queues filling) look like a drift.
constexpr double kPlausibleDrift = 100e-6;

// Widens [tmin, tmax] to the times of `upper` and `lower`.
void widen_span(const std::vector<SkewBound>& upper, const std::vector<SkewBound>& lower, double& tmin, double& tmax) {
    for (const auto* set : {&upper, &lower})
        for (const SkewBound& b : *set) {
            tmin = std::min(tmin, b.t);
            tmax = std::max(tmax, b.t);
        }
}

// The point of [a, b] where the concave `f` is highest, within `tolerance` (a ternary search).
template <class F>
double concave_argmax(F&& f, double a, double b, double tolerance) {
    for (int i = 0; i < 200 && b - a > tolerance; ++i) {
        const double m1 = a + (b - a) / 3, m2 = b - (b - a) / 3;
        if (f(m1) < f(m2))
            a = m1;
        else
            b = m2;
    }
    return (a + b) / 2;
}

}  // namespace

const char* status_name(HostClock::Status s) {
    switch (s) {
        case HostClock::Status::reference: return "reference";
        case HostClock::Status::estimated: return "estimated";
        case HostClock::Status::one_sided: return "one_sided";
        case HostClock::Status::unconstrained: return "unconstrained";
        case HostClock::Status::contradictory: return "contradictory";
    }
    return "unconstrained";
}

PairFit fit_relative_skew(const std::vector<SkewBound>& upper, const std::vector<SkewBound>& lower, double t0) {
    PairFit fit;
    if (upper.empty() || lower.empty()) return fit;
    fit.two_sided = true;
    double tmin = std::numeric_limits<double>::max(), tmax = std::numeric_limits<double>::lowest();
    widen_span(upper, lower, tmin, tmax);
    // The band the bounds leave at drift d: [lo, hi] for the offset. Its width is concave in d (a minimum of
    // lines minus a maximum of lines), so a ternary search finds the widest.
    auto band = [&](double d, double* lo, double* hi) {
        *hi = std::numeric_limits<double>::max();
        *lo = std::numeric_limits<double>::lowest();
        for (const SkewBound& b : upper) *hi = std::min(*hi, b.value - d * (b.t - t0));
        for (const SkewBound& b : lower) *lo = std::max(*lo, b.value - d * (b.t - t0));
    };
    auto width = [&](double d) {
        double lo = 0, hi = 0;
        band(d, &lo, &hi);
        return hi - lo;
    };
    const double widest = concave_argmax(width, -kMaxDrift, kMaxDrift, 1e-12);
    fit.drift = widest;
    const double best = width(fit.drift), flat = width(0);
    if (best > 0 && (flat >= (1 - kDriftGain) * best || (flat > 0 && (tmax - tmin) * kPlausibleDrift < flat / 2)))
        fit.drift = 0;
    double lo = 0, hi = 0;
    band(fit.drift, &lo, &hi);
    fit.offset_ns = (lo + hi) / 2;
    fit.half_width_ns = (hi - lo) / 2;
    fit.consistent = hi >= lo;
    if (!fit.consistent) return fit;
    // The drifts the bounds allow: an interval around the widest band's (the width is concave), to its edges.
    const auto edge = [&](double inside, double outside) {
        if (width(outside) >= 0) return outside;
        for (int i = 0; i < 200 && std::abs(outside - inside) > 1e-15; ++i) {
            const double mid = (inside + outside) / 2;
            (width(mid) >= 0 ? inside : outside) = mid;
        }
        return inside;
    };
    fit.drift_lo = std::min(edge(widest, -kMaxDrift), fit.drift);
    fit.drift_hi = std::max(edge(widest, kMaxDrift), fit.drift);
    // The offsets at t0 over those drifts: the highest upper edge of the band (a minimum of lines: concave in the
    // drift) and the lowest lower edge (convex).
    const auto extreme = [&](bool upper_edge) {
        const auto value = [&](double d) {
            double l = 0, h = 0;
            band(d, &l, &h);
            return upper_edge ? h : -l;
        };
        return value(concave_argmax(value, fit.drift_lo, fit.drift_hi, 1e-15));
    };
    fit.offset_hi_ns = std::max(extreme(true), hi);
    fit.offset_lo_ns = std::min(-extreme(false), lo);
    return fit;
}

void ClockConstraints::Samples::add(int64_t ts) {
    const uint64_t k = count++;
    if (k % stride != 0) return;
    if (kept.size() == kMaxSamplesPerQp) {
        stride *= 2;
        std::erase_if(kept, [&](const auto& s) { return s.first % stride != 0; });
        if (k % stride != 0) return;
    }
    kept.emplace_back(k, ts);
}

void ClockConstraints::add_message(const Operation& op) {
    const bool recv = op.is_recv();
    std::vector<Samples>& side = recv ? recvs_ : sends_;
    if (side.size() <= op.qp) side.resize(op.qp + 1);
    Samples& s = side[op.qp];
    switch (op.outcome) {
        case OpOutcome::Completed:
            s.add(recv ? op.done_ts : op.post_ts);
            break;
        case OpOutcome::Failed:
            s.broken = true;   // whether it consumed a receive is unknown: the count no longer matches
            break;
        default:
            break;   // flushed, unconfirmed, in flight: at the end of the QP's life, after every counted one
    }
}

ClockCorrection::ClockCorrection(const ClockResult& r) {
    for (const HostClock& h : r.hosts)
        if (h.status == HostClock::Status::estimated && (h.offset_ns != 0 || h.drift_ppm != 0))
            shifts_.emplace(h.host, ClockShift{h.offset_ns, h.drift_ppm * 1e-6, r.at_ns});
}

ClockResult ClockConstraints::solve(const Topology& topo, int64_t t0) const {
    ClockResult result;
    result.at_ns = t0;
    // Hosts of the processes that did RDMA, and the reference: the host of the lowest rank (else the first name).
    std::set<std::string> hosts;
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    for (ProcId p = 0; p < topo.process_count(); ++p) {
        if (!topo.rdma_active(p)) continue;
        const Process& pr = topo.proc(p);
        hosts.insert(pr.host);
        if (pr.rank >= 0 && pr.rank < best_rank) {
            best_rank = pr.rank;
            result.reference = pr.host;
        }
    }
    if (hosts.size() < 2) return {};
    if (result.reference.empty()) result.reference = *hosts.begin();

    // Bounds per host pair (first < second): delta = skew(second) - skew(first).
    struct Bounds {
        std::vector<SkewBound> upper, lower;
    };
    std::map<std::pair<std::string, std::string>, Bounds> pairs;
    for (QpId qa = 0; qa < sends_.size(); ++qa) {
        const Samples& sends = sends_[qa];
        if (sends.broken || sends.kept.empty()) continue;
        const Qp& a = topo.qp(qa);
        if (a.peer.qp == kNoId || a.peer.qp >= recvs_.size()) continue;
        const Samples& recvs = recvs_[a.peer.qp];
        if (recvs.broken) continue;
        const std::string& ha = topo.proc(a.proc).host;
        const std::string& hb = topo.proc(topo.qp(a.peer.qp).proc).host;
        if (ha == hb) continue;
        const bool forward = ha < hb;
        Bounds& bounds = pairs[forward ? std::make_pair(ha, hb) : std::make_pair(hb, ha)];
        const auto& sk = sends.kept;
        const auto& rk = recvs.kept;
        for (size_t i = 0, j = 0; i < sk.size() && j < rk.size();) {
            if (sk[i].first < rk[j].first) {
                ++i;
            } else if (rk[j].first < sk[i].first) {
                ++j;
            } else {
                // Posted on A before completing on B: skew(B) - skew(A) < done_B - post_A.
                const double value = static_cast<double>(rk[j].second - sk[i].second);
                const double t = (static_cast<double>(sk[i].second) + static_cast<double>(rk[j].second)) / 2;
                if (forward)
                    bounds.upper.push_back({t, value});
                else
                    bounds.lower.push_back({t, -value});
                ++i;
                ++j;
            }
        }
    }

    // The offsets are given at the middle of the bounds' time span: where they are known best. Given at a time
    // far from the messages (the trace's start, seconds before a job's traffic), a drift's error of a few ppm
    // would move them by far more than the band's width.
    double tmin = std::numeric_limits<double>::max(), tmax = std::numeric_limits<double>::lowest();
    for (const auto& [key, b] : pairs) widen_span(b.upper, b.lower, tmin, tmax);
    if (tmin <= tmax) {
        t0 = static_cast<int64_t>((tmin + tmax) / 2);
        result.at_ns = t0;
    }

    // Fit every pair, then place hosts from the reference along the pairs of smallest accumulated uncertainty
    // (consistent pairs first; a host reachable only through contradicting ones is placed through them, flagged).
    struct Edge {
        std::string to;
        PairFit fit;
        double sign;      // +1: fit is skew(to) - skew(from); -1: the reverse
        uint64_t bounds;
    };
    std::map<std::string, std::vector<Edge>> edges;
    std::map<std::string, uint64_t> one_sided;
    for (const auto& [key, b] : pairs) {
        const PairFit fit = fit_relative_skew(b.upper, b.lower, static_cast<double>(t0));
        const uint64_t n = b.upper.size() + b.lower.size();
        if (!fit.two_sided) {
            one_sided[key.first] += n;
            one_sided[key.second] += n;
            continue;
        }
        edges[key.first].push_back({key.second, fit, +1, n});
        edges[key.second].push_back({key.first, fit, -1, n});
    }
    std::map<std::string, HostClock> placed;
    HostClock& ref = placed[result.reference];
    ref.host = ref.relative_to = result.reference;
    ref.status = HostClock::Status::reference;
    for (bool allow_contradictions : {false, true}) {
        for (;;) {
            // The unplaced host reachable with the least accumulated uncertainty.
            const Edge* best = nullptr;
            const HostClock* from = nullptr;
            double best_cost = std::numeric_limits<double>::max();
            for (const auto& [name, clock] : placed)
                for (const Edge& e : edges[name]) {
                    if (placed.contains(e.to) || (!e.fit.consistent && !allow_contradictions)) continue;
                    const double cost = clock.uncertainty_ns + e.fit.offset_uncertainty_ns();
                    if (cost < best_cost) {
                        best_cost = cost;
                        best = &e;
                        from = &clock;
                    }
                }
            if (best == nullptr) break;
            HostClock h;
            h.host = best->to;
            h.relative_to = from->host;
            h.status = best->fit.consistent && from->status != HostClock::Status::contradictory
                           ? HostClock::Status::estimated
                           : HostClock::Status::contradictory;
            h.offset_ns = from->offset_ns + best->sign * best->fit.offset_ns;
            h.drift_ppm = from->drift_ppm + best->sign * best->fit.drift * 1e6;
            h.uncertainty_ns = best_cost;
            h.drift_uncertainty_ppm = from->drift_uncertainty_ppm + best->fit.drift_uncertainty() * 1e6;
            h.bounds = best->bounds;
            placed[h.host] = h;
        }
    }
    for (const std::string& name : hosts) {
        if (const auto it = placed.find(name); it != placed.end()) {
            result.hosts.push_back(it->second);
            continue;
        }
        HostClock h;
        h.host = name;
        h.status = one_sided.contains(name) ? HostClock::Status::one_sided : HostClock::Status::unconstrained;
        h.bounds = one_sided.contains(name) ? one_sided[name] : 0;
        result.hosts.push_back(h);
    }
    return result;
}

}  // namespace sigmatrace::analyzer
