// The report's time-resolved parts (docs/analyzer.md, "Windows"): `timeline` from the analysis's windows
// (time_windows.h), with each QP's outstanding work per window, and each QP's `outstanding` over the whole trace
// (outstanding.h).
#include <cmath>
#include <map>
#include <utility>

#include "analyzer/analyses/analysis.h"
#include "analyzer/outputs/report_builder.h"

namespace sigmatrace::analyzer {

using nlohmann::json;

namespace {
json count_quantiles(const IntHistogram& h) {
    return json{{"count", h.count()}, {"p50", h.quantile(0.5)}, {"p99", h.quantile(0.99)}};
}
}  // namespace

json ReportBuilder::outstanding_json(QpId q) const {
    const QpOutstanding* o = a_.outstanding_.of(q);
    if (o == nullptr) return nullptr;
    json j{{"max_wrs", o->max_wrs},
           {"max_bytes", o->max_bytes},
           {"p99_bytes", o->bytes.count() ? json(o->bytes.quantile(0.99)) : json(nullptr)},
           {"rnr_events", o->rnr_events}};
    if (o->recv_ops) {
        j["recv_max_posted"] = o->recv_max_posted;
        j["recv_min_posted"] = o->recv_consumed ? json(o->recv_min_posted) : json(nullptr);
    }
    return j;
}

json ReportBuilder::timeline_section() const {
    const TimeWindows& tw = a_.windows_;
    const int64_t width = tw.window_ns();
    const Topology& topo = a_.topo_;
    json windows = json::array();
    int64_t index = tw.first_index();
    for (const Window& w : tw.windows()) {
        std::map<std::pair<NodeId, NodeId>, double> matrix;
        std::map<DevId, std::pair<double, double>> rails;   // tx, rx
        struct Inbound {
            uint32_t senders = 0;
            int64_t busy_ns = 0;
        };
        std::map<DevId, Inbound> receivers;
        std::map<std::pair<NodeId, NodeId>, IntHistogram> pair_latency;
        std::map<std::pair<DevId, DevId>, const WindowLinkCell*> links;   // ordered output
        for (const auto& [key, c] : w.links) links[{static_cast<DevId>(key >> 32), static_cast<DevId>(key & 0xffffffffu)}] = &c;
        json jlinks = json::array();
        for (const auto& [sd, c] : links) {
            const auto [src, dst] = sd;
            const std::pair<NodeId, NodeId> nodes{topo.device(src).node, topo.device(dst).node};
            matrix[nodes] += c->bytes;
            rails[src].first += c->bytes;
            rails[dst].second += c->bytes;
            if (c->busy_ns > 0) {
                Inbound& in = receivers[dst];
                ++in.senders;
                in.busy_ns += c->busy_ns;
            }
            if (c->latency.count()) pair_latency[nodes].merge(c->latency);
            json l{{"src", nic_ref(src)},
                   {"dst", nic_ref(dst)},
                   {"bytes", std::llround(c->bytes)},
                   {"bytes_per_s", std::llround(c->bytes * 1e9 / static_cast<double>(width))},
                   {"ops", c->ops},
                   {"busy_ns", c->busy_ns}};
            if (c->latency.count()) l["latency_ns"] = count_quantiles(c->latency);
            jlinks.push_back(std::move(l));
        }
        json jmatrix = json::array();
        for (const auto& [nodes, bytes] : matrix)
            jmatrix.push_back(json{{"src", node_name(nodes.first)}, {"dst", node_name(nodes.second)}, {"bytes", std::llround(bytes)}});
        json jrails = json::array();
        for (const auto& [dev, b] : rails) {
            json r = nic_ref(dev);
            r["bytes_tx"] = std::llround(b.first);
            r["bytes_rx"] = std::llround(b.second);
            jrails.push_back(std::move(r));
        }
        json jreceivers = json::array();
        for (const auto& [dev, in] : receivers)
            jreceivers.push_back(json{{"receiver", nic_ref(dev)},
                                      {"senders", in.senders},
                                      {"mean_senders", static_cast<double>(in.busy_ns) / static_cast<double>(width)}});
        json by_opcode = json::object();
        for (const auto& [opcode, h] : w.latency_by_opcode) by_opcode[opcode_name(opcode)] = count_quantiles(h);
        json by_pair = json::array();
        for (const auto& [nodes, h] : pair_latency) {
            json p = count_quantiles(h);
            p["src"] = node_name(nodes.first);
            p["dst"] = node_name(nodes.second);
            by_pair.push_back(std::move(p));
        }
        std::map<QpId, const WindowQpCell*> qps;   // ordered output
        for (const auto& [q, c] : w.qps) qps[q] = &c;
        json jqps = json::array();
        for (const auto& [q, c] : qps) {
            const Qp& qp = topo.qp(q);
            json j = proc_ref(qp.proc);
            j["qp_num"] = qp.qp_num;
            if (c->bytes.count()) {
                j["max_wrs"] = c->max_wrs;
                j["max_bytes"] = c->max_bytes;
                j["p99_bytes"] = c->bytes.quantile(0.99);
            }
            if (c->recv_max_posted) {
                j["recv_max_posted"] = c->recv_max_posted;
                j["recv_min_posted"] = c->recv_min_posted == UINT32_MAX ? json(nullptr) : json(c->recv_min_posted);
            }
            if (c->rnr_events) j["rnr_events"] = c->rnr_events;
            jqps.push_back(std::move(j));
        }
        windows.push_back(json{{"start_ns", index * width},
                               {"end_ns", (index + 1) * width},
                               {"node_matrix", std::move(jmatrix)},
                               {"links", std::move(jlinks)},
                               {"rails", std::move(jrails)},
                               {"receivers", std::move(jreceivers)},
                               {"qps", std::move(jqps)},
                               {"latency", json{{"by_opcode", std::move(by_opcode)}, {"by_pair", std::move(by_pair)}}}});
        ++index;
    }
    // QPs left without a series (created after the first --window-qps): their totals are in qps[].outstanding.
    uint64_t left_out = 0;
    for (QpId q = tw.max_qps(); q < topo.qp_count(); ++q) left_out += a_.outstanding_.of(q) != nullptr;
    return json{{"window_ns", width},
                {"qp_series", json{{"limit", tw.max_qps()}, {"qps_left_out", left_out}}},
                {"windows", std::move(windows)}};
}

}  // namespace sigmatrace::analyzer
