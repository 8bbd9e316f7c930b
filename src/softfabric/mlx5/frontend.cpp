// See frontend.h. One Frontend per process (the provider is loaded once); its objects are plain C++ behind the
// opaque mlx5dv handles the stand-in hands to the application.
#include "mlx5/frontend.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <sigmatrace/opcodes.h>

#include "core/clock.h"
#include "mlx5_format/mlx5_layout.h"
#include "mlx5_format/prm_commands.h"
#include "mlx5/address_vector.h"
#include "mlx5/cqe_ring.h"
#include "mlx5/direct_qp.h"
#include "mlx5/frontend_abi.h"
#include "mlx5/general_commands.h"
#include "mlx5/recv_mirror.h"
#include "mlx5/verbs_qp_commands.h"
#include "provider/objects.h"

namespace softfabric::mlx5 {
namespace {

namespace prm = sigmatrace::gpumem::prm;
namespace gm = sigmatrace::gpumem;

constexpr uint32_t kMaxSendSge = 16;
constexpr uint32_t kMaxInline = 256;
constexpr uint32_t kAutoReceiveDepth = 64;
constexpr uint32_t kRqTypeSrq = 0x1;  // qpc.rq_type: receives from the SRQ srqn_rmpn_xrqn names
constexpr size_t kUarPage = 4096;
constexpr size_t kUarRegisterOffset = 0x800;  // MLX5_BF_OFFSET: where a ConnectX's doorbell register sits
// Where producers of DBR-less QPs ring (DOCA GPUNetIO's DOCA_VERBS_UAR_DBR_LESS_DB_OFFSET: UAR base + 0x600).
constexpr size_t kDbrLessDoorbellOffset = 0x600;

// ------------------------------------------------------------------------------------------ objects
struct Umem {
    mlx5dv_devx_umem pub;  // first: the handle the application holds
    ibv_context* ctx;
    uint64_t addr;
    uint64_t size;
};

struct Uar {
    mlx5dv_devx_uar pub;
    void* page;
    int users = 0;       // DBR-less QPs whose doorbells the executor reads in this page
    bool freed = false;  // freed by the application while QPs still used it: unmapped with the last of them
};

// Memory we allocate for rings exported by mlx5dv_init_obj (the application does not free it).
struct Allocation {
    void* p = nullptr;
    explicit Allocation(size_t bytes) {
        p = std::aligned_alloc(4096, (bytes + 4095) & ~size_t{4095});
        if (p) std::memset(p, 0, bytes);
    }
    ~Allocation() { std::free(p); }
    Allocation(const Allocation&) = delete;
    Allocation& operator=(const Allocation&) = delete;
};

struct DevxObject {
    enum class Kind { Qp, Cq, Dct } kind;
    ibv_context* ctx = nullptr;
    std::unique_ptr<CqeRing> cq;        // Kind::Cq
    std::unique_ptr<DirectQp> qp;       // Kind::Qp
    std::unique_ptr<engine::QueuePair> dct;  // Kind::Dct: a DC target, nothing posted to it
    uint64_t recv_cq_offset = 0, recv_cq_bytes = 0;
    Runtime* rt = nullptr;
    Uar* uar = nullptr;                 // Kind::Qp, DBR-less: the page its doorbells are read from
    // Kind::Qp or Dct on verbs objects (UCX's DevX RC QPs and DCTs): counted as attached so that they outlive it.
    provider::SrqImpl* srq = nullptr;
    provider::CqImpl* verbs_send_cq = nullptr;
    provider::CqImpl* verbs_recv_cq = nullptr;
};

// A verbs CQ whose CQE ring the application polls. The fabric writes CQEs for the exported QPs' send completions
// directly (DirectQp) and translates what arrives in the verbs CQ (receive completions pushed by senders) into
// CQEs. Its UAR page is its own, so that an arm doorbell (at +0x20, as libmlx5's MLX5_CQ_DOORBELL) is never
// overwritten by another CQ's before the executor reads it.
struct ExportedCq {
    ibv_cq* handle = nullptr;
    std::unique_ptr<Allocation> ring, dbrec, uar;
    std::unique_ptr<CqeRing> cq;
    SharedCq* shared = nullptr;
    Runtime* rt = nullptr;
    bool has_channel = false;
    bool armed = false;
    uint32_t arm_ci = 0;  // consumer index the arm doorbell carried (24 bits)
};
struct ExportedQp {
    std::unique_ptr<Allocation> ring, dbrec, rq_ring;
    std::unique_ptr<DirectQp> qp;
    std::unique_ptr<RecvMirror> rq;  // a QP with its own receive queue
    ibv_cq* send_cq = nullptr;
    // A NIC consumes a receive queue in order and writes its CQEs in that order (UCX's ud_mlx5 relies on it). On
    // the fabric, senders consume entries of one queue concurrently and push their completions independently, so
    // they may arrive out of order: completions past a gap wait here for the one that fills it.
    uint64_t rq_next = 0;
    std::map<uint64_t, CqeRing::Responder> rq_held;
};
struct ExportedSrq {
    ibv_srq* handle = nullptr;
    std::unique_ptr<Allocation> ring, dbrec;
    std::unique_ptr<RecvMirror> mirror;
    uint32_t srqn = 0;
};
struct ExportedAh {
    alignas(16) gm::mlx5::Av av;
};

constexpr size_t kCqArmDoorbellOffset = 0x20;  // MLX5_CQ_DOORBELL in a CQ's UAR page
constexpr uint32_t kCqArmSolicitedCmd = 1u << 24;  // MLX5_CQ_DB_REQ_NOT_SOL

bool is_fabric_context(ibv_context* ctx) {
    if (!ctx || !ctx->device) return false;
    const auto* vdev = reinterpret_cast<const pabi::verbs_device*>(ctx->device);
    return vdev->ops && vdev->ops->name && std::strcmp(vdev->ops->name, "softfabric") == 0;
}

void say_once(const char* what, uint32_t code) {
    static std::mutex mu;
    static std::vector<uint32_t> said;
    std::lock_guard lk(mu);
    for (uint32_t c : said)
        if (c == code) return;
    said.push_back(code);
    std::fprintf(stderr, "softfabric mlx5: %s (0x%x)\n", what, code);
}

// Fills a command output: status 0 and, for creates, the object number.
void write_out(void* out, size_t outlen, uint32_t number) {
    if (!out || outlen < 16) return;
    std::memset(out, 0, std::min<size_t>(outlen, 16));
    prm::set_field(out, outlen, prm::f::obj_number, number);
}

// ------------------------------------------------------------------------------------------ the front end
class Frontend {
public:
    static Frontend& instance() {
        static Frontend* f = [] {
            auto* created = new Frontend();  // process lifetime: the executor may run until exit
            g_exists.store(true, std::memory_order_release);
            return created;
        }();
        return *f;
    }
    // Destroy hooks run for every fabric QP and CQ: they must not create the front end for nothing.
    static bool exists() { return g_exists.load(std::memory_order_acquire); }

    // ---- UMEM / UAR
    mlx5dv_devx_umem* umem_reg(ibv_context* ctx, void* addr, size_t size) {
        if (!addr || !size) {
            errno = EINVAL;
            return nullptr;
        }
        auto* u = new Umem{};
        std::lock_guard lk(mu_);
        u->pub.umem_id = next_umem_id_++;
        u->ctx = ctx;
        u->addr = reinterpret_cast<uint64_t>(addr);
        u->size = size;
        umems_[&u->pub] = u;
        return &u->pub;
    }
    int umem_dereg(mlx5dv_devx_umem* pub) {
        std::lock_guard lk(mu_);
        auto it = umems_.find(pub);
        if (it == umems_.end()) return EINVAL;
        delete it->second;
        umems_.erase(it);
        return 0;
    }
    mlx5dv_devx_uar* alloc_uar(ibv_context*) {
        void* page = mmap(nullptr, kUarPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED) return nullptr;
        auto* u = new Uar{};
        u->page = page;
        u->pub.base_addr = page;
        u->pub.reg_addr = static_cast<char*>(page) + kUarRegisterOffset;
        std::lock_guard lk(mu_);
        u->pub.page_id = next_uar_page_++;
        uars_[&u->pub] = u;
        return &u->pub;
    }
    void free_uar(mlx5dv_devx_uar* pub) {
        std::lock_guard lk(mu_);
        auto it = uars_.find(pub);
        if (it == uars_.end()) return;
        Uar* u = it->second;
        uars_.erase(it);
        u->freed = true;
        if (u->users == 0) delete_uar(u);  // else the executor still reads a QP's doorbells there
    }
    bool owns(const void* p) {
        std::lock_guard lk(mu_);
        return umems_.count(static_cast<const mlx5dv_devx_umem*>(p)) || uars_.count(static_cast<const mlx5dv_devx_uar*>(p)) ||
               objects_.count(static_cast<const mlx5dv_devx_obj*>(p));
    }

