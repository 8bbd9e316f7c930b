#include "analyzer/analyses/traffic.h"

#include <sigmatrace/opcodes.h>

#include <algorithm>

#include "analyzer/analyses/topology.h"

namespace sigmatrace::analyzer {

void Traffic::add(std::span<const Operation> ops) {
    // A run's operations mostly share their cell: each stretch of one cell is summed, then added once.
    for (std::size_t i = 0; i < ops.size();) {
        const Operation& op = ops[i++];
        if (op.is_recv() || !op.moved_data()) continue;
        const PendingKey key{op.qp, op.opcode == static_cast<uint8_t>(WrOpcode::RDMA_READ), op.ud_ah, op.ud_qpn, op.av};
        if (!(key == last_key_) || last_cell_ == nullptr) {
            last_key_ = key;
            last_cell_ = &pending_[key];
        }
        uint64_t bytes = op.bytes, n = 1;
        // PendingKey's fields, compared directly rather than a key built per operation: the opcode stands in for
        // `read`, which can only end a stretch early, never join two cells.
        for (; i < ops.size(); ++i) {
            const Operation& o = ops[i];
            if (o.opcode != op.opcode || o.qp != op.qp || o.ud_ah != op.ud_ah || o.ud_qpn != op.ud_qpn ||
                o.av != op.av || !o.moved_data())
                break;
            bytes += o.bytes;
            ++n;
        }
        last_cell_->bytes += bytes;
        last_cell_->ops += n;
    }
}

void Traffic::add_counted(QpId q, uint64_t bytes, uint64_t ops) {
    if (bytes == 0 && ops == 0) return;   // a QP that only received, or polled: no cell of zeros
    TrafficCell& c = pending_[PendingKey{q, false, 0, 0, kNoId}];
    last_cell_ = nullptr;   // the map may have grown; the cache is rebuilt on the next add()
    c.bytes += bytes;
    c.ops += ops;
}

std::vector<Traffic::PortablePending> Traffic::export_pending(const Topology& topo) const {
    std::vector<PortablePending> out;
    out.reserve(pending_.size());
    for (const auto& [k, c] : pending_) {
        PortablePending p{k.qp, k.read, k.ud_ah, k.ud_qpn, k.av != kNoId, 0, 0, 0, c.bytes, c.ops};
        if (p.has_av) {
            const AddressHandle& av = topo.av(k.av);
            p.dlid = av.dlid;
            p.gid_prefix = av.dgid.prefix;
            p.gid_iid = av.dgid.iid;
        }
        out.push_back(p);
    }
    return out;
}

void Traffic::import_pending(const std::vector<PortablePending>& cells, Topology& topo) {
    for (const PortablePending& p : cells) {
        const uint32_t av = p.has_av ? topo.intern_av(p.dlid, Gid{p.gid_prefix, p.gid_iid}) : kNoId;
        TrafficCell& c = pending_[PendingKey{p.qp, p.read, p.ud_ah, p.ud_qpn, av}];
        c.bytes += p.bytes;
        c.ops += p.ops;
    }
    last_cell_ = nullptr;
}

void Traffic::merge(Traffic& other, const Topology& other_topo, Topology& topo) {
    import_pending(other.export_pending(other_topo), topo);
    other.pending_.clear();
    other.last_cell_ = nullptr;
}

void Traffic::resolve(Topology& topo) {
    for (const auto& [key, c] : pending_) {
        const Qp& qp = topo.qp(key.qp);
        const Peer peer = key.av != kNoId ? topo.resolve_av_peer(key.av, key.ud_qpn)
                          : key.ud_ah     ? topo.resolve_ud_peer(qp.proc, key.ud_ah, key.ud_qpn)
                                          : topo.resolve_peer(key.qp);
        const NodeId local_node = topo.node_of(qp.proc);
        if (!peer.known() || local_node == kNoId) {
            unresolved_.bytes += c.bytes;
            unresolved_.ops += c.ops;
            continue;
        }
        // RDMA READ: the data moves from the remote memory to the initiator.
        const NodeId src = key.read ? peer.node : local_node;
        const NodeId dst = key.read ? local_node : peer.node;
        const DevId src_dev = key.read ? peer.dev : qp.dev;
        const DevId dst_dev = key.read ? qp.dev : peer.dev;
        TrafficCell& cell = matrix_[{src, dst}];
        cell.bytes += c.bytes;
        cell.ops += c.ops;
        if (src_dev != kNoId) {
            RailCounters& r = rails_[src_dev];
            r.bytes_tx += c.bytes;
            r.ops_tx += c.ops;
        }
        if (dst_dev != kNoId) {
            RailCounters& r = rails_[dst_dev];
            r.bytes_rx += c.bytes;
            r.ops_rx += c.ops;
        }
    }
    pending_.clear();
    last_cell_ = nullptr;
}

NodeTotals node_totals(const std::map<std::pair<NodeId, NodeId>, TrafficCell>& matrix, const std::vector<NodeId>& nodes) {
    NodeTotals t;
    t.in.assign(nodes.size(), 0);
    t.out.assign(nodes.size(), 0);
    std::map<NodeId, std::size_t> pos;
    for (std::size_t i = 0; i < nodes.size(); ++i) pos[nodes[i]] = i;
    for (const auto& [key, cell] : matrix) {
        if (key.first == key.second) continue;  // skew is about inter-node traffic only
        if (auto it = pos.find(key.first); it != pos.end()) t.out[it->second] += cell.bytes;
        if (auto it = pos.find(key.second); it != pos.end()) t.in[it->second] += cell.bytes;
    }
    return t;
}

namespace {
// max/mean of v, and the index of the max; 0 when everything is 0.
std::pair<double, std::size_t> max_over_mean(const std::vector<uint64_t>& v) {
    if (v.empty()) return {0.0, std::size_t{kNoId}};
    long double sum = 0;
    std::size_t imax = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        sum += v[i];
        if (v[i] > v[imax]) imax = i;
    }
    if (sum == 0) return {0.0, std::size_t{kNoId}};
    const long double mean = sum / static_cast<long double>(v.size());
    return {static_cast<double>(static_cast<long double>(v[imax]) / mean), imax};
}
}  // namespace

Skew Traffic::skew(const std::vector<NodeId>& nodes) const {
    const NodeTotals t = node_totals(matrix_, nodes);
    Skew s;
    std::size_t i = 0;
    std::tie(s.inbound, i) = max_over_mean(t.in);
    s.inbound_max_node = i == kNoId ? kNoId : nodes[i];
    std::tie(s.outbound, i) = max_over_mean(t.out);
    s.outbound_max_node = i == kNoId ? kNoId : nodes[i];
    return s;
}

}  // namespace sigmatrace::analyzer
