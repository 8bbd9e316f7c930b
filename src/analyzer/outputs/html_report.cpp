#include "analyzer/outputs/html_report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <cctype>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "analyzer/outputs/format_units.h"
#include "analyzer/outputs/json_text.h"

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

std::string nic_name(const json& n) {
    return fmt::format("{}/{}", n.value("node", std::string("?")), n.value("device", std::string("?")));
}

// What the charts draw, taken from the analysis document: times in ms from the first window, raw bytes and
// nanoseconds otherwise (the page script formats units). One blob, read by the page script.
constexpr std::size_t kOutstandingSeries = 16;

json chart_data(const json& doc) {
    json d;
    const json& windows = doc.contains("timeline") ? doc["timeline"].value("windows", json::array()) : json::array();
    const double t0 = windows.empty() ? 0.0 : windows[0]["start_ns"].get<double>();
    auto ms = [&](double abs_ns) { return (abs_ns - t0) / 1e6; };
    // A window lists only the links (receivers) active in it: absent means zero, drawn as such so that a line
    // does not bridge an idle stretch.
    std::map<std::string, std::map<size_t, json>> links, receivers, qp_bytes;
    std::map<std::string, uint64_t> qp_peak;
    for (size_t i = 0; i < windows.size(); ++i) {
        for (const auto& l : windows[i].value("links", json::array()))
            links[nic_name(l["src"]) + " -> " + nic_name(l["dst"])][i] = l["bytes_per_s"];
        for (const auto& r : windows[i].value("receivers", json::array()))
            receivers[nic_name(r["receiver"])][i] = r["senders"];
        for (const auto& q : windows[i].value("qps", json::array())) {
            if (!q.contains("max_bytes")) continue;
            const std::string name = fmt::format("{} pid {} qp {}", q.value("node", std::string("?")), json_text(q["pid"]), json_text(q["qp_num"]));
            qp_bytes[name][i] = q["max_bytes"];
            qp_peak[name] = std::max(qp_peak[name], q["max_bytes"].get<uint64_t>());
        }
    }
    // The outstanding-bytes-over-time chart draws the QPs with the highest peaks: a line per QP stops being
    // readable long before a job's QP count.
    if (qp_bytes.size() > kOutstandingSeries) {
        std::vector<std::pair<uint64_t, std::string>> by_peak;
        for (const auto& [name, peak] : qp_peak) by_peak.emplace_back(peak, name);
        std::sort(by_peak.begin(), by_peak.end(), std::greater<>());
        for (std::size_t i = kOutstandingSeries; i < by_peak.size(); ++i) qp_bytes.erase(by_peak[i].second);
    }
    auto series = [&](const std::map<std::string, std::map<size_t, json>>& m) {
        json out = json::array();
        for (const auto& [name, values] : m) {
            json pts = json::array();
            for (size_t i = 0; i < windows.size(); ++i) {
                const auto v = values.find(i);
                pts.push_back(json::array({ms(windows[i]["start_ns"].get<double>()), v == values.end() ? json(0) : v->second}));
            }
            out.push_back(json{{"name", name}, {"points", pts}});
        }
        return out;
    };
    d["window_ns"] = doc.contains("timeline") ? doc["timeline"].value("window_ns", json()) : json();
    d["links"] = series(links);
    d["receivers"] = series(receivers);
    d["qp_series"] = series(qp_bytes);
    d["qp_series_total"] = qp_peak.size();
    d["gray"] = json::array();
    for (const auto& f : doc["findings"]) {
        if (f["kind"] != "gray_link") continue;
        const json& e = f["evidence"];
        d["gray"].push_back(json{{"link", nic_name(e["link"]["src"]) + " -> " + nic_name(e["link"]["dst"])},
                                 {"start_ms", ms(e["start_unix_ns"].get<double>())},
                                 {"end_ms", ms(e["end_unix_ns"].get<double>())}});
    }
    d["qps"] = json::array();
    for (const auto& q : doc.value("qps", json::array())) {
        if (!q.contains("outstanding")) continue;
        d["qps"].push_back(json{{"name", fmt::format("{} qp {}", nic_name(q), json_text(q["qp_num"]))},
                                {"max_bytes", q["outstanding"].value("max_bytes", 0)},
                                {"p99_bytes", q["outstanding"].value("p99_bytes", 0)},
                                {"max_wrs", q["outstanding"].value("max_wrs", 0)}});
    }
    d["phases"] = doc.contains("phases") ? doc["phases"] : json();
    std::set<std::string> names;
    for (const auto& c : doc["traffic"]["node_matrix"]) {
        names.insert(c["src"].get<std::string>());
        names.insert(c["dst"].get<std::string>());
    }
    const std::vector<std::string> v(names.begin(), names.end());
    auto index = [&](const json& n) {
        return std::distance(v.begin(), std::find(v.begin(), v.end(), n.get<std::string>()));
    };
    d["matrix"] = json{{"names", v}, {"cells", json::array()}};
    for (const auto& c : doc["traffic"]["node_matrix"])
        d["matrix"]["cells"].push_back(json::array({index(c["dst"]), index(c["src"]), c["bytes"]}));
    d["latency"] = json::array();
    for (auto it = doc["ops"]["by_opcode"].begin(); it != doc["ops"]["by_opcode"].end(); ++it)
        if (!it.value()["latency_histogram"].empty())
            d["latency"].push_back(json{{"opcode", it.key()}, {"bins", it.value()["latency_histogram"]}});
    d["rails"] = doc.value("rails", json::array());
    d["spread"] = doc["barriers"].value("epoch_samples", json::array());
    return d;
}