    // ---- DevX objects
    mlx5dv_devx_obj* obj_create(ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen) {
        const prm::Mailbox box(in, inlen);
        const uint16_t opcode = prm::command_opcode(box);
        if (opcode == prm::cmd::CREATE_CQ) return create_cq(ctx, box, out, outlen);
        if (opcode == prm::cmd::CREATE_QP) return create_qp(ctx, box, out, outlen);
        if (opcode == prm::cmd::CREATE_DCT) return create_dct(ctx, box, out, outlen);
        say_once("DevX command not emulated on fabric devices; it fails with EOPNOTSUPP", opcode);
        errno = EOPNOTSUPP;
        return nullptr;
    }

    int obj_modify(mlx5dv_devx_obj* handle, const void* in, size_t inlen, void* out, size_t outlen) {
        prm::ModifyQp m;
        prm::ParseError err;
        if (!prm::parse_modify_qp(prm::Mailbox(in, inlen), m, err)) {
            say_once("DevX modify command not emulated on fabric devices", prm::command_opcode(prm::Mailbox(in, inlen)));
            return EOPNOTSUPP;
        }
        DirectQp* dq = nullptr;
        {
            std::lock_guard lk(mu_);
            auto it = objects_.find(handle);
            if (it == objects_.end() || it->second->kind != DevxObject::Kind::Qp) return EINVAL;
            dq = it->second->qp.get();
        }
        engine::QueuePair& qp = dq->engine();
        switch (m.opcode) {
        case prm::cmd::RST2INIT_QP: {
            qp.shared().access_flags.store(ibv_access_of(m), std::memory_order_release);
            qp.set_state(IBV_QPS_INIT);
            break;
        }
        case prm::cmd::INIT2RTR_QP: {
            // UCX sets the remote access bits here (RST2INIT: write only)
            if (m.opt_param_mask & prm::kOptParamRemoteAccess)
                qp.shared().access_flags.store(ibv_access_of(m), std::memory_order_release);
            if (qp.config().dc_role == DcRole::Initiator) {  // a DCI has no path: each WQE names its destination
                if (m.mtu >= 1 && m.mtu <= 5) qp.transport().path_mtu = 128u << m.mtu;
                qp.set_state(IBV_QPS_RTR);
                break;
            }
            ibv_gid gid;
            std::memcpy(gid.raw, m.rgid, sizeof gid.raw);
            const std::optional<NicId> dest = m.grh ? nic_from_gid(gid) : nic_from_lid(static_cast<uint16_t>(m.rlid));
            if (!dest) {
                std::fprintf(stderr, "softfabric mlx5: INIT2RTR of QP 0x%x: the address path (rlid %u%s) names no "
                                     "fabric NIC\n", qp.qpn(), m.rlid, m.grh ? ", with GRH" : "");
                return EINVAL;
            }
            engine::TransportAttrs& t = qp.transport();
            t.dest_nic = *dest;
            t.dest_qpn = m.remote_qpn;
            t.has_grh = m.grh;
            t.dgid = gid;
            if (m.mtu >= 1 && m.mtu <= 5) t.path_mtu = 128u << m.mtu;
            qp.shared().remote_nic.store(dest->index());
            qp.shared().remote_qpn.store(m.remote_qpn);
            qp.set_state(IBV_QPS_RTR);
            break;
        }
        case prm::cmd::RTR2RTS_QP: {
            engine::TransportAttrs& t = qp.transport();
            t.timeout = static_cast<uint8_t>(m.ack_timeout);
            t.retry_cnt = static_cast<uint8_t>(m.retry_count);
            t.rnr_retry = static_cast<uint8_t>(m.rnr_retry);
            qp.set_state(IBV_QPS_RTS);
            break;
        }
        case prm::cmd::QP_2ERR: qp.set_state(IBV_QPS_ERR); break;
        case prm::cmd::QP_2RST:
            qp.set_state(IBV_QPS_RESET);
            dq->reset_cursor();
            break;
        default: break;  // RTS2RTS & co: nothing the fabric models changes
        }
        write_out(out, outlen, 0);
        return 0;
    }

    // QUERY_QP (DOCA's doca_verbs_qp_query, a watchdog asking whether its QP went to ERR): the state and the send
    // queue's counters. Other queries are not emulated.
    int obj_query(mlx5dv_devx_obj* handle, const void* in, size_t inlen, void* out, size_t outlen) {
        const prm::Mailbox cmd(in, inlen);
        if (prm::command_opcode(cmd) != prm::cmd::QUERY_QP) {
            say_once("DevX query command not emulated on fabric devices", prm::command_opcode(cmd));
            return EOPNOTSUPP;
        }
        if (!out || outlen < prm::f::qpc_sw_sq_wqebb_counter.bytes_needed()) {
            std::fprintf(stderr, "softfabric mlx5: QUERY_QP: the output (%zu bytes) must hold the qpc through its send "
                                 "counters (%zu bytes)\n", out ? outlen : size_t{0},
                         static_cast<size_t>(prm::f::qpc_sw_sq_wqebb_counter.bytes_needed()));
            return EINVAL;
        }
        std::lock_guard lk(mu_);  // the executor holds it while it pumps: the counters are still
        auto it = objects_.find(handle);
        if (it == objects_.end() || it->second->kind != DevxObject::Kind::Qp) return EINVAL;
        const DirectQp& dq = *it->second->qp;
        std::memset(out, 0, outlen);
        prm::set_field(out, outlen, prm::f::qpc_state, sigmatrace::qpc_state_from_ibv(it->second->qp->engine().state()));
        prm::set_field(out, outlen, prm::f::qpc_hw_sq_wqebb_counter, dq.consumed_index());
        prm::set_field(out, outlen, prm::f::qpc_sw_sq_wqebb_counter, dq.accepted_index());
        return 0;
    }

    int obj_destroy(mlx5dv_devx_obj* handle) {
        std::unique_ptr<DevxObject> o;
        {
            std::lock_guard lk(mu_);  // the executor holds it during a pass: it is not touching this QP after
            auto it = objects_.find(handle);
            if (it == objects_.end()) return EINVAL;
            o = std::move(it->second);
            objects_.erase(it);
            if (o->qp) std::erase(direct_, o->qp.get());
            if (o->cq)
                for (DirectQp* q : direct_)
                    if (q->send_cq() == o->cq.get()) q->set_send_cq(nullptr);
        }
        if (o->qp) o->qp.reset();
        o->dct.reset();   // leaves the runtime before its SRQ and CQ are released
        if (o->recv_cq_offset) o->rt->arena().release(o->recv_cq_offset, o->recv_cq_bytes);
        detach_verbs_objects(*o);
        if (o->uar) {
            std::lock_guard lk(mu_);
            release_uar_user_locked(o->uar);
        }
        return 0;
    }

