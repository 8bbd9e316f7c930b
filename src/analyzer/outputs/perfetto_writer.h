// --perfetto FILE.json (or --perfetto-format json): a timeline in the Chrome JSON trace-event format, which
// ui.perfetto.dev opens (the protobuf format is perfetto_proto_writer.h). One process
// track per traced process ("rank 3 @ node3"), one thread track per QP; each operation is a slice from its
// post to its completion (args: bytes, wr_id, status, peer); two-sided transfers (SEND and RDMA WRITE with
// immediate, and the receive each consumed) are linked by a flow arrow from the sender's slice to the
// receiver's; one-sided ones (RDMA WRITE, READ, atomics) by a flow to a marker slice ("RDMA_WRITE (remote)", cat
// "remote") on the target QP's track at the initiator's completion time (when the data has been placed or read
// at the latest: the target's CPU takes no part, so the trace has no target-side event). Operations are written as they are reconstructed (streaming, nothing kept per operation); the
// track names, known only at the end, are written last.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "analyzer/analyses/op_reconstruction.h"
#include "analyzer/analyses/topology.h"
#include "analyzer/outputs/timeline_sampling.h"

namespace sigmatrace::analyzer {

class Analysis;

// Shared by both timeline formats (perfetto_proto_writer.h): the outcome as written, and which opcodes get
// which kind of flow.
const char* outcome_name(OpOutcome o);
bool two_sided_send(uint8_t opcode);
bool one_sided(uint8_t opcode);

class PerfettoWriter : public OpListener {
public:
    PerfettoWriter(const Topology& topo, uint64_t max_ops) : topo_(topo), sampler_(max_ops) {}
    ~PerfettoWriter() override;
    PerfettoWriter(const PerfettoWriter&) = delete;
    PerfettoWriter& operator=(const PerfettoWriter&) = delete;

    bool open(const std::string& path);
    void on_operation(const Operation& op) override;
    // Writes the track names and closes the file; false on a write error.
    bool close();

    uint64_t written() const { return sampler_.written(); }
    uint64_t dropped() const { return sampler_.dropped(); }
    std::string sampling() const { return sampler_.statement(); }

private:
    struct FlowEnd {
        ProcId proc;
        QpId qp;
        int64_t ts;
    };
    struct RemoteMarker {
        ProcId proc;
        QpId qp;
        uint8_t opcode;
        int64_t post_ts, done_ts;
        uint64_t bytes, raddr;
    };
    static constexpr std::size_t kMaxUnresolvedMarkers = 65536;   // bounds memory when targets are not traced
    void write_flow(const FlowEnd& from, const FlowEnd& to);
    void write_marker(const RemoteMarker& m, const Peer& peer);
    double us(int64_t ts) const { return static_cast<double>(ts - base_) / 1000.0; }

    const Topology& topo_;
    TimelineSampler sampler_;   // --perfetto-max-ops
    std::FILE* f_ = nullptr;
    bool first_ = true;
    bool have_base_ = false;
    int64_t base_ = 0;
    uint64_t next_flow_ = 1;
    uint64_t remote_markers_ = 0;
    uint64_t markers_dropped_ = 0;
    std::vector<RemoteMarker> unresolved_markers_;
    std::set<QpId> qps_seen_;
    // Two-sided transfers waiting for their other end, per (sender QP number, receiver QP number).
    std::map<std::pair<uint32_t, uint32_t>, std::deque<FlowEnd>> sends_, recvs_;
};

}  // namespace sigmatrace::analyzer
