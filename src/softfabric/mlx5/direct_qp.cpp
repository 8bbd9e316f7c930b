#include "mlx5/direct_qp.h"

#include <cstring>

#include "core/clock.h"
#include "mlx5_format/mlx5_layout.h"
#include "mlx5/address_vector.h"

namespace softfabric::mlx5 {
namespace {

namespace gm = sigmatrace::gpumem;
namespace op = sigmatrace::gpumem::mlx5::op;

constexpr uint32_t kAutoReceives = 64;
constexpr uint32_t kNoQpn = 0xffffff;  // no fabric QP has this number

// The engine opcode of an mlx5 opcode; false for those it cannot execute.
bool engine_opcode(uint8_t mlx5_opcode, engine::Opcode& out) {
    switch (mlx5_opcode) {
    case op::RDMA_WRITE: out = engine::Opcode::RdmaWrite; return true;
    case op::RDMA_WRITE_IMM: out = engine::Opcode::RdmaWriteWithImm; return true;
    case op::SEND: out = engine::Opcode::Send; return true;
    case op::SEND_IMM: out = engine::Opcode::SendWithImm; return true;
    case op::RDMA_READ: out = engine::Opcode::RdmaRead; return true;
    case op::ATOMIC_CS: out = engine::Opcode::AtomicCmpSwp; return true;
    case op::ATOMIC_FA: out = engine::Opcode::AtomicFetchAdd; return true;
    default: return false;
    }
}

bool completes_locally(uint8_t mlx5_opcode) { return mlx5_opcode == op::NOP || mlx5_opcode == op::DUMP; }

}  // namespace

DirectQp::DirectQp(engine::QueuePair& qp, std::unique_ptr<engine::QueuePair> owned, const Geometry& g)
    : qp_(qp), owned_(std::move(owned)), g_(g), qpn_(qp.qpn()), payload_(std::make_unique<gm::WqePayload>()) {
    qp_.set_completion_sink(this);
}

DirectQp::~DirectQp() {
    if (owned_) {
        owned_.reset();  // leaves the runtime first: nothing delivers to us after this
        return;
    }
    std::lock_guard lock(qp_.sq_lock());
    qp_.set_completion_sink(nullptr);  // a verbs QP outlives us: back to its default (verbs) CQ
}

void DirectQp::set_send_cq(CqeRing* cq) {
    std::lock_guard lock(qp_.sq_lock());
    send_cq_ = cq;
}

void DirectQp::enable_auto_receive(SharedCq* recv_cq, CqeRing* cq) {
    recv_shared_ = recv_cq;
    recv_cq_ = cq;
}

bool DirectQp::published_index(uint16_t& index) const {
    if (!g_.doorbell) {
        const uint32_t raw = __atomic_load_n(g_.send_dbr, __ATOMIC_ACQUIRE);  // pairs with the producer's release
        index = static_cast<uint16_t>(__builtin_bswap32(raw));
        return true;
    }
    const uint64_t word = __atomic_load_n(g_.doorbell, __ATOMIC_ACQUIRE);
    uint8_t db[8];
    std::memcpy(db, &word, sizeof db);
    if ((gm::mlx5::load_be32(db + 4) >> 8) != qpn_) return false;  // another QP's doorbell on a shared page, or none
    index = static_cast<uint16_t>(gm::mlx5::load_be32(db) >> 8);
    return true;
}

void DirectQp::reset_cursor() {
    if (g_.doorbell) {
        // Its last doorbell would read as WQEs posted in the new life: gone, unless another QP rang since.
        uint64_t word = __atomic_load_n(g_.doorbell, __ATOMIC_ACQUIRE);
        uint8_t db[8];
        std::memcpy(db, &word, sizeof db);
        if ((gm::mlx5::load_be32(db + 4) >> 8) == qpn_)
            __atomic_compare_exchange_n(g_.doorbell, &word, uint64_t{0}, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    std::lock_guard lock(qp_.sq_lock());
    next_ = seen_ = 0;
    last16_ = 0;
    submitted_ = completed_ = 0;
    local_.clear();
    failed_ = false;
    error_pending_ = false;
}

bool DirectQp::pump(uint64_t now) {
    const ibv_qp_state state = qp_.state();
    if (state != IBV_QPS_RTS && state != IBV_QPS_ERR) return false;
    uint16_t d16 = 0;
    const bool published = published_index(d16);
    std::lock_guard lock(qp_.sq_lock());
    if (published) {
        seen_ += static_cast<uint16_t>(d16 - last16_);
        last16_ = d16;
    }
    bool did = false;
    const gm::RingView ring{g_.sq, g_.wqebbs};
    while (next_ < seen_ && !failed_) {
        gm::DecodedWqe w;
        const gm::WqeStatus st = gm::decode_wqe(ring, static_cast<uint32_t>(next_ & (g_.wqebbs - 1)), g_.transport, w,
                                                payload_.get());
        if (st != gm::WqeStatus::Ok || w.wqe_index != static_cast<uint16_t>(next_)) {
            // What a NIC does with a WQE it cannot parse: local QP operation error, QP to ERROR.
            ++malformed_;
            fail_locked(static_cast<uint16_t>(next_), w.opcode);
            did = true;
            break;
        }
        if (next_ + w.wqebbs > seen_) break;  // the doorbell record stops inside this WQE
        const uint8_t* wqe = g_.sq + size_t{static_cast<uint32_t>(next_ & (g_.wqebbs - 1))} * 64;
        if (!submit_one(w, *payload_, wqe, now)) break;  // the engine queue is full: next pass
        next_ += w.wqebbs;
        did = true;
    }
    if (qp_.reserved()) qp_.commit(now);
    qp_.note_app_progress(now);
    qp_.progress(now);
    return did;
}

void DirectQp::enter_error_if_failed() {
    bool pending;
    {
        std::lock_guard lock(qp_.sq_lock());
        pending = error_pending_;
        error_pending_ = false;
    }
    if (pending) qp_.set_state(IBV_QPS_ERR);
}

bool DirectQp::submit_one(const gm::DecodedWqe& w, const gm::WqePayload& p, const uint8_t* wqe, uint64_t) {
    const bool signaled = (w.fm_ce_se & gm::mlx5::kCtrlCqUpdate) != 0;
    if (completes_locally(w.opcode)) {
        if (completed_ == submitted_) {
            if (signaled) complete(w.wqe_index, w.opcode, 0, now_ns(), IBV_WC_SUCCESS, 0);
        } else {
            local_.push_back({submitted_, w.wqe_index, w.opcode, signaled});
        }
        return true;
    }
    engine::Opcode eop;
    const uint32_t max_sge = qp_.config().max_send_sge;
    if (!engine_opcode(w.opcode, eop) || p.num_segments > max_sge || p.inline_length > qp_.config().max_inline) {
        ++malformed_;
        fail_locked(w.wqe_index, w.opcode);
        return false;
    }
    engine::Wqe* e = qp_.reserve();
    if (!e) return false;
    e->id = (uint64_t{w.opcode} << 32) | (uint64_t{signaled} << 31) | w.wqe_index;
    e->opcode = eop;
    e->flags = engine::kSignaled;  // always: see the header
    if (w.fm_ce_se & gm::mlx5::kCtrlSolicited) e->flags |= engine::kSolicited;
    if (w.fm_ce_se & gm::mlx5::kCtrlFence) e->flags |= engine::kFence;
    e->imm_data = w.imm;
    if (g_.transport == gm::Transport::Ud || g_.transport == gm::Transport::Dci) {
        // The address vector right after the control segment (in the WQE's first block). One that names no
        // fabric NIC goes nowhere: UD drops it, DC retries it until the retry count is exhausted, as a NIC
        // does for an unreachable destination.
        if (!destination_of_av(wqe + sizeof(gm::mlx5::CtrlSeg), g_.transport == gm::Transport::Ud, e->ud)) {
            e->ud.nic = qp_.nic();
            e->ud.qpn = kNoQpn;
        }
    }
    e->rkey = w.rkey;
    e->remote_addr = w.raddr;
    if (eop == engine::Opcode::AtomicCmpSwp) {
        e->compare_add = w.atomic_compare;
        e->swap = w.atomic_arg;
    } else if (eop == engine::Opcode::AtomicFetchAdd) {
        e->compare_add = w.atomic_arg;
    }
    if (p.inline_length) {
        e->flags |= engine::kInline;
        e->inline_length = p.inline_length;
        std::memcpy(e->inline_data(max_sge), p.inline_bytes, p.inline_length);
    }
    e->num_sge = p.num_segments;
    for (uint32_t i = 0; i < p.num_segments; ++i)
        e->sges()[i] = {p.segments[i].addr, p.segments[i].length, p.segments[i].lkey};
    ++submitted_;
    return true;
}

void DirectQp::fail_locked(uint16_t index, uint8_t opcode) {
    failed_ = true;
    error_pending_ = true;  // set_state(ERROR) takes the send-queue lock: done by enter_error_if_failed()
    complete(index, opcode, 0, now_ns(), IBV_WC_LOC_QP_OP_ERR, 0);
}

void DirectQp::complete(uint16_t index, uint8_t opcode, uint32_t byte_cnt, uint64_t ts_ns, ibv_wc_status status,
                        uint32_t vendor_err) {
    if (!send_cq_) return;
    send_cq_->requester({.wqe_counter = index,
                         .wqe_opcode = opcode,
                         .qpn = qpn_,
                         .user_index = g_.user_index,
                         .byte_cnt = byte_cnt,
                         .ts_ns = ts_ns,
                         .status = status,
                         .vendor_err = vendor_err});
}

void DirectQp::deliver(const engine::SendCompletion& c) {
    const auto index = static_cast<uint16_t>(c.id & 0xffff);
    const auto opcode = static_cast<uint8_t>(c.id >> 32);
    const bool signaled = (c.id >> 31) & 1;
    ++completed_;
    if (signaled || c.status != IBV_WC_SUCCESS) complete(index, opcode, c.byte_len, c.time_ns, c.status, c.vendor_err);
    while (!local_.empty() && local_.front().after <= completed_) {
        const LocalCompletion l = local_.front();
        local_.pop_front();
        if (l.signaled) complete(l.index, l.opcode, 0, c.time_ns, IBV_WC_SUCCESS, 0);
    }
}

bool DirectQp::pump_receives(uint64_t now) {
    if (!recv_shared_) return false;
    bool did = false;
    ibv_wc wc[16];
    uint64_t ts[16];
    for (int n; (n = recv_shared_->pop(16, wc, ts)) > 0;) {
        for (int i = 0; i < n; ++i, ++recv_done_) {
            if (!recv_cq_) continue;
            CqeRing::Responder r;
            r.wqe_counter = static_cast<uint16_t>(recv_done_);
            r.opcode = wc[i].opcode;
            r.qpn = qpn_;
            r.user_index = g_.user_index;
            r.byte_cnt = wc[i].byte_len;
            r.imm_raw = wc[i].imm_data;
            r.with_imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0;
            r.ts_ns = ts[i];
            r.status = wc[i].status;
            r.src_qpn = wc[i].src_qp;
            r.slid = wc[i].slid;
            r.sl = wc[i].sl;
            recv_cq_->responder(r);
        }
        did = true;
    }
    const ibv_qp_state state = qp_.state();
    if (state == IBV_QPS_INIT || state == IBV_QPS_RTR || state == IBV_QPS_RTS) {
        while (recv_posted_ - recv_done_ < kAutoReceives) {
            if (qp_.post_receive(recv_posted_, nullptr, 0) != 0) break;
            ++recv_posted_;
            did = true;
        }
    }
    (void)now;
    return did;
}

}  // namespace softfabric::mlx5
