// The DevX PRM commands that create, connect and destroy GPU-driven queues, decoded from their mailboxes:
// CREATE_QP / CREATE_CQ / CREATE_DCT, the QP state transitions (RST2INIT, INIT2RTR, RTR2RTS, ...), QUERY_QP,
// DESTROY_*. Field offsets are the PRM's (mlx5_ifc layout, cross-checked against NVSHMEM's and DOCA's copies:
// docs/architecture.md, "Platform facts"). Parsing never trusts the application's lengths: a field
// outside the buffer is reported as missing, and a command too short for what we need is an error that says
// how many bytes were needed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mlx5_format/prm_bits.h"

namespace sigmatrace::gpumem::prm {

// Command opcodes (in bits 0x00..0x0f of every `in` mailbox).
namespace cmd {
inline constexpr uint16_t CREATE_CQ = 0x400;
inline constexpr uint16_t DESTROY_CQ = 0x401;
inline constexpr uint16_t QUERY_CQ = 0x402;
inline constexpr uint16_t CREATE_QP = 0x500;
inline constexpr uint16_t DESTROY_QP = 0x501;
inline constexpr uint16_t RST2INIT_QP = 0x502;
inline constexpr uint16_t INIT2RTR_QP = 0x503;
inline constexpr uint16_t RTR2RTS_QP = 0x504;
inline constexpr uint16_t RTS2RTS_QP = 0x505;
inline constexpr uint16_t SQERR2RTS_QP = 0x506;
inline constexpr uint16_t QP_2ERR = 0x507;
inline constexpr uint16_t QP_2RST = 0x50a;
inline constexpr uint16_t QUERY_QP = 0x50b;
inline constexpr uint16_t SQD_RTS_QP = 0x50c;
inline constexpr uint16_t INIT2INIT_QP = 0x50e;
inline constexpr uint16_t CREATE_DCT = 0x710;
inline constexpr uint16_t DESTROY_DCT = 0x711;
}  // namespace cmd
const char* command_name(uint16_t opcode);
// True for the commands that move a QP between states (they all share the modify_qp_in layout).
bool is_qp_transition(uint16_t opcode);

// QP service types (qpc.st).
namespace st {
inline constexpr uint32_t RC = 0x0;
inline constexpr uint32_t UC = 0x1;
inline constexpr uint32_t UD = 0x2;
inline constexpr uint32_t XRC = 0x3;
inline constexpr uint32_t DCI = 0x5;
}  // namespace st
// qpc.rq_type
inline constexpr uint32_t kRqTypeRegular = 0x0;
// qpc.send_dbr_mode: 1 = the producer never updates the send doorbell record (DOCA's NO_DBR_EXT).
inline constexpr uint32_t kSendDbrModeNoDbr = 0x1;

// ------------------------------------------------------------------------------------------ field offsets
namespace f {
// every command
inline constexpr Field opcode{0x00, 16};
inline constexpr Field op_mod{0x30, 16};
inline constexpr Field out_status{0x00, 8};
inline constexpr Field out_syndrome{0x20, 32};
inline constexpr Field obj_number{0x48, 24};  // qpn / cqn in DESTROY_*, modify and query `in`, and create `out`

// qpc, as embedded at bit 0xC0 of create_qp_in, the modify_qp_in family and query_qp_out
inline constexpr uint32_t kQpc = 0xC0;
inline constexpr Field qpc_state{kQpc + 0x00, 4};  // QUERY_QP out: 0 RST, 1 INIT, 2 RTR, 3 RTS, 4 SQER, 6 ERR, 7 SQD
inline constexpr Field qpc_st{kQpc + 0x08, 8};
inline constexpr Field qpc_pd{kQpc + 0x28, 24};
inline constexpr Field qpc_mtu{kQpc + 0x40, 3};
inline constexpr Field qpc_log_rq_size{kQpc + 0x49, 4};
inline constexpr Field qpc_log_rq_stride{kQpc + 0x4D, 3};
inline constexpr Field qpc_no_sq{kQpc + 0x50, 1};
inline constexpr Field qpc_log_sq_size{kQpc + 0x51, 4};
inline constexpr Field qpc_ts_format{kQpc + 0x58, 2};
inline constexpr Field qpc_uar_page{kQpc + 0x68, 24};
inline constexpr Field qpc_send_dbr_mode{kQpc + 0x80, 2};
inline constexpr Field qpc_user_index{kQpc + 0x88, 24};
inline constexpr Field qpc_remote_qpn{kQpc + 0xA8, 24};
inline constexpr Field qpc_path_grh{kQpc + 0xE8, 1};
inline constexpr Field qpc_path_rlid{kQpc + 0xF0, 16};
inline constexpr Field qpc_path_src_addr_index{kQpc + 0x108, 8};
inline constexpr uint32_t kQpcPathRgid = kQpc + 0x140;  // 16 bytes
inline constexpr Field qpc_path_ack_timeout{kQpc + 0x100, 5};
inline constexpr Field qpc_path_rmac_47_32{kQpc + 0x1F0, 16};
inline constexpr Field qpc_path_rmac_31_0{kQpc + 0x200, 32};
inline constexpr Field qpc_retry_count{kQpc + 0x38D, 3};
inline constexpr Field qpc_rnr_retry{kQpc + 0x390, 3};
inline constexpr Field qpc_cqn_snd{kQpc + 0x3E8, 24};
inline constexpr Field qpc_rre{kQpc + 0x490, 1};  // remote read enable
inline constexpr Field qpc_rwe{kQpc + 0x491, 1};  // remote write enable
inline constexpr Field qpc_rae{kQpc + 0x492, 1};  // remote atomic enable
inline constexpr Field qpc_min_rnr_nak{kQpc + 0x4A3, 5};
inline constexpr Field qpc_cqn_rcv{kQpc + 0x4E8, 24};
inline constexpr Field qpc_dbr_addr{kQpc + 0x500, 64};
inline constexpr Field qpc_rq_type{kQpc + 0x565, 3};
inline constexpr Field qpc_srqn{kQpc + 0x568, 24};
inline constexpr Field qpc_hw_sq_wqebb_counter{kQpc + 0x5A0, 16};
inline constexpr Field qpc_sw_sq_wqebb_counter{kQpc + 0x5B0, 16};
inline constexpr Field qpc_dbr_umem_valid{kQpc + 0x683, 1};
inline constexpr Field qpc_dbr_umem_id{kQpc + 0x720, 32};
// create_qp_in after the qpc
inline constexpr Field qp_wq_umem_offset{0x800, 64};
inline constexpr Field qp_wq_umem_id{0x840, 32};
inline constexpr Field qp_wq_umem_valid{0x860, 1};
// modify_qp_in
inline constexpr Field modify_opt_param_mask{0x80, 32};

// cqc, as embedded at bit 0x80 of create_cq_in
inline constexpr uint32_t kCqc = 0x80;
inline constexpr Field cqc_dbr_umem_valid{kCqc + 0x06, 1};
inline constexpr Field cqc_cqe_sz{kCqc + 0x08, 3};
inline constexpr Field cqc_cc{kCqc + 0x0B, 1};
inline constexpr Field cqc_oi{kCqc + 0x0E, 1};
inline constexpr Field cqc_cqe_comp_en{kCqc + 0x11, 1};
inline constexpr Field cqc_dbr_umem_id{kCqc + 0x20, 32};
inline constexpr Field cqc_ts_format{kCqc + 0x5E, 2};
inline constexpr Field cqc_log_cq_size{kCqc + 0x63, 5};
inline constexpr Field cqc_uar_page{kCqc + 0x68, 24};
inline constexpr Field cqc_c_eqn{kCqc + 0xB8, 8};
inline constexpr Field cqc_dbr_addr{kCqc + 0x1C0, 64};
// create_cq_in after the cqc
inline constexpr Field cq_umem_offset{0x280, 64};
inline constexpr Field cq_umem_id{0x2C0, 32};
inline constexpr Field cq_umem_valid{0x2E0, 1};

// dctc, as embedded at bit 0x80 of create_dct_in
inline constexpr uint32_t kDctc = 0x80;
inline constexpr Field dctc_cqn{kDctc + 0x48, 24};
inline constexpr Field dctc_rre{kDctc + 0x6C, 1};
inline constexpr Field dctc_rwe{kDctc + 0x6D, 1};
inline constexpr Field dctc_rae{kDctc + 0x6E, 1};
inline constexpr Field dctc_srqn{kDctc + 0xA8, 24};
inline constexpr Field dctc_pd{kDctc + 0xC8, 24};
inline constexpr Field dctc_dc_access_key{kDctc + 0x100, 64};
inline constexpr Field dctc_mtu{kDctc + 0x145, 3};
inline constexpr Field dctc_port{kDctc + 0x148, 8};
}  // namespace f

// ------------------------------------------------------------------------------------------ decoded commands
struct ParseError {
    const char* what = nullptr;  // nullptr = no error
    size_t need = 0;             // bytes the command needed
    size_t have = 0;             // bytes the caller passed
};

struct CreateQp {
    uint32_t st = 0, pd = 0, uar_page = 0, user_index = 0;
    uint32_t log_rq_size = 0, log_rq_stride = 0, rq_type = 0, srqn = 0;
    bool no_sq = false;
    uint32_t log_sq_size = 0;
    uint32_t ts_format = 0;
    uint32_t send_dbr_mode = 0;
    uint32_t cqn_snd = 0, cqn_rcv = 0;
    bool dbr_umem_valid = false;
    uint32_t dbr_umem_id = 0;
    uint64_t dbr_addr = 0;  // byte offset inside the DBR umem (the kernel sets dbr_umem_valid for DevX)
    bool wq_umem_valid = false;
    uint32_t wq_umem_id = 0;
    uint64_t wq_umem_offset = 0;

