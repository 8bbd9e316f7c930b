#include "gpu_common/ibgda_setup.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "mlx5_format/mlx5_layout.h"
#include "mlx5_format/prm_commands.h"

namespace sigmatrace::workloads {
namespace {

namespace prm = sigmatrace::gpumem::prm;
namespace f = sigmatrace::gpumem::prm::f;
namespace mlx5 = sigmatrace::gpumem::mlx5;

constexpr size_t kGpuPage = 64 * 1024;  // IBGDA_GPAGE_SIZE: NVSHMEM aligns NIC buffers to 64 KiB
constexpr size_t kCmdBytes = 0x110;     // create_qp_in without pas

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

uint8_t* nic_alloc(size_t bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, kGpuPage, bytes) != 0) return nullptr;
    std::memset(p, 0, bytes);
    return static_cast<uint8_t*>(p);
}

std::string errno_text(const char* what) { return std::string(what) + " failed: " + std::strerror(errno); }

void set(std::vector<uint8_t>& cmd, prm::Field fld, uint64_t v) { prm::set_field(cmd.data(), cmd.size(), fld, v); }

// A state transition of the QP `qp` numbered `qpn` (DevX MODIFY): `opcode` with the qpc fields given.
bool transition(mlx5dv_devx_obj* qp, uint32_t qpn, uint16_t opcode,
                std::initializer_list<std::pair<prm::Field, uint64_t>> qpc, std::string& error) {
    std::vector<uint8_t> in(kCmdBytes, 0);
    set(in, f::opcode, opcode);
    set(in, f::obj_number, qpn);
    for (const auto& [field, value] : qpc) set(in, field, value);
    uint8_t out[16] = {};
    if (int err = mlx5dv_devx_obj_modify(qp, in.data(), in.size(), out, sizeof out)) {
        errno = err;
        error = errno_text(prm::command_name(opcode));
        return false;
    }
    return true;
}

// RTR2RTS with NVSHMEM's retry policy.
bool to_rts(mlx5dv_devx_obj* qp, uint32_t qpn, std::string& error) {
    return transition(qp, qpn, prm::cmd::RTR2RTS_QP,
                      {{f::qpc_path_ack_timeout, 14}, {f::qpc_retry_count, 7}, {f::qpc_rnr_retry, 7}}, error);
}

}  // namespace

IbgdaTransport::~IbgdaTransport() {
    for (auto* o : qp_objs_)
        if (o) mlx5dv_devx_obj_destroy(o);
    if (dct_obj_) mlx5dv_devx_obj_destroy(dct_obj_);
    for (auto* o : cq_objs_)
        if (o) mlx5dv_devx_obj_destroy(o);
    if (recv_cq_obj_) mlx5dv_devx_obj_destroy(recv_cq_obj_);
    for (auto* u : qp_uars_) mlx5dv_devx_free_uar(u);
    if (uar_) mlx5dv_devx_free_uar(uar_);
    if (wq_umem_) mlx5dv_devx_umem_dereg(wq_umem_);
    if (heap_mr_) ibv_dereg_mr(heap_mr_);
    if (pd_) ibv_dealloc_pd(pd_);
    if (ctx_) ibv_close_device(ctx_);
    std::free(wq_buf_);
    if (!flavor_.one_umem) {   // one_umem: the doorbell records and CQs are inside the send rings' UMEM
        if (dbr_umem_) mlx5dv_devx_umem_dereg(dbr_umem_);
        if (cq_umem_) mlx5dv_devx_umem_dereg(cq_umem_);
        std::free(dbr_buf_);
        std::free(cq_buf_);
    }
    std::free(heap_);
}

size_t IbgdaTransport::recv_cq_offset() const {
    return round_up(queues() * send_cq_bytes(), 4096);
}

