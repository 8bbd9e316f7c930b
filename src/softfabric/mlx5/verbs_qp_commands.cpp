// See verbs_qp_commands.h. The qpc fields beyond those prm::parse_modify_qp decodes are read here with their
// PRM offsets (mlx5_ifc qpc, as embedded at bit 0xC0 of the modify commands).
#include "mlx5/verbs_qp_commands.h"

#include <cerrno>
#include <cstring>

#include "mlx5_format/prm_commands.h"
#include "mlx5/general_commands.h"
#include "provider/objects.h"

namespace softfabric::mlx5 {
namespace {

namespace prm = sigmatrace::gpumem::prm;
using prm::Field;

constexpr uint32_t kQpc = prm::f::kQpc;
constexpr Field qpc_path_pkey_index{kQpc + 0xD0, 16};
constexpr Field qpc_path_src_addr_index{kQpc + 0x108, 8};
constexpr Field qpc_path_hop_limit{kQpc + 0x118, 8};
constexpr Field qpc_path_sl{kQpc + 0x1E4, 4};
constexpr Field qpc_path_vhca_port_num{kQpc + 0x1E8, 8};
constexpr Field qpc_log_sra_max{kQpc + 0x388, 3};
constexpr Field qpc_next_send_psn{kQpc + 0x3C8, 24};
constexpr Field qpc_log_rra_max{kQpc + 0x488, 3};
constexpr Field qpc_next_rcv_psn{kQpc + 0x4A8, 24};
constexpr Field qpc_q_key{kQpc + 0x540, 32};

int fail(int err) {
    errno = err;
    return err;
}

// A log2 read/atomic depth as verbs counts it (the device's maximum is 16).
uint8_t depth(uint64_t log) { return static_cast<uint8_t>(1u << std::min<uint64_t>(log, 4)); }

}  // namespace

int modify_verbs_qp(ibv_qp* qp, const void* in, size_t inlen, void* out, size_t outlen) {
    const prm::Mailbox box(in, inlen);
    prm::ModifyQp m;
    prm::ParseError err;
    if (!qp || !prm::parse_modify_qp(box, m, err) || m.qpn != qp->qp_num || !out || outlen < 16) return fail(EINVAL);

    const DcRole role = provider::qp_of(qp).dc_role;
    const bool rc = qp->qp_type == IBV_QPT_RC, ud = qp->qp_type == IBV_QPT_UD;
    const bool dci = role == DcRole::Initiator, dct = role == DcRole::Target;
    if (!rc && !ud && !dci && !dct) return fail(EOPNOTSUPP);  // UC, XRC: no DevX path uses them

    ibv_qp_attr a{};
    int mask = IBV_QP_STATE;
    auto address_vector = [&] {
        a.ah_attr.dlid = static_cast<uint16_t>(m.rlid);
        a.ah_attr.sl = static_cast<uint8_t>(box.get_or(qpc_path_sl, 0));
        a.ah_attr.port_num = static_cast<uint8_t>(box.get_or(qpc_path_vhca_port_num, 1));
        a.ah_attr.is_global = m.grh;
        if (m.grh) {
            std::memcpy(a.ah_attr.grh.dgid.raw, m.rgid, sizeof m.rgid);
            a.ah_attr.grh.sgid_index = static_cast<uint8_t>(box.get_or(qpc_path_src_addr_index, 0));
            a.ah_attr.grh.hop_limit = static_cast<uint8_t>(box.get_or(qpc_path_hop_limit, 0));
        }
        mask |= IBV_QP_AV;
    };
    switch (m.opcode) {
    case prm::cmd::RST2INIT_QP:
        a.qp_state = IBV_QPS_INIT;
        a.pkey_index = static_cast<uint16_t>(box.get_or(qpc_path_pkey_index, 0));
        a.port_num = static_cast<uint8_t>(box.get_or(qpc_path_vhca_port_num, 1));
        mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
        if (rc || dct) {
            a.qp_access_flags = ibv_access_of(m);
            mask |= IBV_QP_ACCESS_FLAGS;
        }
        if (ud) {
            a.qkey = static_cast<uint32_t>(box.get_or(qpc_q_key, 0));
            mask |= IBV_QP_QKEY;
        }
        break;
    case prm::cmd::INIT2RTR_QP:
        a.qp_state = IBV_QPS_RTR;
        if (ud) break;
        a.path_mtu = static_cast<ibv_mtu>(m.mtu);
        mask |= IBV_QP_PATH_MTU;
        if (rc || dct || m.rlid || m.grh || box.get_or(qpc_path_sl, 0)) address_vector();
        if (rc || dct) {
            a.min_rnr_timer = static_cast<uint8_t>(m.min_rnr_nak);
            mask |= IBV_QP_MIN_RNR_TIMER;
        }
        if ((rc || dct) && (m.opt_param_mask & prm::kOptParamRemoteAccess)) {
            a.qp_access_flags = ibv_access_of(m);
            mask |= IBV_QP_ACCESS_FLAGS;
        }
        if (rc) {
            a.dest_qp_num = m.remote_qpn;
            a.rq_psn = static_cast<uint32_t>(box.get_or(qpc_next_rcv_psn, 0));
            a.max_dest_rd_atomic = depth(box.get_or(qpc_log_rra_max, 0));
            mask |= IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC;
        }
        break;
    case prm::cmd::RTR2RTS_QP:
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = static_cast<uint32_t>(box.get_or(qpc_next_send_psn, 0));
        mask |= IBV_QP_SQ_PSN;
        if (rc || dci) {
            a.timeout = static_cast<uint8_t>(m.ack_timeout);
            a.retry_cnt = static_cast<uint8_t>(m.retry_count);
            a.rnr_retry = static_cast<uint8_t>(m.rnr_retry);
            a.max_rd_atomic = depth(box.get_or(qpc_log_sra_max, 0));
            mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        }
        break;
    case prm::cmd::QP_2ERR: a.qp_state = IBV_QPS_ERR; break;
    case prm::cmd::QP_2RST: a.qp_state = IBV_QPS_RESET; break;
    default: return fail(EOPNOTSUPP);
    }
    std::memset(out, 0, 16);
    if (provider::modify_qp(qp, &a, mask) != 0) {
        prm::set_field(out, outlen, prm::f::out_status, kCmdStatusBadParam);
        prm::set_field(out, outlen, prm::f::out_syndrome, uint32_t{m.opcode} << 16);
        return fail(EINVAL);
    }
    return 0;
}

}  // namespace softfabric::mlx5
