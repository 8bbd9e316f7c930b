#include "analyzer/outputs/perfetto_proto_writer.h"
#include "analyzer/outputs/timeline_track_names.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <sigmatrace/opcodes.h>

#include "analyzer/outputs/perfetto_writer.h"
#include "analyzer/outputs/report_builder.h"
#include "perfetto_trace.pb.h"
#include "analyzer/outputs/json_text.h"

namespace sigmatrace::analyzer {

namespace pf = sigmatrace::perfetto_format;

namespace {
// One packet sequence for the whole file: interned names and incremental state belong to it.
constexpr uint32_t kSequence = 1;
// Track uuids: QP tracks get the small numbers (every event names one, as a varint); the rest are above.
constexpr uint64_t kProcUuidBase = uint64_t{1} << 40;
constexpr uint64_t kCounterUuidBase = uint64_t{2} << 40;
constexpr uint64_t kSamplingUuid = uint64_t{3} << 40;
constexpr uint32_t kBootClock = 6;      // BUILTIN_CLOCK_BOOTTIME: what a timestamp means without a clock id
constexpr uint32_t kFileClock = 64;     // the first sequence-scoped clock id

uint64_t qp_uuid(QpId q) { return uint64_t{q} + 1; }
uint64_t proc_uuid(ProcId p) { return kProcUuidBase + p; }

void append_varint(std::string& out, uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

// "rank 1 (node1) QP 320", or "pid 4242 (node0) QP 320": a QP of timeline.windows[].qps.
std::string qp_series_label(const nlohmann::json& q) {
    const std::string node = q.contains("node") && q["node"].is_string() ? q["node"].get<std::string>() : "?";
    const std::string who = q.contains("rank") && q["rank"].is_number() && q["rank"].get<int64_t>() >= 0
                                ? fmt::format("rank {}", q["rank"].get<int64_t>())
                                : fmt::format("pid {}", q.value("pid", int64_t{-1}));
    return fmt::format("{} ({}) QP {}", who, node, q.value("qp_num", int64_t{-1}));
}

std::string nic_label(const nlohmann::json& ref) {
    if (ref.is_object()) {
        const auto str = [&](const char* k) {
            return ref.contains(k) && ref[k].is_string() ? ref[k].get<std::string>() : std::string("?");
        };
        return str("node") + "/" + str("device");
    }
    return ref.is_string() ? ref.get<std::string>() : json_text(ref);
}
}  // namespace

PerfettoProtoWriter::PerfettoProtoWriter(const Topology& topo, uint64_t max_ops) : topo_(topo), sampler_(max_ops) {}

PerfettoProtoWriter::~PerfettoProtoWriter() {
    if (f_) std::fclose(f_);
}

bool PerfettoProtoWriter::open(const std::string& path) {
    f_ = std::fopen(path.c_str(), "wb");
    return f_ != nullptr;
}

// The first packet: clears the incremental state and defines the file's clock, nanoseconds from `base` of the
// trace clock, as every packet's default. Operations are reconstructed out of post order (a long one is known
// at its completion), hence a base a second before the first one; earlier times are written at 0.
void PerfettoProtoWriter::start_sequence(int64_t base) {
    base_ = base;
    pf::TracePacket p;
    pf::ClockSnapshot* c = p.mutable_clock_snapshot();
    pf::ClockSnapshot::Clock* boot = c->add_clocks();
    boot->set_clock_id(kBootClock);
    boot->set_timestamp(static_cast<uint64_t>(base));
    pf::ClockSnapshot::Clock* own = c->add_clocks();
    own->set_clock_id(kFileClock);
    own->set_timestamp(0);
    p.mutable_trace_packet_defaults()->set_timestamp_clock_id(kFileClock);
    emit(p);
}

// A Trace is a sequence of `repeated TracePacket packet = 1`: each packet is written as that field (tag,
// length, bytes), so the file is streamed without holding the Trace message.
void PerfettoProtoWriter::emit(pf::TracePacket& p) {
    p.set_trusted_packet_sequence_id(kSequence);
    if (first_packet_) {
        p.set_sequence_flags(pf::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED | pf::TracePacket::SEQ_NEEDS_INCREMENTAL_STATE);
        first_packet_ = false;
    } else if (p.has_track_event() && p.track_event().has_name_iid()) {   // uses interned names
        p.set_sequence_flags(pf::TracePacket::SEQ_NEEDS_INCREMENTAL_STATE);
    }
    std::string body = p.SerializeAsString();
    buf_.clear();
    buf_.push_back(static_cast<char>((1 << 3) | 2));   // field 1, length-delimited
    append_varint(buf_, body.size());
    buf_ += body;
    std::fwrite(buf_.data(), 1, buf_.size(), f_);
    bytes_ += buf_.size();
}

uint64_t PerfettoProtoWriter::event_name(const std::string& name, pf::TracePacket& p) {
    auto [it, added] = event_names_.try_emplace(name, event_names_.size() + 1);
    if (added) {
        pf::EventName* e = p.mutable_interned_data()->add_event_names();
        e->set_iid(it->second);
        e->set_name(name);
    }
    return it->second;
}

uint64_t PerfettoProtoWriter::annotation_name(const char* name, pf::TracePacket& p) {
    auto [it, added] = annotation_names_.try_emplace(name, annotation_names_.size() + 1);
    if (added) {
        pf::DebugAnnotationName* e = p.mutable_interned_data()->add_debug_annotation_names();
        e->set_iid(it->second);
        e->set_name(name);
    }
    return it->second;
}

void PerfettoProtoWriter::write_track(uint64_t uuid, uint64_t parent, const std::string& name, int32_t pid) {
    pf::TracePacket p;
    pf::TrackDescriptor* d = p.mutable_track_descriptor();
    d->set_uuid(uuid);
    d->set_name(name);
    if (parent) d->set_parent_uuid(parent);
    if (pid >= 0) {
        d->mutable_process()->set_pid(pid);
        d->mutable_process()->set_process_name(name);
    }
    emit(p);
}

// Tracks are described when first used (the viewer needs them before their events) and again at the end with
// the final names: a later descriptor of the same uuid replaces the earlier one.
void PerfettoProtoWriter::ensure_tracks(QpId q) {
    if (!qps_seen_.insert(q).second) return;
    const ProcId p = topo_.qp(q).proc;
    if (procs_seen_.insert(p).second) write_track(proc_uuid(p), 0, timeline_process_name(topo_, p), static_cast<int32_t>(topo_.proc(p).pid));
    write_track(qp_uuid(q), proc_uuid(p), timeline_qp_name(topo_, q), -1);
}

void PerfettoProtoWriter::write_marker(const RemoteMarker& m, const Peer& peer) {
    ensure_tracks(peer.qp);
    pf::TracePacket p;
    p.set_timestamp(rel(m.done_ts));
    pf::TrackEvent* e = p.mutable_track_event();
    e->set_type(pf::TrackEvent::TYPE_INSTANT);
    e->set_track_uuid(qp_uuid(peer.qp));
    e->set_name_iid(event_name(fmt::format("{} (remote)", opcode_name(m.opcode)), p));
    pf::DebugAnnotation* a = e->add_debug_annotations();
    a->set_name_iid(annotation_name("bytes", p));
    a->set_uint_value(m.bytes);
    e->add_terminating_flow_ids(m.flow_id);
    emit(p);
    ++remote_markers_;
}

void PerfettoProtoWriter::on_operation(const Operation& op) {
    if (!f_ || !sampler_.keep()) return;
    if (first_packet_) start_sequence(std::max<int64_t>(op.post_ts - 1000000000, 0));
    ensure_tracks(op.qp);
    const uint64_t track = qp_uuid(op.qp);

    // Flow ids: the first end written takes a new id; the other end, when it comes, the same.
    uint64_t flow_out = 0, flow_in = 0;
    const Qp& qp = topo_.qp(op.qp);
    const bool completed = op.outcome == OpOutcome::Completed;
    if (completed && one_sided(op.opcode)) {
        flow_out = next_flow_++;
        const RemoteMarker m{op.proc, op.qp, op.opcode, op.done_ts, op.bytes, flow_out};
        if (op.peer.qp != kNoId && op.peer.proc != kNoId) write_marker(m, op.peer);
        else if (unresolved_markers_.size() < kMaxUnresolvedMarkers) unresolved_markers_.push_back(m);
        else ++markers_dropped_;
    } else if (completed && qp.has_remote && qp.dest_qpn != 0 && (op.is_recv() || two_sided_send(op.opcode))) {
        const bool recv = op.is_recv();
        const auto key = recv ? std::make_pair(qp.dest_qpn, qp.qp_num) : std::make_pair(qp.qp_num, qp.dest_qpn);
        auto& other = recv ? sends_[key] : recvs_[key];
        uint64_t id = 0;
        if (!other.empty()) {
            id = other.front();
            other.pop_front();
        } else if (auto& mine = recv ? recvs_[key] : sends_[key]; mine.size() < kMaxWaitingFlowEnds) {
            id = next_flow_++;
            mine.push_back(id);
        }
        (recv ? flow_in : flow_out) = id;
    }

    pf::TracePacket p;
    p.set_timestamp(rel(op.post_ts));
    pf::TrackEvent* e = p.mutable_track_event();
    e->set_type(pf::TrackEvent::TYPE_SLICE_BEGIN);
    e->set_track_uuid(track);
    e->set_name_iid(event_name(opcode_name(op.opcode), p));
    const auto annotate = [&](const char* name) {
        pf::DebugAnnotation* a = e->add_debug_annotations();
        a->set_name_iid(annotation_name(name, p));
        return a;
    };
    annotate("bytes")->set_uint_value(op.bytes);
    annotate("wr_id")->set_uint_value(op.wr_id);
    if (!completed) annotate("outcome")->set_string_value(outcome_name(op.outcome));
    if (op.wc_status) annotate("status")->set_string_value(std::string(wc_status_name(op.wc_status)));
    if (op.implied) annotate("completed_by")->set_string_value("next signaled completion (unsignaled WR)");
    if (op.poster != records::Poster::verbs) annotate(records::poster_name(op.poster))->set_bool_value(true);
    if (op.peer.proc != kNoId) {
        const Process& pr = topo_.proc(op.peer.proc);
        if (pr.rank >= 0) annotate("peer_rank")->set_int_value(pr.rank);
        else annotate("peer_pid")->set_int_value(pr.pid);
    } else if (op.peer.node != kNoId) {
        annotate("peer")->set_string_value(topo_.node(op.peer.node).name);
    }
    if (flow_out) e->add_flow_ids(flow_out);
    if (flow_in) e->add_terminating_flow_ids(flow_in);
    emit(p);

    pf::TracePacket end;
    end.set_timestamp(rel(op.done_ts));
    end.mutable_track_event()->set_type(pf::TrackEvent::TYPE_SLICE_END);
    end.mutable_track_event()->set_track_uuid(track);
    emit(end);
    last_ts_ = std::max(last_ts_, op.done_ts);
}

bool PerfettoProtoWriter::close(const nlohmann::json* doc) {
    if (!f_) return false;
    if (first_packet_) start_sequence(0);
    for (const RemoteMarker& m : unresolved_markers_) {
        const Peer& peer = topo_.qp(m.qp).peer;
        if (peer.qp != kNoId && peer.proc != kNoId) write_marker(m, peer);
        else ++markers_dropped_;   // the target is not traced: the flow has no end
    }
    unresolved_markers_.clear();
    for (ProcId p : procs_seen_) write_track(proc_uuid(p), 0, timeline_process_name(topo_, p), static_cast<int32_t>(topo_.proc(p).pid));
    for (QpId q : qps_seen_) write_track(qp_uuid(q), proc_uuid(topo_.qp(q).proc), timeline_qp_name(topo_, q), -1);

    // Counters per time window of the analysis (timeline.windows[]): one track per link (throughput), per
    // receiver (senders), and per QP with a series (its outstanding bytes and its receive queue's depth, the
    // window's max), a value at each window's start where it had one and 0 where it had none.
    if (doc && doc->contains("timeline")) {
        const nlohmann::json& windows = (*doc)["timeline"].value("windows", nlohmann::json::array());
        std::map<std::string, uint64_t> tracks;
        const auto counter_track = [&](const std::string& name, const char* unit) {
            auto [it, added] = tracks.try_emplace(name, kCounterUuidBase + tracks.size());
            if (added) {
                pf::TracePacket p;
                pf::TrackDescriptor* d = p.mutable_track_descriptor();
                d->set_uuid(it->second);
                d->set_name(name);
                d->mutable_counter()->set_unit_name(unit);
                emit(p);
            }
            return it->second;
        };
        // Window times on the trace clock itself: a window may begin before the file's clock does.
        const auto value = [&](uint64_t track, int64_t ts, double v) {
            pf::TracePacket p;
            p.set_timestamp(static_cast<uint64_t>(ts));
            p.set_timestamp_clock_id(kBootClock);
            pf::TrackEvent* e = p.mutable_track_event();
            e->set_type(pf::TrackEvent::TYPE_COUNTER);
            e->set_track_uuid(track);
            e->set_double_counter_value(v);
            emit(p);
        };
        std::set<uint64_t> previous;
        for (const nlohmann::json& w : windows) {
            const int64_t start = w.value("start_ns", int64_t{0});
            std::set<uint64_t> now;
            for (const nlohmann::json& l : w.value("links", nlohmann::json::array())) {
                const uint64_t t = counter_track(fmt::format("link {} -> {} bytes/s", nic_label(l["src"]), nic_label(l["dst"])), "bytes/s");
                value(t, start, l.value("bytes_per_s", 0.0));
                now.insert(t);
            }
            for (const nlohmann::json& r : w.value("receivers", nlohmann::json::array())) {
                const uint64_t t = counter_track(fmt::format("senders -> {}", nic_label(r["receiver"])), "senders");
                value(t, start, r.value("senders", 0.0));
                now.insert(t);
            }
            for (const nlohmann::json& q : w.value("qps", nlohmann::json::array())) {
                const std::string label = qp_series_label(q);
                if (q.contains("max_bytes")) {
                    const uint64_t t = counter_track("outstanding bytes: " + label, "bytes");
                    value(t, start, q["max_bytes"].get<double>());
                    now.insert(t);
                }
                if (q.contains("recv_max_posted")) {
                    const uint64_t t = counter_track("receives posted: " + label, "receives");
                    value(t, start, q["recv_max_posted"].get<double>());
                    now.insert(t);
                }
            }
            for (uint64_t t : previous)
                if (!now.contains(t)) value(t, start, 0);
            previous = std::move(now);
        }
        if (!windows.empty())
            for (uint64_t t : previous) value(t, windows.back().value("end_ns", int64_t{0}), 0);
    }

    if (sampler_.dropped()) {
        // The statement that the timeline is cut: a track of its own, named so, with the counts on an instant.
        pf::TracePacket d;
        d.mutable_track_descriptor()->set_uuid(kSamplingUuid);
        d.mutable_track_descriptor()->set_name(
            "sampling: " + sampler_.statement());
        emit(d);
        pf::TracePacket p;
        p.set_timestamp(rel(last_ts_));
        pf::TrackEvent* e = p.mutable_track_event();
        e->set_type(pf::TrackEvent::TYPE_INSTANT);
        e->set_track_uuid(kSamplingUuid);
        e->set_name_iid(event_name("operations left out", p));
        pf::DebugAnnotation* a = e->add_debug_annotations();
        a->set_name_iid(annotation_name("operations_written", p));
        a->set_uint_value(sampler_.written());
        a = e->add_debug_annotations();
        a->set_name_iid(annotation_name("operations_dropped", p));
        a->set_uint_value(sampler_.dropped());
        emit(p);
    }
    const bool ok = std::ferror(f_) == 0;
    const bool closed = std::fclose(f_) == 0;
    f_ = nullptr;
    return ok && closed;
}

}  // namespace sigmatrace::analyzer