bool IbgdaTransport::open(const std::string& device, int npes, int my_pe, uint32_t log_sq_size, size_t heap_bytes,
                          std::string& error, const QpFlavor& flavor) {
    flavor_ = flavor;
    npes_ = npes;
    me_ = my_pe;
    log_sq_size_ = log_sq_size;
    if (npes > PeInfo::kMaxPes) {
        error = "more than " + std::to_string(PeInfo::kMaxPes) + " PEs";
        return false;
    }
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n && !ctx_; ++i)
        if (device == ibv_get_device_name(list[i])) ctx_ = ibv_open_device(list[i]);
    if (list) ibv_free_device_list(list);
    if (!ctx_) {
        error = "Cannot open RDMA device " + device + " (run under `sigmatrace fabric`, or name a device)";
        return false;
    }
    ibv_port_attr port{};
    if (ibv_query_port(ctx_, 1, &port)) return error = errno_text("ibv_query_port"), false;
    lid_ = port.lid;
    pd_ = ibv_alloc_pd(ctx_);
    if (!pd_) return error = errno_text("ibv_alloc_pd"), false;
    // NVSHMEM ibgda_create_qp_shared_objects: the PD's number for the QP contexts.
    mlx5dv_pd dvpd{};
    mlx5dv_obj obj{};
    obj.pd.in = pd_;
    obj.pd.out = &dvpd;
    if (int err = mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD)) {
        errno = err;
        return error = errno_text("mlx5dv_init_obj(PD)"), false;
    }
    pdn_ = dvpd.pdn;

    heap_bytes_ = heap_bytes;
    heap_ = nic_alloc(round_up(heap_bytes, kGpuPage));
    heap_mr_ = heap_ ? ibv_reg_mr(pd_, heap_, heap_bytes,
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                      IBV_ACCESS_REMOTE_ATOMIC)
                     : nullptr;
    if (!heap_mr_) return error = errno_text("heap ibv_reg_mr"), false;

    // ibgda_nic_control_alloc + ibgda_mobject_nic_map: one UMEM per kind of buffer.
    wq_bytes_ = round_up(queues() * wq_stride(), kGpuPage);
    dbr_bytes_ = kGpuPage;
    cq_bytes_ = round_up(recv_cq_offset() + kRecvCqes * 64, kGpuPage);
    if (flavor_.one_umem) {
        // UCX GDAKI (gdaki.c): one buffer, registered once, the queues at offsets in it: rings, CQs, records.
        cq_base_ = wq_bytes_;
        dbr_base_ = wq_bytes_ + cq_bytes_;
        wq_buf_ = nic_alloc(dbr_base_ + dbr_bytes_);
        if (!wq_buf_) return error = "Cannot allocate NIC buffers", false;
        cq_buf_ = wq_buf_ + cq_base_;
        dbr_buf_ = wq_buf_ + dbr_base_;
        std::memset(cq_buf_, 0xff, cq_bytes_);
        wq_umem_ = mlx5dv_devx_umem_reg(ctx_, wq_buf_, dbr_base_ + dbr_bytes_, IBV_ACCESS_LOCAL_WRITE);
        if (!wq_umem_) return error = errno_text("mlx5dv_devx_umem_reg"), false;
        dbr_umem_ = cq_umem_ = wq_umem_;
        wq_bytes_ = dbr_base_ + dbr_bytes_;
    } else {
        wq_buf_ = nic_alloc(wq_bytes_);
        dbr_buf_ = nic_alloc(dbr_bytes_);
        cq_buf_ = nic_alloc(cq_bytes_);
        if (!wq_buf_ || !dbr_buf_ || !cq_buf_) return error = "Cannot allocate NIC buffers", false;
        std::memset(cq_buf_, 0xff, cq_bytes_);  // ibgda_create_cq: cudaMemset(0xff), every CQE invalid
        wq_umem_ = mlx5dv_devx_umem_reg(ctx_, wq_buf_, wq_bytes_, IBV_ACCESS_LOCAL_WRITE);
        dbr_umem_ = mlx5dv_devx_umem_reg(ctx_, dbr_buf_, dbr_bytes_, IBV_ACCESS_LOCAL_WRITE);
        cq_umem_ = mlx5dv_devx_umem_reg(ctx_, cq_buf_, cq_bytes_, IBV_ACCESS_LOCAL_WRITE);
        if (!wq_umem_ || !dbr_umem_ || !cq_umem_) return error = errno_text("mlx5dv_devx_umem_reg"), false;
    }
    // ibgda_alloc_and_map_qp_uar: a non-cached dedicated doorbell page.
    uar_ = mlx5dv_devx_alloc_uar(ctx_, flavor_.blueflame ? MLX5DV_UAR_ALLOC_TYPE_BF : MLX5DV_UAR_ALLOC_TYPE_NC);
    if (!uar_) return error = errno_text("mlx5dv_devx_alloc_uar"), false;
    return true;
}

