#include "gpumem/setup_observer.h"

#include <cstdarg>
#include <cstdio>

#include <sigmatrace/opcodes.h>

#include "mlx5_format/mlx5_layout.h"
#include "mlx5_format/prm_commands.h"
#include "gpumem/watcher.h"
#include "provider/trace.h"

namespace sigmatrace::gpumem {
namespace {

// enum ibv_qp_type values (stable verbs ABI).
constexpr uint32_t kIbvQptRc = 2, kIbvQptUc = 3, kIbvQptUd = 4, kIbvQptXrcSend = 9, kIbvQptDriver = 0xff;

Transport transport_for_prm_st(uint32_t st) {
    switch (st) {
    case prm::st::UC: return Transport::Uc;
    case prm::st::UD: return Transport::Ud;
    case prm::st::XRC: return Transport::Xrc;
    case prm::st::DCI: return Transport::Dci;
    default: return Transport::Rc;
    }
}

Transport transport_for_ibv_qp_type(uint32_t t) {
    switch (t) {
    case kIbvQptUc: return Transport::Uc;
    case kIbvQptUd: return Transport::Ud;
    case kIbvQptXrcSend: return Transport::Xrc;
    case kIbvQptDriver: return Transport::Dci;  // mlx5dv_create_qp's DC initiators (DCTs export no send queue)
    default: return Transport::Rc;
    }
}

bool power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

uint32_t read_producer_index(uint64_t dbr_addr, MemType mem) {
    if (!dbr_addr || !host_readable(mem)) return 0;
    const uint32_t raw = __atomic_load_n(reinterpret_cast<const uint32_t*>(dbr_addr), __ATOMIC_ACQUIRE);
    return __builtin_bswap32(raw) & mlx5::kSendDbrMask;
}

}  // namespace

SetupObserver::SetupObserver(QueueRegistry& registry, MemoryClassifier& classifier, Watcher* watcher)
    : registry_(registry), classifier_(classifier), watcher_(watcher) {}

void SetupObserver::problem(const char* fmt, ...) {
    // A queue we cannot watch is worth saying, once per queue; a flood is not.
    constexpr uint64_t kMaxMessages = 20;
    const uint64_t n = ++problems_;
    if (n > kMaxMessages) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "SigmaTrace: %s%s\n", msg, n == kMaxMessages ? " (further such messages suppressed)" : "");
}

// ------------------------------------------------------------------------------------------ UMEM, UAR

void SetupObserver::umem_registered(uint64_t ctx, uint64_t handle, uint32_t umem_id, uint64_t addr, uint64_t size,
                                    int dmabuf_fd, int err) {
    UmemInfo u;
    u.handle = handle;
    u.ctx = ctx;
    u.id = umem_id;
    u.addr = addr;
    u.size = size;
    u.dmabuf_fd = dmabuf_fd;
    if (addr == 0 && dmabuf_fd >= 0) {
        // A dmabuf registration names no address; the export that produced the fd did.
        std::lock_guard lk(mu_);
        if (auto it = dmabufs_.find(dmabuf_fd); it != dmabufs_.end() && it->second.second >= size) {
            u.addr = it->second.first;
            u.mem = MemType::Device;
        } else {
            u.mem = MemType::Unknown;
        }
    } else {
        u.mem = classifier_.classify(addr);
    }
    if (ST_TRACE_ENABLED(gpu_umem_reg)) {
        st_gpu_umem_reg_rec rec{ctx, umem_id, addr, size, static_cast<uint32_t>(u.mem), dmabuf_fd, err};
        ST_TRACE_EMIT(gpu_umem_reg, &rec);
    }
    if (err == 0 && handle != 0) registry_.add_umem(u);
}

void SetupObserver::umem_deregistering(uint64_t handle) {
    const auto u = registry_.remove_umem(handle);
    if (!u || u->addr == 0) return;
    // Queues still living in it must stop being read before the memory can go away.
    for (uint64_t key : registry_.queues_in_range(u->ctx, u->addr, u->size)) retire(key);
}

