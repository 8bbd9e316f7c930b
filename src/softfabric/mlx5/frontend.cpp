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

#include "core/clock.h"
#include "gpumem/mlx5_layout.h"
#include "gpumem/prm_commands.h"
#include "mlx5/cqe_ring.h"
#include "mlx5/direct_qp.h"
#include "mlx5/frontend_abi.h"
#include "provider/objects.h"

namespace softfabric::mlx5 {
namespace {

namespace prm = sigmatrace::gpumem::prm;
namespace gm = sigmatrace::gpumem;

constexpr uint32_t kMaxSendSge = 16;
constexpr uint32_t kMaxInline = 256;
constexpr uint32_t kAutoReceiveDepth = 64;
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
    enum class Kind { Qp, Cq } kind;
    ibv_context* ctx = nullptr;
    std::unique_ptr<CqeRing> cq;        // Kind::Cq
    std::unique_ptr<DirectQp> qp;       // Kind::Qp
    uint64_t recv_cq_offset = 0, recv_cq_bytes = 0;
    Runtime* rt = nullptr;
    Uar* uar = nullptr;                 // Kind::Qp, DBR-less: the page its doorbells are read from
};

struct ExportedCq {
    std::unique_ptr<Allocation> ring, dbrec;
    std::unique_ptr<CqeRing> cq;
};
struct ExportedQp {
    std::unique_ptr<Allocation> ring, dbrec;
    std::unique_ptr<DirectQp> qp;
    ibv_cq* send_cq = nullptr;
};

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
            uint32_t access = IBV_ACCESS_LOCAL_WRITE;
            if (m.remote_read) access |= IBV_ACCESS_REMOTE_READ;
            if (m.remote_write) access |= IBV_ACCESS_REMOTE_WRITE;
            if (m.remote_atomic) access |= IBV_ACCESS_REMOTE_ATOMIC;
            qp.shared().access_flags.store(access, std::memory_order_release);
            qp.set_state(IBV_QPS_INIT);
            break;
        }
        case prm::cmd::INIT2RTR_QP: {
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

    int obj_query(mlx5dv_devx_obj*, const void* in, size_t inlen, void*, size_t) {
        say_once("DevX query command not emulated on fabric devices", prm::command_opcode(prm::Mailbox(in, inlen)));
        return EOPNOTSUPP;
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
        if (o->recv_cq_offset) o->rt->arena().release(o->recv_cq_offset, o->recv_cq_bytes);
        if (o->uar) {
            std::lock_guard lk(mu_);
            release_uar_user_locked(o->uar);
        }
        return 0;
    }

    // ---- init_obj
    int init_obj(mlx5dv_obj* obj, uint64_t type) {
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
        if (type & ~uint64_t{MLX5DV_OBJ_PD | MLX5DV_OBJ_CQ | MLX5DV_OBJ_QP}) return EOPNOTSUPP;
        return 0;
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
        }
    }
    void forget_cq(ibv_cq* cq) {
        std::unique_ptr<ExportedCq> e;
        std::lock_guard lk(mu_);
        auto it = exported_cqs_.find(cq);
        if (it == exported_cqs_.end()) return;
        for (auto& [q, eq] : exported_qps_)
            if (eq->send_cq == cq) eq->qp->set_send_cq(nullptr);
        e = std::move(it->second);
        exported_cqs_.erase(it);
    }

