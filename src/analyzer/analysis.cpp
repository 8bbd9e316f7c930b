#include "analyzer/analysis.h"

#include <algorithm>

#include "analyzer/data_link.h"
#include "analyzer/report_builder.h"
#include "analyzer/schema_table.h"

namespace sigmatrace::analyzer {
namespace F = fields;

Analysis::Analysis(AnalysisOptions options)
    : options_(std::move(options)),
      recon_(topo_, *this),
      barriers_(options_.barrier),
      gray_(options_.gray),
      incast_(options_.incast, topo_) {}

void Analysis::on_event(const DecodedEvent& ev) {
    if (ev.id >= EventId::count_) {
        ++topo_.anomalies().unknown_events;
        return;
    }
    // A deferred data event was emitted after its elements were captured: the trace starts at the earliest
    // capture (elements' times are non-decreasing, so the first one).
    int64_t begin = ev.ts_ns;
    if (const CaptureFields c = capture_fields(ev.id); c.ts >= 0 && ev.u(c.n) > 0)
        begin = std::min(begin, ev.element_ts(c.ts, 0));
    if (events_ == 0 || begin < first_ts_) first_ts_ = begin;
    if (ev.ts_ns > last_ts_ || events_ == 0) last_ts_ = ev.ts_ns;
    if (ev.inconsistent) ++topo_.anomalies().malformed_events;
    if (!ev.continued && !ev.expanded) {
        ++events_;
        ++events_by_id_[static_cast<std::size_t>(ev.id)];
    }

    ProcId p = topo_.process_of(ev);
    {
        Process& pr = topo_.proc(p);
        if (!ev.continued && !ev.expanded) ++pr.events;
        pr.last_ts = std::max(pr.last_ts, ev.ts_ns);
    }
    switch (ev.id) {
    case EventId::deferred_records: {
        namespace F = fields::deferred_records;
        if (ev.f[F::origin_pid].present && static_cast<int32_t>(ev.u(F::origin_pid)) > 0) ++salvaged_events_;
        if (const uint64_t lost = ev.f[F::lost].present ? ev.u(F::lost) : 0; lost != 0) lost_records_[ev.vpid] += lost;
        break;
    }
    case EventId::process_info:
        retired_scratch_.clear();
        topo_.on_process_info(ev, p, retired_scratch_);
        for (ProcId old : retired_scratch_) recon_.drain_process(old);
        break;
    case EventId::device_open: topo_.on_device_open(ev, p); break;
    case EventId::port_info: topo_.on_port_info(ev, p); break;
    case EventId::cq_create: topo_.on_cq_create(ev, p); break;
    case EventId::qp_create: topo_.on_qp_create(ev, p); break;
    case EventId::qp_modify: {
        const QpId q = topo_.on_qp_modify(ev, p);
        if (q != kNoId) recon_.on_qp_state(q, static_cast<int32_t>(ev.i64(F::qp_modify::qp_state)));
        break;
    }
    case EventId::qp_destroy: {
        const QpId q = topo_.on_qp_destroy(ev, p);
        if (q != kNoId) recon_.drain_qp(q, true);
        break;
    }
    case EventId::srq_create: topo_.on_srq_create(ev, p); break;
    case EventId::ah_create: topo_.on_ah_create(ev, p); break;
    case EventId::post_send: recon_.on_post_send(ev, p); break;
    case EventId::post_recv: recon_.on_post_recv(ev, p); break;
    case EventId::post_srq_recv: recon_.on_post_srq_recv(ev, p); break;
    case EventId::poll_cq: recon_.on_poll_cq(ev, p); break;
    case EventId::gpu_qp_create: topo_.on_gpu_qp_create(ev, p); break;
    case EventId::gpu_qp_modify: topo_.on_gpu_qp_modify(ev, p); break;
    case EventId::gpu_qp_destroy: {
        const QpId q = topo_.on_gpu_qp_destroy(ev, p);
        if (q != kNoId) recon_.drain_qp(q, true);
        break;
    }
    case EventId::qp_counters: on_qp_counters(ev, p); break;
    case EventId::gpu_wqe: recon_.on_gpu_wqe(ev, p); break;
    case EventId::gpu_cqe: recon_.on_gpu_cqe(ev, p); break;
    case EventId::gpu_watch_stats:
        topo_.anomalies().gpu_wqes_lost += ev.u(F::gpu_watch_stats::lost_wqes);
        topo_.anomalies().gpu_wqes_malformed += ev.u(F::gpu_watch_stats::malformed_wqes);
        break;
    case EventId::gpu_cq_stats: topo_.anomalies().gpu_cqes_missed += ev.u(F::gpu_cq_stats::missed_cqes); break;
    default: break;  // object life without analysis value yet (MRs, CQ destroy, notifications, counters)
    }
}

void Analysis::on_qp_counters(const DecodedEvent& ev, ProcId p) {
    const auto qpn = static_cast<uint32_t>(ev.u(F::qp_counters::qp_num));
    QpId q = topo_.find_qp_by_handle(p, ev.u(F::qp_counters::qp));
    if (q == kNoId) q = topo_.find_qp_for_completion(p, 0, qpn);
    if (q == kNoId) q = topo_.implicit_qp(p, ev.u(F::qp_counters::qp), qpn, false);
    Qp::Counted& c = topo_.qp(q).counted;
    // interval_ns is the time since the QP's previous emission (or its creation): the first event's interval
    // starts the QP's counted time. Corrupt values larger than the trace's own time are bounded by the event.
    const int64_t interval = static_cast<int64_t>(std::min<uint64_t>(ev.u(F::qp_counters::interval_ns), uint64_t{1} << 62));
    const int64_t start = ev.ts_ns - std::min<int64_t>(interval, ev.ts_ns);
    if (c.events == 0 || start < c.first_ns) c.first_ns = start;
    c.last_ns = std::max(c.last_ns, ev.ts_ns);
    ++c.events;
    c.posted_wrs += ev.u(F::qp_counters::posted_wrs);
    c.posted_bytes += ev.u(F::qp_counters::posted_bytes);
    c.recv_wrs += ev.u(F::qp_counters::recv_wrs);
    c.completions += ev.u(F::qp_counters::completions);
    c.error_completions += ev.u(F::qp_counters::error_completions);
    c.post_errors += ev.u(F::qp_counters::post_errors);
    traffic_.add_counted(q, ev.u(F::qp_counters::posted_bytes), ev.u(F::qp_counters::posted_wrs));
    ++counter_events_;
}

void Analysis::on_discarded(const DiscardRecord& d) { discards_.push_back(d); }

void Analysis::on_operation(const Operation& op) {
    stats_.add(op);
    traffic_.add(op);
    barriers_.add(op, topo_.qp(op.qp));
    if (!op.is_recv() && (op.bytes >= options_.gray.min_bytes || op.bytes >= options_.incast.min_bytes)) {
        const DataLink link = data_link_of(op, topo_);
        gray_.add(op, link);
        incast_.add(op, link);
    }
    if (op.outcome == OpOutcome::Failed || op.outcome == OpOutcome::Flushed) {
        ++errors_by_status_[op.wc_status];
        if (first_errors_.size() < 16) first_errors_.push_back({op.done_ts, op.proc, op.qp, op.wc_status, op.opcode, op.wr_id});
    }
    for (OpListener* l : listeners_) l->on_operation(op);
}

nlohmann::json Analysis::finish() {
    if (!finished_) {
        recon_.finish();
        // Peers are resolved now that every process's identity events have been read.
        for (QpId q = 0; q < topo_.qp_count(); ++q) topo_.resolve_peer(q);
        traffic_.resolve(topo_);
        stats_.finish(topo_);
        gray_result_ = gray_.finish();
        incast_result_ = incast_.finish();
        finished_ = true;
    }
    return ReportBuilder(*this).build();
}

}  // namespace sigmatrace::analyzer