    // ---- init_obj
    int init_obj(mlx5dv_obj* obj, uint64_t type) {
        constexpr uint64_t kSupported = MLX5DV_OBJ_PD | MLX5DV_OBJ_CQ | MLX5DV_OBJ_QP | MLX5DV_OBJ_SRQ | MLX5DV_OBJ_AH;
        if (type & ~kSupported) return EOPNOTSUPP;  // device memory, parent domains, DevX handles of verbs objects
        if (type & MLX5DV_OBJ_PD) {
            if (!obj->pd.in || !obj->pd.out) return EINVAL;
            obj->pd.out->pdn = pdn_of(provider::pd_of(obj->pd.in).id);
            obj->pd.out->comp_mask = 0;
        }
        if (type & MLX5DV_OBJ_CQ) {
            if (int err = export_cq(obj->cq.in, obj->cq.out)) return err;
        }
        if (type & MLX5DV_OBJ_QP) {
            if (int err = export_qp(obj->qp.in, obj->qp.out)) return err;
        }
        if (type & MLX5DV_OBJ_SRQ) {
            if (int err = export_srq(obj->srq.in, obj->srq.out)) return err;
        }
        if (type & MLX5DV_OBJ_AH) {
            if (int err = export_ah(obj->ah.in, obj->ah.out)) return err;
        }
        return 0;
    }

    // ---- mlx5dv_query_device / mlx5dv_create_cq / mlx5dv_create_qp
    int query_device(ibv_context*, mlx5dv_context* attrs) {
        if (!attrs) return EINVAL;
        // CQE version 1 (the CQEs this front end writes), nothing optional: no CQE compression, striding RQ,
        // tunnel offloads, dynamic UARs, clock info, flow actions, DC ODP, LAG, signature, DCI streams,
        // memcpy or crypto. The comp_mask the caller asked with comes back cleared of all of them.
        attrs->version = 0;
        attrs->flags = MLX5DV_CONTEXT_FLAGS_CQE_V1;
        attrs->comp_mask = 0;
        return 0;
    }

    ibv_cq_ex* create_cq(ibv_context* ctx, ibv_cq_init_attr_ex* attr, mlx5dv_cq_init_attr* dv) {
        uint32_t cqe_size = 64;
        // As libmlx5: without a size in the call, MLX5_CQE_SIZE chooses it, and a size other than 64 or 128 is
        // EINVAL either way.
        if (const char* env = std::getenv("MLX5_CQE_SIZE"); env && !(dv && (dv->comp_mask & MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE))) {
            cqe_size = static_cast<uint32_t>(std::strtoul(env, nullptr, 10));
            if (cqe_size != 64 && cqe_size != 128) {
                errno = EINVAL;
                return nullptr;
            }
        }
        if (dv) {
            constexpr uint64_t kKnown = MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE | MLX5DV_CQ_INIT_ATTR_MASK_FLAGS |
                                        MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE;
            if (dv->comp_mask & ~kKnown) {
                errno = EINVAL;
                return nullptr;
            }
            // CQE compression (mini-CQEs) and signature CQs are not emulated: refused as by a device without them.
            if (dv->comp_mask & (MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE | MLX5DV_CQ_INIT_ATTR_MASK_FLAGS)) {
                errno = EOPNOTSUPP;
                return nullptr;
            }
            if (dv->comp_mask & MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE) {
                if (dv->cqe_size != 64 && dv->cqe_size != 128) {
                    errno = EINVAL;
                    return nullptr;
                }
                cqe_size = dv->cqe_size;
            }
        }
        ibv_cq_ex* cq = ibv_create_cq_ex(ctx, attr);
        if (!cq) return nullptr;
        std::lock_guard lk(mu_);
        cqe_sizes_[ibv_cq_ex_to_cq(cq)] = cqe_size;
        return cq;
    }

    ibv_qp* create_qp(ibv_context* ctx, ibv_qp_init_attr_ex* attr, mlx5dv_qp_init_attr* dv) {
        if (!attr) {
            errno = EINVAL;
            return nullptr;
        }
        uint64_t mask = dv ? dv->comp_mask : 0;
        if (mask & ~uint64_t{MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS | MLX5DV_QP_INIT_ATTR_MASK_DC}) {
            // DCI streams, mlx5 send ops (mlx5dv_qp_ex): not emulated.
            errno = EOPNOTSUPP;
            return nullptr;
        }
        if (mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) {
            // The fabric never scatters data into CQEs, which both scatter-to-CQE flags allow; others (tunnel
            // offloads, multi-packet WQEs, TIR/TIS, packet-based credit, SQD2RTS) are not emulated.
            constexpr uint32_t kAllowed = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE | MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE;
            if (dv->create_flags & ~kAllowed) {
                errno = EOPNOTSUPP;
                return nullptr;
            }
        }
        if (mask & MLX5DV_QP_INIT_ATTR_MASK_DC) {
            if (attr->qp_type != IBV_QPT_DRIVER) {
                errno = EINVAL;
                return nullptr;
            }
            switch (dv->dc_init_attr.dc_type) {
            case MLX5DV_DCTYPE_DCI: return provider::create_dc_qp(ctx, attr, DcRole::Initiator, 0);
            case MLX5DV_DCTYPE_DCT:
                return provider::create_dc_qp(ctx, attr, DcRole::Target, dv->dc_init_attr.dct_access_key);
            default: errno = EINVAL; return nullptr;
            }
        }
        if (attr->qp_type == IBV_QPT_DRIVER) {  // a driver QP without a DC type: nothing the fabric knows
            errno = EINVAL;
            return nullptr;
        }
        return ibv_create_qp_ex(ctx, attr);
    }

    void forget_qp(ibv_qp* qp) {
        std::unique_ptr<ExportedQp> e;
        {
            std::lock_guard lk(mu_);
            auto it = exported_qps_.find(qp);
            if (it == exported_qps_.end()) return;
            e = std::move(it->second);
            exported_qps_.erase(it);
            std::erase(direct_, e->qp.get());
            rq_by_qpn_.erase(e->qp->qpn());
        }
    }
    void forget_cq(ibv_cq* cq) {
        std::unique_ptr<ExportedCq> e;
        std::lock_guard lk(mu_);
        cqe_sizes_.erase(cq);
        auto it = exported_cqs_.find(cq);
        if (it == exported_cqs_.end()) return;
        for (auto& [q, eq] : exported_qps_)
            if (eq->send_cq == cq) eq->qp->set_send_cq(nullptr);
        for (DirectQp* q : direct_)
            if (q->send_cq() == it->second->cq.get()) q->set_send_cq(nullptr);
        e = std::move(it->second);
        exported_cqs_.erase(it);
    }
    void reset_qp(ibv_qp* qp) {
        std::lock_guard lk(mu_);  // the executor is between passes
        auto it = exported_qps_.find(qp);
        if (it == exported_qps_.end()) return;
        ExportedQp& e = *it->second;
        auto* dbrec = static_cast<uint32_t*>(e.dbrec->p);
        __atomic_store_n(&dbrec[0], 0u, __ATOMIC_RELEASE);
        __atomic_store_n(&dbrec[1], 0u, __ATOMIC_RELEASE);
        e.qp->reset_cursor();
        if (e.rq) e.rq->reset();
        e.rq_next = 0;
        e.rq_held.clear();
    }
    void forget_srq(ibv_srq* srq) {
        std::unique_ptr<ExportedSrq> e;
        std::lock_guard lk(mu_);
        auto it = exported_srqs_.find(srq);
        if (it == exported_srqs_.end()) return;
        e = std::move(it->second);
        exported_srqs_.erase(it);
    }
    void forget_ah(ibv_ah* ah) {
        std::unique_ptr<ExportedAh> e;
        std::lock_guard lk(mu_);
        auto it = exported_ahs_.find(ah);
        if (it == exported_ahs_.end()) return;
        e = std::move(it->second);
        exported_ahs_.erase(it);
    }

private:
    Frontend() { pthread_atfork(nullptr, nullptr, [] { instance().after_fork_child(); }); }

    void after_fork_child() {
        // The parent's queues are not the child's; its executor thread does not exist here (its handle is
        // meaningless: released without joining).
        new (&mu_) std::mutex();
        direct_.clear();
        exported_cqs_.clear();
        exported_srqs_.clear();
        for (auto& [q, e] : exported_qps_) e->rq.reset();
        rq_by_qpn_.clear();
        running_ = false;
        if (executor_.joinable()) new (&executor_) std::thread();
    }

