// The directed NIC-to-NIC link an operation's data crosses, for the link-level analyses (gray links, incast):
// initiator NIC -> target NIC for SEND/WRITE/atomics, target -> initiator for RDMA READ (the direction the data
// moves, as in the traffic matrix). The remote NIC comes from the peer resolved when the operation was
// rebuilt: at device level it is known while reading (the remote NIC's port_info comes at set-up, before any
// data), even when the remote QP is not known yet.
#pragma once

#include <cstdint>

#include <sigmatrace/opcodes.h>

#include "analyzer/analyses/model.h"
#include "analyzer/analyses/topology.h"

namespace sigmatrace::analyzer {

struct DataLink {
    DevId src = kNoId;
    DevId dst = kNoId;
    bool known() const { return src != kNoId && dst != kNoId; }
    uint64_t key() const { return static_cast<uint64_t>(src) << 32 | dst; }
};

// The link of a send-side operation; unknown for receives and when either NIC is not known. Inline: every send
// of the windows, phases, gray-link and incast analyses asks.
inline DataLink data_link_of(const Operation& op, const Topology& topo) {
    if (op.is_recv() || op.qp == kNoId || op.peer.dev == kNoId) return {};
    const DevId local = topo.qp(op.qp).dev;
    if (local == kNoId) return {};
    if (op.opcode == static_cast<uint8_t>(WrOpcode::RDMA_READ)) return {op.peer.dev, local};
    return {local, op.peer.dev};
}

// Whether an operation's times can be cut into windows: within [0, 2^62) ns (Unix time until the year 2116), so
// that window arithmetic cannot overflow on corrupt timestamps.
inline constexpr int64_t kMaxPlausibleTs = int64_t{1} << 62;
inline bool plausible_times(const Operation& op) {
    return op.post_ts >= 0 && op.done_ts >= op.post_ts && op.done_ts < kMaxPlausibleTs;
}

}  // namespace sigmatrace::analyzer