void SetupObserver::uar_allocated(uint64_t ctx, uint64_t handle, uint32_t page_id, uint64_t reg_addr,
                                  uint64_t base_addr, uint32_t flags, int err) {
    if (ST_TRACE_ENABLED(gpu_uar_alloc)) {
        st_gpu_uar_alloc_rec rec{ctx, page_id, reg_addr, base_addr, flags, err};
        ST_TRACE_EMIT(gpu_uar_alloc, &rec);
    }
    if (err != 0 || handle == 0) return;
    UarInfo u;
    u.handle = handle;
    u.ctx = ctx;
    u.page_id = page_id;
    u.reg_addr = reg_addr;
    u.base_addr = base_addr;
    u.flags = flags;
    registry_.add_uar(u);
}

void SetupObserver::uar_freeing(uint64_t handle) { registry_.remove_uar(handle); }

// ------------------------------------------------------------------------------------------ DevX objects

void SetupObserver::devx_created(uint64_t ctx, uint64_t obj, const void* in, size_t inlen, const void* out,
                                 size_t outlen) {
    if (!obj || !in) return;
    const prm::Mailbox inbox(in, inlen);
    const uint16_t opcode = prm::command_opcode(inbox);
    if (opcode != prm::cmd::CREATE_QP && opcode != prm::cmd::CREATE_CQ && opcode != prm::cmd::CREATE_DCT) return;
    uint32_t number = 0;
    prm::ParseError err;
    if (!prm::parse_create_out(prm::Mailbox(out, outlen), number, err)) {
        problem("Cannot read the object number of a %s: %s (outlen=%zu); the object is not traced",
                prm::command_name(opcode), err.what, outlen);
        return;
    }
    {
        std::lock_guard lk(mu_);
        const ObjKind kind = opcode == prm::cmd::CREATE_QP ? ObjKind::Qp : opcode == prm::cmd::CREATE_CQ ? ObjKind::Cq : ObjKind::Dct;
        objs_[obj] = DevxObj{kind, ctx, number};
    }
    if (opcode == prm::cmd::CREATE_QP) created_qp(ctx, obj, in, inlen, number);
    else if (opcode == prm::cmd::CREATE_CQ) created_cq(ctx, obj, in, inlen, number);
    else created_dct(ctx, number);
}

// A DCT has nothing to watch (no send queue); the event tells the analysis which process a DCT number on this
// device belongs to, the peer of every DCI WQE that names it.
void SetupObserver::created_dct(uint64_t ctx, uint32_t dctn) {
    if (ST_TRACE_ENABLED(gpu_qp_create)) {
        st_gpu_qp_create_rec rec{ctx, dctn, kGpuQpStDct, 0, 0, 0, 0, 0, 0, 0, static_cast<uint32_t>(QueueSource::Devx)};
        ST_TRACE_EMIT(gpu_qp_create, &rec);
    }
}

void SetupObserver::created_qp(uint64_t ctx, uint64_t obj, const void* in, size_t inlen, uint32_t qpn) {
    prm::CreateQp c;
    prm::ParseError err;
    if (!prm::parse_create_qp(prm::Mailbox(in, inlen), c, err)) {
        problem("Cannot decode CREATE_QP of QP 0x%x: %s (need %zu bytes, have %zu); its WQEs are not traced", qpn,
                err.what, err.need, err.have);
        return;
    }
    SendQueue q;
    q.key = obj;
    q.ctx = ctx;
    q.qpn = qpn;
    q.st = c.st;
    q.transport = transport_for_prm_st(c.st);
    q.source = QueueSource::Devx;
    q.wqebbs = c.sq_wqebbs();
    q.dbr_less = c.send_dbr_mode == prm::kSendDbrModeNoDbr;
    q.cqn = c.cqn_snd;
    q.uar_page = c.uar_page;
    q.ring_mem = q.dbr_mem = MemType::Unknown;

    // The *_umem_valid bits are not read: the kernel's DevX sets them on every CREATE_QP/CREATE_CQ it passes on
    // (user space can only place queues in UMEMs), and libraries such as UCX leave them clear.
    const char* why = nullptr;
    if (auto wq = registry_.find_umem(ctx, c.wq_umem_id); !wq) why = "its work queue UMEM was not registered through us";
    else if (wq->addr == 0) why = "its work queue UMEM has no known address (dmabuf)";
    else if (c.sq_umem_offset() + uint64_t{q.wqebbs} * mlx5::kWqeBasicBlock > wq->size) why = "its send queue runs past its UMEM";
    else {
        q.ring_addr = wq->addr + c.sq_umem_offset();
        q.ring_mem = wq->mem;
    }
    if (!q.dbr_less) {
        if (auto dbr = registry_.find_umem(ctx, c.dbr_umem_id); !dbr || dbr->addr == 0)
            why = why ? why : "its doorbell record UMEM is unknown";
        else if (c.dbr_addr + mlx5::kDbrBytes > dbr->size) why = why ? why : "its doorbell record lies past its UMEM";
        else {
            q.dbr_addr = dbr->addr + c.send_dbr_umem_offset();
            q.dbr_mem = dbr->mem;
        }
    }
    if (q.wqebbs == 0) why = why ? why : "it has no send queue";
    if (ST_TRACE_ENABLED(gpu_qp_create)) {
        st_gpu_qp_create_rec rec{ctx, qpn, c.st, q.ring_addr, q.wqebbs, q.dbr_addr, q.dbr_less ? 1u : 0u, c.cqn_snd,
                                 c.uar_page, static_cast<uint32_t>(q.ring_mem), static_cast<uint32_t>(QueueSource::Devx)};
        ST_TRACE_EMIT(gpu_qp_create, &rec);
    }
    if (!why && (q.ring_mem == MemType::Unknown || (!q.dbr_less && q.dbr_mem == MemType::Unknown)))
        why = "its memory could not be classified (a GPU runtime is loaded that we cannot query)";
    if (why) {
        problem("QP 0x%x (DevX) is not watched: %s", qpn, why);
        return;
    }
    registry_.add_send_queue(q);
    if (watcher_) watcher_->wake();
}

