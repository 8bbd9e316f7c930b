#include "analyzer/analyses/analysis.h"

#include <algorithm>
#include <utility>

#include <fmt/core.h>

#include <sigmatrace/opcodes.h>

#include "analyzer/analyses/data_link.h"
#include "analyzer/outputs/report_builder.h"
#include "analyzer/decode/schema_table.h"
#include "analyzer/outputs/json_text.h"

namespace sigmatrace::analyzer {
namespace F = fields;

Analysis::Analysis(AnalysisOptions options)
    : options_(std::move(options)),
      recon_(topo_, *this),
      barriers_(options_.barrier),
      gray_(options_.gray),
      incast_(options_.incast, topo_),
      windows_(options_.windows),
      phases_(options_.phases),
      outstanding_(&windows_) {
    if (options_.clock.applied) correction_ = ClockCorrection(*options_.clock.applied);
}

void Analysis::on_event(const DecodedEvent& ev) {
    const bool mine = owns(ev.trace_index, ev.trace_hostname);
    if (ev.id >= EventId::count_) {
        if (mine) ++topo_.anomalies().unknown_events;
        return;
    }
    if (!mine) {
        // Another share's trace: its set-up builds the same topology here, and nothing of it is counted (the
        // share that owns it counts it; a malformed one too).
        if (carries_data_path(ev.id)) return;
        recon_.forget_lookups();
        note_time(ev.ts_ns, ev.ts_ns);
        const Anomalies counted = topo_.anomalies();
        on_object_event(ev, topo_.process_of(ev));
        topo_.anomalies() = counted;
        return;
    }
    if (is_data_event(ev.id)) {
        // An events-format data event handed over whole (unit tests, the fuzzer, or one without elements from
        // the element decoder): its elements, through the same adapter; the first one counts the event.
        ElementOrigin origin{ev.trace_index, ev.vpid, ev.vtid, ev.procname, ev.trace_hostname, ev.ts_ns, 0};
        ElementExtras extras;
        bool malformed = false;
        if (for_each_element(ev, origin, extras, malformed, [this](const DataElement& e) { on_element(e); }) > 0) return;
        if (malformed) ++topo_.anomalies().malformed_events;
    }
    // The QP and CQ caches of reconstruction hold lookups that object-life events may change (a carrier of
    // records, which follows its elements, changes none).
    if (ev.id != EventId::deferred_records) recon_.forget_lookups();
    note_time(ev.ts_ns, ev.ts_ns);
    if (ev.inconsistent) ++topo_.anomalies().malformed_events;
    ++events_;
    ++events_by_id_[static_cast<std::size_t>(ev.id)];

    ProcId p = topo_.process_of(ev);
    {
        Process& pr = topo_.proc(p);
        ++pr.events;
        pr.last_ts = std::max(pr.last_ts, ev.ts_ns);
    }
    switch (ev.id) {
    case EventId::deferred_records: {
        namespace F = fields::deferred_records;
        if (ev.f[F::origin_pid].present && static_cast<int32_t>(ev.u(F::origin_pid)) > 0) ++salvaged_events_;
        if (const uint64_t lost = ev.f[F::lost].present ? ev.u(F::lost) : 0; lost != 0) lost_records_[ev.vpid] += lost;
        break;
    }
    case EventId::gpu_qp_query: on_gpu_qp_query(ev, p); break;
    case EventId::qp_counters: on_qp_counters(ev, p); break;
    case EventId::gpu_watch_stats:
        topo_.anomalies().gpu_wqes_lost += ev.u(F::gpu_watch_stats::lost_wqes);
        topo_.anomalies().gpu_wqes_malformed += ev.u(F::gpu_watch_stats::malformed_wqes);
        break;
    case EventId::gpu_cq_stats: topo_.anomalies().gpu_cqes_missed += ev.u(F::gpu_cq_stats::missed_cqes); break;
    default: on_object_event(ev, p); break;
    }
}

void Analysis::on_object_event(const DecodedEvent& ev, ProcId p) {
    switch (ev.id) {
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
        if (q != kNoId) {
            const auto state = static_cast<int32_t>(ev.i64(F::qp_modify::qp_state));
            recon_.on_qp_state(q, state);
            // A modify without IBV_QP_STATE records -1: the state did not change.
            if (state >= 0) progress_.on_owner_state(q, state, ev.ts_ns);
        }
        break;
    }
    case EventId::qp_destroy: {
        const QpId q = topo_.on_qp_destroy(ev, p);
        if (q != kNoId) {
            recon_.drain_qp(q, true);
            progress_.on_owner_destroy(q, ev.ts_ns);
        }
        break;
    }
    case EventId::srq_create: topo_.on_srq_create(ev, p); break;
    case EventId::ah_create: topo_.on_ah_create(ev, p); break;
    case EventId::gpu_qp_create: topo_.on_gpu_qp_create(ev, p); break;
    case EventId::gpu_qp_modify: topo_.on_gpu_qp_modify(ev, p); break;
    case EventId::gpu_qp_destroy: {
        const QpId q = topo_.on_gpu_qp_destroy(ev, p);
        if (q != kNoId) {
            recon_.drain_qp(q, true);
            progress_.on_owner_destroy(q, ev.ts_ns);
        }
        break;
    }
    default: break;  // object life without analysis value yet (MRs, CQ destroy, notifications, counters)
    }
}

