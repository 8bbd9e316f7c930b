// A finished share of an analysis in bytes (analysis.h, save_share/load_share): cereal's binary archive over what
// merge_share() takes from a share. Every part lists its own fields (each class's serialize()); this file adds
// the analysis's own counters, the topology's per-object data state and the identities both sides check.
//
// The bytes are for the same build on the same architecture (the ranks of one job run one binary): plain
// structs go as their bytes, and a header of their sizes refuses bytes from another build.
#include <cstring>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <cereal/archives/binary.hpp>
#include <cereal/cereal.hpp>
#include <cereal/types/deque.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/set.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/unordered_map.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/vector.hpp>

#include "analyzer/analyses/analysis.h"

namespace sigmatrace::analyzer {

// Plain structs as their bytes: found by cereal through argument-dependent lookup.
template <class Archive> void serialize(Archive& ar, Operation& v) { ar(cereal::binary_data(&v, sizeof v)); }
template <class Archive> void serialize(Archive& ar, QpStateChange& v) { ar(cereal::binary_data(&v, sizeof v)); }
template <class Archive> void serialize(Archive& ar, NicQuery& v) { ar(cereal::binary_data(&v, sizeof v)); }
template <class Archive> void serialize(Archive& ar, OrderingSummary& v) { ar(cereal::binary_data(&v, sizeof v)); }
template <class Archive> void serialize(Archive& ar, Anomalies& v) { ar(cereal::binary_data(&v, sizeof v)); }
template <class Archive> void serialize(Archive& ar, Qp::Counted& v) { ar(cereal::binary_data(&v, sizeof v)); }

namespace {

constexpr char kMagic[] = "sigmatrace-share";
constexpr uint32_t kFormat = 1;

// The sizes of the structs that go as bytes: another build's bytes are refused rather than misread.
std::vector<uint32_t> layout() {
    return {sizeof(Operation), sizeof(QpStateChange), sizeof(NicQuery), sizeof(OrderingSummary), sizeof(Anomalies),
            sizeof(Qp::Counted), kEventCount};
}

// What Topology::same_objects() compares: the objects' identities, by id.
struct ObjectKeys {
    std::vector<std::tuple<uint32_t, int64_t>> procs;                  // trace index, vpid
    std::vector<std::tuple<ProcId, uint64_t, uint32_t, bool>> qps;     // process, handle, number, GPU
    std::vector<std::string> nodes;
    std::vector<std::tuple<NodeId, std::string>> devices;
    bool operator==(const ObjectKeys&) const = default;
    template <class Archive> void serialize(Archive& ar) { ar(procs, qps, nodes, devices); }
};

ObjectKeys object_keys(const Topology& t) {
    ObjectKeys k;
    for (ProcId p = 0; p < t.process_count(); ++p) k.procs.emplace_back(t.proc(p).trace_index, t.proc(p).vpid);
    for (QpId q = 0; q < t.qp_count(); ++q) {
        const Qp& qp = t.qp(q);
        k.qps.emplace_back(qp.proc, qp.handle, qp.qp_num, qp.gpu);
    }
    for (NodeId n = 0; n < t.node_count(); ++n) k.nodes.push_back(t.node(n).name);
    for (DevId d = 0; d < t.device_count(); ++d) k.devices.emplace_back(t.device(d).node, t.device(d).name);
    return k;
}

// Process::take_counts() and Qp::take_data_state(): what a share's data events made of its own objects.
struct ProcCounts {
    ProcId id = kNoId;
    uint64_t events = 0;
    int64_t first_ts = 0, last_ts = 0;
    template <class Archive> void serialize(Archive& ar) { ar(id, events, first_ts, last_ts); }
};
struct QpDataState {
    QpId id = kNoId;
    records::Poster poster = records::Poster::verbs;
    bool gpu_cqe_seen = false, both_views = false;
    Qp::Counted counted;
    template <class Archive> void serialize(Archive& ar) { ar(id, poster, gpu_cqe_seen, both_views, counted); }
};

}  // namespace

std::string Analysis::save_share() {
    finish_share();
    incast_.close_share();
    std::vector<ProcCounts> procs;
    for (ProcId p = 0; p < topo_.process_count(); ++p)
        if (const Process& pr = topo_.proc(p); owns(pr.trace_index))
            procs.push_back({p, pr.events, pr.first_ts, pr.last_ts});
    std::vector<QpDataState> qps;
    for (QpId q = 0; q < topo_.qp_count(); ++q)
        if (const Qp& qp = topo_.qp(q); owns(topo_.proc(qp.proc).trace_index))
            qps.push_back({q, qp.poster, qp.gpu_cqe_seen, qp.both_views, qp.counted});
    std::ostringstream out(std::ios::binary);
    {
        cereal::BinaryOutputArchive ar(out);
        ar(std::string(kMagic), kFormat, layout(), object_keys(topo_));
        ar(share_hosts_, owned_traces_, procs, qps, topo_.anomalies());
        ar(events_, events_by_id_, counter_events_, salvaged_events_, lost_records_, have_times_, first_ts_, last_ts_,
           recorded_until_, discards_, ordering_, read_problems_, errors_by_status_, errors_seen_, first_errors_,
           recon_.unconsumed_receives());
        ar(progress_, outstanding_, clocks_, windows_, phases_, stats_, traffic_.export_pending(topo_), gray_, incast_,
           barriers_);
    }
    return std::move(out).str();
}

std::unique_ptr<Analysis> Analysis::load_share(std::string_view bytes, const Analysis& like, std::string* why) {
    auto a = std::make_unique<Analysis>(like.options_);
    a->topo_.copy_objects(like.topo_);
    std::istringstream in(std::string(bytes), std::ios::binary);
    try {
        cereal::BinaryInputArchive ar(in);
        std::string magic;
        uint32_t format = 0;
        std::vector<uint32_t> sizes;
        ar(magic, format);
        if (magic != kMagic || format != kFormat) {
            *why = "not a share of an analysis in this format";
            return nullptr;
        }
        ObjectKeys keys;
        ar(sizes, keys);
        if (sizes != layout()) {
            *why = "a share saved by another build of sigmatrace-analyze";
            return nullptr;
        }
        if (!(keys == object_keys(like.topo_))) {
            *why = "the share's topology differs (objects made from data events alone, or another trace)";
            return nullptr;
        }
        std::vector<std::string> hosts;
        std::vector<ProcCounts> procs;
        std::vector<QpDataState> qps;
        ar(hosts, a->owned_traces_, procs, qps, a->topo_.anomalies());
        const std::vector<int8_t> owned = std::move(a->owned_traces_);
        a->set_share(std::move(hosts));
        a->owned_traces_ = owned;
        for (const ProcCounts& c : procs) {
            if (c.id >= a->topo_.process_count()) throw cereal::Exception("a process id out of range");
            Process& p = a->topo_.proc(c.id);
            p.events = c.events;
            p.first_ts = c.first_ts;
            p.last_ts = c.last_ts;
        }
        for (const QpDataState& s : qps) {
            if (s.id >= a->topo_.qp_count()) throw cereal::Exception("a QP id out of range");
            Qp& q = a->topo_.qp(s.id);
            q.poster = s.poster;
            q.gpu_cqe_seen = s.gpu_cqe_seen;
            q.both_views = s.both_views;
            q.counted = s.counted;
        }
        uint64_t unconsumed = 0;
        ar(a->events_, a->events_by_id_, a->counter_events_, a->salvaged_events_, a->lost_records_, a->have_times_,
           a->first_ts_, a->last_ts_, a->recorded_until_, a->discards_, a->ordering_, a->read_problems_,
           a->errors_by_status_, a->errors_seen_, a->first_errors_, unconsumed);
        if (a->events_by_id_.size() != kEventCount) throw cereal::Exception("event counts of another schema");
        a->recon_.set_unconsumed_receives(unconsumed);
        std::vector<Traffic::PortablePending> pending;
        ar(a->progress_, a->outstanding_, a->clocks_, a->windows_, a->phases_, a->stats_, pending, a->gray_, a->incast_,
           a->barriers_);
        a->traffic_.import_pending(pending, a->topo_);
        if (in.peek() != std::char_traits<char>::eof()) throw cereal::Exception("bytes after the share");
    } catch (const std::exception& e) {   // cereal's, or a length read from damaged bytes too large to allocate
        *why = std::string("a damaged share: ") + e.what();
        return nullptr;
    }
    // Its reader finished it: merging must not end its reconstruction again.
    a->reconstruction_finished_ = true;
    return a;
}

std::string save_clock_result(const ClockResult& clocks) {
    std::ostringstream out(std::ios::binary);
    {
        cereal::BinaryOutputArchive ar(out);
        ar(std::string(kMagic), kFormat, clocks);
    }
    return std::move(out).str();
}

std::optional<ClockResult> load_clock_result(std::string_view bytes) {
    std::istringstream in(std::string(bytes), std::ios::binary);
    try {
        cereal::BinaryInputArchive ar(in);
        std::string magic;
        uint32_t format = 0;
        ClockResult clocks;
        ar(magic, format);
        if (magic != kMagic || format != kFormat) return std::nullopt;
        ar(clocks);
        return clocks;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

}  // namespace sigmatrace::analyzer