void SetupObserver::created_cq(uint64_t ctx, uint64_t obj, const void* in, size_t inlen, uint32_t cqn) {
    prm::CreateCq c;
    prm::ParseError err;
    if (!prm::parse_create_cq(prm::Mailbox(in, inlen), c, err)) {
        problem("Cannot decode CREATE_CQ of CQ 0x%x: %s (need %zu bytes, have %zu); its CQEs are not traced", cqn,
                err.what, err.need, err.have);
        return;
    }
    CompletionQueue q;
    q.key = obj;
    q.ctx = ctx;
    q.cqn = cqn;
    q.source = QueueSource::Devx;
    q.ncqe = c.ncqe();
    q.cqe_size = c.cqe_bytes();
    q.collapsed = c.collapsed;
    q.compressed = c.compression;
    q.ring_mem = q.dbr_mem = MemType::Unknown;
    const char* why = nullptr;
    const uint64_t ring_bytes = q.collapsed ? q.cqe_size : uint64_t{q.ncqe} * q.cqe_size;
    if (auto ring = registry_.find_umem(ctx, c.cq_umem_id); !ring || ring->addr == 0) why = "its CQE ring UMEM is unknown";
    else if (c.cq_umem_offset + ring_bytes > ring->size) why = "its CQE ring runs past its UMEM";
    else {
        q.ring_addr = ring->addr + c.cq_umem_offset;
        q.ring_mem = ring->mem;
    }
    if (auto dbr = registry_.find_umem(ctx, c.dbr_umem_id); dbr && dbr->addr && c.dbr_addr + mlx5::kDbrBytes <= dbr->size) {
        q.dbr_addr = dbr->addr + c.dbr_addr;
        q.dbr_mem = dbr->mem;
    }
    if (ST_TRACE_ENABLED(gpu_cq_create)) {
        st_gpu_cq_create_rec rec{ctx, cqn, q.ring_addr, q.ncqe, q.cqe_size, q.dbr_addr, q.collapsed ? 1u : 0u,
                                 static_cast<uint32_t>(q.ring_mem), static_cast<uint32_t>(QueueSource::Devx)};
        ST_TRACE_EMIT(gpu_cq_create, &rec);
    }
    if (!why && q.ring_mem == MemType::Unknown) why = "its memory could not be classified";
    if (!why && q.compressed) why = "CQE compression is on (mini-CQEs are not decoded)";
    if (why) {
        problem("CQ 0x%x (DevX) is not watched: %s", cqn, why);
        return;
    }
    registry_.add_completion_queue(q);
    if (watcher_) watcher_->wake();
}

