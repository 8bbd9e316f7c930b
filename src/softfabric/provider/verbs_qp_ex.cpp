// The ibv_wr_* API (ibv_qp_ex function pointers): ibv_wr_start takes the send-queue lock, each builder
// reserves a WQE and the setters fill it, ibv_wr_complete schedules them all (or reports the first error and
// posts none), ibv_wr_abort drops them.
#include <cerrno>
#include <cstring>

#include "core/clock.h"
#include "provider/objects.h"

namespace softfabric::provider {
namespace {

constexpr uint32_t kNoQpn = 0xffffff;  // no fabric QP has this number

QpImpl& impl(ibv_qp_ex* qpx) { return qp_of(qpx); }

void fail(QpImpl& q, int err) {
    if (!q.wr_error) q.wr_error = err;
    q.wr_current = nullptr;
}

// Starts a new WQE for a builder call; nullptr (and the batch error set) when it cannot.
engine::Wqe* begin(ibv_qp_ex* qpx, engine::Opcode op, uint64_t flag_needed) {
    QpImpl& q = impl(qpx);
    if (q.wr_error) return nullptr;
    if (q.send_ops_flags && !(q.send_ops_flags & flag_needed)) {
        fail(q, EOPNOTSUPP);
        return nullptr;
    }
    ibv_qp_type type = q.engine.type();
    const bool dci = q.dc_role == DcRole::Initiator;  // its destination comes with each WQE (mlx5dv_wr_set_dc_addr)
    bool rdma = op != engine::Opcode::Send && op != engine::Opcode::SendWithImm;
    bool rc_only = op == engine::Opcode::RdmaRead || op == engine::Opcode::AtomicCmpSwp ||
                   op == engine::Opcode::AtomicFetchAdd;
    if (q.dc_role == DcRole::Target || (rdma && type == IBV_QPT_UD) || (rc_only && type != IBV_QPT_RC && !dci) ||
        (type != IBV_QPT_UD && !dci && !q.dest_known)) {
        fail(q, EINVAL);
        return nullptr;
    }
    engine::Wqe* w = q.engine.reserve();
    if (!w) {
        fail(q, ENOMEM);
        return nullptr;
    }
    if (dci) {  // until mlx5dv_wr_set_dc_addr names one: nowhere, retried to exhaustion as by a NIC
        w->ud = engine::UdDestination{};
        w->ud.nic = q.engine.nic();
        w->ud.qpn = kNoQpn;
    }
    w->id = qpx->wr_id;
    w->opcode = op;
    if (qpx->wr_flags & IBV_SEND_SIGNALED) w->flags |= engine::kSignaled;
    if (qpx->wr_flags & IBV_SEND_SOLICITED) w->flags |= engine::kSolicited;
    if (qpx->wr_flags & IBV_SEND_FENCE) w->flags |= engine::kFence;
    q.wr_current = w;
    return w;
}

void wr_start(ibv_qp_ex* qpx) {
    QpImpl& q = impl(qpx);
    q.engine.sq_lock().lock();
    q.wr_error = 0;
    q.wr_current = nullptr;
    ibv_qp_state s = q.engine.state();
    if (s != IBV_QPS_RTS && s != IBV_QPS_ERR) q.wr_error = EINVAL;
    uint64_t now = now_ns();
    q.engine.note_app_progress(now);
    q.engine.progress(now);
}

int wr_complete(ibv_qp_ex* qpx) {
    QpImpl& q = impl(qpx);
    int err = q.wr_error;
    if (err) {
        q.engine.abort();
    } else {
        uint64_t now = now_ns();
        q.engine.commit(now);
        q.engine.progress(now);
    }
    q.wr_current = nullptr;
    q.engine.sq_lock().unlock();
    return err;
}

void wr_abort(ibv_qp_ex* qpx) {
    QpImpl& q = impl(qpx);
    q.engine.abort();
    q.wr_current = nullptr;
    q.engine.sq_lock().unlock();
}

void wr_send(ibv_qp_ex* qpx) { begin(qpx, engine::Opcode::Send, IBV_QP_EX_WITH_SEND); }

void wr_send_imm(ibv_qp_ex* qpx, __be32 imm) {
    if (engine::Wqe* w = begin(qpx, engine::Opcode::SendWithImm, IBV_QP_EX_WITH_SEND_WITH_IMM)) w->imm_data = imm;
}

void wr_rdma_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t raddr) {
    if (engine::Wqe* w = begin(qpx, engine::Opcode::RdmaWrite, IBV_QP_EX_WITH_RDMA_WRITE)) {
        w->rkey = rkey;
        w->remote_addr = raddr;
    }
}

void wr_rdma_write_imm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t raddr, __be32 imm) {
    if (engine::Wqe* w = begin(qpx, engine::Opcode::RdmaWriteWithImm, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)) {
        w->rkey = rkey;
        w->remote_addr = raddr;
        w->imm_data = imm;
    }
}

void wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t raddr) {
    if (engine::Wqe* w = begin(qpx, engine::Opcode::RdmaRead, IBV_QP_EX_WITH_RDMA_READ)) {
        w->rkey = rkey;
        w->remote_addr = raddr;
    }
}

void wr_atomic_cmp_swp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t raddr, uint64_t compare, uint64_t swap) {
    if (engine::Wqe* w = begin(qpx, engine::Opcode::AtomicCmpSwp, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP)) {
        w->rkey = rkey;
        w->remote_addr = raddr;
        w->compare_add = compare;
        w->swap = swap;
    }
}

void wr_atomic_fetch_add(ibv_qp_ex* qpx, uint32_t rkey, uint64_t raddr, uint64_t add) {
    if (engine::Wqe* w = begin(qpx, engine::Opcode::AtomicFetchAdd, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)) {
        w->rkey = rkey;
        w->remote_addr = raddr;
        w->compare_add = add;
    }
}

void wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
    QpImpl& q = impl(qpx);
    engine::Wqe* w = q.wr_current;
    if (!w) return;
    bool atomic = w->opcode == engine::Opcode::AtomicCmpSwp || w->opcode == engine::Opcode::AtomicFetchAdd;
    if (atomic && length != 8) return fail(q, EINVAL);
    w->num_sge = 1;
    w->sges()[0] = {addr, length, lkey};
}

void wr_set_sge_list(ibv_qp_ex* qpx, size_t n, const ibv_sge* list) {
    QpImpl& q = impl(qpx);
    engine::Wqe* w = q.wr_current;
    if (!w) return;
    if (n > q.engine.config().max_send_sge) return fail(q, EINVAL);
    w->num_sge = static_cast<uint32_t>(n);
    for (size_t i = 0; i < n; ++i) w->sges()[i] = {list[i].addr, list[i].length, list[i].lkey};
}

void wr_set_inline_data_list(ibv_qp_ex* qpx, size_t n, const ibv_data_buf* bufs) {
    QpImpl& q = impl(qpx);
    engine::Wqe* w = q.wr_current;
    if (!w) return;
    const auto& cfg = q.engine.config();
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) total += bufs[i].length;
    if (total > cfg.max_inline) return fail(q, EINVAL);
    unsigned char* dst = w->inline_data(cfg.max_send_sge);
    for (size_t i = 0; i < n; ++i) {
        std::memcpy(dst, bufs[i].addr, bufs[i].length);
        dst += bufs[i].length;
    }
    w->flags |= engine::kInline;
    w->inline_length = static_cast<uint32_t>(total);
}

void wr_set_inline_data(ibv_qp_ex* qpx, void* addr, size_t length) {
    ibv_data_buf buf{addr, length};
    wr_set_inline_data_list(qpx, 1, &buf);
}

void wr_set_ud_addr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
    QpImpl& q = impl(qpx);
    engine::Wqe* w = q.wr_current;
    if (!w) return;
    auto* a = reinterpret_cast<AhObject*>(ah);
    if (!a || !a->valid) return fail(q, EINVAL);
    w->ud = a->dest;
    w->ud.qpn = remote_qpn;
    w->ud.qkey = remote_qkey;
}

// Operations the fabric does not implement: the batch fails at ibv_wr_complete.
void wr_unsupported(ibv_qp_ex* qpx) { fail(impl(qpx), EOPNOTSUPP); }
void wr_bind_mw(ibv_qp_ex* qpx, ibv_mw*, uint32_t, const ibv_mw_bind_info*) { wr_unsupported(qpx); }
void wr_local_inv(ibv_qp_ex* qpx, uint32_t) { wr_unsupported(qpx); }
void wr_send_inv(ibv_qp_ex* qpx, uint32_t) { wr_unsupported(qpx); }
void wr_send_tso(ibv_qp_ex* qpx, void*, uint16_t, uint16_t) { wr_unsupported(qpx); }
void wr_set_xrc_srqn(ibv_qp_ex* qpx, uint32_t) { wr_unsupported(qpx); }
void wr_atomic_write(ibv_qp_ex* qpx, uint32_t, uint64_t, const void*) { wr_unsupported(qpx); }

// ---- mlx5dv_qp_ex: mlx5's setters on the same batch.
QpImpl& impl(mlx5dv_qp_ex* mqp) { return *reinterpret_cast<QpImpl::DvQpEx*>(mqp)->impl; }

// A DCI's destination: the AH's NIC, the DCT's number and the low 32 bits of its access key (what a DCT keeps
// of the key, create_dc_qp). On any other QP, and for an AH that names no fabric NIC: EINVAL at ibv_wr_complete.
void wr_set_dc_addr(mlx5dv_qp_ex* mqp, ibv_ah* ah, uint32_t remote_dctn, uint64_t remote_dc_key) {
    QpImpl& q = impl(mqp);
    engine::Wqe* w = q.wr_current;
    if (!w) return;
    auto* a = reinterpret_cast<AhObject*>(ah);
    if (q.dc_role != DcRole::Initiator || !a || !a->valid) return fail(q, EINVAL);
    w->ud = a->dest;
    w->ud.qpn = remote_dctn;
    w->ud.qkey = static_cast<uint32_t>(remote_dc_key);
}

