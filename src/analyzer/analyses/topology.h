// Who is who in a trace: processes (from the vpid context and process_info), the nodes they run on, the
// devices they open (with their GIDs and LIDs from port_info), their queue pairs and where each QP is
// connected to. Peers are resolved lazily, because a QP is often connected before the remote side's events
// have been read (clocks of different nodes, muxing order).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyzer/decode/data_element.h"
#include "analyzer/decode/decoded_event.h"
#include "analyzer/analyses/fifo_ring.h"
#include "analyzer/analyses/model.h"

namespace sigmatrace::analyzer {

// A work request (or a WQE the watcher decoded) waiting for its completion.
struct PendingWr {
    uint64_t wr_id = 0;
    int64_t post_ts = 0;
    uint64_t raddr = 0;
    uint64_t ah = 0;          // UD address handle
    uint32_t bytes = 0;
    uint32_t rkey = 0;
    uint32_t remote_qpn = 0;  // UD destination QPN
    uint16_t wqe_index = 0;   // ring WQEs (and verbs WRs seen in the ring too): the index a CQE's wqe_counter names
    uint8_t opcode = 0;       // records::kNoWrOpcode: a ring WQE that moves no data (retired, never an operation)
    bool signaled = false;
    bool indexed = false;     // wqe_index is known: decoded from the ring (the watcher saw this WR)
    bool from_verbs = false;  // posted through the verbs API (on a watched QP: may be seen in the ring too)
    records::Poster poster = records::Poster::verbs;
    uint32_t av = kNoId;      // UD/DC ring WQEs: their address vector (Topology::intern_av), else kNoId
};

struct Qp {
    ProcId proc = kNoId;
    DevId dev = kNoId;
    uint64_t ctx = 0;
    uint64_t handle = 0;      // ibv_qp pointer (0 for DevX-created GPU QPs)
    uint32_t qp_num = 0;
    uint32_t type = 2;        // enum ibv_qp_type (2 = RC); GPU QPs are mapped to it as well
    uint32_t max_send_wr = 0;
    uint32_t max_recv_wr = 0;
    bool sig_all = false;
    // Learned by the watcher (gpu_qp_create: DevX, or a verbs QP exported with mlx5dv_init_obj, which is then this
    // same QP): WQEs come from its ring.
    bool gpu = false;
    records::Poster poster = records::Poster::verbs;  // who wrote the last WQE decoded from its ring
    bool gpu_cqe_seen = false;  // the watcher delivered at least one CQE for it
    // Both the verbs wrappers and the ring showed a WR of it (a verbs post on an exported QP, which the provider
    // writes into the same ring): each such WR is counted once, and a completion seen both ways is not an
    // unmatched one the second time.
    bool both_views = false;
    uint32_t verbs_unindexed = 0;  // verbs-posted WRs waiting that the ring has not shown yet (watched QPs only)
    uint32_t ring_unclaimed = 0;   // ring WRs waiting that no verbs post claimed (watched QPs with verbs posts)
    bool destroyed = false;
    // Its owner moved it to ERR (or RESET) or destroyed it: what it had outstanding ends with that teardown
    // (flushes are not errors, a tail without completion is unconfirmed rather than in flight). Cleared when
    // the owner brings it back (RESET -> INIT: a reused QP).
    bool torn_down = false;
    uint64_t srq = 0;
    uint64_t send_cq = 0;
    uint64_t recv_cq = 0;
    // Remote address from the connection (RTR) transition.
    bool has_remote = false;
    uint32_t dest_qpn = 0;
    uint32_t dlid = 0;
    Gid dgid;
    Peer peer;                  // resolved lazily (resolve_peer)
    bool peer_final = false;    // resolution found the remote QP itself: no need to retry
    // The topology's address generation `peer` was resolved in (Topology::resolve_peer; 0: never): an unfinal
    // peer is resolved again only once ports' addresses or QPs have changed since.
    uint64_t peer_generation = 0;
    FifoRing<PendingWr> sq;
    FifoRing<PendingWr> rq;
    // Counters mode (qp_counters events): the QP's totals over the trace.
    struct Counted {
        uint64_t events = 0;
        uint64_t posted_wrs = 0, posted_bytes = 0, recv_wrs = 0, completions = 0, error_completions = 0,
                 post_errors = 0;
        int64_t first_ns = 0;   // start of the first event's interval
        int64_t last_ns = 0;    // the last event
    } counted;

