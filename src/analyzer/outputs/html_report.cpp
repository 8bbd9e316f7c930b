#include "analyzer/outputs/html_report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "analyzer/outputs/format_units.h"

namespace sigmatrace::analyzer {

using nlohmann::json;

namespace {

std::string esc(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        default: out.push_back(c);
        }
    }
    return out;
}

std::string ns_or_dash(const json& v) { return v.is_number() ? format_ns(v.get<double>()) : std::string("-"); }

// A bar chart of a latency histogram: x = log10(ns), y = count.
std::string latency_svg(const json& bins) {
    if (bins.empty()) return "<p class=muted>no completed operation</p>";
    constexpr double W = 520, H = 140, L = 40, B = 22;
    double lo = 1e300, hi = 0, ymax = 0;
    for (const auto& b : bins) {
        lo = std::min(lo, std::max(1.0, b[0].get<double>()));
        hi = std::max(hi, std::max(1.0, b[1].get<double>()));
        ymax = std::max(ymax, b[2].get<double>());
    }
    double x0 = std::floor(std::log10(lo)), x1 = std::ceil(std::log10(hi));
    if (x1 <= x0) x1 = x0 + 1;
    auto X = [&](double v) { return L + (std::log10(std::max(1.0, v)) - x0) / (x1 - x0) * (W - L - 10); };
    std::string s = fmt::format("<svg width=\"{}\" height=\"{}\" role=\"img\">", W, H);
    for (const auto& b : bins) {
        const double xa = X(b[0].get<double>()), xb = X(b[1].get<double>());
        const double h = b[2].get<double>() / ymax * (H - B - 10);
        s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#3b7dd8\"><title>{} - {}: {}</title></rect>",
                         xa, H - B - h, std::max(1.0, xb - xa), h, format_ns(b[0].get<double>()),
                         format_ns(b[1].get<double>()), b[2].get<uint64_t>());
    }
    for (double d = x0; d <= x1; d += 1) {
        const double x = X(std::pow(10.0, d));
        s += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#999\"/>"
                         "<text x=\"{0:.1f}\" y=\"{3}\" font-size=\"10\" text-anchor=\"middle\">{4}</text>",
                         x, H - B, H - B + 4, H - 6, format_ns(std::pow(10.0, d)));
    }
    s += fmt::format("<text x=\"2\" y=\"12\" font-size=\"10\">max {}</text></svg>", static_cast<uint64_t>(ymax));
    return s;
}

std::string matrix_svg(const json& traffic) {
    std::set<std::string> names;
    std::map<std::pair<std::string, std::string>, double> cell;
    double mx = 0;
    for (const auto& c : traffic["node_matrix"]) {
        names.insert(c["src"].get<std::string>());
        names.insert(c["dst"].get<std::string>());
        const double b = c["bytes"].get<double>();
        cell[{c["src"].get<std::string>(), c["dst"].get<std::string>()}] = b;
        mx = std::max(mx, b);
    }
    if (names.empty()) return "<p class=muted>no transfer between known nodes</p>";
    const std::vector<std::string> v(names.begin(), names.end());
    const double n = static_cast<double>(v.size());
    const double C = std::clamp(420.0 / n, 6.0, 48.0), L = 90, T = 90;
    std::string s = fmt::format("<svg width=\"{:.0f}\" height=\"{:.0f}\" role=\"img\">", L + C * n + 10, T + C * n + 10);
    for (std::size_t i = 0; i < v.size(); ++i) {
        s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"end\">{}</text>", L - 4,
                         T + C * static_cast<double>(i) + C / 2 + 3, esc(v[i]));
        s += fmt::format("<text transform=\"translate({:.1f},{:.1f}) rotate(-60)\" font-size=\"10\">{}</text>",
                         L + C * static_cast<double>(i) + C / 2, T - 4, esc(v[i]));
        for (std::size_t j = 0; j < v.size(); ++j) {
            auto it = cell.find({v[i], v[j]});
            const double b = it == cell.end() ? 0.0 : it->second;
            const double t = mx > 0 ? b / mx : 0.0;
            const int r = static_cast<int>(255 - 200 * t), g = static_cast<int>(255 - 140 * t);
            s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"rgb({},{},255)\" "
                             "stroke=\"#ddd\"><title>{} -&gt; {}: {}</title></rect>",
                             L + C * static_cast<double>(j), T + C * static_cast<double>(i), C, C, r, g, esc(v[i]),
                             esc(v[j]), format_bytes(b));
        }
    }
    s += "</svg><p class=muted>rows: source node, columns: destination node; darker = more bytes</p>";
    return s;
}