// The blob sits in a <script> element: every '<' becomes \u003c (legal only inside JSON strings, where it
// means the same), so no "</script" or "<!--" in a node name or path can end or bend the element.
std::string script_safe(const std::string& json_text) {
    std::string out;
    out.reserve(json_text.size());
    for (char c : json_text) {
        if (c == '<') out += "\\u003c";
        else out.push_back(c);
    }
    return out;
}

// The page script: one ECharts instance per <div class=chart data-chart=NAME>. It records, per chart, the
// number of data points ECharts holds (from getOption()) in #chart-counts, and any script error in
// #page-errors, so that a headless browser test can compare them with the analysis document.
constexpr std::string_view kPageScript = R"JS(
(function () {
  const errors = document.getElementById('page-errors');
  window.addEventListener('error', e => { errors.textContent += 'error: ' + e.message + '\n'; });
  const consoleError = console.error.bind(console);
  console.error = (...a) => { errors.textContent += 'console.error: ' + a.join(' ') + '\n'; consoleError(...a); };
  const D = JSON.parse(document.getElementById('sigmatrace-data').textContent);
  const units = (v, steps) => { for (const [d, u] of steps) if (Math.abs(v) >= d) return +(v / d).toPrecision(3) + ' ' + u; return +v.toPrecision(3) + ' ' + steps[steps.length - 1][1]; };
  const ns = v => units(v, [[1e9, 's'], [1e6, 'ms'], [1e3, 'us'], [1, 'ns']]);
  const bytes = v => units(v, [[1073741824, 'GiB'], [1048576, 'MiB'], [1024, 'KiB'], [1, 'B']]);
  const rate = v => bytes(v) + '/s';
  const timeAxis = { type: 'value', name: 'time from first window (ms)', nameLocation: 'middle', nameGap: 26 };
  const base = { animation: false, tooltip: { trigger: 'axis' }, grid: { left: 80, right: 30, top: 40, bottom: 50 } };
  const zoom = [{ type: 'inside', filterMode: 'none' }];
  const charts = {};
  function draw(name, option) {
    const el = document.querySelector('[data-chart="' + name + '"]');
    if (!el) return;
    const c = echarts.init(el, null, { renderer: 'canvas' });
    c.setOption(Object.assign({}, base, option));
    charts[name] = c;
  }
  const gray = { itemStyle: { color: 'rgba(120,120,120,0.25)' }, label: { show: true, position: 'insideTop', formatter: 'gray' } };
  draw('throughput', {
    legend: { type: 'scroll', top: 0 }, xAxis: timeAxis, dataZoom: zoom,
    yAxis: { type: 'value', name: 'throughput', axisLabel: { formatter: rate } },
    series: D.links.map((l, i) => ({
      name: l.name, type: 'line', showSymbol: false, data: l.points,
      markArea: Object.assign({}, gray, { data: D.gray.filter(g => g.link === l.name || (i === 0 && !D.links.some(x => x.name === g.link)))
                                                      .map(g => [{ xAxis: g.start_ms }, { xAxis: g.end_ms }]) })
    }))
  });
  draw('incast', {
    legend: { type: 'scroll', top: 0 }, xAxis: timeAxis, dataZoom: zoom,
    yAxis: { type: 'value', name: 'senders', minInterval: 1 },
    series: D.receivers.map(r => ({ name: r.name, type: 'line', step: 'end', showSymbol: false, data: r.points }))
  });
  draw('outstanding_time', {
    legend: { type: 'scroll', top: 0 }, xAxis: timeAxis, dataZoom: zoom, tooltip: { trigger: 'axis', valueFormatter: bytes },
    yAxis: { type: 'value', name: 'outstanding (window max)', axisLabel: { formatter: bytes } },
    series: D.qp_series.map(q => ({ name: q.name, type: 'line', step: 'end', showSymbol: false, data: q.points }))
  });
  draw('outstanding', {
    legend: { top: 0 }, tooltip: { trigger: 'axis', valueFormatter: bytes },
    xAxis: { type: 'category', data: D.qps.map(q => q.name), axisLabel: { rotate: 30, fontSize: 10 } },
    yAxis: { type: 'value', name: 'outstanding', axisLabel: { formatter: bytes } },
    grid: { left: 80, right: 30, top: 40, bottom: 110 },
    series: [{ name: 'max bytes', type: 'bar', data: D.qps.map(q => q.max_bytes) },
             { name: 'p99 bytes', type: 'bar', data: D.qps.map(q => q.p99_bytes) }]
  });
  if (Array.isArray(D.phases) && D.phases.length) draw('phases', {
    tooltip: { trigger: 'axis', formatter: ps => { const p = D.phases[ps[0].dataIndex]; return 'phase ' + ps[0].dataIndex + ': ' + ns(p.end_ns - p.start_ns) + ', ' + bytes(p.bytes) + ', lower bound ' + ns(p.lower_bound_ns) + ', efficiency ' + (100 * p.efficiency).toFixed(1) + '%, binding port ' + JSON.stringify(p.binding_port); } },
    xAxis: { type: 'category', name: 'phase', data: D.phases.map((p, i) => String(i)) },
    yAxis: { type: 'value', name: 'efficiency', max: 1, axisLabel: { formatter: v => (100 * v).toFixed(0) + '%' } },
    series: [{ name: 'efficiency', type: 'bar', data: D.phases.map(p => p.efficiency), label: { show: true, position: 'top', formatter: p => (100 * p.value).toFixed(0) + '%' } }]
  });
  const mx = D.matrix.cells.reduce((m, c) => Math.max(m, c[2]), 0);
  draw('matrix', {
    tooltip: { formatter: p => D.matrix.names[p.value[1]] + ' -> ' + D.matrix.names[p.value[0]] + ': ' + bytes(p.value[2]) },
    grid: { left: 90, right: 30, top: 30, bottom: 90 },
    xAxis: { type: 'category', name: 'destination', nameLocation: 'middle', nameGap: 60, data: D.matrix.names, axisLabel: { rotate: 30 } },
    yAxis: { type: 'category', name: 'source', data: D.matrix.names },
    visualMap: { min: 0, max: mx || 1, calculable: true, orient: 'horizontal', left: 'center', bottom: 0, formatter: v => bytes(v), inRange: { color: ['#f7fbff', '#08306b'] } },
    series: [{ name: 'bytes', type: 'heatmap', data: D.matrix.cells, label: { show: true, fontSize: 10, formatter: p => bytes(p.value[2]) } }]
  });
  draw('latency', {
    legend: { top: 0 }, tooltip: { trigger: 'item', formatter: p => p.seriesName + ' ' + ns(p.value[2]) + ' - ' + ns(p.value[3]) + ': ' + p.value[1] },
    xAxis: { type: 'log', logBase: 10, name: 'latency', nameLocation: 'middle', nameGap: 26, axisLabel: { formatter: ns } },
    yAxis: { type: 'value', name: 'operations', minInterval: 1 },
    series: D.latency.map(o => ({ name: o.opcode, type: 'scatter', symbolSize: 6,
                                  data: o.bins.map(b => [Math.sqrt(Math.max(1, b[0]) * Math.max(1, b[1])), b[2], b[0], b[1]]) }))
  });
  draw('rails', {
    legend: { top: 0 }, tooltip: { trigger: 'axis', valueFormatter: bytes },
    xAxis: { type: 'category', data: D.rails.map(r => r.node + ' ' + r.device) },
    yAxis: { type: 'value', axisLabel: { formatter: bytes } },
    series: [{ name: 'tx', type: 'bar', data: D.rails.map(r => r.bytes_tx) }, { name: 'rx', type: 'bar', data: D.rails.map(r => r.bytes_rx) }]
  });
  draw('spread', {
    tooltip: { trigger: 'item', formatter: p => 'spread ' + ns(p.value[1]) },
    xAxis: { type: 'value', name: 'time in trace', axisLabel: { formatter: ns } },
    yAxis: { type: 'value', name: 'barrier spread', axisLabel: { formatter: ns } },
    series: [{ type: 'scatter', symbolSize: 5, data: D.spread.map(e => [e[0], e[1]]) }]
  });
  const counts = {};
  for (const [name, c] of Object.entries(charts)) {
    const series = c.getOption().series;
    counts[name] = series.reduce((n, s) => n + (s.data ? s.data.length : 0), 0);
    if (name === 'throughput') counts.gray_areas = series.reduce((n, s) => n + (s.markArea && s.markArea.data ? s.markArea.data.length : 0), 0);
  }
  document.getElementById('chart-counts').textContent = JSON.stringify(counts);
  window.addEventListener('resize', () => Object.values(charts).forEach(c => c.resize()));
})();
)JS";

}  // namespace