    // What its data events made of it, from the share of a trace that read them (analysis.h, merge_share).
    void take_data_state(const Qp& owner) {
        poster = owner.poster;
        gpu_cqe_seen = owner.gpu_cqe_seen;
        both_views = owner.both_views;
        counted = owner.counted;
    }
};

struct AddressHandle {
    uint32_t dlid = 0;
    Gid dgid;
};

struct Process {
    uint32_t trace_index = 0;
    int64_t vpid = -1;
    int32_t pid = -1;
    int32_t rank = -1;
    int32_t world_size = -1;
    NodeId node = kNoId;
    std::string procname;
    std::string host;           // the machine whose trace holds it (the trace's hostname)
    std::string job_id;
    uint32_t schema_version = 0;
    uint32_t schema_minor = 0;
    bool has_info = false;      // a process_info event was seen
    bool counters_mode = false; // traced with SIGMATRACE_MODE=counters: qp_counters instead of per-op events
    bool retired = false;       // a later incarnation (same vpid, new process_info) replaced it
    bool has_qp = false;
    int64_t first_ts = 0;
    int64_t last_ts = 0;
    uint64_t events = 0;
    std::unordered_map<uint64_t, DevId> ctx_dev;        // ibv_context -> device
    std::unordered_map<uint64_t, uint64_t> cq_ctx;      // ibv_cq -> ibv_context
    std::unordered_map<uint64_t, QpId> qp_by_handle;    // live ibv_qp -> QP
    std::unordered_map<uint64_t, QpId> qp_by_num;       // live QP number -> QP (verbs QPs)
    std::unordered_map<uint32_t, QpId> gpu_qp_by_num;   // live QP number -> QP (learned GPU QPs)
    // QP number -> the last learned QP of that number that was destroyed, while no live one has it: a CQE the
    // watcher read from a CQ that outlives the QP (its final sweep comes at the CQ's destroy) still finds its WQE.
    std::unordered_map<uint32_t, QpId> gone_gpu_qp_by_num;
    std::unordered_map<uint64_t, FifoRing<PendingWr>> srq_pending;  // ibv_srq -> posted receives
    std::unordered_map<uint64_t, AddressHandle> ah;     // ibv_ah -> destination
    std::unordered_map<uint64_t, uint32_t> srq_depth;   // ibv_srq -> granted depth

    // Its event counts and time span, from the share of a trace that read all its events (analysis.h,
    // merge_share).
    void take_counts(const Process& owner) {
        events = owner.events;
        first_ts = owner.first_ts;
        last_ts = owner.last_ts;
    }
};

// Counters of things that were odd in the input; each becomes a warning line in the reports.
struct Anomalies {
    uint64_t malformed_events = 0;        // sequences shorter/longer than n, missing mandatory fields
    uint64_t unknown_qp = 0;              // data-path events naming a QP never created in the trace
    uint64_t unmatched_completions = 0;   // completions with no posted WR to match
    uint64_t post_errors = 0;             // post calls that returned an error (WRs not posted)
    uint64_t lost_wrs = 0;                // WRs dropped from a queue model that overflowed
    uint64_t schema_mismatch = 0;         // processes written by a tracer with an unknown major version
    uint64_t unknown_events = 0;          // events of other providers, or sigmatrace events this version lacks
    // The GPU watcher's own reports (gpu_watch_stats, gpu_cq_stats): what it could not put in the trace.
    uint64_t gpu_wqes_lost = 0;           // WQEs overwritten in their ring before the watcher read them
    uint64_t gpu_wqes_malformed = 0;      // WQEs that did not decode and were skipped
    uint64_t gpu_cqes_missed = 0;         // completions consumed and invalidated before the watcher read them