bool IbgdaTransport::create_qps(std::string& error) {
    uint32_t eqn = 0;
    if (int err = mlx5dv_devx_query_eqn(ctx_, 0, &eqn)) {
        errno = err;
        return error = errno_text("mlx5dv_devx_query_eqn"), false;
    }
    // collapsed: one slot rewritten in place (cc); overrun: the NIC may write over CQEs nobody consumed (oi).
    auto create_cq = [&](uint64_t cq_offset, uint64_t dbr_offset, bool collapsed, bool overrun, uint32_t log_size,
                         uint32_t& cqn) -> mlx5dv_devx_obj* {
        std::vector<uint8_t> in(kCmdBytes, 0);
        uint8_t out[16] = {};
        set(in, f::opcode, prm::cmd::CREATE_CQ);
        set(in, f::cq_umem_id, cq_umem_->umem_id);
        set(in, f::cq_umem_valid, 1);
        set(in, f::cq_umem_offset, cq_base_ + cq_offset);
        set(in, f::cqc_dbr_umem_valid, 1);
        set(in, f::cqc_cqe_sz, 0);  // 64-byte CQEs
        set(in, f::cqc_cc, collapsed ? 1 : 0);
        set(in, f::cqc_oi, overrun ? 1 : 0);
        set(in, f::cqc_dbr_umem_id, dbr_umem_->umem_id);
        set(in, f::cqc_log_cq_size, log_size);
        set(in, f::cqc_uar_page, uar_->page_id);
        set(in, f::cqc_c_eqn, eqn);
        set(in, f::cqc_dbr_addr, dbr_base_ + dbr_offset);
        mlx5dv_devx_obj* o = mlx5dv_devx_obj_create(ctx_, in.data(), in.size(), out, sizeof out);
        cqn = static_cast<uint32_t>(prm::Mailbox(out, sizeof out).get_or(f::obj_number, 0));
        return o;
    };
    // One normal CQ for the responder completions (RDMA WRITE with immediate), like NVSHMEM's recv CQ.
    uint32_t recv_cqn = 0;
    const size_t nq = queues();
    recv_cq_obj_ = create_cq(recv_cq_offset(), size_t{2} * nq * 8, false, false, 10, recv_cqn);
    if (!recv_cq_obj_) return error = errno_text("CREATE_CQ (receive)"), false;
    if (flavor_.dcis) {
        // ibgda_create_dct_shared_objects: one DCT, its responder completions on the receive CQ.
        std::vector<uint8_t> in(kCmdBytes, 0);
        uint8_t out[16] = {};
        set(in, f::opcode, prm::cmd::CREATE_DCT);
        set(in, f::dctc_pd, pdn_);
        set(in, f::dctc_cqn, recv_cqn);
        set(in, f::dctc_rre, 1);
        set(in, f::dctc_rwe, 1);
        set(in, f::dctc_rae, 1);
        set(in, f::dctc_dc_access_key, kDcAccessKey);
        set(in, f::dctc_mtu, 5);
        set(in, f::dctc_port, 1);
        dct_obj_ = mlx5dv_devx_obj_create(ctx_, in.data(), in.size(), out, sizeof out);
        if (!dct_obj_) return error = errno_text("CREATE_DCT"), false;
        dctn_ = static_cast<uint32_t>(prm::Mailbox(out, sizeof out).get_or(f::obj_number, 0));
    }

    const uint32_t nwqes = 1u << log_sq_size_;
    for (size_t pe = 0; pe < nq; ++pe) {
        uint32_t cqn = 0;
        const uint64_t cq_offset = uint64_t{pe} * send_cq_bytes();
        const uint64_t cq_dbr = uint64_t{nq + pe} * 8;
        mlx5dv_devx_obj* cq = flavor_.cq_per_wqe     ? create_cq(cq_offset, cq_dbr, false, false, log_sq_size_, cqn)
                              : flavor_.cq_one_entry ? create_cq(cq_offset, cq_dbr, false, true, 0, cqn)
                                                     : create_cq(cq_offset, cq_dbr, true, true, 0, cqn);
        if (!cq) return error = errno_text("CREATE_CQ"), false;
        cq_objs_.push_back(cq);

        // DBR-less QPs get a doorbell page each: their doorbells are the only sign of a post (docs/softfabric.md).
        mlx5dv_devx_uar* qp_uar = uar_;
        if (flavor_.dbr_less) {
            qp_uar = mlx5dv_devx_alloc_uar(ctx_, MLX5DV_UAR_ALLOC_TYPE_NC);
            if (!qp_uar) return error = errno_text("mlx5dv_devx_alloc_uar (DBR-less QP)"), false;
            qp_uars_.push_back(qp_uar);
        }
        std::vector<uint8_t> in(kCmdBytes, 0);
        uint8_t out[16] = {};
        set(in, f::opcode, prm::cmd::CREATE_QP);
        set(in, f::qpc_st, flavor_.dcis ? prm::st::DCI : prm::st::RC);
        set(in, f::qpc_pd, pdn_);
        set(in, f::qpc_uar_page, qp_uar->page_id);
        if (flavor_.rq_log) {   // MORI: a regular RQ of 64-byte WQEs (log stride 2: 2^(2+4) bytes)
            set(in, f::qpc_rq_type, 0);
            set(in, f::qpc_log_rq_size, flavor_.rq_log);
            set(in, f::qpc_log_rq_stride, 2);
        } else {
            set(in, f::qpc_rq_type, 3);  // zero-size RQ: receives come from the auto-stocked queue (fabric) / SRQ
        }
        set(in, f::qpc_log_sq_size, log_sq_size_);
        set(in, f::qpc_ts_format, 1);
        set(in, f::qpc_user_index, static_cast<uint32_t>(pe));
        set(in, f::qpc_cqn_snd, cqn);
        set(in, f::qpc_cqn_rcv, recv_cqn);
        set(in, f::qpc_send_dbr_mode, flavor_.dbr_less ? prm::kSendDbrModeNoDbr : 0);
        set(in, f::qpc_dbr_umem_valid, 1);  // the receive side's record (DOCA sets it for DBR-less QPs too)
        set(in, f::qpc_dbr_umem_id, dbr_umem_->umem_id);
        set(in, f::qpc_dbr_addr, dbr_base_ + uint64_t{pe} * 8);
        set(in, f::qp_wq_umem_id, wq_umem_->umem_id);
        set(in, f::qp_wq_umem_offset, uint64_t{pe} * wq_stride());
        set(in, f::qp_wq_umem_valid, 1);
        mlx5dv_devx_obj* qp = mlx5dv_devx_obj_create(ctx_, in.data(), in.size(), out, sizeof out);
        if (!qp) return error = errno_text("CREATE_QP"), false;
        qp_objs_.push_back(qp);

        auto g = std::make_unique<GpuQp>();
        g->qpn = static_cast<uint32_t>(prm::Mailbox(out, sizeof out).get_or(f::obj_number, 0));
        g->wqe = wq_buf_ + pe * wq_stride() + rq_bytes();
        g->nwqes = nwqes;
        g->dbrec = reinterpret_cast<uint32_t*>(dbr_buf_ + pe * 8 + 4);  // DBR[1]
        g->dbr_less = flavor_.dbr_less;
        // DOCA_VERBS_UAR_DBR_LESS_DB_OFFSET: producers of DBR-less QPs ring at UAR base + 0x600.
        g->bf = flavor_.dbr_less ? reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(qp_uar->base_addr) + 0x600)
                                 : static_cast<uint64_t*>(qp_uar->reg_addr);
        g->cqe = cq_buf_ + cq_offset;
        g->blueflame = flavor_.blueflame;
        if (flavor_.dcis) g->wqe_wqebbs = GpuQp::kDcWqebbs;
        if (flavor_.cq_per_wqe) {
            g->cq_ncqe = nwqes;
            g->cq_invalidate = false;
        }
        qps_.push_back(std::move(g));
    }
    return true;
}

