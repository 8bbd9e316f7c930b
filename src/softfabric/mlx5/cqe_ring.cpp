#include "mlx5/cqe_ring.h"

#include <cstddef>
#include <cstring>

#include "mlx5_format/mlx5_layout.h"

namespace softfabric::mlx5 {

namespace layout = sigmatrace::gpumem::mlx5;

uint8_t syndrome_of(ibv_wc_status status) {
    switch (status) {
    case IBV_WC_LOC_LEN_ERR: return 0x01;
    case IBV_WC_LOC_QP_OP_ERR: return 0x02;
    case IBV_WC_LOC_PROT_ERR: return 0x04;
    case IBV_WC_WR_FLUSH_ERR: return 0x05;
    case IBV_WC_MW_BIND_ERR: return 0x06;
    case IBV_WC_BAD_RESP_ERR: return 0x10;
    case IBV_WC_LOC_ACCESS_ERR: return 0x11;
    case IBV_WC_REM_INV_REQ_ERR: return 0x12;
    case IBV_WC_REM_ACCESS_ERR: return 0x13;
    case IBV_WC_REM_OP_ERR: return 0x14;
    case IBV_WC_RETRY_EXC_ERR: return 0x15;
    case IBV_WC_RNR_RETRY_EXC_ERR: return 0x16;
    case IBV_WC_REM_ABORT_ERR: return 0x22;
    default: return 0x14;  // remote operation error: the closest generic one
    }
}

CqeRing::CqeRing(uint32_t cqn, uint8_t* ring, uint32_t ncqe, uint32_t cqe_size, bool collapsed)
    : cqn_(cqn), ring_(ring), ncqe_(collapsed ? 1 : ncqe), cqe_size_(cqe_size == 128 ? 128 : 64), collapsed_(collapsed) {}

void CqeRing::invalidate_all() {
    std::lock_guard lk(mu_);
    for (uint32_t i = 0; i < ncqe_; ++i) {
        uint8_t* cqe = ring_ + size_t{i} * cqe_size_ + (cqe_size_ - 64);
        std::memset(cqe, 0, 64);
        __atomic_store_n(cqe + 63, static_cast<uint8_t>(layout::cqe_op::INVALID << 4), __ATOMIC_RELEASE);
    }
}

uint8_t* CqeRing::next_slot(bool& owner) {
    const uint64_t i = pi_++;
    owner = (i / ncqe_) & 1;  // hardware's owner bit: flips every pass over the ring
    return ring_ + size_t{i & (ncqe_ - 1)} * cqe_size_ + (cqe_size_ - 64);
}

// Everything but the last 8 bytes first, then the last 8 (wqe_counter, signature, op_own) in one release store,
// as the NIC writes them: a consumer that sees the new op_own (or, on a collapsed CQ, the new wqe_counter) sees
// the rest, and never the new wqe_counter under an old op_own.
void CqeRing::publish(uint8_t* cqe, const uint8_t* staged, uint8_t op_own) {
    std::memcpy(cqe, staged, 56);
    uint8_t tail[8];
    std::memcpy(tail, staged + 56, 7);
    tail[7] = op_own;
    uint64_t word;
    std::memcpy(&word, tail, 8);
    __atomic_store_n(reinterpret_cast<uint64_t*>(cqe + 56), word, __ATOMIC_RELEASE);
}

void CqeRing::requester(const Requester& r) {
    std::lock_guard lk(mu_);
    bool owner = false;
    uint8_t* cqe = next_slot(owner);
    uint8_t staged[64] = {};
    const bool error = r.status != IBV_WC_SUCCESS;
    layout::store_be32(staged + offsetof(layout::Cqe64, srqn_uidx), r.user_index & 0xffffff);
    layout::store_be32(staged + 44, error ? 0 : r.byte_cnt);
    if (error) {
        staged[54] = static_cast<uint8_t>(r.vendor_err);  // struct mlx5_err_cqe: vendor_err_synd, syndrome
        staged[55] = syndrome_of(r.status);
    } else {
        layout::store_be64(staged + 48, r.ts_ns);
    }
    layout::store_be32(staged + 56, (uint32_t{r.wqe_opcode} << 24) | (r.qpn & 0xffffff));
    layout::store_be16(staged + 60, r.wqe_counter);
    const uint8_t opcode = error ? layout::cqe_op::REQ_ERR : layout::cqe_op::REQ;
    publish(cqe, staged, static_cast<uint8_t>(opcode << 4 | (owner ? 1 : 0)));
}

void CqeRing::responder(const Responder& r) {
    std::lock_guard lk(mu_);
    bool owner = false;
    uint8_t* cqe = next_slot(owner);
    uint8_t staged[64] = {};
    const bool error = r.status != IBV_WC_SUCCESS;
    layout::store_be16(staged + offsetof(layout::Cqe64, slid), r.slid);
    layout::store_be32(staged + offsetof(layout::Cqe64, flags_rqpn),
                       (r.grh ? 1u << 28 : 0u) | (uint32_t{r.sl & 0xfu} << 24) | (r.src_qpn & 0xffffff));
    layout::store_be32(staged + offsetof(layout::Cqe64, srqn_uidx), r.user_index & 0xffffff);
    if (r.with_imm) std::memcpy(staged + 36, &r.imm_raw, 4);
    layout::store_be32(staged + 44, r.byte_cnt);
    if (error) staged[55] = syndrome_of(r.status);
    else layout::store_be64(staged + 48, r.ts_ns);
    layout::store_be32(staged + 56, r.qpn & 0xffffff);
    layout::store_be16(staged + 60, r.wqe_counter);
    uint8_t op = layout::cqe_op::RESP_SEND;
    if (error) op = layout::cqe_op::RESP_ERR;
    else if (r.opcode == IBV_WC_RECV_RDMA_WITH_IMM) op = layout::cqe_op::RESP_WR_IMM;
    else if (r.with_imm) op = layout::cqe_op::RESP_SEND_IMM;
    publish(cqe, staged, static_cast<uint8_t>(op << 4 | (owner ? 1 : 0)));
}

}  // namespace softfabric::mlx5
