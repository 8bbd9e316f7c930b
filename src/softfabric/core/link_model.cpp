#include "core/link_model.h"

#include <algorithm>

namespace softfabric {
namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9e37'79b9'7f4a'7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58'476d'1ce4'e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d0'49bb'1331'11ebull;
    return x ^ (x >> 31);
}

}  // namespace

LinkState& LinkModel::params(NicId from, NicId to) {
    LinkState& l = region_.link(from, to);
    if (l.params_ready.load(std::memory_order_acquire)) return l;
    // First use of this link: resolve defaults and overrides (later statements win). Racing processes compute
    // the same values, so a duplicate store is harmless.
    const RegionConfig& rc = region_.config;
    uint64_t bw = rc.default_bandwidth;
    uint64_t lat = rc.default_latency_ns;
    for (uint32_t i = 0; i < rc.num_overrides; ++i) {
        const LinkOverride& o = rc.overrides[i];
        if (!o.link.matches(from, to)) continue;
        if (o.has_bandwidth) bw = o.params.bandwidth_bytes_per_s;
        if (o.has_latency) lat = o.params.latency_ns;
    }
    l.bandwidth_bytes_per_s = bw;
    l.latency_ns = lat;
    l.params_ready.store(1, std::memory_order_release);
    return l;
}

LinkModel::Conditions LinkModel::conditions(NicId from, NicId to, uint64_t at_ns) const {
    Conditions c;
    const RegionConfig& rc = region_.config;
    if (rc.num_faults == 0) return c;
    uint64_t rel = at_ns > region_.start_ns ? at_ns - region_.start_ns : 0;
    for (uint32_t i = 0; i < rc.num_faults; ++i) {
        const Fault& f = rc.faults[i];
        if (rel < f.from_ns || rel >= f.to_ns || !f.link.matches(from, to)) continue;
        switch (f.kind) {
            case FaultKind::Slow: c.slow_factor *= f.value; break;
            case FaultKind::Loss: c.loss_probability = 1.0 - (1.0 - c.loss_probability) * (1.0 - f.value); break;
            case FaultKind::Down: c.down = true; break;
        }
    }
    return c;
}

bool LinkModel::draw_loss(double probability) {
    if (probability <= 0.0) return false;
    if (probability >= 1.0) return true;
    uint64_t n = region_.loss_draws.fetch_add(1, std::memory_order_relaxed);
    uint64_t r = splitmix64(region_.config.loss_seed ^ (n * 0x2545'f491'4f6c'dd1dull));
    return static_cast<double>(r >> 11) * 0x1.0p-53 < probability;
}

uint64_t LinkModel::latency(NicId from, NicId to, uint64_t at_ns) {
    LinkState& l = params(from, to);
    Conditions c = conditions(from, to, at_ns);
    return static_cast<uint64_t>(static_cast<double>(l.latency_ns) * c.slow_factor);
}

Transmission LinkModel::transmit(NicId from, NicId to, uint64_t bytes, uint64_t earliest_ns) {
    LinkState& l = params(from, to);
    Transmission t;
    // Faults apply from the moment the transmission can start (behind what is already queued on the link).
    Conditions c = conditions(from, to, std::max(earliest_ns, l.next_free_ns.load(std::memory_order_relaxed)));
    t.latency_ns = static_cast<uint64_t>(static_cast<double>(l.latency_ns) * c.slow_factor);
    if (l.bandwidth_bytes_per_s == 0) {
        // Unlimited: no serialization, and no shared horizon to contend on.
        t.start_ns = t.end_ns = earliest_ns;
    } else {
        double ns = static_cast<double>(bytes) * 1e9 * c.slow_factor / static_cast<double>(l.bandwidth_bytes_per_s);
        uint64_t duration = static_cast<uint64_t>(ns);
        uint64_t cur = l.next_free_ns.load(std::memory_order_relaxed);
        do {
            t.start_ns = std::max(earliest_ns, cur);
            t.end_ns = t.start_ns + duration;
        } while (!l.next_free_ns.compare_exchange_weak(cur, t.end_ns, std::memory_order_relaxed));
    }
    t.arrive_ns = t.end_ns + t.latency_ns;
    t.lost = c.down || draw_loss(c.loss_probability);
    if (t.lost) count_lost(from, to);
    return t;
}

}  // namespace softfabric
