// The directed NIC-to-NIC link an operation's data crosses, for the link-level analyses (gray links, incast):
// initiator NIC -> target NIC for SEND/WRITE/atomics, target -> initiator for RDMA READ (the direction the data
// moves, as in the traffic matrix). The remote NIC comes from the peer resolved when the operation was
// rebuilt: at device level it is known while reading (the remote NIC's port_info comes at set-up, before any
// data), even when the remote QP is not known yet.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

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

// a / b rounded down: the link analyses' window index, so that a negative time falls in a window of its own and
// not in window 0 with the first positive ones.
constexpr int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

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

// The sends one completion retired (op_reconstruction.h: the unsignaled WRs before it and its own), when the link
// analyses can take them whole: every one a completed send with plausible times, all of one opcode and one peer
// NIC (so one link), all completing at done_ts. A bandwidth run's completions retire many such sends, and the
// link analyses' per-operation work is then done once per run.
struct SendRun {
    std::span<const Operation> ops;   // in post order
    int64_t done_ts = 0;
    int64_t min_post = 0, max_post = 0;
    uint64_t bytes = 0;               // their sum
    uint64_t max_bytes = 0;           // the largest one's
    uint32_t timed = 0;               // those with their own completion (not implied: their latency is known)
};
// Whether `ops` (one QP's, in post order) is such a run, then described in `r`.
inline bool send_run_of(std::span<const Operation> ops, SendRun& r) {
    const Operation& last = ops.back();
    if (last.is_recv() || last.done_ts >= kMaxPlausibleTs) return false;
    r = SendRun{ops, last.done_ts, last.post_ts, last.post_ts, 0, 0, 0};
    bool uniform = true;
    for (const Operation& op : ops) {
        uniform &= op.outcome == OpOutcome::Completed && op.done_ts == r.done_ts && op.opcode == last.opcode &&
                   op.peer.dev == last.peer.dev && op.post_ts >= 0;
        r.min_post = std::min(r.min_post, op.post_ts);
        r.max_post = std::max(r.max_post, op.post_ts);
        r.bytes += op.bytes;
        r.max_bytes = std::max(r.max_bytes, op.bytes);
        r.timed += op.implied ? 0 : 1;
    }
    return uniform && r.max_post <= r.done_ts;
}

}  // namespace sigmatrace::analyzer