    uint32_t pdn_of(uint64_t pd_id) {
        std::lock_guard lk(mu_);
        for (auto& [pdn, id] : pdns_)
            if (id == pd_id) return pdn;
        const uint32_t pdn = next_pdn_++;
        pdns_[pdn] = pd_id;
        return pdn;
    }

    static void delete_uar(Uar* u) {
        munmap(u->page, kUarPage);
        delete u;
    }
    void release_uar_user_locked(Uar* u) {
        if (--u->users == 0 && u->freed) delete_uar(u);
    }
    Uar* uar_by_page(uint32_t page_id) {
        for (auto& [pub, u] : uars_)
            if (pub->page_id == page_id) return u;
        return nullptr;
    }

    const Umem* umem_by_id(uint32_t id) {
        for (auto& [pub, u] : umems_)
            if (pub->umem_id == id) return u;
        return nullptr;
    }

    mlx5dv_devx_obj* create_cq(ibv_context* ctx, const prm::Mailbox& in, void* out, size_t outlen) {
        prm::CreateCq c;
        prm::ParseError err;
        if (!prm::parse_create_cq(in, c, err)) {
            std::fprintf(stderr, "softfabric mlx5: CREATE_CQ: %s (need %zu bytes, have %zu)\n", err.what, err.need, err.have);
            errno = EINVAL;
            return nullptr;
        }
        std::lock_guard lk(mu_);
        // As the kernel does for DevX create commands, the umem ids are used whatever the valid bits say.
        const Umem* ring = umem_by_id(c.cq_umem_id);
        const uint64_t bytes = c.collapsed ? c.cqe_bytes() : uint64_t{c.ncqe()} * c.cqe_bytes();
        if (!ring || c.cq_umem_offset + bytes > ring->size || c.compression) {
            std::fprintf(stderr, "softfabric mlx5: CREATE_CQ: the CQE ring must lie in a UMEM registered on this "
                                 "fabric context, without CQE compression (umem %u, offset %llu, %llu bytes)\n",
                         c.cq_umem_id, static_cast<unsigned long long>(c.cq_umem_offset),
                         static_cast<unsigned long long>(bytes));
            errno = EINVAL;
            return nullptr;
        }
        auto o = std::make_unique<DevxObject>();
        o->kind = DevxObject::Kind::Cq;
        o->ctx = ctx;
        const uint32_t cqn = next_cqn_++;
        o->cq = std::make_unique<CqeRing>(cqn, reinterpret_cast<uint8_t*>(ring->addr + c.cq_umem_offset), c.ncqe(),
                                          c.cqe_bytes(), c.collapsed);
        devx_cqs_[cqn] = o->cq.get();
        auto* handle = reinterpret_cast<mlx5dv_devx_obj*>(o.get());
        objects_[handle] = std::move(o);
        write_out(out, outlen, cqn);
        return handle;
    }

    mlx5dv_devx_obj* create_qp(ibv_context* ctx, const prm::Mailbox& in, void* out, size_t outlen) {
        prm::CreateQp c;
        prm::ParseError err;
        if (!prm::parse_create_qp(in, c, err)) {
            std::fprintf(stderr, "softfabric mlx5: CREATE_QP: %s (need %zu bytes, have %zu)\n", err.what, err.need, err.have);
            errno = EINVAL;
            return nullptr;
        }
        if ((c.st != prm::st::RC && c.st != prm::st::DCI) || c.send_dbr_mode > prm::kSendDbrModeNoDbr) {
            std::fprintf(stderr, "softfabric mlx5: CREATE_QP: only RC QPs and DCIs are emulated, with a doorbell "
                                 "record or DBR-less (st %u, send_dbr_mode %u)\n", c.st, c.send_dbr_mode);
            errno = EOPNOTSUPP;
            return nullptr;
        }
        const bool dci = c.st == prm::st::DCI;
        // On an SRQ, or with automatic receives whatever other receive queue the qpc describes. A DCI has no receive
        // side whatever its qpc says (UCX names its SRQ there).
        const bool on_srq = !dci && c.rq_type == kRqTypeSrq;
        const bool dbr_less = c.send_dbr_mode == prm::kSendDbrModeNoDbr;
        provider::ContextImpl& cimpl = provider::context_of(ctx);
        std::lock_guard lk(mu_);
        // As the kernel does for DevX create commands (UCX sets none of the valid bits), the umem ids are used
        // whatever the valid bits say.
        const Umem* wq = umem_by_id(c.wq_umem_id);
        const Umem* dbr = umem_by_id(c.dbr_umem_id);
        const uint32_t wqebbs = c.sq_wqebbs();
        Uar* uar = dbr_less ? uar_by_page(c.uar_page) : nullptr;
        auto pd = pdns_.find(c.pd);
        const char* why = nullptr;
        if (!wq || c.sq_umem_offset() + uint64_t{wqebbs} * 64 > wq->size) why = "its send queue must lie in a UMEM";
        else if (!dbr_less && (!dbr || c.dbr_addr + 8 > dbr->size || (c.dbr_addr & 3)))
            why = "its doorbell record must lie in a UMEM";
        else if (dbr_less && !uar)
            why = "a DBR-less QP's uar_page must name a UAR from mlx5dv_devx_alloc_uar on this context (its doorbells "
                  "are read there)";
        else if (pd == pdns_.end()) why = "its pd is not a pdn returned by mlx5dv_init_obj(MLX5DV_OBJ_PD)";
        else if (wqebbs == 0 || wqebbs > engine::kMaxQueueDepth) why = "its send queue size is not supported";
        ExportedSrq* srq = on_srq ? exported_srq_by_number(c.srqn) : nullptr;
        ExportedCq* verbs_scq = exported_cq_by_number(c.cqn_snd);
        ExportedCq* verbs_rcq = exported_cq_by_number(c.cqn_rcv);
        if (!why && on_srq && dbr_less) why = "a QP on an SRQ needs a doorbell record in a UMEM";
        else if (!why && on_srq) why = verbs_receive_refusal(srq, verbs_rcq);
        if (why) {
            std::fprintf(stderr, "softfabric mlx5: CREATE_QP: %s\n", why);
            errno = EINVAL;
            return nullptr;
        }
        Runtime& rt = *cimpl.rt;
        auto o = std::make_unique<DevxObject>();
        o->kind = DevxObject::Kind::Qp;
        o->ctx = ctx;
        o->rt = &rt;
        if (on_srq) return create_srq_qp(ctx, c, *wq, *dbr, pd->second, *srq, verbs_scq, *verbs_rcq, std::move(o), out, outlen);
        if (dci) return create_dci(ctx, c, *wq, dbr, uar, pd->second, verbs_scq, std::move(o), out, outlen);
        // A receive CQ for the automatic receives (their completions become responder CQEs).
        o->recv_cq_bytes = SharedCq::bytes_for(kAutoReceiveDepth * 2);
        o->recv_cq_offset = rt.arena().allocate(o->recv_cq_bytes);
        if (!o->recv_cq_offset) {
            errno = ENOMEM;
            return nullptr;
        }
        SharedCq* rcq = rt.arena().at<SharedCq>(o->recv_cq_offset);
        rcq->capacity = kAutoReceiveDepth * 2;
        rcq->cqn = 0;
        rcq->member = rt.member();
        rcq->channel_wfd = -1;
        rcq->owner_token = 0;
        rcq->tail.store(0);
        rcq->head.store(0);
        rcq->armed.store(0);
        rcq->event_pending.store(0);
        rcq->overflow.store(0);
        for (uint32_t i = 0; i < rcq->capacity; ++i) rcq->slot(i)->seq.store(0);

        engine::QueuePairConfig cfg = devx_qp_config(cimpl, c, pd->second);
        cfg.type = IBV_QPT_RC;
        cfg.rq_depth = kAutoReceiveDepth;
        cfg.recv_cq_offset = o->recv_cq_offset;
        std::unique_ptr<engine::QueuePair> qp = make_engine_qp(rt, cfg, "CREATE_QP");
        if (!qp) {
            rt.arena().release(o->recv_cq_offset, o->recv_cq_bytes);
            return nullptr;
        }
        attach_direct_qp(*o, std::move(qp), send_geometry(c, *wq, dbr, uar, *o), c.cqn_snd, verbs_scq);
        CqeRing* recv_ring = nullptr;
        if (auto it = devx_cqs_.find(c.cqn_rcv); it != devx_cqs_.end()) recv_ring = it->second;
        o->qp->enable_auto_receive(rcq, recv_ring);
        return add_direct_qp_locked(std::move(o), out, outlen);
    }