    // The receive queue comes first in the WQ buffer (MORI's GetSqAddress, NVSHMEM's log_rq_size = 0 + SRQ).
    uint64_t rq_bytes() const {
        if (rq_type != kRqTypeRegular) return 0;
        return (uint64_t{1} << log_rq_size) << (log_rq_stride + 4);
    }
    uint64_t sq_umem_offset() const { return wq_umem_offset + rq_bytes(); }
    uint32_t sq_wqebbs() const { return no_sq ? 0 : 1u << log_sq_size; }
    uint64_t send_dbr_umem_offset() const { return dbr_addr + mlx5::kSendDbrOffset; }
};
bool parse_create_qp(const Mailbox& in, CreateQp& out, ParseError& err);

struct CreateCq {
    bool dbr_umem_valid = false;
    uint32_t dbr_umem_id = 0;
    uint64_t dbr_addr = 0;
    uint32_t cqe_sz = 0;  // 0: 64-byte CQEs, 1: 128-byte
    bool collapsed = false;
    bool overrun_ignore = false;
    bool compression = false;
    uint32_t ts_format = 0;
    uint32_t log_cq_size = 0;
    uint32_t uar_page = 0;
    uint32_t c_eqn = 0;
    bool cq_umem_valid = false;
    uint32_t cq_umem_id = 0;
    uint64_t cq_umem_offset = 0;

