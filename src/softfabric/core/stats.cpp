#include "core/stats.h"

#include <fmt/core.h>

#include "core/clock.h"
#include "core/fabric_region.h"

namespace softfabric {

FabricStats read_stats(const std::string& name) {
    auto fabric = Fabric::open(name, OpenMode::ReadOnly, nullptr);
    FabricRegion& r = fabric->region();
    FabricStats s;
    s.name = name;
    uint64_t now = now_ns();
    s.uptime_ns = now > r.start_ns ? now - r.start_ns : 0;
    for (const auto& m : r.members) {
        int pid = m.pid.load();
        if (pid != 0 && process_alive(pid, m.start_time)) ++s.live_members;
    }
    for (uint32_t from = 0; from < kMaxNics; ++from) {
        for (uint32_t to = 0; to < kMaxNics; ++to) {
            const LinkState& l = r.links[from * kMaxNics + to];
            uint64_t ops = l.ops.load(), lost = l.lost.load(), rnr = l.rnr_naks.load();
            if (!ops && !lost && !rnr) continue;
            s.links.push_back({NicId::from_index(from), NicId::from_index(to), l.bytes.load(), ops, lost, rnr});
        }
    }
    return s;
}

std::string format_stats_text(const FabricStats& s) {
    std::string out = fmt::format("fabric {}: up {:.3f} s, {} live processes\n", s.name, s.uptime_ns / 1e9,
                                  s.live_members);
    out += fmt::format("{:<16} {:<16} {:>16} {:>12} {:>10} {:>10}\n", "from", "to", "bytes", "ops", "lost", "rnr_naks");
    for (const auto& l : s.links)
        out += fmt::format("{:<16} {:<16} {:>16} {:>12} {:>10} {:>10}\n", nic_label(l.from), nic_label(l.to), l.bytes,
                           l.ops, l.lost, l.rnr_naks);
    return out;
}

std::string format_stats_json(const FabricStats& s) {
    std::string out = fmt::format("{{\"fabric\": \"{}\", \"uptime_ns\": {}, \"live_processes\": {}, \"links\": [",
                                  s.name, s.uptime_ns, s.live_members);
    for (size_t i = 0; i < s.links.size(); ++i) {
        const auto& l = s.links[i];
        out += fmt::format("{}\n  {{\"from\": \"{}\", \"to\": \"{}\", \"bytes\": {}, \"ops\": {}, \"lost\": {}, "
                           "\"rnr_naks\": {}}}",
                           i ? "," : "", nic_label(l.from), nic_label(l.to), l.bytes, l.ops, l.lost, l.rnr_naks);
    }
    out += "\n]}\n";
    return out;
}

}  // namespace softfabric