    // A DC initiator (NVSHMEM's DCIs, st 0x5): no receive side; each WQE names its DCT in an address vector.
    mlx5dv_devx_obj* create_dci(ibv_context* ctx, const prm::CreateQp& c, const Umem& wq, const Umem* dbr, Uar* uar,
                                uint64_t pd_id, ExportedCq* verbs_scq, std::unique_ptr<DevxObject> o, void* out,
                                size_t outlen) {
        provider::ContextImpl& cimpl = provider::context_of(ctx);
        engine::QueuePairConfig cfg = devx_qp_config(cimpl, c, pd_id);
        cfg.type = IBV_QPT_DRIVER;
        cfg.dc_role = DcRole::Initiator;
        std::unique_ptr<engine::QueuePair> qp = make_engine_qp(*cimpl.rt, cfg, "CREATE_QP");
        if (!qp) return nullptr;
        DirectQp::Geometry g = send_geometry(c, wq, dbr, uar, *o);
        g.transport = gm::Transport::Dci;
        attach_direct_qp(*o, std::move(qp), g, c.cqn_snd, verbs_scq);
        return add_direct_qp_locked(std::move(o), out, outlen);
    }

    // A DC target (CREATE_DCT), active once created: it executes the RDMA WRITEs, READs and atomics DCIs send it
    // with its access key (the low 32 bits, as verbs DCTs). Without an SRQ (NVSHMEM's) it has no receive queue:
    // SENDs and WRITEs with immediate to it fail at the sender. On a verbs SRQ exported with mlx5dv_init_obj (UCX's),
    // it takes its receives from the SRQ's ring and completes them into the exported verbs CQ `cqn` names, as
    // a DevX RC QP on an SRQ does.
    mlx5dv_devx_obj* create_dct(ibv_context* ctx, const prm::Mailbox& in, void* out, size_t outlen) {
        prm::CreateDct d;
        prm::ParseError err;
        if (!prm::parse_create_dct(in, d, err)) {
            std::fprintf(stderr, "softfabric mlx5: CREATE_DCT: %s (need %zu bytes, have %zu)\n", err.what, err.need, err.have);
            errno = EINVAL;
            return nullptr;
        }
        provider::ContextImpl& cimpl = provider::context_of(ctx);
        std::lock_guard lk(mu_);
        auto pd = pdns_.find(d.pd);
        if (pd == pdns_.end()) {
            std::fprintf(stderr, "softfabric mlx5: CREATE_DCT: its pd %u is not a pdn returned by "
                                 "mlx5dv_init_obj(MLX5DV_OBJ_PD)\n", d.pd);
            errno = EINVAL;
            return nullptr;
        }
        ExportedSrq* srq = d.srqn != 0 ? exported_srq_by_number(d.srqn) : nullptr;
        ExportedCq* rcq = d.srqn != 0 ? exported_cq_by_number(d.cqn) : nullptr;
        if (const char* why = d.srqn != 0 ? verbs_receive_refusal(srq, rcq) : nullptr) {
            std::fprintf(stderr, "softfabric mlx5: CREATE_DCT: %s\n", why);
            errno = EINVAL;
            return nullptr;
        }
        engine::QueuePairConfig cfg;
        cfg.type = IBV_QPT_DRIVER;
        cfg.dc_role = DcRole::Target;
        cfg.nic = cimpl.nic;
        cfg.pd_id = pd->second;
        cfg.sq_depth = 1;  // nothing is ever posted to a DCT
        cfg.rq_depth = 0;
        if (srq) {
            cfg.srq_offset = provider::srq_of(srq->handle).offset;
            cfg.recv_cq_offset = provider::cq_of(rcq->handle).offset;
        }
        auto o = std::make_unique<DevxObject>();
        o->kind = DevxObject::Kind::Dct;
        o->ctx = ctx;
        o->rt = cimpl.rt;
        o->dct = make_engine_qp(*cimpl.rt, cfg, "CREATE_DCT");
        if (!o->dct) return nullptr;
        if (srq) attach_verbs_receive(*o, provider::srq_of(srq->handle), provider::cq_of(rcq->handle));
        engine::QueuePair& q = *o->dct;
        q.shared().qkey.store(static_cast<uint32_t>(d.dc_access_key));
        q.shared().access_flags.store(ibv_access_of(d), std::memory_order_release);
        if (d.mtu >= 1 && d.mtu <= 5) q.transport().path_mtu = 128u << d.mtu;
        q.set_state(IBV_QPS_INIT);
        q.set_state(IBV_QPS_RTR);
        const uint32_t dctn = q.qpn();
        auto* handle = reinterpret_cast<mlx5dv_devx_obj*>(o.get());
        objects_[handle] = std::move(o);
        write_out(out, outlen, dctn);
        return handle;
    }

    // What every DevX QP's engine QP shares: its NIC and PD, a send queue of the CREATE_QP's size, no receive queue
    // of its own (callers add what their kind has).
    static engine::QueuePairConfig devx_qp_config(const provider::ContextImpl& cimpl, const prm::CreateQp& c,
                                                  uint64_t pd_id) {
        engine::QueuePairConfig cfg;
        cfg.nic = cimpl.nic;
        cfg.pd_id = pd_id;
        cfg.sq_depth = c.sq_wqebbs();
        cfg.max_send_sge = kMaxSendSge;
        cfg.max_inline = kMaxInline;
        cfg.rq_depth = 0;
        return cfg;
    }
    // The engine QP of a DevX object; null, with errno ENOMEM and the reason on stderr, when the fabric has no room.
    static std::unique_ptr<engine::QueuePair> make_engine_qp(Runtime& rt, const engine::QueuePairConfig& cfg,
                                                             const char* command) {
        try {
            return std::make_unique<engine::QueuePair>(rt, cfg);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "softfabric mlx5: %s: %s\n", command, e.what());
            errno = ENOMEM;
            return nullptr;
        }
    }
    // Where the executor reads the send queue: the ring in its UMEM, and the doorbell record in its UMEM or, for a
    // DBR-less QP, the doorbell register of its UAR page (which then counts the QP as a user).
    static DirectQp::Geometry send_geometry(const prm::CreateQp& c, const Umem& wq, const Umem* dbr, Uar* uar,
                                            DevxObject& o) {
        DirectQp::Geometry g;
        g.sq = reinterpret_cast<uint8_t*>(wq.addr + c.sq_umem_offset());
        g.wqebbs = c.sq_wqebbs();
        g.user_index = c.user_index;
        if (c.send_dbr_mode == prm::kSendDbrModeNoDbr) {
            g.doorbell = reinterpret_cast<uint64_t*>(static_cast<char*>(uar->page) + kDbrLessDoorbellOffset);
            ++uar->users;
            o.uar = uar;
        } else {
            g.send_dbr = reinterpret_cast<uint32_t*>(dbr->addr + c.send_dbr_umem_offset());
        }
        return g;
    }
    // The object's DirectQp, completing into the send CQ `cqn_snd` names: a DevX CQ, else the exported verbs CQ.
    void attach_direct_qp(DevxObject& o, std::unique_ptr<engine::QueuePair> qp, const DirectQp::Geometry& g,
                          uint32_t cqn_snd, ExportedCq* verbs_scq) {
        engine::QueuePair& ref = *qp;
        o.qp = std::make_unique<DirectQp>(ref, std::move(qp), g);
        if (auto it = devx_cqs_.find(cqn_snd); it != devx_cqs_.end()) o.qp->set_send_cq(it->second);
        else if (verbs_scq) o.qp->set_send_cq(verbs_scq->cq.get());
    }