void SetupObserver::devx_modified(uint64_t obj, const void* in, size_t inlen, const void*, size_t, int ret,
                                  uint64_t verbs_ctx) {
    if (!in) return;
    prm::ModifyQp m;
    prm::ParseError err;
    if (!prm::parse_modify_qp(prm::Mailbox(in, inlen), m, err)) return;  // not a QP transition: nothing to learn
    uint64_t ctx = verbs_ctx;
    if (!ctx) {
        std::lock_guard lk(mu_);
        if (auto it = objs_.find(obj); it != objs_.end()) ctx = it->second.ctx;
    }
    auto sq = registry_.find_send_queue(obj);
    if (!ctx && sq) ctx = sq->ctx;  // a verbs QP driven through mlx5dv_devx_qp_modify
    if (ST_TRACE_ENABLED(gpu_qp_modify)) {
        st_gpu_qp_modify_rec rec{ctx, m.qpn, m.opcode, m.remote_qpn, m.rlid, m.rgid_prefix(), m.rgid_iid(), ret};
        ST_TRACE_EMIT(gpu_qp_modify, &rec);
    }
    // A QP ready to send is about to: sweep at the busy period from now (a first burst that fills the ring within
    // one idle period would otherwise lose its oldest WQEs).
    if (ret == 0 && m.opcode == prm::cmd::RTR2RTS_QP && sq && watcher_) watcher_->wake();
    if (ret == 0 && m.opcode == prm::cmd::QP_2RST && sq) {
        // A reset QP starts posting at WQE 0 again.
        ++sq->epoch;
        sq->initial_pi = 0;
        registry_.add_send_queue(*sq);
        if (watcher_) watcher_->sync();
    }
}

void SetupObserver::devx_queried(uint64_t obj, const void* in, size_t inlen, const void* out, size_t outlen, int ret,
                                 uint64_t verbs_ctx) {
    if (!in || !ST_TRACE_ENABLED(gpu_qp_query)) return;
    const prm::Mailbox cmd(in, inlen);
    if (prm::command_opcode(cmd) != prm::cmd::QUERY_QP) return;
    uint64_t ctx = verbs_ctx;
    uint32_t qpn = static_cast<uint32_t>(cmd.get_or(prm::f::obj_number, 0));
    {
        std::lock_guard lk(mu_);
        if (auto it = objs_.find(obj); it != objs_.end()) {
            if (!ctx) ctx = it->second.ctx;
            if (!qpn) qpn = it->second.number;
        }
    }
    prm::QueryQpOut q;
    prm::ParseError err;
    int status = ret;
    if (ret == 0 && (!out || !prm::parse_query_qp_out(prm::Mailbox(out, outlen), q, err))) status = EPROTO;
    st_gpu_qp_query_rec rec{ctx, qpn, q.state, q.hw_sq_wqebb_counter, q.sw_sq_wqebb_counter, status};
    ST_TRACE_EMIT(gpu_qp_query, &rec);
}

void SetupObserver::devx_destroying(uint64_t obj) {
    DevxObj o{};
    {
        std::lock_guard lk(mu_);
        auto it = objs_.find(obj);
        if (it == objs_.end()) return;
        o = it->second;
        objs_.erase(it);
    }
    // The final sweep first: what it decodes belongs before the destroy in the trace.
    retire(obj);
    if ((o.kind == ObjKind::Qp || o.kind == ObjKind::Dct) && ST_TRACE_ENABLED(gpu_qp_destroy)) {
        st_gpu_qp_destroy_rec rec{o.ctx, o.number};
        ST_TRACE_EMIT(gpu_qp_destroy, &rec);
    }
}

void SetupObserver::retire(uint64_t key) {
    const bool sq = registry_.remove_send_queue(key).has_value();
    const bool cq = registry_.remove_completion_queue(key).has_value();
    if ((sq || cq) && watcher_) watcher_->sync();  // final sweep before the caller frees the rings
}

// ------------------------------------------------------------------------------------------ verbs objects

