#include "analyzer/outputs/report_builder.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <sigmatrace/opcodes.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "analyzer/analyses/analysis.h"
#include "analyzer/outputs/format_units.h"

namespace sigmatrace::analyzer {

using nlohmann::json;

std::string opcode_name(uint8_t code) {
    if (code == kOpRecv) return "RECV";
    if (code == kOpRecvRdmaWithImm) return "RECV_RDMA_WITH_IMM";
    return std::string(wr_opcode_name(code));
}

namespace {

int64_t round_ns(double v) { return static_cast<int64_t>(std::llround(v)); }

json quantiles_json(const QuantileHistogram& h) {
    if (h.count() == 0) return json{{"p50", nullptr}, {"p99", nullptr}, {"max", nullptr}};
    return json{{"p50", round_ns(h.quantile(0.5))}, {"p99", round_ns(h.quantile(0.99))}, {"max", round_ns(h.max())}};
}

// Quantiles with the sample count, mean and min: the form of every time distribution in `ops`.
json times_json(const QuantileHistogram& h) {
    json j = quantiles_json(h);
    j["count"] = h.count();
    if (h.count()) {
        j["mean"] = round_ns(h.mean());
        j["min"] = round_ns(h.min());
    }
    return j;
}

json histogram_bins_json(const QuantileHistogram& h) {
    json bins = json::array();
    for (const auto& [lo, hi, n] : h.nonempty_bins()) bins.push_back(json::array({round_ns(lo), round_ns(hi), n}));
    return bins;
}

std::string hex(uint64_t v) { return fmt::format("0x{:x}", v); }

// Severity order for sorting findings: errors first.
int severity_rank(const std::string& s) { return s == "error" ? 0 : s == "warning" ? 1 : 2; }

}  // namespace

json finding(std::string kind, std::string severity, std::string summary, json evidence) {
    return json{{"kind", std::move(kind)},
                {"severity", std::move(severity)},
                {"summary", std::move(summary)},
                {"evidence", std::move(evidence)}};
}

json latency_json(const OpAggregate& agg) { return quantiles_json(agg.latency_ns); }

std::string ReportBuilder::node_name(NodeId n) const {
    return n == kNoId ? std::string("?") : a_.topo_.node(n).name;
}

json ReportBuilder::nic_ref(DevId d) const {
    if (d == kNoId) return json{{"node", nullptr}, {"device", nullptr}};
    return json{{"node", node_name(a_.topo_.device(d).node)}, {"device", a_.topo_.device(d).name}};
}

std::string ReportBuilder::nic_label(DevId d) const {
    if (d == kNoId) return "?";
    return fmt::format("{}/{}", node_name(a_.topo_.device(d).node), a_.topo_.device(d).name);
}

json ReportBuilder::proc_ref(ProcId p) const {
    if (p == kNoId) return json{{"rank", nullptr}, {"node", nullptr}, {"pid", nullptr}};
    const Process& pr = a_.topo_.proc(p);
    return json{{"rank", pr.rank}, {"node", node_name(pr.node)}, {"pid", pr.pid}};
}

std::string ReportBuilder::proc_label(ProcId p) const {
    if (p == kNoId) return "?";
    const Process& pr = a_.topo_.proc(p);
    if (pr.rank >= 0) return fmt::format("rank {} ({})", pr.rank, node_name(pr.node));
    return fmt::format("pid {} ({})", pr.pid, node_name(pr.node));
}

std::vector<ProcId> ReportBuilder::active_processes() const {
    std::vector<ProcId> out;
    for (ProcId p = 0; p < a_.topo_.process_count(); ++p)
        if (a_.topo_.rdma_active(p)) out.push_back(p);
    return out;
}

std::vector<NodeId> ReportBuilder::trace_nodes() const {
    std::set<NodeId> ids;
    for (ProcId p = 0; p < a_.topo_.process_count(); ++p)
        if (a_.topo_.rdma_active(p)) ids.insert(a_.topo_.node_of(p));
    for (const auto& [key, cell] : a_.traffic_.node_matrix()) {
        ids.insert(key.first);
        ids.insert(key.second);
    }
    std::vector<NodeId> out(ids.begin(), ids.end());
    std::sort(out.begin(), out.end(), [&](NodeId x, NodeId y) { return node_name(x) < node_name(y); });
    return out;
}

uint64_t ReportBuilder::lost_records_total() const {
    uint64_t n = 0;
    for (const auto& [pid, count] : a_.lost_records_) n += count;
    return n;
}

std::string ReportBuilder::trace_mode() const {
    bool ops = a_.stats_.total().count > 0, counters = a_.counter_events_ > 0;
    for (ProcId p : active_processes()) (a_.topo_.proc(p).counters_mode ? counters : ops) = true;
    return ops && counters ? "mixed" : counters ? "counters" : "ops";
}

json ReportBuilder::trace_section() const {
    uint64_t discarded = 0, discarded_packets = 0, uncounted = 0;
    for (const DiscardRecord& d : a_.discards_) {
        (d.packets ? discarded_packets : discarded) += d.count;
        uncounted += !d.packets && d.count == 0;
    }
    json by_type = json::object();
    for (std::size_t i = 0; i < kEventCount; ++i)
        if (a_.events_by_id_[i]) by_type[kEventNames[i]] = a_.events_by_id_[i];
    const std::size_t nodes_with_processes = trace_nodes().size();
    return json{{"events", a_.events_},
                {"discarded_events", discarded},
                {"discarded_packets", discarded_packets},
                {"discarded_uncounted", uncounted},
                {"late_events", a_.ordering_.late_events},
                {"reorder_window_ns", a_.ordering_.window_ns},
                {"processes", active_processes().size()},
                {"processes_without_rdma", a_.topo_.process_count() - active_processes().size()},
                {"nodes", nodes_with_processes},
                {"duration_ns", a_.events_ ? a_.last_ts_ - a_.first_ts_ : 0},
                {"start_ns", a_.first_ts_},
                {"paths", a_.trace_paths_},
                {"salvaged_events", a_.salvaged_events_},
                {"lost_records", lost_records_total()},
                {"mode", trace_mode()},
                {"complete", a_.read_problems_.empty() && lost_records_total() == 0},
                {"read_problems", a_.read_problems_},
                {"events_by_type", by_type}};
}

json ReportBuilder::processes_section() const {
    std::vector<ProcId> order = active_processes();
    std::sort(order.begin(), order.end(), [&](ProcId x, ProcId y) {
        const Process& a = a_.topo_.proc(x);
        const Process& b = a_.topo_.proc(y);
        if ((a.rank < 0) != (b.rank < 0)) return a.rank >= 0;
        if (a.rank != b.rank) return a.rank < b.rank;
        if (a.node != b.node) return node_name(a.node) < node_name(b.node);
        return a.first_ts < b.first_ts;
    });
    json out = json::array();
    const auto& byp = a_.stats_.by_process();
    for (ProcId p : order) {
        const Process& pr = a_.topo_.proc(p);
        json j = proc_ref(p);
        j["procname"] = pr.procname;
        j["host"] = pr.host;
        j["job_id"] = pr.job_id;
        j["events"] = pr.events;
        j["schema_version"] = pr.schema_version;
        j["duration_ns"] = pr.last_ts - pr.first_ts;
        auto it = byp.find(p);
        const OpAggregate empty;
        const OpAggregate& agg = it == byp.end() ? empty : it->second;
        j["ops"] = agg.count;
        j["bytes"] = agg.bytes;
        j["errors"] = agg.errors();
        j["in_flight_at_end"] = agg.in_flight;
        j["unconfirmed"] = agg.unconfirmed;
        j["latency_ns"] = quantiles_json(agg.latency_ns);
        if (a_.counter_events_) {   // counters mode: what its QPs' counters add up to
            uint64_t wrs = 0, bytes = 0;
            for (QpId q = 0; q < a_.topo_.qp_count(); ++q)
                if (a_.topo_.qp(q).proc == p) {
                    wrs += a_.topo_.qp(q).counted.posted_wrs;
                    bytes += a_.topo_.qp(q).counted.posted_bytes;
                }
            j["counted_wrs"] = wrs;
            j["counted_bytes"] = bytes;
        }
        out.push_back(std::move(j));
    }
    return out;
}

json ReportBuilder::ops_section() const {
    const OpAggregate& t = a_.stats_.total();
    json by_opcode = json::object();
    for (const auto& [code, agg] : a_.stats_.by_opcode()) {
        json entry = json{
            {"count", agg.count},
            {"bytes", agg.bytes},
            {"posted_bytes", agg.posted_bytes},
            {"completed_bytes", agg.completed_bytes},
            {"in_flight_bytes", agg.in_flight_bytes},
            {"unconfirmed_bytes", agg.unconfirmed_bytes},
            {"completed", agg.completed},
            {"errors", agg.errors()},
            {"in_flight", agg.in_flight},
            {"unconfirmed", agg.unconfirmed},
            {"flushed_at_teardown", agg.flushed_at_teardown},
            {"observed_without_completion", agg.observed},
            {"implied", agg.implied},
            {"gpu", agg.gpu},
            {"cpu_direct", agg.cpu_direct},
            {"latency_ns", times_json(agg.latency_ns)},
            {"implied_latency_ns", times_json(agg.implied_latency_ns)},
            {"size_bytes",
             agg.size_bytes.count() ? json{{"p50", round_ns(agg.size_bytes.quantile(0.5))},
                                           {"max", round_ns(agg.size_bytes.max())}}
                                    : json{{"p50", nullptr}, {"max", nullptr}}},
            {"latency_histogram", histogram_bins_json(agg.latency_ns)},
        };
        if (code >= kOpRecv) {
            entry["time_posted_ns"] = times_json(agg.time_posted_ns);
            entry["time_posted_histogram"] = histogram_bins_json(agg.time_posted_ns);
        }
        by_opcode[opcode_name(code)] = std::move(entry);
    }
    return json{{"total", t.count},
                {"errors", t.errors()},
                {"failed", t.failed},
                {"flushed", t.flushed},
                {"flushed_at_teardown", t.flushed_at_teardown},
                {"in_flight_at_end", t.in_flight},
                {"unconfirmed", t.unconfirmed},
                {"observed_without_completion", t.observed},
                {"lost", t.lost},
                {"implied", t.implied},
                {"gpu", t.gpu},
                {"cpu_direct", t.cpu_direct},
                {"posted_bytes", t.posted_bytes},
                {"completed_bytes", t.completed_bytes},
                {"in_flight_bytes", t.in_flight_bytes},
                {"unconfirmed_bytes", t.unconfirmed_bytes},
                {"unconsumed_receives", a_.recon_.unconsumed_receives()},
                {"by_opcode", by_opcode}};
}

json ReportBuilder::qp_ref(const Qp& qp) const {
    json j = proc_ref(qp.proc);
    j["qp_num"] = qp.qp_num;
    j["type"] = qp.type;
    j["device"] = qp.dev == kNoId ? std::string("?") : a_.topo_.device(qp.dev).name;
    const Peer& peer = qp.peer;
    json pj = proc_ref(peer.proc);
    if (peer.node != kNoId) pj["node"] = node_name(peer.node);
    pj["qp_num"] = qp.has_remote ? json(qp.dest_qpn) : json(nullptr);
    pj["device"] = peer.dev == kNoId ? json(nullptr) : json(a_.topo_.device(peer.dev).name);
    j["peer"] = pj;
    return j;
}

json ReportBuilder::qps_section() const {
    json out = json::array();
    for (const auto& [q, agg] : a_.stats_.by_qp()) {
        const Qp& qp = a_.topo_.qp(q);
        json j = qp_ref(qp);
        // Who posted on it: verbs, or what its ring's WQEs say (a verbs QP exported with init_obj whose ring showed
        // nothing but verbs posts stays verbs).
        const records::Poster poster = qp.gpu && agg.count > agg.verbs_posted ? qp.poster : records::Poster::verbs;
        j["gpu"] = poster == records::Poster::gpu;
        j["poster"] = records::poster_name(poster);
        j["count"] = agg.count;
        j["bytes"] = agg.bytes;
        j["errors"] = agg.errors();
        j["in_flight"] = agg.in_flight;
        j["unconfirmed"] = agg.unconfirmed;
        j["latency_ns"] = quantiles_json(agg.latency_ns);
        if (json o = outstanding_json(q); !o.is_null()) j["outstanding"] = std::move(o);
        j["progress"] = progress_json(q);
        out.push_back(std::move(j));
    }
    return out;
}

json ReportBuilder::counters_section() const {
    // Counters mode: per-QP totals from qp_counters, per QP and per process pair, with rates over the counted time.
    auto rate = [](uint64_t v, int64_t ns) { return ns > 0 ? json(std::llround(static_cast<double>(v) * 1e9 / static_cast<double>(ns))) : json(nullptr); };
    struct Sum {
        uint64_t posted_wrs = 0, posted_bytes = 0, recv_wrs = 0, completions = 0, error_completions = 0, post_errors = 0;
        int64_t first_ns = 0, last_ns = 0;
        bool any = false;
        void add(const Qp::Counted& c) {
            posted_wrs += c.posted_wrs;
            posted_bytes += c.posted_bytes;
            recv_wrs += c.recv_wrs;
            completions += c.completions;
            error_completions += c.error_completions;
            post_errors += c.post_errors;
            first_ns = any ? std::min(first_ns, c.first_ns) : c.first_ns;
            last_ns = any ? std::max(last_ns, c.last_ns) : c.last_ns;
            any = true;
        }
    };
    auto fields = [&](json& j, const Sum& x) {
        j["posted_wrs"] = x.posted_wrs;
        j["posted_bytes"] = x.posted_bytes;
        j["recv_wrs"] = x.recv_wrs;
        j["completions"] = x.completions;
        j["error_completions"] = x.error_completions;
        j["post_errors"] = x.post_errors;
        j["duration_ns"] = x.last_ns - x.first_ns;
        j["bytes_per_s"] = rate(x.posted_bytes, x.last_ns - x.first_ns);
        j["wrs_per_s"] = rate(x.posted_wrs, x.last_ns - x.first_ns);
    };
    Sum total;
    json per_qp = json::array();
    std::map<std::pair<ProcId, ProcId>, Sum> pairs;
    for (QpId q = 0; q < a_.topo_.qp_count(); ++q) {
        const Qp& qp = a_.topo_.qp(q);
        if (qp.counted.events == 0) continue;
        Sum x;
        x.add(qp.counted);
        total.add(qp.counted);
        json j = qp_ref(qp);
        const Peer& peer = qp.peer;
        j["events"] = qp.counted.events;
        fields(j, x);
        per_qp.push_back(std::move(j));
        if (qp.type != 4 && peer.proc != kNoId) pairs[{qp.proc, peer.proc}].add(qp.counted);
    }
    json per_peer = json::array();
    for (const auto& [key, x] : pairs) {
        json j{{"src", proc_ref(key.first)}, {"dst", proc_ref(key.second)}};
        fields(j, x);
        per_peer.push_back(std::move(j));
    }
    json out{{"events", a_.counter_events_}, {"qps", per_qp.size()}};
    fields(out, total);
    out["per_qp"] = std::move(per_qp);
    out["per_peer"] = std::move(per_peer);
    // Without per-operation events these cannot be computed: said, not shown as zeros.
    out["needs_per_operation_events"] = json::array(
        {"ops.by_opcode (opcodes, latency, sizes)", "barriers", "gray_link", "incast", "timeline (--perfetto)",
         "RDMA READ direction (counted initiator -> target)", "teardown flushes (counted as error completions)"});
    return out;
}

json ReportBuilder::peers_section() const {
    json out = json::array();
    for (const auto& [key, agg] : a_.stats_.by_pair()) {
        json src = proc_ref(key.first), dst = proc_ref(key.second);
        out.push_back(json{{"src", src},
                           {"dst", dst},
                           {"count", agg.count},
                           {"bytes", agg.bytes},
                           {"errors", agg.errors()},
                           {"latency_ns", quantiles_json(agg.latency_ns)}});
    }
    return out;
}

ReportBuilder::SkewBasis ReportBuilder::skew_basis() const {
    SkewBasis b;
    std::set<NodeId> nodes;
    for (const auto& [key, cell] : a_.traffic_.node_matrix()) {
        if (key.first == key.second || cell.bytes == 0) continue;
        ++b.flows;
        b.bytes += cell.bytes;
        nodes.insert(key.first);
        nodes.insert(key.second);
    }
    b.nodes = nodes.size();
    return b;
}

json ReportBuilder::traffic_section() const {
    json matrix = json::array();
    std::vector<std::pair<std::pair<std::string, std::string>, TrafficCell>> cells;
    for (const auto& [key, cell] : a_.traffic_.node_matrix())
        cells.push_back({{node_name(key.first), node_name(key.second)}, cell});
    std::sort(cells.begin(), cells.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (const auto& [names, cell] : cells)
        matrix.push_back(json{{"src", names.first}, {"dst", names.second}, {"bytes", cell.bytes}, {"ops", cell.ops}});
    const std::vector<NodeId> order = trace_nodes();
    const Skew s = a_.traffic_.skew(order);
    const NodeTotals totals = node_totals(a_.traffic_.node_matrix(), order);
    json nodes = json::array();
    for (std::size_t i = 0; i < order.size(); ++i)
        nodes.push_back(json{{"node", node_name(order[i])}, {"bytes_out", totals.out[i]}, {"bytes_in", totals.in[i]}});
    const SkewBasis basis = skew_basis();
    return json{{"node_matrix", matrix},
                {"skew_meaningful", basis.meaningful()},
                {"inbound_skew", s.inbound},
                {"outbound_skew", s.outbound},
                {"inbound_max_node", s.inbound_max_node == kNoId ? json(nullptr) : json(node_name(s.inbound_max_node))},
                {"outbound_max_node", s.outbound_max_node == kNoId ? json(nullptr) : json(node_name(s.outbound_max_node))},
                {"nodes", nodes},
                {"unresolved_bytes", a_.traffic_.unresolved().bytes},
                {"unresolved_ops", a_.traffic_.unresolved().ops}};
}

json ReportBuilder::rails_section() const {
    std::vector<std::pair<std::pair<std::string, std::string>, RailCounters>> rows;
    // Every NIC a traced process opened, idle ones included (bytes per NIC of a node: an unused rail shows as 0).
    for (DevId dev = 0; dev < a_.topo_.device_count(); ++dev) {
        auto it = a_.traffic_.rails().find(dev);
        rows.push_back({{node_name(a_.topo_.device(dev).node), a_.topo_.device(dev).name},
                        it == a_.traffic_.rails().end() ? RailCounters{} : it->second});
    }
    std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    json out = json::array();
    for (const auto& [k, r] : rows)
        out.push_back(json{{"node", k.first}, {"device", k.second}, {"bytes_tx", r.bytes_tx}, {"bytes_rx", r.bytes_rx},
                           {"ops_tx", r.ops_tx}, {"ops_rx", r.ops_rx}});
    return out;
}

json ReportBuilder::barriers_section(json& findings) const {
    // finish() is logically const for the report: the detector is consumed exactly once, by this call.
    BarrierResult r = const_cast<BarrierDetector&>(a_.barriers_).finish(const_cast<Topology&>(a_.topo_));
    QuantileHistogram all;
    std::map<ProcId, uint64_t> last;
    uint64_t epochs = 0;
    json words = json::array();
    json samples = json::array();
    for (const BarrierWord& w : r.words) {
        epochs += w.epochs;
        all.merge(w.spread_ns);
        for (const auto& [p, n] : w.times_last) last[p] += n;
        json participants = json::array();
        for (ProcId p : w.participants) participants.push_back(proc_ref(p)["rank"]);
        words.push_back(json{{"node", node_name(w.target.node)},
                             {"device", w.target.dev == kNoId ? json(nullptr) : json(a_.topo_.device(w.target.dev).name)},
                             {"owner_rank", proc_ref(w.target.proc)["rank"]},
                             {"rkey", hex(w.rkey)},
                             {"raddr", hex(w.raddr)},
                             {"participants", participants},
                             {"epochs", w.epochs},
                             {"incomplete_epochs", w.incomplete},
                             {"spread_ns", quantiles_json(w.spread_ns)}});
        if (w.epochs >= 2 && (barrier_bounds_.empty() || w.samples.size() > barrier_bounds_.size())) {
            barrier_bounds_.clear();
            for (const EpochSample& e : w.samples) barrier_bounds_.push_back(e.first_ts);
        }
        for (const EpochSample& e : w.samples)
            samples.push_back(json::array({e.first_ts - a_.first_ts_, e.spread_ns, proc_ref(e.last)["rank"]}));
    }
    std::vector<std::pair<ProcId, uint64_t>> ranked(last.begin(), last.end());
    std::sort(ranked.begin(), ranked.end(), [&](const auto& x, const auto& y) {
        if (x.second != y.second) return x.second > y.second;
        return a_.topo_.proc(x.first).rank < a_.topo_.proc(y.first).rank;
    });
    json stragglers = json::array();
    for (const auto& [p, n] : ranked) {
        json j = proc_ref(p);
        j["times_last"] = n;
        stragglers.push_back(j);
        const double frac = epochs ? static_cast<double>(n) / static_cast<double>(epochs) : 0.0;
        if (epochs >= 3 && frac > a_.options_.straggler_fraction) {
            findings.push_back(finding(
                "barrier_straggler", "warning",
                fmt::format("{} arrived last in {} of {} barrier epochs (median spread {}, p99 {})", proc_label(p), n,
                            epochs, format_ns(all.quantile(0.5)), format_ns(all.quantile(0.99))),
                json{{"rank", proc_ref(p)["rank"]},
                     {"node", proc_ref(p)["node"]},
                     {"pid", proc_ref(p)["pid"]},
                     {"times_last", n},
                     {"epochs", epochs},
                     {"fraction", frac},
                     {"spread_ns", quantiles_json(all)}}));
        }
    }
    json spread = quantiles_json(all);
    if (all.count()) spread["mean"] = round_ns(all.mean());
    return json{{"epochs", epochs},
                {"spread_ns", spread},
                {"stragglers", stragglers},
                {"words", words},
                {"candidate_words", r.candidate_words},
                {"dropped_candidate_words", r.dropped_candidates},
                {"spread_histogram", histogram_bins_json(all)},
                {"epoch_samples", samples}};
}

json ReportBuilder::links_section() const {
    std::vector<std::pair<std::pair<std::string, std::string>, const LinkThroughput*>> rows;
    for (const LinkThroughput& l : a_.gray_result_.links) rows.push_back({{nic_label(l.link.src), nic_label(l.link.dst)}, &l});
    std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    json out = json::array();
    for (const auto& [names, l] : rows)
        out.push_back(json{{"src", nic_ref(l->link.src)},
                           {"dst", nic_ref(l->link.dst)},
                           {"large_ops", l->large_ops},
                           {"queued_ops", l->queued_ops},
                           {"sender_bound_ops", l->sender_bound_ops},
                           {"measured_windows", l->measured_windows},
                           {"throughput_bytes_per_s",
                            l->measured_windows ? json{{"p50", std::llround(l->p50_bytes_per_s)}, {"max", std::llround(l->max_bytes_per_s)}}
                                                : json{{"p50", nullptr}, {"max", nullptr}}}});
    return out;
}

json ReportBuilder::options_section() const {
    const AnalysisOptions& o = a_.options_;
    return json{{"skew_threshold", o.skew_threshold},
                {"error_storm", o.error_storm_threshold},
                {"stall_after_ns", o.stall_after_ns},
                {"straggler_fraction", o.straggler_fraction},
                {"rail_imbalance", o.rail_imbalance_threshold},
                {"gray_link", {{"window_ns", o.gray.window_ns}, {"windows", o.gray.min_windows},
                               {"fraction", o.gray.fraction}, {"min_bytes", o.gray.min_bytes}}},
                {"incast", {{"window_ns", o.incast.window_ns}, {"senders", o.incast.min_senders},
                            {"share", o.incast.share}, {"min_bytes", o.incast.min_bytes},
                            {"min_duration_ns", o.incast.min_duration_ns}}},
                {"phases", phases_options()},
                {"window", {{"enabled", o.windows.enabled},
                            {"window_ns", o.windows.window_ns > 0 ? json(o.windows.window_ns) : json("auto")}}}};
}

json ReportBuilder::gray_link_findings(const GrayLinkResult& g) const {
    json findings = json::array();
    add_gray_link_findings(findings, g);
    return findings;
}

void ReportBuilder::add_gray_link_findings(json& findings, const GrayLinkResult& g) const {
    const GrayLinkOptions& o = a_.options_.gray;
    // One finding per link: its longest episode, every episode listed in the evidence.
    std::map<std::pair<std::string, std::string>, std::vector<const GrayEpisode*>> by_link;
    for (const GrayEpisode& e : g.episodes) by_link[{nic_label(e.link.src), nic_label(e.link.dst)}].push_back(&e);
    for (const auto& [names, eps] : by_link) {
        const GrayEpisode& e = **std::max_element(eps.begin(), eps.end(), [](const GrayEpisode* x, const GrayEpisode* y) {
            return x->slow_windows < y->slow_windows;
        });
        const double ref = std::max(e.own_bytes_per_s, e.peers_bytes_per_s);
        const bool below_own = e.own_bytes_per_s > 0 && e.slow_bytes_per_s < o.fraction * e.own_bytes_per_s;
        const bool below_peers = e.peers_bytes_per_s > 0 && e.slow_bytes_per_s < o.fraction * e.peers_bytes_per_s;
        const char* against = below_own && below_peers ? "its earlier level and its peers"
                              : below_own              ? "its earlier level"
                                                       : "its peers";
        json episodes = json::array();
        for (const GrayEpisode* x : eps)
            episodes.push_back(json{{"start_ns", x->start_ns - a_.first_ts_}, {"duration_ns", x->end_ns - x->start_ns},
                                    {"slowdown", x->slowdown}, {"until_end", x->until_end}});
        json windows = json::array();
        for (const LinkWindowSample& w : e.samples)
            windows.push_back(json::array({w.start_ns - a_.first_ts_, std::llround(w.bytes_per_s), std::llround(w.reference), w.slow}));
        findings.push_back(finding(
            "gray_link", "warning",
            fmt::format("Gray link {} -> {}: large transfers {:.2f}x slower than {} from +{} for {}{} ({} windows of "
                        "{}): {}/s against {}/s",
                        names.first, names.second, e.slowdown, against,
                        format_ns(static_cast<double>(e.start_ns - a_.first_ts_)),
                        format_ns(static_cast<double>(e.end_ns - e.start_ns)),
                        e.until_end ? " (until its traffic ended)" : "", e.slow_windows,
                        format_ns(static_cast<double>(g.window_ns)), format_bytes(e.slow_bytes_per_s), format_bytes(ref)),
            json{{"link", json{{"src", nic_ref(e.link.src)}, {"dst", nic_ref(e.link.dst)}}},
                 {"start_ns", e.start_ns - a_.first_ts_},
                 {"end_ns", e.end_ns - a_.first_ts_},
                 {"start_unix_ns", e.start_ns},
                 {"end_unix_ns", e.end_ns},
                 {"duration_ns", e.end_ns - e.start_ns},
                 {"until_end", e.until_end},
                 {"slowdown", e.slowdown},
                 {"throughput_bytes_per_s", std::llround(e.slow_bytes_per_s)},
                 {"own_earlier_bytes_per_s", std::llround(e.own_bytes_per_s)},
                 {"peers_bytes_per_s", std::llround(e.peers_bytes_per_s)},
                 {"below_own_earlier_level", below_own},
                 {"below_peers", below_peers},
                 {"slow_windows", e.slow_windows},
                 {"bytes", e.bytes},
                 {"episodes", episodes},
                 {"windows", windows},
                 {"window_ns", g.window_ns},
                 {"fraction", o.fraction},
                 {"min_windows", o.min_windows},
                 {"min_bytes", o.min_bytes}}));
    }
}

json ReportBuilder::incast_findings(const IncastResult& result) const {
    json findings = json::array();
    add_incast_findings(findings, result);
    return findings;
}

void ReportBuilder::add_incast_findings(json& findings, const IncastResult& result) const {
    const IncastOptions& o = a_.options_.incast;
    for (const IncastReceiver& r : result.receivers) {
        if (r.kept.empty()) continue;
        const IncastEpisode& e = *std::max_element(r.kept.begin(), r.kept.end(), [](const auto& x, const auto& y) {
            return x.end_ns - x.start_ns < y.end_ns - y.start_ns;
        });
        auto labels = [&](const std::set<DevId>& devs) {
            std::vector<std::string> v;
            for (DevId d : devs) v.push_back(nic_label(d));
            std::sort(v.begin(), v.end());
            return v;
        };
        const std::vector<std::string> senders = labels(e.senders);
        json episodes = json::array();
        for (const IncastEpisode& x : r.kept)
            episodes.push_back(json{{"start_ns", x.start_ns - a_.first_ts_}, {"duration_ns", x.end_ns - x.start_ns},
                                    {"max_degree", x.max_degree}, {"mean_degree", x.mean_degree},
                                    {"senders", labels(x.senders)}, {"bytes", std::llround(x.bytes)}});
        findings.push_back(finding(
            "incast", "warning",
            fmt::format("Incast on {}: {} senders with data in flight to it at once ({}) for {} from +{}{}",
                        nic_label(r.receiver), e.max_degree, fmt::join(senders, ", "),
                        format_ns(static_cast<double>(e.end_ns - e.start_ns)),
                        format_ns(static_cast<double>(e.start_ns - a_.first_ts_)),
                        r.episodes > 1 ? fmt::format(" ({} episodes, {} in all)", r.episodes,
                                                     format_ns(static_cast<double>(r.total_ns)))
                                       : std::string()),
            json{{"receiver", nic_ref(r.receiver)},
                 {"degree", e.max_degree},
                 {"mean_degree", e.mean_degree},
                 {"senders", senders},
                 {"start_ns", e.start_ns - a_.first_ts_},
                 {"end_ns", e.end_ns - a_.first_ts_},
                 {"start_unix_ns", e.start_ns},
                 {"duration_ns", e.end_ns - e.start_ns},
                 {"bytes", std::llround(e.bytes)},
                 {"episodes", r.episodes},
                 {"total_duration_ns", r.total_ns},
                 {"max_degree_all_episodes", r.max_degree},
                 {"longest_episodes", episodes},
                 {"window_ns", o.window_ns},
                 {"min_senders", o.min_senders},
                 {"share", o.share},
                 {"min_bytes", o.min_bytes},
                 {"min_duration_ns", o.min_duration_ns}}));
    }
}

void ReportBuilder::add_findings(json& doc, json& findings) const {
    // Discarded events: every number after this is a lower bound.
    const uint64_t discarded = doc["trace"]["discarded_events"].get<uint64_t>();
    const uint64_t discarded_packets = doc["trace"]["discarded_packets"].get<uint64_t>();
    // A stream whose first packet already counts discarded events lost some before it, how many unknown (count 0:
    // trace.discarded_uncounted counts such streams).
    const bool uncounted = doc["trace"]["discarded_uncounted"].get<uint64_t>() != 0;
    // One pass over the streams' losses: the evidence, and what the summary tells apart. The advice depends on the
    // channel that lost them: --channel-size sizes the data channel (and the one channel of older traces); the
    // set-up channel's size is fixed, and only --blocking keeps its events.
    uint64_t setup_lost = 0;   // events (a packet discard counts packets)
    bool setup = false, data = false;
    json streams = json::array();
    for (const DiscardRecord& d : a_.discards_) {
        if (d.setup_only && !d.packets) setup_lost += d.count;
        (d.setup_only ? setup : data) = true;
        streams.push_back(json{{"trace", d.trace}, {"stream", d.stream}, {"channel", d.setup_only ? "setup" : "data"},
                               {"count", d.count}, {"packets", d.packets}, {"begin_ns", d.begin_ns}, {"end_ns", d.end_ns}});
    }
    if (discarded || discarded_packets || uncounted) {
        std::string advice;
        if (data) advice = "record with a larger --channel-size";
        if (setup)
            advice += fmt::format("{}the set-up channel (a fixed size) lost {}: record with --blocking",
                                  data ? "; " : "", setup_lost ? format_count(setup_lost) + " of them" : "some");
        std::string what = discarded ? format_count(discarded) + (uncounted ? " or more events" : " events")
                                     : std::string(uncounted ? "an unknown number of events" : "");
        if (discarded_packets)
            what += fmt::format("{}{} packets", what.empty() ? "" : " and ", format_count(discarded_packets));
        findings.push_back(finding(
            "discarded_events", "error",
            fmt::format("The tracer discarded {} (ring buffers full): counts and matches below are lower bounds; {}",
                        what, advice),
            json{{"discarded_events", discarded},
                 {"discarded_packets", discarded_packets},
                 {"setup_channel_events", setup_lost},
                 {"streams", streams}}));
    }

    // Records a process captured that neither it nor record's salvage step could put in the trace.
    if (const uint64_t lost = lost_records_total(); lost != 0) {
        json procs = json::array();
        for (const auto& [pid, n] : a_.lost_records_) procs.push_back(json{{"pid", pid}, {"records", n}});
        findings.push_back(finding(
            "records_lost", "error",
            fmt::format("{} data-path calls captured by the tracer are not in the trace (their process ended while "
                        "one was inside the provider's call, or its ring was damaged): counts below are lower bounds",
                        format_count(lost)),
            json{{"lost_records", lost}, {"processes", procs}}));
    }

    // Deferred emission: events that came after the reordering window were processed out of capture order.
    // It is a warning when it may have changed a result: a completion that matched nothing or a WR left in
    // flight; when every completion matched its WR (times are capture times whatever the processing order), it
    // is information about the tracer's emission on a loaded machine.
    if (a_.ordering_.late_events) {
        const bool may_matter = a_.topo_.anomalies().unmatched_completions > 0 || a_.stats_.total().in_flight > 0;
        findings.push_back(finding(
            "late_events", may_matter ? "warning" : "info",
            fmt::format("{} events came later than the reordering window ({}, up to {} late): they were processed "
                        "out of capture order, so completions may be unmatched or mis-timed near them; record with a "
                        "smaller SIGMATRACE_DEFER_MAX_AGE_US or SIGMATRACE_DEFER=0",
                        format_count(a_.ordering_.late_events), format_ns(static_cast<double>(a_.ordering_.window_ns)),
                        format_ns(static_cast<double>(a_.ordering_.max_lateness_ns))),
            json{{"late_events", a_.ordering_.late_events},
                 {"window_ns", a_.ordering_.window_ns},
                 {"max_lateness_ns", a_.ordering_.max_lateness_ns},
                 {"max_held_events", a_.ordering_.max_held},
                 {"unmatched_completions", a_.topo_.anomalies().unmatched_completions},
                 {"in_flight_at_end", a_.stats_.total().in_flight}}));
    }

    // Traffic skew, only where it can mean something (skew_meaningful): over two nodes, or one flow, max/mean
    // is 2.00x by construction.
    const json& tr = doc["traffic"];
    const NodeTotals totals = node_totals(a_.traffic_.node_matrix(), trace_nodes());
    const SkewBasis basis = skew_basis();
    for (const char* dir : {"inbound", "outbound"}) {
        const double skew = tr[std::string(dir) + "_skew"].get<double>();
        const json& max_node = tr[std::string(dir) + "_max_node"];
        if (!basis.meaningful() || skew <= a_.options_.skew_threshold || max_node.is_null()) continue;
        const bool in = std::string_view(dir) == "inbound";
        const auto& v = in ? totals.in : totals.out;
        long double sum = 0;
        uint64_t mx = 0;
        for (uint64_t b : v) {
            sum += b;
            mx = std::max(mx, b);
        }
        const double mean = static_cast<double>(sum / static_cast<long double>(v.size()));
        findings.push_back(finding(
            "traffic_skew", "warning",
            fmt::format("{} traffic skew {:.2f}x: {} {} {} against a mean of {} per node", in ? "Inbound" : "Outbound",
                        skew, max_node.get<std::string>(), in ? "receives" : "sends", format_bytes(static_cast<double>(mx)),
                        format_bytes(mean)),
            json{{"direction", dir}, {"skew", skew}, {"node", max_node}, {"bytes", mx}, {"mean_bytes", mean},
                 {"threshold", a_.options_.skew_threshold}, {"nodes_with_traffic", basis.nodes},
                 {"flows", basis.flows}, {"inter_node_bytes", basis.bytes}}));
    }

    // Errors: one error followed by a flush of everything queued behind it is the usual shape.
    const json& ops = doc["ops"];
    const uint64_t errors = ops["errors"].get<uint64_t>();
    if (errors > 0) {
        json by_status = json::object();
        for (const auto& [st, n] : a_.errors_by_status_) by_status[std::string(wc_status_name(st))] = n;
        json first = json::array();
        for (const ErrorSample& e : a_.first_errors_) {
            json j = proc_ref(e.proc);
            j["time_ns"] = e.ts - a_.first_ts_;
            j["qp_num"] = a_.topo_.qp(e.qp).qp_num;
            j["status"] = std::string(wc_status_name(e.status));
            j["opcode"] = opcode_name(e.opcode);
            j["wr_id"] = e.wr_id;
            first.push_back(std::move(j));
        }
        std::set<QpId> qps;
        for (const auto& [q, agg] : a_.stats_.by_qp())
            if (agg.errors()) qps.insert(q);
        const ErrorSample& e0 = a_.first_errors_.front();
        const bool storm = errors >= a_.options_.error_storm_threshold;
        findings.push_back(finding(
            storm ? "error_storm" : "error_completions", storm ? "error" : "warning",
            fmt::format("{} error completions on {} QP(s) ({} failed, {} flushed); first: {} on {} QP {} ({})",
                        format_count(errors), qps.size(), ops["failed"].get<uint64_t>(), ops["flushed"].get<uint64_t>(),
                        wc_status_name(e0.status), proc_label(e0.proc), a_.topo_.qp(e0.qp).qp_num, opcode_name(e0.opcode)),
            json{{"errors", errors}, {"by_status", by_status}, {"qps", qps.size()}, {"first_errors", first},
                 {"threshold", a_.options_.error_storm_threshold}}));
    }

    // Counters mode: error completions counted per QP (no status, no time; teardown flushes included).
    if (doc.contains("counters") && doc["counters"]["error_completions"].get<uint64_t>() > 0) {
        const json& c = doc["counters"];
        json qps = json::array();
        for (const json& q : c["per_qp"])
            if (q["error_completions"].get<uint64_t>() > 0)
                qps.push_back(json{{"rank", q["rank"]}, {"node", q["node"]}, {"pid", q["pid"]}, {"qp_num", q["qp_num"]},
                                   {"error_completions", q["error_completions"]}});
        findings.push_back(finding(
            "error_completions", "warning",
            fmt::format("{} error completions counted on {} QP(s) (counters mode: no status; flushes of an orderly "
                        "teardown count too; record with --mode ops to see which)",
                        format_count(c["error_completions"].get<uint64_t>()), qps.size()),
            json{{"errors", c["error_completions"]}, {"qps", qps}, {"source", "counters"}}));
    }

    // Rail imbalance: bytes (sent + received) per NIC of a node with several NICs.
    std::map<NodeId, std::vector<std::pair<DevId, uint64_t>>> per_node;
    for (const auto& [dev, r] : a_.traffic_.rails())
        per_node[a_.topo_.device(dev).node].push_back({dev, r.bytes_tx + r.bytes_rx});
    for (DevId d = 0; d < a_.topo_.device_count(); ++d) {  // idle NICs count in the mean too
        auto& v = per_node[a_.topo_.device(d).node];
        if (std::none_of(v.begin(), v.end(), [&](const auto& x) { return x.first == d; })) v.push_back({d, 0});
    }
    for (const auto& [node, devs] : per_node) {
        if (devs.size() < 2) continue;
        long double sum = 0;
        std::pair<DevId, uint64_t> mx{kNoId, 0};
        for (const auto& x : devs) {
            sum += x.second;
            if (x.second > mx.second) mx = x;
        }
        if (sum == 0) continue;
        const double mean = static_cast<double>(sum / static_cast<long double>(devs.size()));
        const double ratio = static_cast<double>(mx.second) / mean;
        if (ratio <= a_.options_.rail_imbalance_threshold) continue;
        json per = json::object();
        for (const auto& x : devs) per[a_.topo_.device(x.first).name] = x.second;
        findings.push_back(finding(
            "rail_imbalance", "warning",
            fmt::format("Rail imbalance {:.2f}x on {}: {} carries {} against a mean of {} per NIC", ratio,
                        node_name(node), a_.topo_.device(mx.first).name, format_bytes(static_cast<double>(mx.second)),
                        format_bytes(mean)),
            json{{"node", node_name(node)}, {"ratio", ratio}, {"bytes_per_device", per},
                 {"threshold", a_.options_.rail_imbalance_threshold}}));
    }

    add_gray_link_findings(findings, a_.gray_result_);
    add_incast_findings(findings, a_.incast_result_);
    add_stall_findings(findings, errors > 0 && errors >= a_.options_.error_storm_threshold);

    // Operations without completion on a QP that was still alive: a process that crashed or was killed, or a
    // trace cut short. (A tail left when the owner tore its QP down is `unconfirmed`, not this.)
    std::vector<std::pair<ProcId, uint64_t>> in_flight;
    for (const auto& [p, agg] : a_.stats_.by_process())
        if (agg.in_flight) in_flight.push_back({p, agg.in_flight});
    if (!in_flight.empty()) {
        json procs = json::array();
        uint64_t total = 0;
        for (const auto& [p, n] : in_flight) {
            json j = proc_ref(p);
            j["in_flight"] = n;
            j["last_event_ns"] = a_.topo_.proc(p).last_ts - a_.first_ts_;
            procs.push_back(j);
            total += n;
        }
        // Completions a direct-queue consumer took before the watcher saw them leave their WQEs here too: say so first.
        const uint64_t missed = a_.topo_.anomalies().gpu_cqes_missed;
        const std::string why =
            missed != 0 ? fmt::format("{} completions of directly driven queues went by unread (consumed before the "
                                      "watcher read them), or a crashed or killed process, or a trace stopped early",
                                      format_count(missed))
                        : std::string("a crashed or killed process, or a trace stopped early (their QPs were never "
                                      "destroyed or reset)");
        findings.push_back(finding(
            "in_flight_at_end", "warning",
            fmt::format("{} operations of {} process(es) never completed before the trace ended (first: {}, {} "
                        "ops): {}",
                        format_count(total), in_flight.size(), proc_label(in_flight.front().first),
                        in_flight.front().second, why),
            json{{"operations", total}, {"processes", procs}}));
    }
}

json ReportBuilder::warnings() const {
    json out = json::array();
    const Anomalies& an = a_.topo_.anomalies();
    auto add = [&](uint64_t n, const char* what) {
        if (n) out.push_back(fmt::format("{} {}", format_count(n), what));
    };
    add(an.malformed_events, "malformed events (sequence lengths disagree with n); read as far as consistent");
    add(an.unknown_qp, "events named a QP whose creation is not in the trace (tracing started late?)");
    add(an.unmatched_completions, "completions matched no posted work request");
    add(an.post_errors, "work requests were rejected by the post call (not posted)");
    add(an.lost_wrs, "work requests dropped from a queue model that overflowed (their completions were not seen)");
    add(an.schema_mismatch, "processes were traced with an unknown schema major version");
    add(an.gpu_wqes_lost, "WQEs of directly driven queues (GPU or CPU-direct) were overwritten in their ring before the "
                          "watcher read them (not in the trace; shorter SIGMATRACE_GPU_WATCH_*_PERIOD_US read more often)");
    add(an.gpu_wqes_malformed, "WQEs of directly driven queues did not decode and were skipped (not in the trace)");
    add(an.gpu_cqes_missed, "completions of directly driven queues were consumed by the application before the watcher "
                            "read them: the WQEs they complete may show as in flight at the end");
    add(a_.traffic_.unresolved().ops, "transfers whose destination could not be resolved (peer not traced?)");
    if (a_.incast_result_.clipped_bytes >= 1.0)
        out.push_back(fmt::format("{} of transfers in flight longer than {} incast windows were left out of the incast "
                                  "analysis (a larger --incast-window covers them)",
                                  format_bytes(a_.incast_result_.clipped_bytes), IncastDetector::kSlackWindows));
    for (const std::string& p : a_.read_problems_) out.push_back(p);
    for (const std::string& m : missing_ranks()) out.push_back(m);
    if (const std::string m = unaligned_hosts(); !m.empty()) out.push_back(m);
    return out;
}

json ReportBuilder::clock_section() const {
    const ClockResult& c = a_.clock_result_;
    json hosts = json::array();
    for (const HostClock& h : c.hosts) {
        json j{{"host", h.host}, {"status", status_name(h.status)}, {"bounds", h.bounds}};
        const bool placed = h.status == HostClock::Status::reference || h.status == HostClock::Status::estimated ||
                            h.status == HostClock::Status::contradictory;
        j["relative_to"] = placed ? json(h.relative_to) : json(nullptr);
        j["offset_ns"] = placed ? json(std::llround(h.offset_ns)) : json(nullptr);
        j["drift_ppm"] = placed ? json(std::round(h.drift_ppm * 1000) / 1000) : json(nullptr);
        j["uncertainty_ns"] = placed ? json(std::llround(h.uncertainty_ns)) : json(nullptr);
        // A contradictory host's bounds allow no line, so no drift range.
        j["drift_uncertainty_ppm"] = placed && h.status != HostClock::Status::contradictory
                                         ? json(std::round(h.drift_uncertainty_ppm * 1000) / 1000)
                                         : json(nullptr);
        hosts.push_back(std::move(j));
    }
    return json{{"reference", c.reference}, {"at_ns", c.at_ns}, {"aligned", c.applied}, {"hosts", std::move(hosts)}};
}

// Hosts whose times could not be moved onto the reference's: what compares times across hosts carries their offset.
std::string ReportBuilder::unaligned_hosts() const {
    const ClockResult& c = a_.clock_result_;
    std::string list;
    for (const HostClock& h : c.hosts) {
        if (h.status == HostClock::Status::reference || h.status == HostClock::Status::estimated) continue;
        list += fmt::format("{}{} ({})", list.empty() ? "" : ", ", h.host, status_name(h.status));
    }
    if (list.empty()) return {};
    return fmt::format("clock: hosts {} not aligned with {} (no messages both ways with an aligned host, or bounds that "
                       "contradict each other): barrier spread, incast and timelines across hosts carry their clock offset",
                       list, c.reference);
}

std::vector<std::string> ReportBuilder::missing_ranks() const {
    // Per job, the ranks its processes said they belong to (process_info) against the job's size.
    std::map<std::string, std::pair<int32_t, std::set<int32_t>>> jobs;
    for (ProcId p : active_processes()) {
        const Process& pr = a_.topo_.proc(p);
        if (pr.rank < 0 || pr.world_size <= 0) continue;
        auto& [size, ranks] = jobs[pr.job_id];
        size = std::max(size, pr.world_size);
        ranks.insert(pr.rank);
    }
    std::vector<std::string> out;
    for (const auto& [job, entry] : jobs) {
        const auto& [size, ranks] = entry;
        if (static_cast<int32_t>(ranks.size()) >= size) continue;
        std::string list;
        int listed = 0;
        for (int32_t r = 0; r < size && listed < 16; ++r)
            if (!ranks.contains(r)) list += fmt::format("{}{}", listed++ ? ", " : "", r);
        const int32_t missing = size - static_cast<int32_t>(ranks.size());
        if (missing > listed) list += ", ...";
        out.push_back(fmt::format("{}{} of {} ranks are not in the trace (ranks {}): a host's trace is missing, or they "
                                  "never used RDMA; their traffic shows as unresolved and analyses across ranks "
                                  "(barriers, skew) see only the others",
                                  job.empty() ? "" : "job " + job + ": ", missing, size, list));
    }
    return out;
}

json ReportBuilder::build() const {
    json doc;
    doc["schema"] = kAnalysisSchema;
    doc["analyzer"] = json{{"version", SIGMATRACE_VERSION_STRING}};
    doc["trace"] = trace_section();
    doc["processes"] = processes_section();
    doc["ops"] = ops_section();
    doc["qps"] = qps_section();
    doc["peers"] = peers_section();
    doc["traffic"] = traffic_section();
    doc["rails"] = rails_section();
    if (a_.counter_events_) doc["counters"] = counters_section();
    doc["links"] = links_section();
    if (a_.windows_.enabled()) doc["timeline"] = timeline_section();
    if (!a_.clock_result_.hosts.empty()) doc["clock"] = clock_section();
    json findings = json::array();
    doc["barriers"] = barriers_section(findings);
    // After the barriers: their epochs delimit the phases.
    if (a_.phases_.enabled()) doc["phases"] = phases_section(findings);
    add_findings(doc, findings);
    std::stable_sort(findings.begin(), findings.end(), [](const json& x, const json& y) {
        return severity_rank(x["severity"].get<std::string>()) < severity_rank(y["severity"].get<std::string>());
    });
    doc["findings"] = findings;
    doc["warnings"] = warnings();
    doc["options"] = options_section();
    return doc;
}

}  // namespace sigmatrace::analyzer