bool IbgdaTransport::query(int pe, QpQuery& q, std::string& error) {
    std::vector<uint8_t> in(kCmdBytes, 0);
    set(in, f::opcode, prm::cmd::QUERY_QP);
    set(in, f::obj_number, qps_.at(static_cast<size_t>(pe))->qpn);
    std::vector<uint8_t> out(512, 0);
    if (int err = mlx5dv_devx_obj_query(qp_objs_.at(static_cast<size_t>(pe)), in.data(), in.size(), out.data(), out.size())) {
        errno = err;
        error = errno_text("QUERY_QP");
        return false;
    }
    prm::QueryQpOut r;
    prm::ParseError perr;
    if (!prm::parse_query_qp_out(prm::Mailbox(out.data(), out.size()), r, perr)) {
        error = std::string("QUERY_QP: ") + (perr.what ? perr.what : "unreadable output");
        return false;
    }
    q = {r.state, r.hw_sq_wqebb_counter, r.sw_sq_wqebb_counter};
    return true;
}

bool IbgdaTransport::bring_up_dcis(std::string& error) {
    // A DCI has no path: INIT2RTR carries only the MTU.
    for (size_t i = 0; i < qps_.size(); ++i) {
        mlx5dv_devx_obj* qp = qp_objs_[i];
        const uint32_t qpn = qps_[i]->qpn;
        if (!transition(qp, qpn, prm::cmd::RST2INIT_QP, {}, error) ||
            !transition(qp, qpn, prm::cmd::INIT2RTR_QP, {{f::qpc_mtu, 5}}, error) || !to_rts(qp, qpn, error))
            return false;
    }
    return true;
}