private:
    Frontend() { pthread_atfork(nullptr, nullptr, [] { instance().after_fork_child(); }); }

    void after_fork_child() {
        // The parent's queues are not the child's; its executor thread does not exist here (its handle is
        // meaningless: released without joining).
        new (&mu_) std::mutex();
        direct_.clear();
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
        const Umem* ring = c.cq_umem_valid ? umem_by_id(c.cq_umem_id) : nullptr;
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
        if (c.st != prm::st::RC || c.send_dbr_mode > prm::kSendDbrModeNoDbr) {
            std::fprintf(stderr, "softfabric mlx5: CREATE_QP: only RC QPs are emulated, with a doorbell record or "
                                 "DBR-less (st %u, send_dbr_mode %u)\n", c.st, c.send_dbr_mode);
            errno = EOPNOTSUPP;
            return nullptr;
        }
        const bool dbr_less = c.send_dbr_mode == prm::kSendDbrModeNoDbr;
        provider::ContextImpl& cimpl = provider::context_of(ctx);
        std::lock_guard lk(mu_);
        const Umem* wq = c.wq_umem_valid ? umem_by_id(c.wq_umem_id) : nullptr;
        const Umem* dbr = c.dbr_umem_valid ? umem_by_id(c.dbr_umem_id) : nullptr;
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

        engine::QueuePairConfig cfg;
        cfg.type = IBV_QPT_RC;
        cfg.nic = cimpl.nic;
        cfg.pd_id = pd->second;
        cfg.sq_depth = wqebbs;
        cfg.max_send_sge = kMaxSendSge;
        cfg.max_inline = kMaxInline;
        cfg.rq_depth = kAutoReceiveDepth;
        cfg.recv_cq_offset = o->recv_cq_offset;
        std::unique_ptr<engine::QueuePair> qp;
        try {
            qp = std::make_unique<engine::QueuePair>(rt, cfg);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "softfabric mlx5: CREATE_QP: %s\n", e.what());
            rt.arena().release(o->recv_cq_offset, o->recv_cq_bytes);
            errno = ENOMEM;
            return nullptr;
        }
        DirectQp::Geometry g;
        g.sq = reinterpret_cast<uint8_t*>(wq->addr + c.sq_umem_offset());
        g.wqebbs = wqebbs;
        if (dbr_less) {
            g.doorbell = reinterpret_cast<uint64_t*>(static_cast<char*>(uar->page) + kDbrLessDoorbellOffset);
            ++uar->users;
            o->uar = uar;
        } else {
            g.send_dbr = reinterpret_cast<uint32_t*>(dbr->addr + c.send_dbr_umem_offset());
        }
        engine::QueuePair& ref = *qp;
        o->qp = std::make_unique<DirectQp>(ref, std::move(qp), g);
        if (auto it = devx_cqs_.find(c.cqn_snd); it != devx_cqs_.end()) o->qp->set_send_cq(it->second);
        CqeRing* recv_ring = nullptr;
        if (auto it = devx_cqs_.find(c.cqn_rcv); it != devx_cqs_.end()) recv_ring = it->second;
        o->qp->enable_auto_receive(rcq, recv_ring);
        const uint32_t qpn = o->qp->qpn();
        direct_.push_back(o->qp.get());
        auto* handle = reinterpret_cast<mlx5dv_devx_obj*>(o.get());
        objects_[handle] = std::move(o);
        start_executor_locked();
        write_out(out, outlen, qpn);
        return handle;
    }

    int export_cq(ibv_cq* cq, mlx5dv_cq* out) {
        if (!cq || !out) return EINVAL;
        std::lock_guard lk(mu_);
        auto& e = exported_cqs_[cq];
        if (!e) {
            e = std::make_unique<ExportedCq>();
            const uint32_t ncqe = std::bit_ceil(static_cast<uint32_t>(std::max(cq->cqe, 1)) + 1);
            e->ring = std::make_unique<Allocation>(size_t{ncqe} * 64);
            e->dbrec = std::make_unique<Allocation>(64);
            if (!e->ring->p || !e->dbrec->p) {
                exported_cqs_.erase(cq);
                return ENOMEM;
            }
            e->cq = std::make_unique<CqeRing>(provider::cq_of(cq).shared->cqn, static_cast<uint8_t*>(e->ring->p), ncqe,
                                              64, false);
            e->cq->invalidate_all();
            for (auto& [q, eq] : exported_qps_)
                if (eq->send_cq == cq) eq->qp->set_send_cq(e->cq.get());
        }
        out->buf = e->cq->ring();
        out->dbrec = static_cast<__be32*>(e->dbrec->p);
        out->cqe_cnt = e->cq->ncqe();
        out->cqe_size = 64;
        out->cq_uar = nullptr;
        out->cqn = e->cq->cqn();
        out->comp_mask = 0;
        return 0;
    }

    int export_qp(ibv_qp* qp, mlx5dv_qp* out) {
        if (!qp || !out) return EINVAL;
        if (qp->qp_type != IBV_QPT_RC) return EOPNOTSUPP;
        provider::QpImpl& impl = provider::qp_of(qp);
        std::lock_guard lk(mu_);
        auto& e = exported_qps_[qp];
        if (!e) {
            e = std::make_unique<ExportedQp>();
            const uint32_t wqebbs = impl.engine.sq_depth();  // one engine WQE per WQEBB at most
            e->ring = std::make_unique<Allocation>(size_t{wqebbs} * 64);
            e->dbrec = std::make_unique<Allocation>(64);
            if (!e->ring->p || !e->dbrec->p) {
                exported_qps_.erase(qp);
                return ENOMEM;
            }
            DirectQp::Geometry g;
            g.sq = static_cast<uint8_t*>(e->ring->p);
            g.wqebbs = wqebbs;
            g.send_dbr = static_cast<uint32_t*>(e->dbrec->p) + 1;
            e->qp = std::make_unique<DirectQp>(impl.engine, nullptr, g);
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
        out->rq.buf = nullptr;
        out->rq.wqe_cnt = 0;
        out->rq.stride = 0;
        out->bf.reg = uar_page_ == MAP_FAILED ? nullptr : static_cast<char*>(uar_page_) + kUarRegisterOffset;
        out->bf.size = 0;  // a non-BlueFlame doorbell: 8-byte writes
        out->comp_mask = 0;
        return 0;
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
                for (DirectQp* q : direct_) {
                    did |= q->pump(now);
                    did |= q->pump_receives(now);
                    q->enter_error_if_failed();
                }
            }
            const uint64_t now = now_ns();
            if (did) {
                idle_since = now;
                continue;
            }
            // Doorbell latency vs. CPU: 20 us while recently busy, 200 us after 10 ms of quiet, 1 ms after 1 s.
            const uint64_t quiet = now - idle_since;
            const long sleep_ns = quiet < 10'000'000 ? 20'000 : quiet < 1'000'000'000 ? 200'000 : 1'000'000;
            timespec ts{0, sleep_ns};
            nanosleep(&ts, nullptr);
        }
    }

    static inline std::atomic<bool> g_exists{false};
    std::mutex mu_;  // everything below; the executor holds it for a pass, create/destroy briefly
    uint32_t next_umem_id_ = 1, next_uar_page_ = 1, next_pdn_ = 1, next_cqn_ = 0x400;
    std::map<const mlx5dv_devx_umem*, Umem*> umems_;
    std::map<const mlx5dv_devx_uar*, Uar*> uars_;
    std::map<const mlx5dv_devx_obj*, std::unique_ptr<DevxObject>> objects_;
    std::map<uint32_t, CqeRing*> devx_cqs_;
    std::map<uint32_t, uint64_t> pdns_;
    std::map<ibv_cq*, std::unique_ptr<ExportedCq>> exported_cqs_;
    std::map<ibv_qp*, std::unique_ptr<ExportedQp>> exported_qps_;
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

constexpr softfabric_mlx5_ops kOps = {
    SOFTFABRIC_MLX5_ABI_VERSION, sizeof(softfabric_mlx5_ops), owns_context, owns_object, umem_reg, umem_dereg,
    alloc_uar, free_uar, obj_create, obj_modify, obj_query, obj_destroy, query_eqn, init_obj,
};

}  // namespace

void forget_verbs_qp(ibv_qp* qp) {
    if (Frontend::exists()) Frontend::instance().forget_qp(qp);
}
void forget_verbs_cq(ibv_cq* cq) {
    if (Frontend::exists()) Frontend::instance().forget_cq(cq);
}

}  // namespace softfabric::mlx5

extern "C" __attribute__((visibility("default"))) const softfabric_mlx5_ops* softfabric_mlx5_frontend(uint32_t abi) {
    return abi == SOFTFABRIC_MLX5_ABI_VERSION ? &softfabric::mlx5::kOps : nullptr;
}