// mlx5 features the fabric does not emulate (indirect mkeys, signature, crypto, DCI streams, raw WQEs on the
// verbs path, DMA memcpy): the batch fails with EOPNOTSUPP at ibv_wr_complete, as on a device without them.
void mlx5_unsupported(mlx5dv_qp_ex* mqp) { fail(impl(mqp), EOPNOTSUPP); }
void wr_mr_interleaved(mlx5dv_qp_ex* m, mlx5dv_mkey*, uint32_t, uint32_t, uint16_t, mlx5dv_mr_interleaved*) {
    mlx5_unsupported(m);
}
void wr_mr_list(mlx5dv_qp_ex* m, mlx5dv_mkey*, uint32_t, uint16_t, ibv_sge*) { mlx5_unsupported(m); }
void wr_mkey_configure(mlx5dv_qp_ex* m, mlx5dv_mkey*, uint8_t, mlx5dv_mkey_conf_attr*) { mlx5_unsupported(m); }
void wr_set_mkey_access_flags(mlx5dv_qp_ex* m, uint32_t) { mlx5_unsupported(m); }
void wr_set_mkey_layout_list(mlx5dv_qp_ex* m, uint16_t, const ibv_sge*) { mlx5_unsupported(m); }
void wr_set_mkey_layout_interleaved(mlx5dv_qp_ex* m, uint32_t, uint16_t, const mlx5dv_mr_interleaved*) {
    mlx5_unsupported(m);
}
void wr_set_mkey_sig_block(mlx5dv_qp_ex* m, const mlx5dv_sig_block_attr*) { mlx5_unsupported(m); }
void wr_raw_wqe(mlx5dv_qp_ex* m, const void*) { mlx5_unsupported(m); }
void wr_set_dc_addr_stream(mlx5dv_qp_ex* m, ibv_ah*, uint32_t, uint64_t, uint16_t) { mlx5_unsupported(m); }
void wr_memcpy(mlx5dv_qp_ex* m, uint32_t, uint64_t, uint32_t, uint64_t, size_t) { mlx5_unsupported(m); }
void wr_set_mkey_crypto(mlx5dv_qp_ex* m, const mlx5dv_crypto_attr*) { mlx5_unsupported(m); }

}  // namespace

mlx5dv_qp_ex* dv_qp_ex(ibv_qp_ex* qpx) { return &impl(qpx).dv.pub; }

bool is_fabric_dv_qp_ex(const mlx5dv_qp_ex* mqp) { return mqp && mqp->wr_set_dc_addr == wr_set_dc_addr; }

void install_qp_ex_ops(ibv_qp_ex* qpx) {
    qpx->wr_start = wr_start;
    qpx->wr_complete = wr_complete;
    qpx->wr_abort = wr_abort;
    qpx->wr_send = wr_send;
    qpx->wr_send_imm = wr_send_imm;
    qpx->wr_rdma_write = wr_rdma_write;
    qpx->wr_rdma_write_imm = wr_rdma_write_imm;
    qpx->wr_rdma_read = wr_rdma_read;
    qpx->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    qpx->wr_atomic_fetch_add = wr_atomic_fetch_add;
    qpx->wr_set_sge = wr_set_sge;
    qpx->wr_set_sge_list = wr_set_sge_list;
    qpx->wr_set_inline_data = wr_set_inline_data;
    qpx->wr_set_inline_data_list = wr_set_inline_data_list;
    qpx->wr_set_ud_addr = wr_set_ud_addr;
    qpx->wr_bind_mw = wr_bind_mw;
    qpx->wr_local_inv = wr_local_inv;
    qpx->wr_send_inv = wr_send_inv;
    qpx->wr_send_tso = wr_send_tso;
    qpx->wr_set_xrc_srqn = wr_set_xrc_srqn;
    qpx->wr_atomic_write = wr_atomic_write;

    QpImpl& q = impl(qpx);
    mlx5dv_qp_ex& d = q.dv.pub;
    d.comp_mask = 0;
    d.wr_set_dc_addr = wr_set_dc_addr;
    d.wr_mr_interleaved = wr_mr_interleaved;
    d.wr_mr_list = wr_mr_list;
    d.wr_mkey_configure = wr_mkey_configure;
    d.wr_set_mkey_access_flags = wr_set_mkey_access_flags;
    d.wr_set_mkey_layout_list = wr_set_mkey_layout_list;
    d.wr_set_mkey_layout_interleaved = wr_set_mkey_layout_interleaved;
    d.wr_set_mkey_sig_block = wr_set_mkey_sig_block;
    d.wr_raw_wqe = wr_raw_wqe;
    d.wr_set_dc_addr_stream = wr_set_dc_addr_stream;
    d.wr_memcpy = wr_memcpy;
    d.wr_set_mkey_crypto = wr_set_mkey_crypto;
    q.dv.impl = &q;
}

}  // namespace softfabric::provider
