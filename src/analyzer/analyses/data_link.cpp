#include "analyzer/analyses/data_link.h"

#include <sigmatrace/opcodes.h>

#include "analyzer/analyses/topology.h"

namespace sigmatrace::analyzer {

DataLink data_link_of(const Operation& op, const Topology& topo) {
    if (op.is_recv() || op.qp == kNoId || op.peer.dev == kNoId) return {};
    const DevId local = topo.qp(op.qp).dev;
    if (local == kNoId) return {};
    if (op.opcode == static_cast<uint8_t>(WrOpcode::RDMA_READ)) return {op.peer.dev, local};
    return {local, op.peer.dev};
}

}  // namespace sigmatrace::analyzer
