// qps[].progress and the stalled_queue finding (docs/analyzer.md, "Queue progress and stalls"): what a person
// looking at a hung job needs without dumping rings: which QP stopped, the first work request it did not
// acknowledge, the error completion that stopped it (status, and for a CQE the watcher read its mlx5 syndrome),
// and the other QPs of the process that were flushed.
#include <fmt/format.h>

#include <algorithm>

#include <sigmatrace/opcodes.h>

#include "analyzer/analyses/analysis.h"
#include "analyzer/outputs/format_units.h"
#include "analyzer/outputs/report_builder.h"

namespace sigmatrace::analyzer {

using nlohmann::json;

namespace {

std::string_view qp_state_name(int32_t s) {
    static constexpr std::string_view names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    return s >= 0 && s < 7 ? names[s] : std::string_view("UNKNOWN");
}

std::string_view source_name(QpStateChange::Source s) {
    switch (s) {
    case QpStateChange::Source::modify_qp: return "modify_qp";
    case QpStateChange::Source::error_completion: return "error_completion";
    case QpStateChange::Source::query_qp: return "query_qp";
    }
    return "unknown";
}

}  // namespace

json ReportBuilder::completion_error_json(const Operation& op) const {
    json j{{"status", std::string(wc_status_name(op.wc_status))}, {"source", op.cqe_from_ring ? "cqe" : "verbs"}};
    if (op.cqe_from_ring) {
        // The watcher records an error CQE's syndrome | vendor syndrome << 8 (deferred_records.h).
        const auto syndrome = static_cast<uint8_t>(op.vendor_err & 0xff);
        j["syndrome"] = fmt::format("0x{:x}", syndrome);
        const std::string_view meaning = mlx5_syndrome_meaning(syndrome);
        j["syndrome_meaning"] = meaning.empty() ? json(nullptr) : json(std::string(meaning));
        j["vendor_syndrome"] = fmt::format("0x{:x}", (op.vendor_err >> 8) & 0xff);
    } else {
        j["vendor_err"] = fmt::format("0x{:x}", op.vendor_err);
    }
    return j;
}

json ReportBuilder::wqe_json(const Operation& op) const {
    json j{{"opcode", opcode_name(op.opcode)},
           {"bytes", op.bytes},
           {"remote_addr", fmt::format("0x{:x}", op.raddr)},
           {"rkey", fmt::format("0x{:x}", op.rkey)},
           {"poster", records::poster_name(op.poster)},
           {"signaled", op.signaled},
           {"posted_ns", op.post_ts - a_.first_ts_}};
    // A ring WQE's wr_id is its unwrapped producer index (its wqe_counter is the low 16 bits).
    if (op.poster == records::Poster::verbs)
        j["wr_id"] = op.wr_id;
    else
        j["wqe_index"] = op.wr_id;
    switch (op.outcome) {
    case OpOutcome::Completed: j["completion"] = "success"; break;
    case OpOutcome::Failed: j["completion"] = "error"; break;
    case OpOutcome::Flushed: j["completion"] = "flushed"; break;
    default: j["completion"] = nullptr; break;
    }
    if (op.outcome == OpOutcome::Completed || op.outcome == OpOutcome::Failed || op.outcome == OpOutcome::Flushed)
        j["completed_ns"] = op.done_ts - a_.first_ts_;
    if (op.outcome == OpOutcome::Failed || op.outcome == OpOutcome::Flushed) j["error"] = completion_error_json(op);
    return j;
}

json ReportBuilder::progress_json(QpId q) const {
    const QpProgress* p = a_.progress_.of(q);
    if (!p) return nullptr;
    auto opt = [&](const std::optional<Operation>& op) { return op ? wqe_json(*op) : json(nullptr); };
    json states = json::array();
    for (const QpStateChange& s : p->states)
        states.push_back(json{{"time_ns", s.ts - a_.first_ts_},
                              {"state", std::string(qp_state_name(s.state))},
                              {"source", source_name(s.source)}});
    return json{{"posted", p->posted},
                {"completed", p->completed},
                {"failed", p->failed},
                {"flushed", p->flushed},
                {"in_flight", p->in_flight},
                {"unacknowledged", p->unacknowledged},
                {"last_completed", opt(p->last_completed)},
                {"first_unacknowledged", opt(p->first_unacknowledged)},
                {"last_error", p->last_error ? completion_error_json(*p->last_error) : json(nullptr)},
                {"states", std::move(states)},
                {"nic_query", nic_query_json(p->nic)}};
}

json ReportBuilder::nic_query_json(const std::optional<NicQuery>& n) const {
    if (!n) return nullptr;
    return json{{"time_ns", n->ts - a_.first_ts_},
                {"state", std::string(qp_state_name(n->state))},
                {"consumed_index", n->consumed_index},
                {"producer_index", n->producer_index}};
}

json ReportBuilder::stall_findings() const {
    json findings = json::array();
    add_stall_findings(findings, false);
    return findings;
}

void ReportBuilder::add_stall_findings(json& findings, bool error_storm) const {
    if (!a_.have_times_) return;
    const int64_t end = std::max(a_.last_ts_, a_.recorded_until_);
    for (const StalledQueue& s : a_.progress_.stalled(end, a_.options_.stall_after_ns)) {
        const QpProgress& p = *a_.progress_.of(s.qp);
        const Qp& qp = a_.topo_.qp(s.qp);
        const Operation& w = *p.first_unacknowledged;
        json ev = qp_ref(qp);
        ev["first_unacknowledged"] = wqe_json(w);
        ev["last_completed"] = p.last_completed ? wqe_json(*p.last_completed) : json(nullptr);
        ev["outstanding"] = p.unacknowledged;
        ev["posted"] = p.posted;
        ev["completed"] = p.completed;
        ev["since_ns"] = s.since - a_.first_ts_;
        ev["stalled_ns"] = s.stalled_ns;
        ev["ended_by_owner"] = s.ended_by_owner;
        ev["threshold_ns"] = a_.options_.stall_after_ns;
        ev["last_error"] = p.last_error ? completion_error_json(*p.last_error) : json(nullptr);
        ev["nic_query"] = nic_query_json(p.nic);
        json companions = json::array();
        for (QpId o : a_.progress_.flushed_companions(s.qp, qp.proc)) {
            const QpProgress& c = *a_.progress_.of(o);
            companions.push_back(json{{"qp_num", a_.topo_.qp(o).qp_num},
                                      {"flushed", c.flushed},
                                      {"first_flush_ns", c.first_flush_ts - a_.first_ts_}});
        }
        ev["flushed_companions"] = companions;
        if (error_storm) ev["related"] = json::array({"error_storm"});

        std::string error;
        if (p.last_error) {
            const json e = completion_error_json(*p.last_error);
            error = fmt::format("; last error {}", e["status"].get<std::string>());
            if (p.last_error->cqe_from_ring)
                error += fmt::format(" (syndrome {} {}, vendor syndrome {})", e["syndrome"].get<std::string>(),
                                     e["syndrome_meaning"].is_null() ? "" : e["syndrome_meaning"].get<std::string>(),
                                     e["vendor_syndrome"].get<std::string>());
            else
                error += fmt::format(" (vendor_err {})", e["vendor_err"].get<std::string>());
        }
        // The NIC's own word, when the owner asked (QUERY_QP): its state and how far it consumed the ring.
        const std::string nic =
            p.nic ? fmt::format("; QUERY_QP {}: state {}, NIC consumed index {} of producer index {}",
                                format_ns(static_cast<double>(p.nic->ts - a_.first_ts_)), qp_state_name(p.nic->state),
                                p.nic->consumed_index, p.nic->producer_index)
                  : std::string();
        const json peer = ev["peer"];
        findings.push_back(json{
            {"kind", "stalled_queue"},
            {"severity", "error"},
            {"summary",
             fmt::format("QP {} of {} (peer {} QP {}) {} no completion for {}: {} of {} operations "
                         "unacknowledged, first {} {} to 0x{:x} ({} {}){}{}",
                         qp.qp_num, proc_label(qp.proc),
                         peer.contains("node") && peer["node"].is_string() ? peer["node"].get<std::string>() : std::string("?"),
                         !peer.contains("qp_num") || peer["qp_num"].is_null() ? std::string("?") : std::to_string(peer["qp_num"].get<uint32_t>()),
                         s.ended_by_owner ? "had, until its owner tore it down," : "has had", format_ns(static_cast<double>(s.stalled_ns)), p.unacknowledged, p.posted,
                         opcode_name(w.opcode), format_bytes(static_cast<double>(w.bytes)), w.raddr,
                         w.poster == records::Poster::verbs ? "wr_id" : "wqe", w.wr_id, error + nic,
                         companions.empty() ? std::string()
                                            : fmt::format("; {} companion QP(s) flushed", companions.size()))},
            {"evidence", std::move(ev)}});
    }
}

}  // namespace sigmatrace::analyzer
