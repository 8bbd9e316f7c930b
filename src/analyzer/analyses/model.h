// The objects the analysis rebuilds from the events: nodes, processes, devices, queue pairs, and the
// operations (one per work request or GPU WQE) it hands to the statistics, traffic, barrier and timeline code.
// Objects are referred to by dense ids (indexes into the Topology's tables) so that operations are small
// values and tables survive the events that created them.
#pragma once

#include <sigmatrace/deferred_records.h>

#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>

namespace sigmatrace::analyzer {

using NodeId = uint32_t;
using ProcId = uint32_t;
using DevId = uint32_t;
using QpId = uint32_t;
inline constexpr uint32_t kNoId = std::numeric_limits<uint32_t>::max();

struct Gid {
    uint64_t prefix = 0;
    uint64_t iid = 0;
    bool empty() const { return prefix == 0 && iid == 0; }
    bool operator==(const Gid&) const = default;
};
struct GidHash {
    std::size_t operator()(const Gid& g) const { return std::hash<uint64_t>()(g.prefix * 0x9e3779b97f4a7c15ULL ^ g.iid); }
};

struct Node {
    std::string name;
};

// One NIC of one node (a device name is unique within a node). Several processes may open it.
struct Device {
    NodeId node = kNoId;
    std::string name;
};

// The other end of a connection, as far as it could be resolved.
struct Peer {
    NodeId node = kNoId;
    DevId dev = kNoId;
    ProcId proc = kNoId;
    QpId qp = kNoId;
    bool known() const { return node != kNoId; }
};

// Opcode codes used in operations: enum ibv_wr_opcode values for sends (CPU and GPU alike), and these two for
// receives (the enum ibv_wc_opcode values of receive completions).
inline constexpr uint8_t kOpRecv = 128;
inline constexpr uint8_t kOpRecvRdmaWithImm = 129;
// Whether an operation code is a receive's (kOpRecv, kOpRecvRdmaWithImm).
inline constexpr bool is_recv_opcode(uint8_t opcode) { return opcode >= kOpRecv; }

enum class OpOutcome : uint8_t {
    Completed,   // a success completion was seen (or implied, for an unsignaled WR)
    Failed,      // an error completion other than a flush
    Flushed,     // IBV_WC_WR_FLUSH_ERR (or the mlx5 flush syndrome)
    InFlight,    // no completion while its QP lived: the process died, or the trace stopped with the QP alive
    Observed,    // WQE seen on a watched ring, no CQE visible to the watcher: moved data, latency unknown
    Lost,        // dropped from a full queue model: its completion was never seen (discarded events?)
    // No completion, and its owner then moved the QP to RESET or ERR or destroyed it: the unsignaled tail of a
    // normal run (UCX, Open MPI and qperf post most sends unsignaled). It most likely completed; nothing says so.
    Unconfirmed,
    // IBV_WC_WR_FLUSH_ERR after the owner moved the QP to RESET or ERR (or destroyed it): its own teardown
    // flushed it. Not an error.
    FlushedAtTeardown,
};

// One reconstructed operation: a work request (or GPU WQE) from post to completion.
struct Operation {
    ProcId proc = kNoId;
    QpId qp = kNoId;
    Peer peer;
    uint8_t opcode = 0;       // ibv_wr_opcode, or kOpRecv / kOpRecvRdmaWithImm
    // Who posted it: through the verbs API, or (decoded by the watcher from a watched ring) a CPU writing WQEs
    // itself or a GPU. Receives: verbs.
    records::Poster poster = records::Poster::verbs;
    bool signaled = false;
    bool implied = false;     // completed by a later signaled completion (unsignaled WR)
    OpOutcome outcome = OpOutcome::Completed;
    uint8_t wc_status = 0;    // enum ibv_wc_status of the completion (0 when none)
    // Error completions: where the status came from, and what the completion said beyond it. A CQE the watcher
    // read (cqe_from_ring): vendor_err = mlx5 syndrome | vendor syndrome << 8; a verbs poll: ibv_wc.vendor_err.
    bool cqe_from_ring = false;
    uint32_t vendor_err = 0;
    int64_t post_ts = 0;
    int64_t done_ts = 0;      // == post_ts when there is no completion
    uint64_t bytes = 0;
    uint64_t wr_id = 0;
    uint64_t raddr = 0;
    uint32_t rkey = 0;
    uint64_t ud_ah = 0;       // UD sends: the address handle and destination QPN (peer resolved from them)
    uint32_t ud_qpn = 0;
    uint32_t av = kNoId;      // UD/DC WQEs decoded from a ring: their address vector (Topology::intern_av)

    bool is_recv() const { return is_recv_opcode(opcode); }
    bool gpu() const { return poster == records::Poster::gpu; }
    // Whether a completion of its own was seen, so that post -> completion is its latency: implied completions
    // (unsignaled WRs retired by a later signaled one) take another WR's completion time.
    bool observed_completion() const { return outcome == OpOutcome::Completed && !implied; }
    // Whether its bytes count as moved data (traffic matrix, rails): it finished without error, it is a GPU WQE
    // whose completion the watcher cannot see, or it is the unconfirmed tail of a QP its owner tore down after a
    // normal run: an upper bound (UCX's and Open MPI's tails had all crossed the link; qperf destroys QPs with
    // WRs still queued), ops.unconfirmed_bytes says how much of the total rests on it.
    bool moved_data() const {
        return outcome == OpOutcome::Completed || outcome == OpOutcome::Observed || outcome == OpOutcome::Unconfirmed;
    }
};

}  // namespace sigmatrace::analyzer
