// The report's time-resolved parts (docs/analyzer.md, "Windows"): `timeline` from the analysis's windows
// (time_windows.h), with each QP's and each process pair's outstanding work per window, and each QP's
// `outstanding` over the whole trace (outstanding.h).
#include <algorithm>
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

// A process pair's QPs in one window. Means add up exactly (a pair's outstanding work is the sum of its QPs'
// at every instant); maxima do not -- the QPs' samples reach the analysis in each QP's order, not in one time
// order -- so the sum of the QPs' maxima is given: the pair's peak for a pair on one QP (most stacks open one
// RC QP per peer and direction), an upper bound on it otherwise.
struct PeerPairCell {
    uint32_t qps = 0;
    double wrs_ns = 0.0, bytes_ns = 0.0;
    uint64_t max_wrs_sum = 0, max_bytes_sum = 0, rnr_events = 0;
    uint32_t recv_min_posted = UINT32_MAX;
    void add(const WindowQpCell& c, bool sends) {
        ++qps;
        wrs_ns += c.wrs_ns;
        bytes_ns += c.bytes_ns;
        if (sends) {
            max_wrs_sum += c.max_wrs;
            max_bytes_sum += c.max_bytes;
        }
        rnr_events += c.rnr_events;
        recv_min_posted = std::min(recv_min_posted, c.recv_min_posted);
    }
};
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
        std::map<std::pair<ProcId, ProcId>, PeerPairCell> pairs;
        for (const auto& [q, c] : qps) {
            const Qp& qp = topo.qp(q);
            json j = proc_ref(qp.proc);
            j["qp_num"] = qp.qp_num;
            const bool sends = c->bytes.count() || c->wrs_ns > 0;
            if (sends) {
                j["max_wrs"] = c->max_wrs;
                j["max_bytes"] = c->max_bytes;
                // A window without a sample held one level throughout: its p99 is that level.
                j["p99_bytes"] = c->bytes.count() ? c->bytes.quantile(0.99) : c->max_bytes;
                j["mean_wrs"] = c->wrs_ns / static_cast<double>(width);
                j["mean_bytes"] = c->bytes_ns / static_cast<double>(width);
            }
            if (c->recv_max_posted) {
                j["recv_max_posted"] = c->recv_max_posted;
                j["recv_min_posted"] = c->recv_min_posted == UINT32_MAX ? json(nullptr) : json(c->recv_min_posted);
            }
            if (c->rnr_events) j["rnr_events"] = c->rnr_events;
            jqps.push_back(std::move(j));
            // UD QPs talk to many peers: not attributable to one pair (as in `peers`).
            if (qp.type != 4 && qp.peer.proc != kNoId) pairs[{qp.proc, qp.peer.proc}].add(*c, sends);
        }
        json jpeers = json::array();
        for (const auto& [procs, p] : pairs) {
            json j{{"src", proc_ref(procs.first)},
                   {"dst", proc_ref(procs.second)},
                   {"qps", p.qps},
                   {"mean_wrs", p.wrs_ns / static_cast<double>(width)},
                   {"mean_bytes", p.bytes_ns / static_cast<double>(width)},
                   {"max_wrs_sum", p.max_wrs_sum},
                   {"max_bytes_sum", p.max_bytes_sum},
                   {"rnr_events", p.rnr_events}};
            j["recv_min_posted"] = p.recv_min_posted == UINT32_MAX ? json(nullptr) : json(p.recv_min_posted);
            jpeers.push_back(std::move(j));
        }
        windows.push_back(json{{"start_ns", index * width},
                               {"end_ns", (index + 1) * width},
                               {"node_matrix", std::move(jmatrix)},
                               {"links", std::move(jlinks)},
                               {"rails", std::move(jrails)},
                               {"receivers", std::move(jreceivers)},
                               {"qps", std::move(jqps)},
                               {"peers", std::move(jpeers)},
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