    uint32_t cqe_bytes() const { return 64u << cqe_sz; }
    uint32_t ncqe() const { return 1u << log_cq_size; }
};
bool parse_create_cq(const Mailbox& in, CreateCq& out, ParseError& err);

// A DC target (CREATE_DCT): where its responder completions go, what remote access it allows, the key a DCI's
// address vector must carry to reach it.
struct CreateDct {
    uint32_t cqn = 0, srqn = 0, pd = 0, mtu = 0, port = 0;
    bool remote_read = false, remote_write = false, remote_atomic = false;
    uint64_t dc_access_key = 0;
};
bool parse_create_dct(const Mailbox& in, CreateDct& out, ParseError& err);

// The optional-parameter bits that say an INIT2RTR or RTR2RTS carries the remote access (RRE, RAE, RWE).
inline constexpr uint32_t kOptParamRemoteAccess = (1u << 1) | (1u << 2) | (1u << 3);

// RST2INIT, INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS, INIT2INIT, SQD_RTS (shared layout) and 2ERR / 2RST.
struct ModifyQp {
    uint16_t opcode = 0;
    uint32_t qpn = 0;
    uint32_t opt_param_mask = 0;
    // Connection attributes, meaningful for INIT2RTR (0 when the mailbox is too short to hold them).
    uint32_t remote_qpn = 0;
    uint32_t mtu = 0;
    uint32_t rlid = 0;
    bool grh = false;
    uint8_t rgid[16] = {};
    // RST2INIT: remote access the QP allows; RTR2RTS: retry policy (fields 0 when absent).
    bool remote_read = false, remote_write = false, remote_atomic = false;
    uint32_t ack_timeout = 0, retry_count = 0, rnr_retry = 0, min_rnr_nak = 0;
    uint64_t rgid_prefix() const { return mlx5::load_be64(rgid); }
    uint64_t rgid_iid() const { return mlx5::load_be64(rgid + 8); }
};
bool parse_modify_qp(const Mailbox& in, ModifyQp& out, ParseError& err);

// The object number a create command's `out` returns (qpn, cqn, dctn), after checking its status.
bool parse_create_out(const Mailbox& out, uint32_t& number, ParseError& err);

// QUERY_QP `out`: the NIC's own view of a send queue's progress.
struct QueryQpOut {
    uint32_t state = 0;                // qpc.state (qpc_state above)
    uint32_t hw_sq_wqebb_counter = 0;  // WQEBBs the NIC has consumed (mod 2^16)
    uint32_t sw_sq_wqebb_counter = 0;  // last doorbell producer index the NIC accepted (mod 2^16)
};
bool parse_query_qp_out(const Mailbox& out, QueryQpOut& q, ParseError& err);

// The opcode of any command mailbox, or 0 when it is shorter than 4 bytes.
inline uint16_t command_opcode(const Mailbox& in) { return static_cast<uint16_t>(in.get_or(f::opcode, 0)); }

}  // namespace sigmatrace::gpumem::prm
