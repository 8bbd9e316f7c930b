// The report's `phases` (docs/analyzer.md, "Phases"): the analysis's phases (phase_tracker.h) with each port's
// bytes, the lower bound the busiest port sets, the efficiency, and a phase_inefficiency finding naming where
// the time went (incast, gray link, straggler) when a phase runs far from its bound.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include <string_view>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analyzer/analyses/analysis.h"
#include "analyzer/outputs/format_units.h"
#include "analyzer/outputs/report_builder.h"

namespace sigmatrace::analyzer {

using nlohmann::json;

namespace {
struct Bandwidth {
    double bytes_per_s = 0.0;
    const char* source = "observed";
};
}  // namespace

json ReportBuilder::phases_section(json& findings) const {
    const PhaseTracker& t = a_.phases_;
    const PhaseOptions& o = t.options();
    // The split that applies: barrier epochs under Auto when a barrier was detected.
    const char* delimiter = "gap";
    std::vector<int64_t> boundaries;
    switch (o.split) {
    case PhaseOptions::Split::Times: delimiter = "time"; break;
    case PhaseOptions::Split::Opcode:
        delimiter = "opcode";
        boundaries = t.marks();
        std::sort(boundaries.begin(), boundaries.end());
        break;
    case PhaseOptions::Split::Auto:
        if (!barrier_bounds_.empty()) {
            delimiter = "barrier";
            boundaries = barrier_bounds_;
        }
        break;
    case PhaseOptions::Split::Gap: break;
    }
    const std::vector<Phase> phases = build_phases(t, boundaries, delimiter);

    // Each port's bandwidth: configured (per device, then for all), or its observed peak, the highest rate it
    // reached over any segment (its bytes over the time from its first post to its last completion there). The
    // observed peak is never below what the port did in a phase, so the efficiency stays in (0, 1].
    const std::map<uint64_t, double> peak = observed_peaks(t);
    auto bandwidth = [&](uint64_t key) -> Bandwidth {
        const DevId d = port_dev(key);
        const std::string label = nic_label(d);
        const std::string& name = a_.topo_.device(d).name;
        for (const auto& [dev, bps] : o.device_bytes_per_s)
            if (dev == label || dev == name) return {bps, "configured"};
        if (o.port_bytes_per_s > 0) return {o.port_bytes_per_s, "configured"};
        const auto it = peak.find(key);
        return {it == peak.end() ? 0.0 : it->second, "observed"};
    };
    auto port_json = [&](uint64_t key) {
        json j = nic_ref(port_dev(key));
        j["direction"] = port_rx(key) ? "rx" : "tx";
        return j;
    };
    auto port_label = [&](uint64_t key) { return fmt::format("{} {}", nic_label(port_dev(key)), port_rx(key) ? "rx" : "tx"); };

    json out = json::array();
    std::size_t index = 0;
    for (const Phase& p : phases) {
        const int64_t duration = p.end_ns - p.start_ns;
        double tx_bytes = 0.0;
        json ports = json::array();
        for (const auto& [key, tally] : p.ports) {
            const Bandwidth bw = bandwidth(key);
            if (!port_rx(key)) tx_bytes += tally.bytes;
            json j = port_json(key);
            j["bytes"] = std::llround(tally.bytes);
            j["first_ns"] = tally.first_ns - a_.first_ts_;
            j["last_ns"] = tally.last_ns - a_.first_ts_;
            j["bandwidth_bytes_per_s"] = bw.bytes_per_s > 0 ? json(std::llround(bw.bytes_per_s)) : json(nullptr);
            j["bandwidth_source"] = bw.source;
            ports.push_back(std::move(j));
        }
        const PhaseBound pb = lower_bound(p, [&](uint64_t key) { return bandwidth(key).bytes_per_s; });
        const double bound_ns = pb.lower_bound_ns;
        const bool has_binding = bound_ns > 0;
        const uint64_t binding = pb.binding;
        const Bandwidth binding_bw = has_binding ? bandwidth(binding) : Bandwidth{};
        const bool measured = has_binding && duration > 0;
        // A configured bandwidth below what the port achieved gives a bound above the duration: the efficiency
        // is capped at 1 and the phase says so (faster_than_bound).
        const double efficiency = measured ? std::min(1.0, bound_ns / static_cast<double>(duration)) : 0.0;

        // Where the time went: a port whose last byte ends well after every other port's of its direction, and
        // the incast and gray-link episodes that overlap the phase.
        json causes = json::array();
        std::vector<std::string> cause_text;
        for (const bool rx : {false, true})
            if (const auto st = straggler_of(p, rx, o.straggler_share)) {
                causes.push_back(json{{"kind", "straggler"}, {"port", port_json(st->port)}, {"late_ns", st->late_ns}});
                cause_text.push_back(fmt::format("straggler {} (last byte {} after the others)", port_label(st->port),
                                                 format_ns(static_cast<double>(st->late_ns))));
            }
        for (const IncastReceiver& r : a_.incast_result_.receivers)
            for (const IncastEpisode& e : r.kept)
                if (e.start_ns < p.end_ns && e.end_ns > p.start_ns) {
                    causes.push_back(json{{"kind", "incast"}, {"receiver", nic_ref(r.receiver)},
                                          {"degree", e.max_degree}, {"start_ns", e.start_ns - a_.first_ts_},
                                          {"end_ns", e.end_ns - a_.first_ts_}});
                    cause_text.push_back(fmt::format("incast on {} ({} senders)", nic_label(r.receiver), e.max_degree));
                }
        for (const GrayEpisode& e : a_.gray_result_.episodes)
            if (e.start_ns < p.end_ns && e.end_ns > p.start_ns) {
                causes.push_back(json{{"kind", "gray_link"}, {"src", nic_ref(e.link.src)}, {"dst", nic_ref(e.link.dst)},
                                      {"slowdown", e.slowdown}, {"start_ns", e.start_ns - a_.first_ts_},
                                      {"end_ns", e.end_ns - a_.first_ts_}});
                cause_text.push_back(fmt::format("gray link {} -> {} ({:.2f}x slower)", nic_label(e.link.src),
                                                 nic_label(e.link.dst), e.slowdown));
            }

        json j{{"index", index},
               {"delimiter", p.delimiter},
               {"start_ns", p.start_ns - a_.first_ts_},
               {"end_ns", p.end_ns - a_.first_ts_},
               {"start_unix_ns", p.start_ns},
               {"end_unix_ns", p.end_ns},
               {"duration_ns", duration},
               {"ops", p.ops},
               {"bytes", std::llround(tx_bytes)},
               {"lower_bound_ns", measured ? json(std::llround(bound_ns)) : json(nullptr)},
               {"efficiency", measured ? json(efficiency) : json(nullptr)},
               {"faster_than_bound", measured && bound_ns > static_cast<double>(duration)},
               {"binding_port", has_binding ? port_json(binding) : json(nullptr)},
               {"bandwidth_bytes_per_s", measured ? json(std::llround(binding_bw.bytes_per_s)) : json(nullptr)},
               {"bandwidth_source", measured ? json(binding_bw.source) : json(nullptr)},
               {"ports", std::move(ports)},
               {"causes", causes}};
        // Only against a configured bandwidth: an observed peak is the best burst the port ever managed, so a
        // bound from it is optimistic, and a clean run on a busy host falls below it (a false finding).
        const bool configured = std::string_view(binding_bw.source) != "observed";
        if (measured && configured && efficiency < o.efficiency_threshold &&
            tx_bytes >= static_cast<double>(o.finding_min_bytes)) {
            findings.push_back(finding(
                "phase_inefficiency", "warning",
                fmt::format("Phase {} (+{} for {}, {}) ran at {:.0f}% of its bound: {} limited by {} at {}/s would "
                            "take {}; {}",
                            index, format_ns(static_cast<double>(p.start_ns - a_.first_ts_)),
                            format_ns(static_cast<double>(duration)), format_bytes(tx_bytes), efficiency * 100.0,
                            format_bytes(p.ports.at(binding).bytes), port_label(binding),
                            format_bytes(binding_bw.bytes_per_s), format_ns(bound_ns),
                            cause_text.empty() ? std::string("no incast, gray link or straggler overlaps it")
                                               : fmt::format("time went to {}", fmt::join(cause_text, ", "))),
                json{{"phase", index},
                     {"start_ns", p.start_ns - a_.first_ts_},
                     {"end_ns", p.end_ns - a_.first_ts_},
                     {"duration_ns", duration},
                     {"lower_bound_ns", std::llround(bound_ns)},
                     {"efficiency", efficiency},
                     {"binding_port", port_json(binding)},
                     {"causes", causes},
                     {"threshold", o.efficiency_threshold}}));
        }
        out.push_back(std::move(j));
        ++index;
    }
    return out;
}

json ReportBuilder::phases_options() const {
    const PhaseOptions& o = a_.phases_.options();
    json split;
    switch (o.split) {
    case PhaseOptions::Split::Auto: split = "auto"; break;
    case PhaseOptions::Split::Gap: split = "gap"; break;
    case PhaseOptions::Split::Times: split = json{{"times_ns", o.times_ns}}; break;
    case PhaseOptions::Split::Opcode: split = json{{"opcode", opcode_name(o.opcode)}}; break;
    }
    json devices = json::object();
    for (const auto& [dev, bps] : o.device_bytes_per_s) devices[dev] = std::llround(bps);
    return json{{"enabled", o.enabled},
                {"split", split},
                {"gap_ns", o.gap_ns},
                {"gap_used_ns", a_.phases_.gap_ns()},
                {"port_bandwidth_bytes_per_s", o.port_bytes_per_s > 0 ? json(std::llround(o.port_bytes_per_s)) : json("observed")},
                {"device_bandwidth_bytes_per_s", devices},
                {"efficiency_threshold", o.efficiency_threshold},
                {"finding_min_bytes", o.finding_min_bytes},
                {"straggler_share", o.straggler_share}};
}

}  // namespace sigmatrace::analyzer