std::optional<std::string> load_charting_library(const std::filesystem::path& data_dir) {
    std::ifstream in(data_dir / kChartingLibraryFile, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) return std::nullopt;
    // A library text that could end its own <script> element would break the page; treat it as missing.
    std::string lower = text.str();
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower.find("</script") != std::string::npos) return std::nullopt;
    return std::move(text).str();
}

std::string render_html_report(const json& doc, const std::optional<std::string>& charting_library) {
    const json& tr = doc["trace"];
    const bool charts = charting_library.has_value();
    auto chart = [&](std::string_view name, int height) {
        return charts ? fmt::format("<div class=chart data-chart=\"{}\" style=\"height:{}px\"></div>", name, height)
                      : std::string();
    };
    std::string h = R"(<!doctype html><html><head><meta charset="utf-8"><title>SigmaTrace analysis</title><style>
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.muted{color:#777;font-size:12px}
.chart{width:100%;margin:8px 0}.note{background:#fff4d6;border:1px solid #e0c070;padding:6px 10px}
.error{color:#b00020}.warning{color:#a05a00}.info{color:#555}h2{margin-top:28px;border-bottom:1px solid #ddd}
</style></head><body>)";
    h += "<h1>SigmaTrace analysis</h1>";
    if (!charts)
        h += fmt::format("<p class=note>Charts are not shown: the charting library ({}) was not found next to the "
                         "analyzer (share/sigmatrace/). Build with -DSIGMATRACE_ECHARTS=ON (docs/analyzer.md, \"HTML "
                         "report\"); the tables below are complete.</p>",
                         kChartingLibraryFile);
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
                             esc(f["summary"].get<std::string>()), esc(json_text(f["evidence"], 2)));
        h += "</ul>";
    }

    const json cd = chart_data(doc);
    h += "<h2>Timeline</h2>";
    if (cd["links"].empty() && cd["receivers"].empty()) {
        h += "<p class=muted>no time windows (the timeline needs a trace with data transfers)</p>";
    } else {
        h += fmt::format("<h3>Throughput per link</h3><p class=muted>per window of {}; shaded: gray-link episodes "
                         "({} found)</p>",
                         cd["window_ns"].is_number() ? format_ns(cd["window_ns"].get<double>()) : std::string("?"),
                         cd["gray"].size());
        h += chart("throughput", 340);
        h += "<h3>Incast: concurrent senders per receiver</h3>" + chart("incast", 260);
    }
    h += "<h2>Outstanding bytes per QP</h2>";
    if (!cd["qp_series"].empty()) {
        h += fmt::format("<h3>Over time</h3><p class=muted>each window's maximum of the bytes posted and not yet "
                         "completed; {} of {} QPs with a series (the highest peaks)</p>",
                         cd["qp_series"].size(), cd["qp_series_total"].get<std::size_t>());
        h += chart("outstanding_time", 300);
        h += "<h3>Over the trace</h3>";
    }
    h += cd["qps"].empty() ? std::string("<p class=muted>no queue pair</p>") : chart("outstanding", 320);
    h += "<h2>Phases</h2>";
    if (cd["phases"].is_array() && !cd["phases"].empty())
        h += "<p class=muted>efficiency = lower bound / measured duration; the tooltip names the binding port</p>" +
             chart("phases", 280);
    else
        h += "<p class=muted>no phases in this analysis</p>";

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
    if (!cd["latency"].empty())
        h += "<h3>Latency distribution (post to completion, log scale)</h3>" + chart("latency", 300);

    const json& t = doc["traffic"];
    h += fmt::format("<h2>Traffic</h2><p>Inbound skew <b>{:.2f}x</b>, outbound skew <b>{:.2f}x</b> (max/mean over nodes, "
                     "inter-node bytes).</p>",
                     t["inbound_skew"].get<double>(), t["outbound_skew"].get<double>());
    h += cd["matrix"]["cells"].empty() ? std::string("<p class=muted>no transfer between known nodes</p>")
                                       : chart("matrix", 160 + 40 * static_cast<int>(cd["matrix"]["names"].size()));
    h += "<h2>Rails</h2>";
    h += cd["rails"].empty() ? std::string("<p class=muted>no traffic on a known NIC</p>") : chart("rails", 260);

    const json& b = doc["barriers"];
    h += "<h2>Barriers</h2>";
    if (b["epochs"].get<uint64_t>() == 0) {
        h += "<p>No barrier detected.</p>";
    } else {
        h += fmt::format("<p>{} epochs; spread p50 {}, p99 {}, max {}.</p>", b["epochs"].get<uint64_t>(),
                         ns_or_dash(b["spread_ns"]["p50"]), ns_or_dash(b["spread_ns"]["p99"]), ns_or_dash(b["spread_ns"]["max"]));
        if (!cd["spread"].empty()) h += chart("spread", 240);
        h += "<table><tr><th>last to arrive</th><th>node</th><th>times last</th></tr>";
        for (const auto& s : b["stragglers"])
            h += fmt::format("<tr><td>rank {}</td><td>{}</td><td>{}</td></tr>", json_text(s["rank"]),
                             esc(s["node"].is_string() ? s["node"].get<std::string>() : "?"), s["times_last"].get<uint64_t>());
        h += "</table>";
    }

    h += "<h2>Processes</h2><table><tr><th>rank</th><th>node</th><th>pid</th><th>ops</th><th>bytes</th><th>errors</th><th>p50</th><th>p99</th></tr>";
    for (const auto& p : doc["processes"])
        h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                         json_text(p["rank"]), esc(p["node"].get<std::string>()), json_text(p["pid"]),
                         format_count(p["ops"].get<uint64_t>()), format_bytes(p["bytes"].get<double>()),
                         format_count(p["errors"].get<uint64_t>()), ns_or_dash(p["latency_ns"]["p50"]),
                         ns_or_dash(p["latency_ns"]["p99"]));
    h += "</table>";
    if (!doc["warnings"].empty()) {
        h += "<h2>Warnings</h2><ul>";
        for (const auto& w : doc["warnings"]) h += fmt::format("<li>{}</li>", esc(w.get<std::string>()));
        h += "</ul>";
    }
    if (charts) {
        h += "<pre id=chart-counts hidden></pre><pre id=page-errors hidden></pre>";
        h += "<script>" + *charting_library + "</script>";
        h += "<script type=\"application/json\" id=\"sigmatrace-data\">" + script_safe(json_text(cd)) + "</script>";
        h += fmt::format("<script>{}</script>", kPageScript);
    }
    h += "</body></html>\n";
    return h;
}

}  // namespace sigmatrace::analyzer