    Anomalies& operator+=(const Anomalies& o) {
        malformed_events += o.malformed_events;
        unknown_qp += o.unknown_qp;
        unmatched_completions += o.unmatched_completions;
        post_errors += o.post_errors;
        lost_wrs += o.lost_wrs;
        schema_mismatch += o.schema_mismatch;
        unknown_events += o.unknown_events;
        gpu_wqes_lost += o.gpu_wqes_lost;
        gpu_wqes_malformed += o.gpu_wqes_malformed;
        gpu_cqes_missed += o.gpu_cqes_missed;
        return *this;
    }
};

// operator+= adds each counter by name: a counter added to Anomalies must be added there too.
static_assert(sizeof(Anomalies) == 10 * sizeof(uint64_t), "Anomalies::operator+= must add every counter");

class Topology {
public:
    Topology() = default;
    Topology(const Topology&) = delete;
    Topology& operator=(const Topology&) = delete;

    // The process an event belongs to; created on first sight (rank unknown until process_info).
    ProcId process_of(const DecodedEvent& ev);
    // Inline: every element asks, and consecutive elements mostly come from one process.
    ProcId process_of(const ElementOrigin& o) {
        if (o.trace_index == last_key_.trace && o.vpid == last_key_.vpid) return last_proc_;
        return process_of_new_key(o);
    }

    // Identity and object-life events. Each returns false when the event was malformed (counted by caller).
    void on_process_info(const DecodedEvent& ev, ProcId p, std::vector<ProcId>& retired_out);
    void on_device_open(const DecodedEvent& ev, ProcId p);
    void on_port_info(const DecodedEvent& ev, ProcId p);
    void on_cq_create(const DecodedEvent& ev, ProcId p);
    QpId on_qp_create(const DecodedEvent& ev, ProcId p);
    QpId on_qp_modify(const DecodedEvent& ev, ProcId p);   // the QP it changed, kNoId when none
    QpId on_qp_destroy(const DecodedEvent& ev, ProcId p);  // the QP whose pending WRs must be drained
    void on_srq_create(const DecodedEvent& ev, ProcId p);
    void on_ah_create(const DecodedEvent& ev, ProcId p);
    QpId on_gpu_qp_create(const DecodedEvent& ev, ProcId p);
    void on_gpu_qp_modify(const DecodedEvent& ev, ProcId p);
    QpId on_gpu_qp_destroy(const DecodedEvent& ev, ProcId p);

    // The remote end of a QP (cached once the remote QP is found).
    const Peer& resolve_peer(QpId q);
    // The remote end of a UD send through address handle `ah` to `remote_qpn`.
    Peer resolve_ud_peer(ProcId p, uint64_t ah, uint32_t remote_qpn);
    // An address vector (a UD or DC WQE's destination LID and GID) as a small id, resolved when asked
    // (resolve_av_peer): the remote side's identity events may come later in the trace.
    uint32_t intern_av(uint32_t dlid, const Gid& dgid);
    // The remote end through address vector `av` to QP or DCT number `qpn`.
    Peer resolve_av_peer(uint32_t av, uint32_t qpn) const;
    // The address vector intern_av() gave `av` for.
    const AddressHandle& av(uint32_t av) const { return avs_[av]; }

    // A QP that data-path events name but whose creation is not in the trace (tracing started late, or the
    // events were discarded): created on the spot so its operations still count, with its peer unknown.
    QpId implicit_qp(ProcId p, uint64_t handle, uint32_t qp_num, bool gpu);

    QpId find_qp_by_handle(ProcId p, uint64_t handle) const;
    // Completion routing: the QP that `qp_num` names for a CQ of process p.
    QpId find_qp_for_completion(ProcId p, uint64_t cq, uint32_t qp_num) const;
    QpId find_gpu_qp(ProcId p, uint32_t qpn) const;
    // The QP a DevX command (gpu_qp_modify, gpu_qp_query) names: the learned QP of that number, else the verbs one.
    QpId find_devx_command_qp(ProcId p, uint32_t qpn) const;
    // The live learned QP of that number, else the last destroyed one (records read after its destroy).
    QpId find_gpu_qp_or_gone(ProcId p, uint32_t qpn) const;

    NodeId node_id(std::string_view name);
    DevId device_id(NodeId node, std::string_view name);