std::string rails_svg(const json& rails) {
    if (rails.empty()) return "<p class=muted>no traffic on a known NIC</p>";
    double mx = 0;
    for (const auto& r : rails) mx = std::max({mx, r["bytes_tx"].get<double>(), r["bytes_rx"].get<double>()});
    const double rowh = 18, L = 170, W = 520;
    std::string s = fmt::format("<svg width=\"{}\" height=\"{:.0f}\" role=\"img\">", W + L + 90,
                                rowh * 2 * static_cast<double>(rails.size()) + 10);
    double y = 4;
    for (const auto& r : rails) {
        for (const char* dir : {"bytes_tx", "bytes_rx"}) {
            const double b = r[dir].get<double>();
            const double w = mx > 0 ? b / mx * W : 0;
            s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" font-size=\"11\" text-anchor=\"end\">{} {} {}</text>"
                             "<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.1f}\" height=\"{:.0f}\" fill=\"{}\"/>"
                             "<text x=\"{:.1f}\" y=\"{:.0f}\" font-size=\"11\">{}</text>",
                             L - 6, y + 12, esc(r["node"].get<std::string>()), esc(r["device"].get<std::string>()),
                             std::string_view(dir) == "bytes_tx" ? "tx" : "rx", L, y, w, rowh - 4,
                             std::string_view(dir) == "bytes_tx" ? "#d8833b" : "#3bb08f", L + w + 4, y + 12,
                             format_bytes(b));
            y += rowh;
        }
    }
    return s + "</svg>";
}

std::string spread_svg(const json& samples) {
    if (samples.empty()) return "";
    constexpr double W = 620, H = 160, L = 60, B = 20;
    double tmax = 1, smax = 1;
    for (const auto& e : samples) {
        tmax = std::max(tmax, e[0].get<double>());
        smax = std::max(smax, e[1].get<double>());
    }
    std::string s = fmt::format("<svg width=\"{}\" height=\"{}\" role=\"img\">", W, H);
    for (const auto& e : samples) {
        const double x = L + e[0].get<double>() / tmax * (W - L - 10);
        const double y = H - B - e[1].get<double>() / smax * (H - B - 10);
        s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"#c0392b\"><title>spread {} (last: rank {})</title></circle>",
                         x, y, format_ns(e[1].get<double>()), e[2].is_null() ? std::string("?") : e[2].dump());
    }
    s += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" stroke=\"#999\"/>"
                     "<text x=\"2\" y=\"14\" font-size=\"10\">{3}</text><text x=\"2\" y=\"{4}\" font-size=\"10\">0</text>"
                     "<text x=\"{1}\" y=\"{5}\" font-size=\"10\" text-anchor=\"end\">time in trace: {6}</text></svg>",
                     L, W - 10, H - B, format_ns(smax), H - B, H - 4, format_ns(tmax));
    return s + "<p class=muted>barrier spread per epoch (last arrival - first arrival) over the trace</p>";
}

}  // namespace

