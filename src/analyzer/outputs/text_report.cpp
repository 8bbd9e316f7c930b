#include "analyzer/outputs/text_report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "analyzer/outputs/format_units.h"

namespace sigmatrace::analyzer {

using nlohmann::json;

namespace {

std::string who(const json& ref) {
    const json& rank = ref["rank"];
    const std::string node = ref["node"].is_string() ? ref["node"].get<std::string>() : "?";
    if (rank.is_number() && rank.get<int64_t>() >= 0) return fmt::format("rank {} ({})", rank.get<int64_t>(), node);
    if (ref["pid"].is_number()) return fmt::format("pid {} ({})", ref["pid"].get<int64_t>(), node);
    return node;
}

constexpr std::size_t kMaxMatrixNodes = 8;   // larger matrices are shown as their busiest cells
constexpr std::size_t kMaxRows = 12;

void section(std::string& out, std::string_view title) { out += fmt::format("\n{}\n", title); }

}  // namespace

std::string render_text_report(const json& doc) {
    std::string out;
    const json& tr = doc["trace"];
    // Late events (deferred emission beyond the reordering window) are named only when there are some: an
    // immediate trace cannot have any.
    const uint64_t late = tr.value("late_events", uint64_t{0});
    out += fmt::format("SigmaTrace analysis: {} processes on {} nodes, {} of trace, {} events ({} discarded{})\n",
                       tr["processes"].get<uint64_t>(), tr["nodes"].get<uint64_t>(),
                       format_ns(tr["duration_ns"].get<double>()), format_count(tr["events"].get<uint64_t>()),
                       format_count(tr["discarded_events"].get<uint64_t>()),
                       late ? fmt::format(", {} out of capture order", format_count(late)) : "");
    for (const auto& p : tr["paths"]) out += fmt::format("  trace: {}\n", p.get<std::string>());

    section(out, "Findings");
    if (doc["findings"].empty()) out += "  none\n";
    for (const auto& f : doc["findings"])
        out += fmt::format("  [{}] {}: {}\n", f["severity"].get<std::string>(), f["kind"].get<std::string>(),
                           f["summary"].get<std::string>());

    const json& ops = doc["ops"];
    const bool counters_only = doc.contains("counters") && ops["total"].get<uint64_t>() == 0;
    if (counters_only) {
        // Counters mode: no operation was traced one by one; what the counters give, and what they cannot.
        const json& c = doc["counters"];
        section(out, fmt::format("Counters (counters mode, {} QPs): {} send WRs posted, {}, {} receives posted, "
                                 "{} completions, {} error completions, {} failed posts",
                                 c["qps"].get<uint64_t>(), format_count(c["posted_wrs"].get<uint64_t>()),
                                 format_bytes(c["posted_bytes"].get<double>()), format_count(c["recv_wrs"].get<uint64_t>()),
                                 format_count(c["completions"].get<uint64_t>()),
                                 format_count(c["error_completions"].get<uint64_t>()),
                                 format_count(c["post_errors"].get<uint64_t>())));
        out += fmt::format("  {:<26}{:>8}{:>12}{:>12}{:>12}{:>8}{:>13}\n", "process", "QP", "WRs", "bytes", "completions",
                           "errors", "rate");
        std::size_t shown = 0;
        for (const auto& q : c["per_qp"]) {
            if (shown++ == kMaxRows) {
                out += fmt::format("  ... {} more in the JSON output\n", c["per_qp"].size() - kMaxRows);
                break;
            }
            out += fmt::format("  {:<26}{:>8}{:>12}{:>12}{:>12}{:>8}{:>13}\n", who(q), q["qp_num"].get<uint64_t>(),
                               format_count(q["posted_wrs"].get<uint64_t>()), format_bytes(q["posted_bytes"].get<double>()),
                               format_count(q["completions"].get<uint64_t>()),
                               format_count(q["error_completions"].get<uint64_t>()),
                               q["bytes_per_s"].is_number() ? format_bytes(q["bytes_per_s"].get<double>()) + "/s"
                                                            : std::string("-"));
        }
        std::string needs;
        for (const auto& n : c["needs_per_operation_events"]) needs += (needs.empty() ? "" : ", ") + n.get<std::string>();
        out += fmt::format("  Not available from counters (record with --mode ops): {}\n", needs);
    } else {
        // Who posted: "GPU-posted" counts only WQEs a GPU wrote; CPU-direct ones (UCX's mlx5 transports) are said
        // when there are any.
        const uint64_t cpu_direct = ops.value("cpu_direct", uint64_t{0});
        section(out, fmt::format("Operations: {} (errors {}, in flight at end {}, unconfirmed at teardown {}, GPU-posted {}{})",
                                 format_count(ops["total"].get<uint64_t>()), format_count(ops["errors"].get<uint64_t>()),
                                 format_count(ops["in_flight_at_end"].get<uint64_t>()),
                                 format_count(ops.value("unconfirmed", uint64_t{0})),
                                 format_count(ops["gpu"].get<uint64_t>()),
                                 cpu_direct != 0 ? fmt::format(", CPU-direct {}", format_count(cpu_direct)) : std::string()));
    }
    if (!ops["by_opcode"].empty()) {
        // Latency: operations whose own completion was seen; receives show how long they sat posted instead.
        out += fmt::format("  {:<22}{:>12}{:>12}{:>8}{:>11}{:>11}{:>11}\n", "opcode", "count", "bytes", "errors",
                           "p50", "p99", "max");
        for (auto it = ops["by_opcode"].begin(); it != ops["by_opcode"].end(); ++it) {
            const json& o = it.value();
            const json& t = o.contains("time_posted_ns") ? o["time_posted_ns"] : o["latency_ns"];
            out += fmt::format("  {:<22}{:>12}{:>12}{:>8}{:>11}{:>11}{:>11}{}\n", it.key(),
                               format_count(o["count"].get<uint64_t>()), format_bytes(o["bytes"].get<double>()),
                               format_count(o["errors"].get<uint64_t>()), ns_or_dash(t["p50"]), ns_or_dash(t["p99"]),
                               ns_or_dash(t["max"]), o.contains("time_posted_ns") ? "  (time posted)" : "");
        }
        const uint64_t implied = ops.value("implied", uint64_t{0});
        if (implied)
            out += fmt::format("  {} unsignaled operations completed with a later signaled one: not in the latencies "
                               "(implied_latency_ns in the JSON)\n",
                               format_count(implied));
    }

    const json& traffic = doc["traffic"];
    section(out, fmt::format("Traffic between nodes (bytes; inbound skew {:.2f}x, outbound skew {:.2f}x)",
                             traffic["inbound_skew"].get<double>(), traffic["outbound_skew"].get<double>()));
    std::set<std::string> names;
    for (const auto& c : traffic["node_matrix"]) {
        names.insert(c["src"].get<std::string>());
        names.insert(c["dst"].get<std::string>());
    }
    if (names.empty()) {
        out += "  no transfer between known nodes\n";
    } else if (names.size() <= kMaxMatrixNodes) {
        std::map<std::pair<std::string, std::string>, uint64_t> cell;
        for (const auto& c : traffic["node_matrix"])
            cell[{c["src"].get<std::string>(), c["dst"].get<std::string>()}] = c["bytes"].get<uint64_t>();
        out += fmt::format("  {:<12}", "src \\ dst");
        for (const auto& d : names) out += fmt::format("{:>11}", d.substr(0, 10));
        out += "\n";
        for (const auto& s : names) {
            out += fmt::format("  {:<12}", s.substr(0, 12));
            for (const auto& d : names) {
                auto it = cell.find({s, d});
                out += fmt::format("{:>11}", it == cell.end() ? std::string(".") : format_bytes(static_cast<double>(it->second)));
            }
            out += "\n";
        }
    } else {
        std::vector<json> cells(traffic["node_matrix"].begin(), traffic["node_matrix"].end());
        std::sort(cells.begin(), cells.end(),
                  [](const json& a, const json& b) { return a["bytes"].get<uint64_t>() > b["bytes"].get<uint64_t>(); });
        out += fmt::format("  {} nodes; busiest pairs:\n", names.size());
        for (std::size_t i = 0; i < std::min(cells.size(), kMaxRows); ++i)
            out += fmt::format("  {:>12} -> {:<12} {:>11} in {} ops\n", cells[i]["src"].get<std::string>(),
                               cells[i]["dst"].get<std::string>(), format_bytes(cells[i]["bytes"].get<double>()),
                               format_count(cells[i]["ops"].get<uint64_t>()));
    }
    if (traffic["unresolved_ops"].get<uint64_t>())
        out += fmt::format("  + {} in {} ops to peers that could not be resolved\n",
                           format_bytes(traffic["unresolved_bytes"].get<double>()),
                           format_count(traffic["unresolved_ops"].get<uint64_t>()));

    if (!doc["rails"].empty()) {
        section(out, "Rails (NICs)");
        for (const auto& r : doc["rails"])
            out += fmt::format("  {:<12} {:<10} tx {:>11}   rx {:>11}\n", r["node"].get<std::string>(),
                               r["device"].get<std::string>(), format_bytes(r["bytes_tx"].get<double>()),
                               format_bytes(r["bytes_rx"].get<double>()));
    }

    const json& b = doc["barriers"];
    if (b["epochs"].get<uint64_t>() > 0) {
        section(out, fmt::format("Barriers: {} epochs on {} synchronization word(s); spread p50 {}, p99 {}, max {}",
                                 b["epochs"].get<uint64_t>(), b["words"].size(), ns_or_dash(b["spread_ns"]["p50"]),
                                 ns_or_dash(b["spread_ns"]["p99"]), ns_or_dash(b["spread_ns"]["max"])));
        std::size_t shown = 0;
        for (const auto& s : b["stragglers"]) {
            if (shown++ == 5) break;
            out += fmt::format("  last to arrive: {:<24} {} times\n", who(s), s["times_last"].get<uint64_t>());
        }
    } else {
        section(out, "Barriers: none detected");
    }

    if (doc.contains("clock")) {
        const json& c = doc["clock"];
        section(out, fmt::format("Clocks (each host's against {}'s, estimated from messages between them; {})",
                                 c["reference"].get<std::string>(),
                                 c.value("aligned", false) ? "the analyses use times moved onto it"
                                                           : "the analyses use the recorded times"));
        for (const auto& h : c["hosts"]) {
            const std::string status = h["status"].get<std::string>();
            if (h["offset_ns"].is_null()) {
                out += fmt::format("  {:<16} {}\n", h["host"].get<std::string>(),
                                   status == "one_sided" ? "messages in one direction only: bounded on one side"
                                                         : "no message with another host: unknown");
                continue;
            }
            const double off = h["offset_ns"].get<double>();
            const json& drift_unc = h["drift_uncertainty_ppm"];
            out += fmt::format("  {:<16} {}{} +- {}, drift {:+.1f}{} ppm{}\n", h["host"].get<std::string>(),
                               off < 0 ? "-" : "+", format_ns(std::abs(off)), format_ns(h["uncertainty_ns"].get<double>()),
                               h["drift_ppm"].get<double>(),
                               drift_unc.is_number() ? fmt::format(" +- {:.1f}", drift_unc.get<double>()) : "",
                               status == "reference" ? " (reference)"
                               : status == "contradictory" ? " (its bounds CONTRADICT each other: a clock jump?)" : "");
        }
    }

    if (doc.contains("phases") && !doc["phases"].empty()) {
        const json& phases = doc["phases"];
        section(out, fmt::format("Phases: {} (lower bound: the busiest port's bytes over its bandwidth)", phases.size()));
        out += fmt::format("  {:>4} {:<8}{:>11}{:>11}{:>12}{:>11}{:>6}  {}\n", "#", "by", "start", "duration", "bytes",
                           "bound", "eff", "binding port (bandwidth)");
        std::size_t shown_phases = 0;
        for (const auto& p : phases) {
            if (shown_phases++ == kMaxRows) {
                out += fmt::format("  ... {} more in the JSON output\n", phases.size() - kMaxRows);
                break;
            }
            const json& bp = p["binding_port"];
            const std::string port =
                bp.is_null() ? std::string("-")
                             : fmt::format("{}/{} {} ({} {}/s)", bp["node"].is_null() ? "?" : bp["node"].get<std::string>(),
                                           bp["device"].is_null() ? "?" : bp["device"].get<std::string>(),
                                           bp["direction"].get<std::string>(),
                                           p["bandwidth_source"].is_null() ? "" : p["bandwidth_source"].get<std::string>(),
                                           p["bandwidth_bytes_per_s"].is_null()
                                               ? std::string("-")
                                               : format_bytes(p["bandwidth_bytes_per_s"].get<double>()));
            out += fmt::format("  {:>4} {:<8}{:>11}{:>11}{:>12}{:>11}{:>6}  {}\n", p["index"].get<uint64_t>(),
                               p["delimiter"].get<std::string>(), format_ns(p["start_ns"].get<double>()),
                               format_ns(p["duration_ns"].get<double>()), format_bytes(p["bytes"].get<double>()),
                               ns_or_dash(p["lower_bound_ns"]),
                               p["efficiency"].is_null() ? std::string("-")
                                                         : fmt::format("{:.0f}%", p["efficiency"].get<double>() * 100.0),
                               port);
        }
    }

    section(out, "Processes");
    out += fmt::format("  {:<26}{:>8}{:>12}{:>12}{:>8}{:>11}{:>11}\n", "process", "pid", "ops", "bytes", "errors", "p50",
                       "p99");
    std::size_t shown = 0;
    for (const auto& p : doc["processes"]) {
        if (shown++ == kMaxRows) {
            out += fmt::format("  ... {} more in the JSON output\n", doc["processes"].size() - kMaxRows);
            break;
        }
        // Counters mode: the WRs and bytes its QPs counted (no operation was traced one by one).
        const bool counted = counters_only && p.contains("counted_wrs");
        out += fmt::format("  {:<26}{:>8}{:>12}{:>12}{:>8}{:>11}{:>11}\n", who(p), p["pid"].get<int64_t>(),
                           format_count(p[counted ? "counted_wrs" : "ops"].get<uint64_t>()),
                           format_bytes(p[counted ? "counted_bytes" : "bytes"].get<double>()),
                           format_count(p["errors"].get<uint64_t>()), ns_or_dash(p["latency_ns"]["p50"]),
                           ns_or_dash(p["latency_ns"]["p99"]));
    }

    if (!doc["warnings"].empty()) {
        section(out, "Warnings");
        for (const auto& w : doc["warnings"]) out += fmt::format("  {}\n", w.get<std::string>());
    }
    return out;
}

}  // namespace sigmatrace::analyzer