void Analysis::on_element(const DataElement& e) {
    on_elements(std::span<const DataElement>(&e, 1));
}

void Analysis::on_elements(std::span<const DataElement> es) {
    const ElementOrigin& o = *es.front().origin;
    if (!owns(o.trace_index, o.trace_hostname)) [[unlikely]] return;   // another share's (the readers skip them)
    const ProcId p = topo_.process_of(o);
    {
        Process& pr = topo_.proc(p);
        pr.last_ts = std::max(pr.last_ts, o.event_ns);
    }
    // The span's times and counts first, then its elements to reconstruction: the span's elements come in
    // capture order, so the trace's start is what it would be one element at a time.
    int64_t earliest = o.event_ns;
    for (const DataElement& e : es) {
        // A deferred element was captured before its event was emitted: the trace starts at the earliest capture.
        earliest = std::min(earliest, e.ts_ns);
        if (e.counts_event) [[unlikely]] {
            ++events_;
            ++events_by_id_[static_cast<std::size_t>(event_of(e.kind, e.ring))];
            ++topo_.proc(p).events;
            if (e.malformed) ++topo_.anomalies().malformed_events;
        }
    }
    note_time(earliest, o.event_ns);
    if (es.size() == 1) recon_.on_element(es.front(), p);
    else recon_.on_elements(es, p);
}

