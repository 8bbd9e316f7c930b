// A finished share of an analysis in bytes (analysis.h, save_share/load_share): cereal's binary archive over what
// merge_share() takes from a share. Every part lists its own fields (each class's serialize()); this file adds
// the analysis's own counters, the topology's per-object data state and the identities both sides check.
//
// The bytes are for the same build on the same architecture (the ranks of one job run one binary): plain
// structs go as their bytes, a header of their sizes refuses bytes from another build, and a checksum damaged
// bytes (see seal()).
#include <cstdint>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
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

// Sealed bytes: a 16-byte magic, a 32-bit format, cereal's body, and the body's 64-bit FNV-1a. The checksum is
// checked before the body is parsed: damaged bytes could otherwise hold a length that asks for terabytes.
constexpr std::string_view kShareMagic = "sigmatrace-share";
constexpr std::string_view kClockMagic = "sigmatrace-clock";
constexpr uint32_t kFormat = 2;
constexpr std::size_t kHeadBytes = 16 + sizeof(uint32_t);

uint64_t fnv1a(std::string_view bytes) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char c : bytes) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
    return h;
}

std::string seal(std::string_view magic, const std::string& body) {
    std::string out(magic);
    const uint32_t format = kFormat;
    out.append(reinterpret_cast<const char*>(&format), sizeof format);
    out += body;
    const uint64_t sum = fnv1a(body);
    out.append(reinterpret_cast<const char*>(&sum), sizeof sum);
    return out;
}

// The body of `bytes` sealed with `magic`, or nullopt with the reason.
std::optional<std::string_view> unseal(std::string_view magic, std::string_view bytes, std::string* why) {
    uint32_t format = 0;
    if (bytes.size() >= kHeadBytes) std::memcpy(&format, bytes.data() + 16, sizeof format);
    if (bytes.size() < kHeadBytes + sizeof(uint64_t) || bytes.substr(0, 16) != magic || format != kFormat) {
        *why = "not a share of an analysis in this format";
        return std::nullopt;
    }
    const std::string_view body = bytes.substr(kHeadBytes, bytes.size() - kHeadBytes - sizeof(uint64_t));
    uint64_t sum = 0;
    std::memcpy(&sum, bytes.data() + bytes.size() - sizeof sum, sizeof sum);
    if (sum != fnv1a(body)) {
        *why = "a damaged share: its checksum does not match its bytes";
        return std::nullopt;
    }
    return body;
}

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

// What a share's data events made of its own processes and QPs (Process::take_counts, Qp::take_data_state):
// the ids, then each one's fields, read straight into the receiver's objects.
template <class Archive> void counts_of(Archive& ar, Process& p) { ar(p.events, p.first_ts, p.last_ts); }
template <class Archive> void data_state_of(Archive& ar, Qp& q) { ar(q.poster, q.gpu_cqe_seen, q.both_views, q.counted); }

}  // namespace

std::string Analysis::save_share() {
    finish_share();
    incast_.close_share();
    std::vector<ProcId> procs;
    for (ProcId p = 0; p < topo_.process_count(); ++p)
        if (owns(topo_.proc(p).trace_index)) procs.push_back(p);
    std::vector<QpId> qps;
    for (QpId q = 0; q < topo_.qp_count(); ++q)
        if (owns(topo_.proc(topo_.qp(q).proc).trace_index)) qps.push_back(q);
    std::ostringstream out(std::ios::binary);
    {
        cereal::BinaryOutputArchive ar(out);
        ar(layout(), object_keys(topo_));
        ar(share_hosts_, owned_traces_, topo_.anomalies(), procs, qps);
        for (ProcId p : procs) counts_of(ar, topo_.proc(p));
        for (QpId q : qps) data_state_of(ar, topo_.qp(q));
        ar(events_, events_by_id_, counter_events_, salvaged_events_, lost_records_, have_times_, first_ts_, last_ts_,
           recorded_until_, discards_, ordering_, read_problems_, errors_by_status_, errors_seen_, first_errors_,
           recon_.unconsumed_receives());
        ar(progress_, outstanding_, clocks_, windows_, phases_, stats_, traffic_.export_pending(topo_), gray_, incast_,
           barriers_);
    }
    return seal(kShareMagic, std::move(out).str());
}

std::unique_ptr<Analysis> Analysis::load_share(std::string_view bytes, const Analysis& like, std::string* why) {
    const std::optional<std::string_view> body = unseal(kShareMagic, bytes, why);
    if (!body) return nullptr;
    std::istringstream in(std::string(*body), std::ios::binary);
    std::unique_ptr<Analysis> a;
    try {
        cereal::BinaryInputArchive ar(in);
        std::vector<uint32_t> sizes;
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
        // Refused bytes cost no copy of the topology.
        a = std::make_unique<Analysis>(like.options_);
        a->topo_.copy_objects(like.topo_);
        std::vector<std::string> hosts;
        std::vector<int8_t> owned;
        std::vector<ProcId> procs;
        std::vector<QpId> qps;
        ar(hosts, owned, a->topo_.anomalies(), procs, qps);
        a->set_share(std::move(hosts));
        a->owned_traces_ = std::move(owned);
        for (ProcId p : procs) {
            if (p >= a->topo_.process_count()) throw cereal::Exception("a process id out of range");
            counts_of(ar, a->topo_.proc(p));
        }
        for (QpId q : qps) {
            if (q >= a->topo_.qp_count()) throw cereal::Exception("a QP id out of range");
            data_state_of(ar, a->topo_.qp(q));
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
        ar(clocks);
    }
    return seal(kClockMagic, std::move(out).str());
}

std::optional<ClockResult> load_clock_result(std::string_view bytes) {
    std::string why;
    const std::optional<std::string_view> body = unseal(kClockMagic, bytes, &why);
    if (!body) return std::nullopt;
    std::istringstream in(std::string(*body), std::ios::binary);
    try {
        cereal::BinaryInputArchive ar(in);
        ClockResult clocks;
        ar(clocks);
        if (in.peek() != std::char_traits<char>::eof()) return std::nullopt;
        return clocks;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

}  // namespace sigmatrace::analyzer