std::string render_html_report(const json& doc) {
    const json& tr = doc["trace"];
    std::string h = R"(<!doctype html><html><head><meta charset="utf-8"><title>SigmaTrace analysis</title><style>
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.muted{color:#777;font-size:12px}
.error{color:#b00020}.warning{color:#a05a00}.info{color:#555}h2{margin-top:28px;border-bottom:1px solid #ddd}
</style></head><body>)";
    h += "<h1>SigmaTrace analysis</h1>";
    const uint64_t late = tr.value("late_events", uint64_t{0});   // deferred emission only (docs/analyzer.md)
    h += fmt::format("<p>{} processes on {} nodes, {} of trace, {} events, <b>{}</b> discarded{}.</p>",
                     tr["processes"].get<uint64_t>(), tr["nodes"].get<uint64_t>(), format_ns(tr["duration_ns"].get<double>()),
                     format_count(tr["events"].get<uint64_t>()), format_count(tr["discarded_events"].get<uint64_t>()),
                     late ? fmt::format(", <b>{}</b> out of capture order", format_count(late)) : "");
    for (const auto& p : tr["paths"]) h += fmt::format("<div class=muted>trace: {}</div>", esc(p.get<std::string>()));

    h += "<h2>Findings</h2>";
    if (doc["findings"].empty()) h += "<p>None.</p>";
    else {
        h += "<ul>";
        for (const auto& f : doc["findings"])
            h += fmt::format("<li class=\"{0}\"><b>[{0}] {1}</b>: {2}<details><summary class=muted>evidence</summary><pre>{3}</pre></details></li>",
                             esc(f["severity"].get<std::string>()), esc(f["kind"].get<std::string>()),
                             esc(f["summary"].get<std::string>()), esc(f["evidence"].dump(2)));
        h += "</ul>";
    }

    const json& ops = doc["ops"];
    h += fmt::format("<h2>Operations</h2><p>{} operations, {} errors, {} in flight at end, {} unconfirmed at "
                     "teardown, {} GPU-posted. Latency: operations whose own completion was seen; receives: the "
                     "time they sat posted.</p>",
                     format_count(ops["total"].get<uint64_t>()), format_count(ops["errors"].get<uint64_t>()),
                     format_count(ops["in_flight_at_end"].get<uint64_t>()),
                     format_count(ops.value("unconfirmed", uint64_t{0})), format_count(ops["gpu"].get<uint64_t>()));
    h += "<table><tr><th>opcode</th><th>count</th><th>bytes</th><th>errors</th><th>p50</th><th>p99</th><th>max</th></tr>";
    for (auto it = ops["by_opcode"].begin(); it != ops["by_opcode"].end(); ++it) {
        const json& o = it.value();
        const json& t = o.contains("time_posted_ns") ? o["time_posted_ns"] : o["latency_ns"];
        h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                         esc(it.key() + (o.contains("time_posted_ns") ? " (time posted)" : "")),
                         format_count(o["count"].get<uint64_t>()), format_bytes(o["bytes"].get<double>()),
                         format_count(o["errors"].get<uint64_t>()), ns_or_dash(t["p50"]), ns_or_dash(t["p99"]),
                         ns_or_dash(t["max"]));
    }
    h += "</table>";
    for (auto it = ops["by_opcode"].begin(); it != ops["by_opcode"].end(); ++it) {
        if (it.value()["latency_histogram"].empty()) continue;
        h += fmt::format("<h3>{} latency (post to completion)</h3>", esc(it.key()));
        h += latency_svg(it.value()["latency_histogram"]);
    }

    const json& t = doc["traffic"];
    h += fmt::format("<h2>Traffic</h2><p>Inbound skew <b>{:.2f}x</b>, outbound skew <b>{:.2f}x</b> (max/mean over nodes, "
                     "inter-node bytes).</p>",
                     t["inbound_skew"].get<double>(), t["outbound_skew"].get<double>());
    h += matrix_svg(t);
    h += "<h2>Rails</h2>" + rails_svg(doc["rails"]);

    const json& b = doc["barriers"];
    h += "<h2>Barriers</h2>";
    if (b["epochs"].get<uint64_t>() == 0) {
        h += "<p>No barrier detected.</p>";
    } else {
        h += fmt::format("<p>{} epochs; spread p50 {}, p99 {}, max {}.</p>", b["epochs"].get<uint64_t>(),
                         ns_or_dash(b["spread_ns"]["p50"]), ns_or_dash(b["spread_ns"]["p99"]), ns_or_dash(b["spread_ns"]["max"]));
        h += spread_svg(b["epoch_samples"]);
        h += "<table><tr><th>last to arrive</th><th>node</th><th>times last</th></tr>";
        for (const auto& s : b["stragglers"])
            h += fmt::format("<tr><td>rank {}</td><td>{}</td><td>{}</td></tr>", s["rank"].dump(),
                             esc(s["node"].is_string() ? s["node"].get<std::string>() : "?"), s["times_last"].get<uint64_t>());
        h += "</table>";
    }

    h += "<h2>Processes</h2><table><tr><th>rank</th><th>node</th><th>pid</th><th>ops</th><th>bytes</th><th>errors</th><th>p50</th><th>p99</th></tr>";
    for (const auto& p : doc["processes"])
        h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                         p["rank"].dump(), esc(p["node"].get<std::string>()), p["pid"].dump(),
                         format_count(p["ops"].get<uint64_t>()), format_bytes(p["bytes"].get<double>()),
                         format_count(p["errors"].get<uint64_t>()), ns_or_dash(p["latency_ns"]["p50"]),
                         ns_or_dash(p["latency_ns"]["p99"]));
    h += "</table>";
    if (!doc["warnings"].empty()) {
        h += "<h2>Warnings</h2><ul>";
        for (const auto& w : doc["warnings"]) h += fmt::format("<li>{}</li>", esc(w.get<std::string>()));
        h += "</ul>";
    }
    h += "</body></html>\n";
    return h;
}

}  // namespace sigmatrace::analyzer