void Analysis::on_gpu_qp_query(const DecodedEvent& ev, ProcId p) {
    if (ev.i64(F::gpu_qp_query::err) != 0) return;
    const QpId q = topo_.find_devx_command_qp(p, static_cast<uint32_t>(ev.u(F::gpu_qp_query::qpn)));
    if (q == kNoId) return;
    NicQuery n;
    n.ts = ev.ts_ns;
    n.state = ibv_qp_state_from_qpc(ev.u(F::gpu_qp_query::state));
    n.consumed_index = static_cast<uint32_t>(ev.u(F::gpu_qp_query::hw_sq_wqebb_counter));
    n.producer_index = static_cast<uint32_t>(ev.u(F::gpu_qp_query::sw_sq_wqebb_counter));
    progress_.on_query(q, n);
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

void Analysis::on_discarded(const DiscardRecord& d) {
    if (owns(d.trace_index)) discards_.push_back(d);
}

void Analysis::on_operations(std::span<const Operation> ops) {
    // One QP's operations (op_reconstruction.h): its QP is looked up once; the analyses that count what a run
    // shares take it whole, the others go operation by operation in one loop (they keep no state in common,
    // except the windows and the outstanding work, which samples into the windows: those stay in that order).
    const Qp& qp = topo_.qp(ops.front().qp);
    if (options_.clock.constraints_only) {
        for (const Operation& op : ops) clocks_.add(op, qp);
        return;
    }
    SendRun run;
    const bool is_run = ops.size() > 1 && send_run_of(ops, run);
    stats_.add(ops);
    traffic_.add(ops);
    barriers_.add(ops, qp, is_run ? &run : nullptr);
    progress_.add(ops);
    const bool per_link = windows_.enabled() || phases_.enabled();
    if (per_link && is_run && take_send_run(run, qp)) [[unlikely]] {
        for (OpListener* l : listeners_) l->on_operations(ops);
        return;
    }
    for (const Operation& op : ops) {
        if (const bool large = op.bytes >= options_.gray.min_bytes || op.bytes >= options_.incast.min_bytes;
            !op.is_recv() && (large || per_link)) {
            const DataLink link = data_link_of(op, topo_);
            if (large) {
                gray_.add(op, link);
                incast_.add(op, link);
            }
            windows_.add(op, link);
            phases_.add(op, link, first_ts_);
        }
        if (windows_.enabled()) outstanding_.add(op);
        if (!options_.clock.applied) clocks_.add(op, qp);
        if (op.outcome == OpOutcome::Failed || op.outcome == OpOutcome::Flushed) [[unlikely]] {
            ++errors_by_status_[op.wc_status];
            if (++errors_seen_ == options_.error_storm_threshold) storm_ts_ = op.done_ts;
            first_errors_.add({op.done_ts, op.proc, op.qp, op.wc_status, op.opcode, op.wr_id});
        }
    }
    for (OpListener* l : listeners_) l->on_operations(ops);
}

bool Analysis::take_send_run(const SendRun& run, const Qp& qp) {
    // Sends one completion retired, on one link and too small for the gray-link and incast detectors, that the
    // windows and the phases can each take whole; the rest of the per-operation work (outstanding work, clock
    // samples) goes one by one. Only completed operations: no error to count.
    const std::span<const Operation> ops = run.ops;
    if (run.max_bytes >= options_.gray.min_bytes || run.max_bytes >= options_.incast.min_bytes) return false;
    const DataLink link = data_link_of(ops.front(), topo_);
    if ((windows_.enabled() && !windows_.takes_run(run, link)) || (phases_.enabled() && !phases_.takes_run(run, link)))
        return false;
    if (windows_.enabled()) windows_.add_run(run);
    if (phases_.enabled()) phases_.add_run(run);
    if (windows_.enabled()) outstanding_.add_run(ops);
    if (!options_.clock.applied && ClockConstraints::takes(ops.front(), qp))
        for (const Operation& op : ops) clocks_.add(op, qp);
    return true;
}

std::vector<LiveFinding> Analysis::new_live_findings() {
    std::vector<LiveFinding> out;
    const ReportBuilder report(*this);
    for (nlohmann::json& f : report.gray_link_findings(gray_.evaluate())) {
        const nlohmann::json& episodes = f["evidence"]["episodes"];
        std::size_t& reported = live_gray_reported_[json_text(f["evidence"]["link"])];
        if (episodes.size() <= reported) continue;
        const int64_t start = first_ts_ + episodes[episodes.size() - 1]["start_ns"].get<int64_t>();
        reported = episodes.size();
        out.push_back({std::move(f), start});
    }
    for (nlohmann::json& f : report.incast_findings(incast_.evaluate())) {
        const nlohmann::json& e = f["evidence"];
        std::size_t& reported = live_incast_reported_[json_text(e["receiver"])];
        if (e["episodes"].get<std::size_t>() <= reported || e["longest_episodes"].empty()) continue;
        reported = e["episodes"].get<std::size_t>();
        const int64_t start = first_ts_ + e["longest_episodes"].back()["start_ns"].get<int64_t>();
        out.push_back({std::move(f), start});
    }
    // A queue is stalled once nothing completed for stall_after since its first unacknowledged post: the
    // finding's moment is that, since + threshold.
    for (nlohmann::json& f : report.stall_findings()) {
        const nlohmann::json& e = f["evidence"];
        const std::string key = fmt::format("{}/{}", json_text(e["pid"]), json_text(e["qp_num"]));
        const int64_t since = first_ts_ + e["since_ns"].get<int64_t>();
        const auto [it, fresh] = live_stalls_reported_.try_emplace(key, since);
        if (!fresh && it->second == since) continue;
        it->second = since;
        out.push_back({std::move(f), since + options_.stall_after_ns});
    }
    if (storm_ts_ >= 0 && !live_storm_reported_) {
        live_storm_reported_ = true;
        const ErrorSample& e0 = first_errors_.front();
        nlohmann::json by_status = nlohmann::json::object();
        for (const auto& [status, n] : errors_by_status_) by_status[std::string(wc_status_name(status))] = n;
        out.push_back({finding("error_storm", "error",
                               fmt::format("{} error completions so far (threshold {}); first: {} on QP {}",
                                           errors_seen_, options_.error_storm_threshold, wc_status_name(e0.status),
                                           topo_.qp(e0.qp).qp_num),
                               nlohmann::json{{"errors", errors_seen_}, {"by_status", by_status},
                                              {"threshold", options_.error_storm_threshold}}),
                       storm_ts_});
    }
    return out;
}

void Analysis::finish_reconstruction() {
    if (std::exchange(reconstruction_finished_, true)) return;
    recon_.finish();
    // Peers are resolved now that every process's identity events have been read.
    for (QpId q = 0; q < topo_.qp_count(); ++q) topo_.resolve_peer(q);
}

void Analysis::finish_share() { finish_reconstruction(); }

bool Analysis::merge_share(Analysis& other) {
    if (!topo_.same_objects(other.topo_) || !gray_.can_merge(other.gray_) || !incast_.can_merge(other.incast_) ||
        !barriers_.can_merge(other.barriers_))
        return false;
    other.finish_share();
    events_ += other.events_;
    for (std::size_t i = 0; i < events_by_id_.size(); ++i) events_by_id_[i] += other.events_by_id_[i];
    counter_events_ += other.counter_events_;
    salvaged_events_ += other.salvaged_events_;
    for (const auto& [vpid, n] : other.lost_records_) lost_records_[vpid] += n;
    if (other.have_times_) note_time(other.first_ts_, other.last_ts_);
    recorded_until_ = std::max(recorded_until_, other.recorded_until_);
    discards_.insert(discards_.end(), other.discards_.begin(), other.discards_.end());
    // Each share's reordering stage held its own traces' data events: the whole trace's window and holdings are
    // the largest of them, its late events their sum.
    ordering_.window_ns = std::max(ordering_.window_ns, other.ordering_.window_ns);
    ordering_.late_events += other.ordering_.late_events;
    ordering_.max_lateness_ns = std::max(ordering_.max_lateness_ns, other.ordering_.max_lateness_ns);
    ordering_.max_held = std::max(ordering_.max_held, other.ordering_.max_held);
    read_problems_.insert(read_problems_.end(), other.read_problems_.begin(), other.read_problems_.end());
    topo_.anomalies() += other.topo_.anomalies();
    for (ProcId p = 0; p < topo_.process_count(); ++p)
        if (other.owns(topo_.proc(p).trace_index)) topo_.proc(p).take_counts(other.topo_.proc(p));
    for (QpId q = 0; q < topo_.qp_count(); ++q)
        if (other.owns(topo_.proc(topo_.qp(q).proc).trace_index)) {
            topo_.qp(q).take_data_state(other.topo_.qp(q));
            progress_.take(q, other.progress_);
            outstanding_.take(q, other.outstanding_);
            clocks_.take(q, other.clocks_);
        }
    windows_.merge(other.windows_);
    phases_.merge(other.phases_);
    stats_.merge(other.stats_);
    traffic_.merge(other.traffic_, other.topo_, topo_);
    gray_.merge(other.gray_);
    incast_.merge(other.incast_);
    barriers_.merge(other.barriers_);
    recon_.merge_unconsumed(other.recon_);
    for (const auto& [status, n] : other.errors_by_status_) errors_by_status_[status] += n;
    errors_seen_ += other.errors_seen_;
    first_errors_.merge(other.first_errors_);
    return true;
}

ClockResult Analysis::finish_clocks() {
    finish_reconstruction();
    finished_ = true;
    return clocks_.solve(topo_, first_ts_);
}

nlohmann::json Analysis::finish() {
    if (!finished_) {
        finish_reconstruction();
        traffic_.resolve(topo_);
        if (options_.clock.applied) {
            clock_result_ = *options_.clock.applied;
            clock_result_.applied = !correction_.empty();
        } else {
            clock_result_ = clocks_.solve(topo_, first_ts_);
        }
        stats_.finish(topo_);
        gray_result_ = gray_.finish();
        incast_result_ = incast_.finish();
        outstanding_.finish();
        windows_.finish();
        finished_ = true;
    }
    return ReportBuilder(*this).build();
}

}  // namespace sigmatrace::analyzer
