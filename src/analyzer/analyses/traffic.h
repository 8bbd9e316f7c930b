// Traffic accounting (docs/analyzer.md, "Traffic and rails"): bytes and operations per (source node, destination node),
// RDMA READ counted in the direction the data moves; bytes sent and received per NIC (rail). Only operations
// that moved data count (completed, or GPU WQEs observed on the ring), and only the initiator's side: a SEND and
// the RECV it consumes are one transfer.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "analyzer/analyses/model.h"

namespace sigmatrace::analyzer {

struct TrafficCell {
    uint64_t bytes = 0;
    uint64_t ops = 0;
};

struct RailCounters {
    uint64_t bytes_tx = 0;
    uint64_t bytes_rx = 0;
    uint64_t ops_tx = 0;
    uint64_t ops_rx = 0;
};

struct Skew {
    double inbound = 0.0;    // max over nodes / mean over nodes of inter-node bytes received
    double outbound = 0.0;   // the same for bytes sent
    NodeId inbound_max_node = kNoId;
    NodeId outbound_max_node = kNoId;
};

class Topology;

// Operations are accumulated per QP (and per UD destination) and attributed to nodes and NICs at the end:
// a peer often becomes resolvable only after the operation (the remote process's events come later in the
// trace), and per-QP accumulation keeps memory bounded by the number of QPs.
class Traffic {
public:
    void add(const Operation& op) { add(std::span<const Operation>(&op, 1)); }
    void add(std::span<const Operation> ops);
    // Counters mode: `bytes` in `ops` WRs posted on QP q (counted initiator -> target: counters do not say which
    // were RDMA READs).
    void add_counted(QpId q, uint64_t bytes, uint64_t ops);
    // Adds what `other` accumulated from another share of the trace's operations (analysis.h, merge_share):
    // QP ids are the same in both topologies; address vectors, interned as each share met them, are moved into
    // `topo`'s. `other` is left empty. Before resolve().
    void merge(Traffic& other, const Topology& other_topo, Topology& topo);
    // A share in bytes (share_codec.cpp): what merge() takes, the pending cells, each address vector as its
    // address (the ids are one topology's).
    struct PortablePending {
        QpId qp = kNoId;
        bool read = false;
        uint64_t ud_ah = 0;
        uint32_t ud_qpn = 0;
        bool has_av = false;
        uint32_t dlid = 0;
        uint64_t gid_prefix = 0, gid_iid = 0;
        uint64_t bytes = 0, ops = 0;
        template <class Archive> void serialize(Archive& ar) {
            ar(qp, read, ud_ah, ud_qpn, has_av, dlid, gid_prefix, gid_iid, bytes, ops);
        }
    };
    std::vector<PortablePending> export_pending(const Topology& topo) const;
    void import_pending(const std::vector<PortablePending>& cells, Topology& topo);
    // Attributes everything accumulated to nodes and rails (call once, at the end).
    void resolve(Topology& topo);

    const std::map<std::pair<NodeId, NodeId>, TrafficCell>& node_matrix() const { return matrix_; }
    const std::map<DevId, RailCounters>& rails() const { return rails_; }
    const TrafficCell& unresolved() const { return unresolved_; }

    // Skew over `nodes` (every node of the trace: a node that sends nothing still counts in the mean).
    Skew skew(const std::vector<NodeId>& nodes) const;

private:
    std::map<std::pair<NodeId, NodeId>, TrafficCell> matrix_;
    std::map<DevId, RailCounters> rails_;
    TrafficCell unresolved_;   // transfers whose destination could not be resolved
    struct PendingKey {
        QpId qp;
        bool read;
        uint64_t ud_ah;
        uint32_t ud_qpn;
        uint32_t av;  // UD/DC WQEs from a ring: their address vector
        auto operator<=>(const PendingKey&) const = default;
    };
    std::map<PendingKey, TrafficCell> pending_;
    PendingKey last_key_{kNoId, false, 0, 0, kNoId};
    TrafficCell* last_cell_ = nullptr;
};

// Inbound/outbound inter-node byte totals of `nodes` (same order).
struct NodeTotals {
    std::vector<uint64_t> in, out;
};
NodeTotals node_totals(const std::map<std::pair<NodeId, NodeId>, TrafficCell>& matrix, const std::vector<NodeId>& nodes);

}  // namespace sigmatrace::analyzer