bool IbgdaTransport::connect(int pe, const PeInfo& peer, std::string& error) {
    if (flavor_.dcis) return pe == 0 ? bring_up_dcis(error) : true;
    mlx5dv_devx_obj* qp = qp_objs_.at(static_cast<size_t>(pe));
    const uint32_t qpn = qps_[static_cast<size_t>(pe)]->qpn;
    return transition(qp, qpn, prm::cmd::RST2INIT_QP, {{f::qpc_rre, 1}, {f::qpc_rwe, 1}, {f::qpc_rae, 1}}, error) &&
           transition(qp, qpn, prm::cmd::INIT2RTR_QP,
                      {{f::qpc_mtu, 5 /* 4096 */}, {f::qpc_remote_qpn, peer.qpn[me_]}, {f::qpc_path_rlid, peer.lid}},
                      error) &&
           to_rts(qp, qpn, error);
}

PeInfo IbgdaTransport::local_info() const {
    PeInfo i;
    i.lid = lid_;
    i.dctn = dctn_;
    for (size_t pe = 0; pe < qps_.size(); ++pe) i.qpn[pe] = qps_[pe]->qpn;
    i.heap_addr = reinterpret_cast<uint64_t>(heap_);
    i.heap_rkey = heap_mr_->rkey;
    return i;
}

std::vector<IbgdaTransport::Region> IbgdaTransport::shared_regions() const {
    if (flavor_.one_umem) return {{wq_buf_, wq_bytes_}, {heap_, round_up(heap_bytes_, kGpuPage)}};
    return {{wq_buf_, wq_bytes_}, {dbr_buf_, dbr_bytes_}, {cq_buf_, cq_bytes_}, {heap_, round_up(heap_bytes_, kGpuPage)}};
}

IbgdaTransport::Region IbgdaTransport::doorbell_page() const {
    auto reg = reinterpret_cast<uintptr_t>(uar_->reg_addr);
    return {reinterpret_cast<void*>(reg & ~uintptr_t{4095}), 4096};
}

void IbgdaTransport::set_truth(TruthLog* log) {
    for (auto& q : qps_) q->truth = log;
}

std::vector<uint32_t> IbgdaTransport::drain_receive_completions() {
    std::vector<uint32_t> imms;
    uint8_t* ring = cq_buf_ + recv_cq_offset();
    for (;;) {
        uint8_t* cqe = ring + size_t{recv_cq_ci_ & (kRecvCqes - 1)} * 64;
        const uint8_t op_own = __atomic_load_n(cqe + 63, __ATOMIC_ACQUIRE);
        const bool owner = (recv_cq_ci_ & kRecvCqes) != 0;
        if ((op_own >> 4) == mlx5::cqe_op::INVALID || ((op_own & 1) != 0) != owner) break;
        uint32_t imm;
        std::memcpy(&imm, cqe + 36, 4);
        if ((op_own >> 4) == mlx5::cqe_op::RESP_WR_IMM) imms.push_back(imm);
        ++recv_cq_ci_;
    }
    // The consumer index, as a GPU (or rocSHMEM) consumer publishes it.
    __atomic_store_n(reinterpret_cast<uint32_t*>(dbr_buf_ + size_t{2} * queues() * 8),
                     __builtin_bswap32(recv_cq_ci_ & 0xffffff), __ATOMIC_RELEASE);
    return imms;
}

}  // namespace sigmatrace::workloads