    // A DevX QP the executor runs from now on: owned by objects_, its QP number written in the command's output.
    mlx5dv_devx_obj* add_direct_qp_locked(std::unique_ptr<DevxObject> o, void* out, size_t outlen) {
        const uint32_t qpn = o->qp->qpn();
        direct_.push_back(o->qp.get());
        auto* handle = reinterpret_cast<mlx5dv_devx_obj*>(o.get());
        objects_[handle] = std::move(o);
        start_executor_locked();
        write_out(out, outlen, qpn);
        return handle;
    }

    ExportedSrq* exported_srq_by_number(uint32_t srqn) {
        for (auto& [srq, e] : exported_srqs_)
            if (e->srqn == srqn) return e.get();
        return nullptr;
    }
    ExportedCq* exported_cq_by_number(uint32_t cqn) {
        for (auto& [cq, e] : exported_cqs_)
            if (e->cq->cqn() == cqn) return e.get();
        return nullptr;
    }

    // A DevX RC QP whose receives come from a verbs SRQ and complete into a verbs CQ, both exported with
    // mlx5dv_init_obj (UCX's DevX RC QPs): the engine QP takes its receives from the SRQ's ring, which the
    // application fills through the exported SRQ, and pushes their completions into the CQ, whose CQE ring the
    // executor fills; its send completions go to the send CQ's CQE ring (exported or DevX).
    mlx5dv_devx_obj* create_srq_qp(ibv_context* ctx, const prm::CreateQp& c, const Umem& wq, const Umem& dbr,
                                   uint64_t pd_id, ExportedSrq& srq, ExportedCq* verbs_scq, ExportedCq& verbs_rcq,
                                   std::unique_ptr<DevxObject> o, void* out, size_t outlen) {
        provider::ContextImpl& cimpl = provider::context_of(ctx);
        provider::SrqImpl& simpl = provider::srq_of(srq.handle);
        provider::CqImpl& rcq = provider::cq_of(verbs_rcq.handle);
        engine::QueuePairConfig cfg = devx_qp_config(cimpl, c, pd_id);
        cfg.type = IBV_QPT_RC;
        cfg.srq_offset = simpl.offset;
        cfg.recv_cq_offset = rcq.offset;
        std::unique_ptr<engine::QueuePair> qp = make_engine_qp(*cimpl.rt, cfg, "CREATE_QP");
        if (!qp) return nullptr;
        attach_direct_qp(*o, std::move(qp), send_geometry(c, wq, &dbr, nullptr, *o), c.cqn_snd, verbs_scq);
        attach_verbs_receive(*o, simpl, rcq);
        if (verbs_scq && verbs_scq != &verbs_rcq) {
            provider::CqImpl& scq = provider::cq_of(verbs_scq->handle);
            std::lock_guard lock(scq.poll_lock);
            ++scq.attached_qps;
            o->verbs_send_cq = &scq;
        }
        return add_direct_qp_locked(std::move(o), out, outlen);
    }

    // Why a QP or DCT cannot receive from the SRQ and into the CQ its command names (each looked up among the
    // exported ones: null when not found), or null when it can.
    static const char* verbs_receive_refusal(const ExportedSrq* srq, const ExportedCq* cq) {
        if (!srq) return "its srqn must be an SRQ number from mlx5dv_init_obj(MLX5DV_OBJ_SRQ, MLX5DV_SRQ_MASK_SRQN)";
        if (!cq) return "on an SRQ, it completes its receives into a verbs CQ exported with mlx5dv_init_obj";
        return nullptr;
    }
    // A QP or DCT receiving from a verbs SRQ into a verbs CQ: both count it as attached, so that they outlive it
    // (destroying them first fails with EBUSY); detach_verbs_objects undoes it.
    static void attach_verbs_receive(DevxObject& o, provider::SrqImpl& srq, provider::CqImpl& cq) {
        {
            std::lock_guard lock(srq.post_lock);
            ++srq.attached_qps;
        }
        o.srq = &srq;
        {
            std::lock_guard lock(cq.poll_lock);
            ++cq.attached_qps;
        }
        o.verbs_recv_cq = &cq;
    }
    static void detach_verbs_objects(DevxObject& o) {
        if (o.srq) {
            std::lock_guard lock(o.srq->post_lock);
            --o.srq->attached_qps;
        }
        for (provider::CqImpl* cq : {o.verbs_recv_cq, o.verbs_send_cq})
            if (cq) {
                std::lock_guard lock(cq->poll_lock);
                --cq->attached_qps;
            }
    }

    int export_cq(ibv_cq* cq, mlx5dv_cq* out) {
        if (!cq || !out) return EINVAL;
        std::lock_guard lk(mu_);
        auto& e = exported_cqs_[cq];
        if (!e) {
            e = std::make_unique<ExportedCq>();
            e->handle = cq;
            provider::CqImpl& impl = provider::cq_of(cq);
            const uint32_t ncqe = std::bit_ceil(static_cast<uint32_t>(std::max(cq->cqe, 1)) + 1);
            auto size = cqe_sizes_.find(cq);
            const uint32_t cqe_size = size == cqe_sizes_.end() ? 64 : size->second;
            e->ring = std::make_unique<Allocation>(size_t{ncqe} * cqe_size);
            e->dbrec = std::make_unique<Allocation>(64);
            e->uar = std::make_unique<Allocation>(kUarPage);
            if (!e->ring->p || !e->dbrec->p || !e->uar->p) {
                exported_cqs_.erase(cq);
                return ENOMEM;
            }
            // A CQ number of its own, from the same counter as DevX CQs': DevX QPs name their CQs by it.
            e->cq = std::make_unique<CqeRing>(next_cqn_++, static_cast<uint8_t*>(e->ring->p), ncqe, cqe_size, false);
            e->cq->invalidate_all();
            e->shared = impl.shared;
            e->rt = impl.rt;
            e->has_channel = impl.has_channel;
            for (auto& [q, eq] : exported_qps_)
                if (eq->send_cq == cq) eq->qp->set_send_cq(e->cq.get());
            start_executor_locked();
        }
        out->buf = e->cq->ring();
        out->dbrec = static_cast<__be32*>(e->dbrec->p);
        out->cqe_cnt = e->cq->ncqe();
        out->cqe_size = e->cq->cqe_size();
        out->cq_uar = e->uar->p;
        out->cqn = e->cq->cqn();
        out->comp_mask = 0;
        return 0;
    }