    Process& proc(ProcId p) { return *procs_[p]; }
    const Process& proc(ProcId p) const { return *procs_[p]; }
    Qp& qp(QpId q) { return *qps_[q]; }
    const Qp& qp(QpId q) const { return *qps_[q]; }
    const Node& node(NodeId n) const { return nodes_[n]; }
    const Device& device(DevId d) const { return devices_[d]; }
    std::size_t process_count() const { return procs_.size(); }
    // Whether a process did anything RDMA: opened a device, created or learned a queue pair (verbs or GPU), or
    // posted on one. Launchers (mpirun, orted, shells, the `sigmatrace fabric` front end before its exec) load
    // the tracer too and may report themselves; they are left out of the process and node counts, the traffic
    // matrix and skew means.
    bool rdma_active(ProcId p) const { return !procs_[p]->ctx_dev.empty() || procs_[p]->has_qp; }
    std::size_t qp_count() const { return qps_.size(); }
    std::size_t node_count() const { return nodes_.size(); }
    std::size_t device_count() const { return devices_.size(); }

    // The node of a process, resolving the trace hostname fallback.
    NodeId node_of(ProcId p) const { return procs_[p]->node; }

    // Whether `other` holds the same processes, nodes, devices and QPs under the same ids: two shares of a trace
    // that read the same set-up events (analysis.h, merge_share).
    bool same_objects(const Topology& other) const;
    // Makes this empty topology a copy of `other`: a share loaded from bytes (share_codec.cpp) stands on the
    // topology every share built alike from the set-up events.
    void copy_objects(const Topology& other);

    Anomalies& anomalies() { return anomalies_; }
    const Anomalies& anomalies() const { return anomalies_; }

private:
    ProcId process_of_new_key(const ElementOrigin& o);
    struct ProcKey {
        uint32_t trace;
        int64_t vpid;
        bool operator==(const ProcKey&) const = default;
    };
    struct ProcKeyHash {
        std::size_t operator()(const ProcKey& k) const {
            return std::hash<int64_t>()(k.vpid) ^ (static_cast<std::size_t>(k.trace) << 40);
        }
    };
    struct DevQpKey {
        DevId dev;
        uint32_t qpn;
        bool operator==(const DevQpKey&) const = default;
    };
    struct DevQpKeyHash {
        std::size_t operator()(const DevQpKey& k) const { return (static_cast<std::size_t>(k.dev) << 32) ^ k.qpn; }
    };

    ProcId new_process(const DecodedEvent& ev);
    ProcId new_process(const ElementOrigin& o);
    DevId device_of_ctx(ProcId p, uint64_t ctx) const;
    DevId device_by_address(uint32_t dlid, const Gid& dgid) const;
    Peer peer_on_device(DevId d, uint32_t qpn) const;
    Peer resolve_address(DevId local_dev, uint32_t dlid, const Gid& dgid, uint32_t qpn) const;
    QpId new_qp(ProcId p, uint64_t ctx, uint32_t qp_num);

    std::vector<std::unique_ptr<Process>> procs_;
    std::vector<std::unique_ptr<Qp>> qps_;
    std::vector<Node> nodes_;
    std::vector<Device> devices_;
    std::unordered_map<ProcKey, ProcId, ProcKeyHash> proc_by_key_;
    std::unordered_map<std::string, NodeId> node_by_name_;
    std::unordered_map<std::string, DevId> dev_by_key_;        // "node\0device"
    std::unordered_map<Gid, DevId, GidHash> dev_by_gid_;
    std::unordered_map<uint32_t, DevId> dev_by_lid_;
    std::unordered_map<DevQpKey, QpId, DevQpKeyHash> qp_by_dev_num_;
    // Raised whenever what resolve_address() reads changes (a port's address, a QP's number on a device; a new
    // device changes nothing until its port_info): an unfinal peer resolved in the current generation is still
    // what resolution would find.
    uint64_t address_generation_ = 1;
    std::vector<AddressHandle> avs_;                         // intern_av's table
    std::unordered_map<Gid, uint32_t, GidHash> av_by_key_;  // {lid, GID prefix ^ ...} -> index into avs_
    ProcKey last_key_{UINT32_MAX, -2};
    ProcId last_proc_ = kNoId;
    Anomalies anomalies_;
};

}  // namespace sigmatrace::analyzer
