#include "analyzer/analyses/topology.h"

#include <sigmatrace/schema.h>

namespace sigmatrace::analyzer {

namespace F = fields;

NodeId Topology::node_id(std::string_view name) {
    if (name.empty()) name = "?";
    auto it = node_by_name_.find(std::string(name));
    if (it != node_by_name_.end()) return it->second;
    const auto id = static_cast<NodeId>(nodes_.size());
    nodes_.push_back(Node{std::string(name)});
    node_by_name_.emplace(std::string(name), id);
    return id;
}

DevId Topology::device_id(NodeId node, std::string_view name) {
    std::string key = std::to_string(node);
    key.push_back('\0');
    key.append(name);
    auto it = dev_by_key_.find(key);
    if (it != dev_by_key_.end()) return it->second;
    const auto id = static_cast<DevId>(devices_.size());
    devices_.push_back(Device{node, std::string(name)});
    dev_by_key_.emplace(std::move(key), id);
    return id;
}

ProcId Topology::new_process(const ElementOrigin& o) {
    auto p = std::make_unique<Process>();
    p->trace_index = o.trace_index;
    p->vpid = o.vpid;
    p->pid = static_cast<int32_t>(o.vpid);
    p->procname = std::string(o.procname);
    p->node = node_id(o.trace_hostname);
    p->host = std::string(o.trace_hostname);
    p->first_ts = p->last_ts = o.event_ns;
    const auto id = static_cast<ProcId>(procs_.size());
    procs_.push_back(std::move(p));
    proc_by_key_[ProcKey{o.trace_index, o.vpid}] = id;
    return id;
}

ProcId Topology::new_process(const DecodedEvent& ev) {
    return new_process(ElementOrigin{ev.trace_index, ev.vpid, ev.vtid, ev.procname, ev.trace_hostname, ev.ts_ns, 0});
}

ProcId Topology::process_of(const DecodedEvent& ev) {
    return process_of(ElementOrigin{ev.trace_index, ev.vpid, ev.vtid, ev.procname, ev.trace_hostname, ev.ts_ns, 0});
}

ProcId Topology::process_of_new_key(const ElementOrigin& o) {
    const ProcKey key{o.trace_index, o.vpid};
    auto it = proc_by_key_.find(key);
    const ProcId id = it != proc_by_key_.end() ? it->second : new_process(o);
    last_key_ = key;
    last_proc_ = id;
    return id;
}

void Topology::on_process_info(const DecodedEvent& ev, ProcId p, std::vector<ProcId>& retired_out) {
    if (procs_[p]->has_info && rdma_active(p)) {
        // A second process_info for the same vpid after RDMA work: the pid was reused, or the process exec'd
        // after using verbs. Its objects belong to a new incarnation; the old one's pending work is finished by
        // the caller. (Without RDMA work, e.g. `sigmatrace fabric` exec'ing the workload, it is the same process
        // taking its final identity: updated in place below, so it is shown once.)
        procs_[p]->retired = true;
        retired_out.push_back(p);
        p = new_process(ev);
        last_key_ = ProcKey{ev.trace_index, ev.vpid};
        last_proc_ = p;
    }
    Process& pr = *procs_[p];
    pr.has_info = true;
    pr.schema_version = static_cast<uint32_t>(ev.u(F::process_info::schema_version));
    pr.schema_minor = static_cast<uint32_t>(ev.u(F::process_info::schema_minor));
    pr.pid = static_cast<int32_t>(ev.i64(F::process_info::pid));
    pr.rank = static_cast<int32_t>(ev.i64(F::process_info::rank));
    pr.world_size = static_cast<int32_t>(ev.i64(F::process_info::world_size));
    pr.job_id = std::string(ev.str(F::process_info::job_id));
    pr.counters_mode = ev.u(F::process_info::mode) == 1;
    if (!ev.procname.empty()) pr.procname = std::string(ev.procname);  // an exec changes it
    std::string_view host = ev.str(F::process_info::hostname);
    if (!host.empty()) pr.node = node_id(host);
    if (pr.schema_version != kSchemaVersion) ++anomalies_.schema_mismatch;
}

DevId Topology::device_of_ctx(ProcId p, uint64_t ctx) const {
    const auto& m = procs_[p]->ctx_dev;
    auto it = m.find(ctx);
    return it == m.end() ? kNoId : it->second;
}

void Topology::on_device_open(const DecodedEvent& ev, ProcId p) {
    Process& pr = *procs_[p];
    pr.ctx_dev[ev.u(F::device_open::ctx)] = device_id(pr.node, ev.str(F::device_open::device));
}

void Topology::on_port_info(const DecodedEvent& ev, ProcId p) {
    const DevId d = device_of_ctx(p, ev.u(F::port_info::ctx));
    if (d == kNoId) return;
    const Gid gid{ev.u(F::port_info::gid_prefix), ev.u(F::port_info::gid_iid)};
    if (!gid.empty()) dev_by_gid_[gid] = d;
    const auto lid = static_cast<uint32_t>(ev.u(F::port_info::lid));
    if (lid != 0) dev_by_lid_[lid] = d;
    ++address_generation_;
}

void Topology::on_cq_create(const DecodedEvent& ev, ProcId p) {
    if (ev.i64(F::cq_create::err) != 0) return;
    procs_[p]->cq_ctx[ev.u(F::cq_create::cq)] = ev.u(F::cq_create::ctx);
}

void Topology::copy_objects(const Topology& other) {
    procs_.clear();
    for (const auto& p : other.procs_) procs_.push_back(std::make_unique<Process>(*p));
    qps_.clear();
    for (const auto& q : other.qps_) qps_.push_back(std::make_unique<Qp>(*q));
    nodes_ = other.nodes_;
    devices_ = other.devices_;
    proc_by_key_ = other.proc_by_key_;
    node_by_name_ = other.node_by_name_;
    dev_by_key_ = other.dev_by_key_;
    dev_by_gid_ = other.dev_by_gid_;
    dev_by_lid_ = other.dev_by_lid_;
    qp_by_dev_num_ = other.qp_by_dev_num_;
    // Past both: no copied QP's peer counts as resolved in this topology's generation.
    address_generation_ = std::max(address_generation_, other.address_generation_) + 1;
    avs_ = other.avs_;
    av_by_key_ = other.av_by_key_;
    last_key_ = other.last_key_;
    last_proc_ = other.last_proc_;
    anomalies_ = other.anomalies_;
}

bool Topology::same_objects(const Topology& other) const {
    if (procs_.size() != other.procs_.size() || qps_.size() != other.qps_.size() ||
        nodes_.size() != other.nodes_.size() || devices_.size() != other.devices_.size())
        return false;
    for (std::size_t p = 0; p < procs_.size(); ++p)
        if (procs_[p]->trace_index != other.procs_[p]->trace_index || procs_[p]->vpid != other.procs_[p]->vpid)
            return false;
    for (std::size_t q = 0; q < qps_.size(); ++q) {
        const Qp &a = *qps_[q], &b = *other.qps_[q];
        if (a.proc != b.proc || a.handle != b.handle || a.qp_num != b.qp_num || a.gpu != b.gpu) return false;
    }
    for (std::size_t n = 0; n < nodes_.size(); ++n)
        if (nodes_[n].name != other.nodes_[n].name) return false;
    for (std::size_t d = 0; d < devices_.size(); ++d)
        if (devices_[d].node != other.devices_[d].node || devices_[d].name != other.devices_[d].name) return false;
    return true;
}

QpId Topology::new_qp(ProcId p, uint64_t ctx, uint32_t qp_num) {
    auto q = std::make_unique<Qp>();
    q->proc = p;
    q->ctx = ctx;
    q->dev = device_of_ctx(p, ctx);
    q->qp_num = qp_num;
    const auto id = static_cast<QpId>(qps_.size());
    qps_.push_back(std::move(q));
    procs_[p]->has_qp = true;
    if (qps_.back()->dev != kNoId) {
        qp_by_dev_num_[DevQpKey{qps_.back()->dev, qp_num}] = id;
        ++address_generation_;
    }
    return id;
}

QpId Topology::on_qp_create(const DecodedEvent& ev, ProcId p) {
    if (ev.i64(F::qp_create::err) != 0) return kNoId;
    const uint64_t handle = ev.u(F::qp_create::qp);
    const auto qpn = static_cast<uint32_t>(ev.u(F::qp_create::qp_num));
    const QpId id = new_qp(p, ev.u(F::qp_create::ctx), qpn);
    Qp& q = *qps_[id];
    q.handle = handle;
    q.type = static_cast<uint32_t>(ev.u(F::qp_create::qp_type));
    q.send_cq = ev.u(F::qp_create::send_cq);
    q.recv_cq = ev.u(F::qp_create::recv_cq);
    q.srq = ev.u(F::qp_create::srq);
    q.max_send_wr = static_cast<uint32_t>(ev.u(F::qp_create::max_send_wr));
    q.max_recv_wr = static_cast<uint32_t>(ev.u(F::qp_create::max_recv_wr));
    q.sig_all = ev.u(F::qp_create::sq_sig_all) != 0;
    Process& pr = *procs_[p];
    pr.qp_by_handle[handle] = id;
    pr.qp_by_num[qpn] = id;
    return id;
}

QpId Topology::on_qp_modify(const DecodedEvent& ev, ProcId p) {
    if (ev.i64(F::qp_modify::err) != 0) return kNoId;
    const QpId id = find_qp_by_handle(p, ev.u(F::qp_modify::qp));
    if (id == kNoId) {
        ++anomalies_.unknown_qp;
        return kNoId;
    }
    Qp& q = *qps_[id];
    const auto dest = static_cast<uint32_t>(ev.u(F::qp_modify::dest_qp_num));
    const Gid dgid{ev.u(F::qp_modify::dgid_prefix), ev.u(F::qp_modify::dgid_iid)};
    const auto dlid = static_cast<uint32_t>(ev.u(F::qp_modify::dlid));
    if (dest != 0 || !dgid.empty() || dlid != 0) {
        if (dest != 0) q.dest_qpn = dest;
        if (!dgid.empty() && ev.u(F::qp_modify::is_global) != 0) q.dgid = dgid;
        if (dlid != 0) q.dlid = dlid;
        q.has_remote = true;
        q.peer = Peer{};
        q.peer_final = false;
        q.peer_generation = 0;
    }
    return id;
}

QpId Topology::on_qp_destroy(const DecodedEvent& ev, ProcId p) {
    if (ev.i64(F::qp_destroy::err) != 0) return kNoId;
    Process& pr = *procs_[p];
    auto it = pr.qp_by_handle.find(ev.u(F::qp_destroy::qp));
    if (it == pr.qp_by_handle.end()) return kNoId;
    const QpId id = it->second;
    pr.qp_by_handle.erase(it);
    auto n = pr.qp_by_num.find(qps_[id]->qp_num);
    if (n != pr.qp_by_num.end() && n->second == id) pr.qp_by_num.erase(n);
    qps_[id]->destroyed = true;
    return id;
}

void Topology::on_srq_create(const DecodedEvent& ev, ProcId p) {
    if (ev.i64(F::srq_create::err) != 0) return;
    procs_[p]->srq_depth[ev.u(F::srq_create::srq)] = static_cast<uint32_t>(ev.u(F::srq_create::max_wr));
}

void Topology::on_ah_create(const DecodedEvent& ev, ProcId p) {
    if (ev.i64(F::ah_create::err) != 0) return;
    AddressHandle a;
    a.dlid = static_cast<uint32_t>(ev.u(F::ah_create::dlid));
    if (ev.u(F::ah_create::is_global) != 0) a.dgid = Gid{ev.u(F::ah_create::dgid_prefix), ev.u(F::ah_create::dgid_iid)};
    procs_[p]->ah[ev.u(F::ah_create::ah)] = a;
}

QpId Topology::on_gpu_qp_create(const DecodedEvent& ev, ProcId p) {
    const auto qpn = static_cast<uint32_t>(ev.u(F::gpu_qp_create::qpn));
    if (ev.u(F::gpu_qp_create::source) == 1) {
        // mlx5dv_init_obj on a verbs QP the trace created: the watcher reads that QP's own ring, so its WQEs are
        // that QP's, with its connection (qp_modify) and its verbs posts, not those of another QP of the number.
        if (const QpId verbs = find_qp_for_completion(p, 0, qpn); verbs != kNoId && !qps_[verbs]->destroyed) {
            qps_[verbs]->gpu = true;
            procs_[p]->gpu_qp_by_num[qpn] = verbs;
            procs_[p]->gone_gpu_qp_by_num.erase(qpn);
            return verbs;
        }
    }
    const QpId id = new_qp(p, ev.u(F::gpu_qp_create::ctx), qpn);
    Qp& q = *qps_[id];
    q.gpu = true;
    // PRM service type 0 is RC, 1 UC, 2 UD; for mlx5dv_init_obj it is already an ibv_qp_type.
    const auto st = static_cast<uint32_t>(ev.u(F::gpu_qp_create::st));
    q.type = ev.u(F::gpu_qp_create::source) == 1 ? st : (st == 0 ? 2u : st == 1 ? 3u : st == 2 ? 4u : st);
    q.max_send_wr = static_cast<uint32_t>(ev.u(F::gpu_qp_create::sq_wqebb));
    procs_[p]->gpu_qp_by_num[qpn] = id;
    procs_[p]->gone_gpu_qp_by_num.erase(qpn);
    return id;
}

void Topology::on_gpu_qp_modify(const DecodedEvent& ev, ProcId p) {
    if (ev.i64(F::gpu_qp_modify::err) != 0) return;
    const QpId id = find_devx_command_qp(p, static_cast<uint32_t>(ev.u(F::gpu_qp_modify::qpn)));
    if (id == kNoId) {
        ++anomalies_.unknown_qp;
        return;
    }
    Qp& q = *qps_[id];
    const auto rqpn = static_cast<uint32_t>(ev.u(F::gpu_qp_modify::remote_qpn));
    const Gid rgid{ev.u(F::gpu_qp_modify::rgid_prefix), ev.u(F::gpu_qp_modify::rgid_iid)};
    const auto rlid = static_cast<uint32_t>(ev.u(F::gpu_qp_modify::rlid));
    if (rqpn != 0 || !rgid.empty() || rlid != 0) {
        if (rqpn != 0) q.dest_qpn = rqpn;
        if (!rgid.empty()) q.dgid = rgid;
        if (rlid != 0) q.dlid = rlid;
        q.has_remote = true;
        q.peer = Peer{};
        q.peer_final = false;
        q.peer_generation = 0;
    }
}

QpId Topology::on_gpu_qp_destroy(const DecodedEvent& ev, ProcId p) {
    auto& m = procs_[p]->gpu_qp_by_num;
    const auto qpn = static_cast<uint32_t>(ev.u(F::gpu_qp_destroy::qpn));
    auto it = m.find(qpn);
    if (it == m.end()) return kNoId;
    const QpId id = it->second;
    m.erase(it);
    procs_[p]->gone_gpu_qp_by_num[qpn] = id;
    // A verbs QP the watcher followed ends with its qp_destroy (which drains it); here only the watching ends.
    if (qps_[id]->handle != 0 && find_qp_by_handle(p, qps_[id]->handle) == id) return kNoId;
    qps_[id]->destroyed = true;
    return id;
}

DevId Topology::device_by_address(uint32_t dlid, const Gid& dgid) const {
    if (!dgid.empty()) {
        auto it = dev_by_gid_.find(dgid);
        if (it != dev_by_gid_.end()) return it->second;
    }
    if (dlid != 0) {
        auto it = dev_by_lid_.find(dlid);
        if (it != dev_by_lid_.end()) return it->second;
    }
    return kNoId;
}

uint32_t Topology::intern_av(uint32_t dlid, const Gid& dgid) {
    // Keyed by the GID with the LID folded into its prefix: LIDs are 16 bits, GID prefixes of one fabric share a value.
    const Gid key{dgid.prefix ^ (static_cast<uint64_t>(dlid) << 48) ^ 0x5a17, dgid.iid};
    auto it = av_by_key_.find(key);
    if (it != av_by_key_.end() && avs_[it->second].dlid == dlid && avs_[it->second].dgid == dgid) return it->second;
    const auto id = static_cast<uint32_t>(avs_.size());
    avs_.push_back(AddressHandle{dlid, dgid});
    av_by_key_[key] = id;
    return id;
}

Peer Topology::resolve_av_peer(uint32_t av, uint32_t qpn) const {
    if (av >= avs_.size()) return Peer{};
    return peer_on_device(device_by_address(avs_[av].dlid, avs_[av].dgid), qpn);
}

Peer Topology::resolve_address(DevId local_dev, uint32_t dlid, const Gid& dgid, uint32_t qpn) const {
    DevId d = device_by_address(dlid, dgid);
    // Neither GID nor LID given (or known): a QP connected on the local port without an address vector only
    // reaches the local device (loopback).
    if (d == kNoId && dgid.empty() && dlid == 0) d = local_dev;
    return peer_on_device(d, qpn);
}

Peer Topology::peer_on_device(DevId d, uint32_t qpn) const {
    Peer peer;
    if (d == kNoId) return peer;
    peer.dev = d;
    peer.node = devices_[d].node;
    if (qpn != 0) {
        auto it = qp_by_dev_num_.find(DevQpKey{d, qpn});
        if (it != qp_by_dev_num_.end()) {
            peer.qp = it->second;
            peer.proc = qps_[it->second]->proc;
        }
    }
    return peer;
}

const Peer& Topology::resolve_peer(QpId id) {
    Qp& q = *qps_[id];
    if (q.peer_final || !q.has_remote || q.peer_generation == address_generation_) return q.peer;
    q.peer = resolve_address(q.dev, q.dlid, q.dgid, q.dest_qpn);
    q.peer_final = q.peer.qp != kNoId;
    q.peer_generation = address_generation_;
    return q.peer;
}

Peer Topology::resolve_ud_peer(ProcId p, uint64_t ah, uint32_t remote_qpn) {
    const auto& m = procs_[p]->ah;
    auto it = m.find(ah);
    if (it == m.end()) return Peer{};
    return resolve_address(kNoId, it->second.dlid, it->second.dgid, remote_qpn);
}

QpId Topology::implicit_qp(ProcId p, uint64_t handle, uint32_t qp_num, bool gpu) {
    ++anomalies_.unknown_qp;
    const QpId id = new_qp(p, 0, qp_num);
    Qp& q = *qps_[id];
    q.handle = handle;
    q.gpu = gpu;
    Process& pr = *procs_[p];
    if (gpu) {
        pr.gpu_qp_by_num[qp_num] = id;
    } else {
        if (handle != 0) pr.qp_by_handle[handle] = id;
        pr.qp_by_num[qp_num] = id;
    }
    return id;
}

QpId Topology::find_qp_by_handle(ProcId p, uint64_t handle) const {
    const auto& m = procs_[p]->qp_by_handle;
    auto it = m.find(handle);
    return it == m.end() ? kNoId : it->second;
}

QpId Topology::find_qp_for_completion(ProcId p, uint64_t, uint32_t qp_num) const {
    // QP numbers are unique per device; a process with QPs of the same number on two devices is rare enough
    // that the number alone routes completions (the CQ handle is kept for a future disambiguation).
    const auto& m = procs_[p]->qp_by_num;
    auto it = m.find(qp_num);
    return it == m.end() ? kNoId : it->second;
}

QpId Topology::find_gpu_qp(ProcId p, uint32_t qpn) const {
    const auto& m = procs_[p]->gpu_qp_by_num;
    auto it = m.find(qpn);
    return it == m.end() ? kNoId : it->second;
}

QpId Topology::find_devx_command_qp(ProcId p, uint32_t qpn) const {
    if (const QpId q = find_gpu_qp(p, qpn); q != kNoId) return q;
    // A verbs QP driven through mlx5dv_devx_qp_modify/_query before (or without) its rings were exported: UCX's DevX
    // md brings its DCIs and UD QPs up this way.
    return find_qp_for_completion(p, 0, qpn);
}

QpId Topology::find_gpu_qp_or_gone(ProcId p, uint32_t qpn) const {
    if (const QpId q = find_gpu_qp(p, qpn); q != kNoId) return q;
    const auto& m = procs_[p]->gone_gpu_qp_by_num;
    auto it = m.find(qpn);
    return it == m.end() ? kNoId : it->second;
}

}  // namespace sigmatrace::analyzer
