// --perfetto FILE.pftrace: the timeline in Perfetto's own protobuf format (perfetto_trace.proto, a subset of
// Perfetto's TracePacket/TrackEvent schema), smaller than the JSON of perfetto_writer.h and read natively by
// ui.perfetto.dev and trace_processor. The same content as the JSON timeline:
// - a track per traced process, a child track per QP (named at the end, when peers are resolved);
// - a slice per operation, post to completion, with debug annotations bytes, wr_id, status, outcome, peer;
// - flows: two-sided send -> the receive it consumed; one-sided -> an instant "OPCODE (remote)" on the
//   target QP's track at the initiator's completion;
// - at the end, counter tracks from the analysis document's time windows (timeline.windows[]): bytes/s per
//   link and senders per receiving NIC.
// Names are interned (InternedData, incremental state on one packet sequence) and operation timestamps are on
// a clock of the sequence's own that starts a second before the first operation (a ClockSnapshot ties it to
// the trace clock; TracePacketDefaults makes it every packet's), so an operation costs a few short varints. Flow ids are given when the first end is written, so nothing is kept per written operation but
// the bounded queues of ends waiting for their other end. Above --perfetto-max-ops operations the rest are
// left out; the file says so in a track named "sampling: ..." and in a debug annotation on it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analyzer/analyses/op_reconstruction.h"
#include "analyzer/analyses/topology.h"
#include "analyzer/outputs/timeline_sampling.h"

namespace sigmatrace::perfetto_format {
class TracePacket;
}

namespace sigmatrace::analyzer {

class PerfettoProtoWriter : public OpListener {
public:
    PerfettoProtoWriter(const Topology& topo, uint64_t max_ops);
    ~PerfettoProtoWriter() override;
    PerfettoProtoWriter(const PerfettoProtoWriter&) = delete;
    PerfettoProtoWriter& operator=(const PerfettoProtoWriter&) = delete;

    bool open(const std::string& path);
    void on_operation(const Operation& op) override;
    // Writes the final track names, the counters of `doc` (the analysis document, may be null) and the
    // sampling statement, and closes the file; false on a write error.
    bool close(const nlohmann::json* doc);

    uint64_t written() const { return sampler_.written(); }
    uint64_t dropped() const { return sampler_.dropped(); }
    std::string sampling() const { return sampler_.statement(); }
    uint64_t bytes_written() const { return bytes_; }

private:
    struct RemoteMarker {
        ProcId proc;
        QpId qp;
        uint8_t opcode;
        int64_t done_ts;
        uint64_t bytes;
        uint64_t flow_id;
    };
    static constexpr std::size_t kMaxUnresolvedMarkers = 65536;   // bounds memory when targets are not traced
    static constexpr std::size_t kMaxWaitingFlowEnds = 4096;      // per QP pair, likewise

    void emit(perfetto_format::TracePacket& p);
    void start_sequence(int64_t base);
    uint64_t rel(int64_t ts) const { return ts > base_ ? static_cast<uint64_t>(ts - base_) : 0; }
    uint64_t event_name(const std::string& name, perfetto_format::TracePacket& p);
    uint64_t annotation_name(const char* name, perfetto_format::TracePacket& p);
    void ensure_tracks(QpId q);
    void write_track(uint64_t uuid, uint64_t parent, const std::string& name, int32_t pid);
    void write_marker(const RemoteMarker& m, const Peer& peer);

    const Topology& topo_;
    TimelineSampler sampler_;   // --perfetto-max-ops
    std::FILE* f_ = nullptr;
    std::string buf_;
    bool first_packet_ = true;
    uint64_t bytes_ = 0;
    uint64_t next_flow_ = 1;
    uint64_t next_uuid_counter_ = 1;
    uint64_t remote_markers_ = 0;
    uint64_t markers_dropped_ = 0;
    int64_t base_ = 0;   // the trace clock's time at 0 of the file's own clock
    int64_t last_ts_ = 0;
    std::unordered_map<std::string, uint64_t> event_names_;
    std::unordered_map<std::string, uint64_t> annotation_names_;
    std::vector<RemoteMarker> unresolved_markers_;
    std::set<ProcId> procs_seen_;
    std::set<QpId> qps_seen_;
    // Two-sided transfers whose other end is not written yet, per (sender QP number, receiver QP number):
    // the flow id already written on the first end.
    std::map<std::pair<uint32_t, uint32_t>, std::deque<uint64_t>> sends_, recvs_;
};

}  // namespace sigmatrace::analyzer