    int export_qp(ibv_qp* qp, mlx5dv_qp* out) {
        if (!qp || !out) return EINVAL;
        provider::QpImpl& impl = provider::qp_of(qp);
        gm::Transport transport;
        if (qp->qp_type == IBV_QPT_RC) transport = gm::Transport::Rc;
        else if (qp->qp_type == IBV_QPT_UD) transport = gm::Transport::Ud;
        else if (impl.dc_role == DcRole::Initiator) transport = gm::Transport::Dci;
        else return EOPNOTSUPP;  // UC and DCT rings are not exported
        std::lock_guard lk(mu_);
        auto& e = exported_qps_[qp];
        if (!e) {
            // The driver may put as much inline data in a WQE as fits in it, whatever max_inline_data it asked for.
            if (!impl.engine.grow_inline(engine::kMaxInline)) {
                exported_qps_.erase(qp);
                return EBUSY;  // operations already posted through the verbs API are in flight
            }
            e = std::make_unique<ExportedQp>();
            const uint32_t wqebbs = impl.engine.sq_depth();  // one engine WQE per WQEBB at most
            e->ring = std::make_unique<Allocation>(size_t{wqebbs} * 64);
            e->dbrec = std::make_unique<Allocation>(64);
            if (!e->ring->p || !e->dbrec->p) {
                exported_qps_.erase(qp);
                return ENOMEM;
            }
            if (RecvRing* rq = impl.engine.receive_ring()) {
                const uint32_t stride = 16 * std::bit_ceil(std::max(rq->max_sge, 1u));
                e->rq_ring = std::make_unique<Allocation>(size_t{rq->capacity} * stride);
                if (!e->rq_ring->p) {
                    exported_qps_.erase(qp);
                    return ENOMEM;
                }
                RecvMirror::Target t;
                t.qp = &impl.engine;
                e->rq = std::make_unique<RecvMirror>(RecvMirror::Kind::Rq, static_cast<uint8_t*>(e->rq_ring->p),
                                                     rq->capacity, stride, static_cast<uint32_t*>(e->dbrec->p), t);
            }
            DirectQp::Geometry g;
            g.sq = static_cast<uint8_t*>(e->ring->p);
            g.wqebbs = wqebbs;
            g.send_dbr = static_cast<uint32_t*>(e->dbrec->p) + 1;
            g.transport = transport;
            e->qp = std::make_unique<DirectQp>(impl.engine, nullptr, g);
            if (e->rq) rq_by_qpn_[e->qp->qpn()] = e.get();
            e->send_cq = qp->send_cq;
            if (auto it = exported_cqs_.find(qp->send_cq); it != exported_cqs_.end()) e->qp->set_send_cq(it->second->cq.get());
            direct_.push_back(e->qp.get());
            start_executor_locked();
        }
        if (!uar_page_) uar_page_ = mmap(nullptr, kUarPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        out->dbrec = static_cast<__be32*>(e->dbrec->p);
        out->sq.buf = e->ring->p;
        out->sq.wqe_cnt = impl.engine.sq_depth();
        out->sq.stride = 64;
        RecvRing* rq = impl.engine.receive_ring();
        out->rq.buf = e->rq_ring ? e->rq_ring->p : nullptr;
        out->rq.wqe_cnt = e->rq_ring ? rq->capacity : 0;
        out->rq.stride = e->rq_ring ? 16 * std::bit_ceil(std::max(rq->max_sge, 1u)) : 0;
        out->bf.reg = uar_page_ == MAP_FAILED ? nullptr : static_cast<char*>(uar_page_) + kUarRegisterOffset;
        out->bf.size = 0;  // a non-BlueFlame doorbell: 8-byte writes
        out->comp_mask = 0;
        return 0;
    }

    // An SRQ's WQEs as libmlx5 lays them out: a linked list of `stride`-byte WQEs (next segment, then data
    // segments), head 0, tail wqe_cnt - 1, each linked to the following one.
    int export_srq(ibv_srq* srq, mlx5dv_srq* out) {
        if (!srq || !out) return EINVAL;
        provider::SrqImpl& impl = provider::srq_of(srq);
        const uint32_t wqe_cnt = impl.max_wr;  // the fabric ring's capacity: a power of two
        const uint32_t stride = std::bit_ceil(16 + 16 * std::max(impl.max_sge, 1u));
        std::lock_guard lk(mu_);
        auto& e = exported_srqs_[srq];
        if (!e) {
            e = std::make_unique<ExportedSrq>();
            e->handle = srq;
            e->ring = std::make_unique<Allocation>(size_t{wqe_cnt} * stride);
            e->dbrec = std::make_unique<Allocation>(64);
            if (!e->ring->p || !e->dbrec->p) {
                exported_srqs_.erase(srq);
                return ENOMEM;
            }
            auto* buf = static_cast<uint8_t*>(e->ring->p);
            for (uint32_t i = 0; i < wqe_cnt; ++i)
                gm::mlx5::store_be16(buf + size_t{i} * stride + 2, static_cast<uint16_t>((i + 1) & (wqe_cnt - 1)));
            e->srqn = next_srqn_++;
            RecvMirror::Target t;
            t.ring = impl.ring;
            t.lock = &impl.post_lock;
            e->mirror = std::make_unique<RecvMirror>(RecvMirror::Kind::Srq, buf, wqe_cnt, stride,
                                                     static_cast<uint32_t*>(e->dbrec->p), t);
            start_executor_locked();
        }
        const bool want_srqn = (out->comp_mask & MLX5DV_SRQ_MASK_SRQN) != 0;
        out->buf = e->ring->p;
        out->dbrec = static_cast<__be32*>(e->dbrec->p);
        out->stride = stride;
        out->head = 0;
        out->tail = wqe_cnt - 1;
        out->comp_mask = 0;
        if (want_srqn) {
            out->srqn = e->srqn;
            out->comp_mask = MLX5DV_SRQ_MASK_SRQN;
        }
        return 0;
    }

    int export_ah(ibv_ah* ah, mlx5dv_ah* out) {
        if (!ah || !out) return EINVAL;
        const auto& obj = *reinterpret_cast<const provider::AhObject*>(ah);
        std::lock_guard lk(mu_);
        auto& e = exported_ahs_[ah];
        if (!e) {
            e = std::make_unique<ExportedAh>();
            av_of_destination(obj.dest, e->av);
        }
        out->av = reinterpret_cast<mlx5_wqe_av*>(&e->av);
        out->comp_mask = 0;
        return 0;
    }

    // Receive completions that senders pushed into an exported CQ's verbs ring, as mlx5 CQEs (and send
    // completions of QPs that were never exported, which have no WQE index of their own: their wr_id's).
    bool translate_verbs_completions(ExportedCq& e) {
        ibv_wc wc[32];
        uint64_t ts[32];
        bool did = false;
        for (int n; (n = e.shared->pop(32, wc, ts)) > 0;) {
            did = true;
            for (int i = 0; i < n; ++i) {
                const ibv_wc& c = wc[i];
                if (c.opcode & IBV_WC_RECV) {
                    ExportedQp* owner = nullptr;
                    if (auto q = rq_by_qpn_.find(c.qp_num); q != rq_by_qpn_.end()) owner = q->second;
                    CqeRing::Responder r;
                    r.wqe_counter = static_cast<uint16_t>(c.wr_id);
                    r.opcode = c.opcode;
                    r.qpn = c.qp_num;
                    r.byte_cnt = c.byte_len;
                    r.imm_raw = c.imm_data;
                    r.with_imm = (c.wc_flags & IBV_WC_WITH_IMM) != 0;
                    r.ts_ns = ts[i];
                    r.status = c.status;
                    r.src_qpn = c.src_qp;
                    r.slid = c.slid;
                    r.sl = c.sl;
                    r.grh = (c.wc_flags & IBV_WC_GRH) != 0;
                    if (!owner) {
                        e.cq->responder(r);
                        continue;
                    }
                    owner->rq_held.emplace(c.wr_id, r);
                    for (auto h = owner->rq_held.begin(); h != owner->rq_held.end() && h->first == owner->rq_next;
                         h = owner->rq_held.erase(h), ++owner->rq_next)
                        e.cq->responder(h->second);
                } else {
                    e.cq->requester({.wqe_counter = static_cast<uint16_t>(c.wr_id),
                                     .qpn = c.qp_num,
                                     .byte_cnt = c.byte_len,
                                     .ts_ns = ts[i],
                                     .status = c.status,
                                     .vendor_err = c.vendor_err});
                }
            }
        }
        return did;
    }

    // The arm doorbell the driver wrote into the CQ's UAR page (consumed, as a NIC consumes the MMIO write), and
    // the completion event once a CQE lies past the consumer index it armed at.
    bool handle_arm(ExportedCq& e) {
        if (!e.has_channel) return false;
        auto* db = reinterpret_cast<uint64_t*>(static_cast<char*>(e.uar->p) + kCqArmDoorbellOffset);
        if (const uint64_t word = __atomic_exchange_n(db, uint64_t{0}, __ATOMIC_ACQ_REL)) {
            const uint32_t sn_ci_cmd = static_cast<uint32_t>(__builtin_bswap64(word) >> 32);
            e.armed = true;
            e.arm_ci = sn_ci_cmd & 0xffffff;
            (void)kCqArmSolicitedCmd;  // every CQE ends a solicited-only arm too: at worst a spurious wake-up
        }
        if (!e.armed || (static_cast<uint32_t>(e.cq->produced()) & 0xffffff) == e.arm_ci) return false;
        e.armed = false;
        e.shared->armed.store(1, std::memory_order_release);
        e.rt->completed_into(e.shared, true);
        return true;
    }

    // ---- the executor: what a ConnectX does when a doorbell rings, for every directly driven QP
    void start_executor_locked() {
        if (running_) return;
        running_ = true;
        executor_ = std::thread([this] { run(); });
        // Stopped before the runtime's own exit handler (registered earlier, so run later) tears the fabric down.
        static bool registered = false;
        if (!registered) {
            registered = true;
            std::atexit([] { instance().stop_executor(); });
        }
    }

    void stop_executor() {
        {
            std::lock_guard lk(mu_);
            running_ = false;
        }
        if (executor_.joinable()) executor_.join();
    }

    void run() {
        pthread_setname_np(pthread_self(), "sfab-mlx5");
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        uint64_t idle_since = now_ns();
        for (;;) {
            bool did = false;
            std::vector<DirectQp*> failed;
            {
                std::lock_guard lk(mu_);
                if (!running_) return;
                const uint64_t now = now_ns();
                for (auto& [srq, e] : exported_srqs_) did |= e->mirror->pump();
                for (auto& [qp, e] : exported_qps_)
                    if (e->rq) did |= e->rq->pump();
                for (DirectQp* q : direct_) {
                    did |= q->pump(now);
                    did |= q->pump_receives(now);
                    q->enter_error_if_failed();
                }
                for (auto& [cq, e] : exported_cqs_) {
                    did |= translate_verbs_completions(*e);
                    did |= handle_arm(*e);
                }
            }
            const uint64_t now = now_ns();
            if (did) {
                idle_since = now;
                continue;
            }
            // Doorbell latency vs. CPU: 20 us while recently busy, 200 us after 10 ms of quiet, 1 ms after 1 s.
            // (A thread that wakes from a sleep gets a CPU back sooner than one that yields it on a loaded machine.)
            const uint64_t quiet = now - idle_since;
            const long sleep_ns = quiet < 10'000'000 ? 20'000 : quiet < 1'000'000'000 ? 200'000 : 1'000'000;
            timespec ts{0, sleep_ns};
            nanosleep(&ts, nullptr);
        }
    }

    static inline std::atomic<bool> g_exists{false};
    std::mutex mu_;  // everything below; the executor holds it for a pass, create/destroy briefly
    uint32_t next_umem_id_ = 1, next_uar_page_ = 1, next_pdn_ = 1, next_cqn_ = 0x400, next_srqn_ = 0x100;
    std::map<const mlx5dv_devx_umem*, Umem*> umems_;
    std::map<const mlx5dv_devx_uar*, Uar*> uars_;
    std::map<const mlx5dv_devx_obj*, std::unique_ptr<DevxObject>> objects_;
    std::map<uint32_t, CqeRing*> devx_cqs_;
    std::map<uint32_t, uint64_t> pdns_;
    std::map<ibv_cq*, std::unique_ptr<ExportedCq>> exported_cqs_;
    std::map<ibv_qp*, std::unique_ptr<ExportedQp>> exported_qps_;
    std::map<ibv_srq*, std::unique_ptr<ExportedSrq>> exported_srqs_;
    std::map<ibv_ah*, std::unique_ptr<ExportedAh>> exported_ahs_;
    std::map<uint32_t, ExportedQp*> rq_by_qpn_;  // exported QPs with a receive queue of their own
    std::map<ibv_cq*, uint32_t> cqe_sizes_;  // CQs from mlx5dv_create_cq with 128-byte CQEs (or 64)
    std::vector<DirectQp*> direct_;
    void* uar_page_ = nullptr;
    bool running_ = false;
    std::thread executor_;
};

// ------------------------------------------------------------------------------------------ the C table
int owns_context(ibv_context* ctx) { return is_fabric_context(ctx) ? 1 : 0; }
int owns_object(const void* p) { return Frontend::instance().owns(p) ? 1 : 0; }
mlx5dv_devx_umem* umem_reg(ibv_context* ctx, void* addr, size_t size, uint32_t) {
    return Frontend::instance().umem_reg(ctx, addr, size);
}
int umem_dereg(mlx5dv_devx_umem* u) { return Frontend::instance().umem_dereg(u); }
mlx5dv_devx_uar* alloc_uar(ibv_context* ctx, uint32_t flags) {
    (void)flags;
    return Frontend::instance().alloc_uar(ctx);
}
void free_uar(mlx5dv_devx_uar* u) { Frontend::instance().free_uar(u); }
mlx5dv_devx_obj* obj_create(ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen) {
    return Frontend::instance().obj_create(ctx, in, inlen, out, outlen);
}
int obj_modify(mlx5dv_devx_obj* o, const void* in, size_t inlen, void* out, size_t outlen) {
    return Frontend::instance().obj_modify(o, in, inlen, out, outlen);
}
int obj_query(mlx5dv_devx_obj* o, const void* in, size_t inlen, void* out, size_t outlen) {
    return Frontend::instance().obj_query(o, in, inlen, out, outlen);
}
int obj_destroy(mlx5dv_devx_obj* o) { return Frontend::instance().obj_destroy(o); }
int query_eqn(ibv_context*, uint32_t, uint32_t* eqn) {
    if (eqn) *eqn = 0;  // one event queue; the fabric raises no CQ events for DevX CQs
    return 0;
}
int init_obj(mlx5dv_obj* obj, uint64_t type) { return obj ? Frontend::instance().init_obj(obj, type) : EINVAL; }
int query_device(ibv_context* ctx, mlx5dv_context* attrs) { return Frontend::instance().query_device(ctx, attrs); }
ibv_cq_ex* create_cq(ibv_context* ctx, ibv_cq_init_attr_ex* attr, mlx5dv_cq_init_attr* dv) {
    return Frontend::instance().create_cq(ctx, attr, dv);
}
ibv_qp* create_qp(ibv_context* ctx, ibv_qp_init_attr_ex* attr, mlx5dv_qp_init_attr* dv) {
    return Frontend::instance().create_qp(ctx, attr, dv);
}

int general_cmd(ibv_context*, const void* in, size_t inlen, void* out, size_t outlen) {
    return general_command(in, inlen, out, outlen);
}
mlx5dv_qp_ex* qp_ex_from_ibv_qp_ex(ibv_qp_ex* qp) { return provider::dv_qp_ex(qp); }
int owns_qp_ex(const mlx5dv_qp_ex* mqp) { return provider::is_fabric_dv_qp_ex(mqp) ? 1 : 0; }

constexpr softfabric_mlx5_ops kOps = {
    SOFTFABRIC_MLX5_ABI_VERSION, sizeof(softfabric_mlx5_ops), owns_context, owns_object, umem_reg, umem_dereg,
    alloc_uar, free_uar, obj_create, obj_modify, obj_query, obj_destroy, query_eqn, init_obj, query_device,
    create_cq, create_qp, qp_ex_from_ibv_qp_ex, owns_qp_ex, general_cmd, modify_verbs_qp,
};

}  // namespace

void forget_verbs_qp(ibv_qp* qp) {
    if (Frontend::exists()) Frontend::instance().forget_qp(qp);
}
void forget_verbs_cq(ibv_cq* cq) {
    if (Frontend::exists()) Frontend::instance().forget_cq(cq);
}
void reset_verbs_qp(ibv_qp* qp) {
    if (Frontend::exists()) Frontend::instance().reset_qp(qp);
}
void forget_verbs_srq(ibv_srq* srq) {
    if (Frontend::exists()) Frontend::instance().forget_srq(srq);
}
void forget_verbs_ah(ibv_ah* ah) {
    if (Frontend::exists()) Frontend::instance().forget_ah(ah);
}

}  // namespace softfabric::mlx5

extern "C" __attribute__((visibility("default"))) const softfabric_mlx5_ops* softfabric_mlx5_frontend(uint32_t abi) {
    return abi == SOFTFABRIC_MLX5_ABI_VERSION ? &softfabric::mlx5::kOps : nullptr;
}