void SetupObserver::verbs_qp_exported(const ExportedQp& e) {
    SendQueue q;
    q.key = e.qp;
    q.ctx = e.ctx;
    q.qpn = e.qpn;
    q.st = e.qp_type;
    q.transport = transport_for_ibv_qp_type(e.qp_type);
    q.source = QueueSource::InitObj;
    q.ring_addr = e.sq_buf;
    q.wqebbs = e.sq_wqe_cnt;
    q.ring_mem = classifier_.classify(e.sq_buf);
    q.dbr_addr = e.dbrec ? e.dbrec + mlx5::kSendDbrOffset : 0;
    q.dbr_mem = classifier_.classify(e.dbrec);
    if (auto cq = registry_.find_completion_queue(e.send_cq)) q.cqn = cq->cqn;
    q.doorbell_addr = e.bf_reg;
    q.initial_pi = read_producer_index(q.dbr_addr, q.dbr_mem);
    if (ST_TRACE_ENABLED(gpu_qp_create)) {
        st_gpu_qp_create_rec rec{e.ctx, e.qpn, e.qp_type, q.ring_addr, q.wqebbs, q.dbr_addr, 0, q.cqn, 0,
                                 static_cast<uint32_t>(q.ring_mem), static_cast<uint32_t>(QueueSource::InitObj)};
        ST_TRACE_EMIT(gpu_qp_create, &rec);
    }
    const char* why = nullptr;
    if (!e.sq_buf || e.sq_wqe_cnt == 0) why = "it exports no send queue";
    else if (!power_of_two(e.sq_wqe_cnt)) why = "its send queue size is not a power of two";
    else if (e.sq_stride != 0 && e.sq_stride != mlx5::kWqeBasicBlock) why = "its send queue stride is not 64 bytes";
    else if (!e.dbrec) why = "it exports no doorbell record";
    else if (q.ring_mem == MemType::Unknown || q.dbr_mem == MemType::Unknown) why = "its memory could not be classified";
    if (why) {
        if (e.sq_wqe_cnt != 0) problem("QP 0x%x (mlx5dv_init_obj) is not watched: %s", e.qpn, why);
        return;
    }
    registry_.add_send_queue(q);
    if (watcher_) watcher_->wake();
}

void SetupObserver::verbs_cq_exported(const ExportedCq& e) {
    CompletionQueue q;
    q.key = e.cq;
    q.ctx = e.ctx;
    q.cqn = e.cqn;
    q.source = QueueSource::InitObj;
    q.ring_addr = e.buf;
    q.ncqe = e.cqe_cnt;
    q.cqe_size = e.cqe_size;
    q.ring_mem = classifier_.classify(e.buf);
    q.dbr_addr = e.dbrec;
    q.dbr_mem = classifier_.classify(e.dbrec);
    if (ST_TRACE_ENABLED(gpu_cq_create)) {
        st_gpu_cq_create_rec rec{e.ctx, e.cqn, e.buf, e.cqe_cnt, e.cqe_size, e.dbrec, 0,
                                 static_cast<uint32_t>(q.ring_mem), static_cast<uint32_t>(QueueSource::InitObj)};
        ST_TRACE_EMIT(gpu_cq_create, &rec);
    }
    if (!e.buf || !power_of_two(e.cqe_cnt) || (e.cqe_size != 64 && e.cqe_size != 128) || q.ring_mem == MemType::Unknown) {
        problem("CQ 0x%x (mlx5dv_init_obj) is not watched: buf=%p cqe_cnt=%u cqe_size=%u mem=%s", e.cqn,
                reinterpret_cast<void*>(e.buf), e.cqe_cnt, e.cqe_size, mem_type_name(q.ring_mem));
        return;
    }
    registry_.add_completion_queue(q);
    if (watcher_) watcher_->wake();
}

void SetupObserver::verbs_object_destroying(uint64_t handle) {
    const auto sq = registry_.find_send_queue(handle);
    // The final sweep first: what it decodes belongs before the destroy in the trace.
    retire(handle);
    if (sq && sq->source == QueueSource::InitObj && ST_TRACE_ENABLED(gpu_qp_destroy)) {
        st_gpu_qp_destroy_rec rec{sq->ctx, sq->qpn};
        ST_TRACE_EMIT(gpu_qp_destroy, &rec);
    }
}

// ------------------------------------------------------------------------------------------ GPU mappings

void SetupObserver::host_registered(uint64_t addr, uint64_t size, bool io_memory, int err) {
    if (err != 0 || addr == 0) return;
    classifier_.note_host_registration(addr, size);
    if (io_memory) registry_.mark_uar_gpu_mapped(addr, size);
}

void SetupObserver::host_unregistered(uint64_t addr) { classifier_.forget_host_registration(addr); }

void SetupObserver::dmabuf_exported(int fd, uint64_t addr, uint64_t size) {
    if (fd < 0) return;
    std::lock_guard lk(mu_);
    dmabufs_[fd] = {addr, size};
}

}  // namespace sigmatrace::gpumem
