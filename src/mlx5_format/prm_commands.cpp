#include "mlx5_format/prm_commands.h"

#include <algorithm>
#include <cstring>

namespace sigmatrace::gpumem::prm {
namespace {

bool fail(ParseError& err, const char* what, size_t need, size_t have) {
    err = ParseError{what, need, have};
    return false;
}

// Checks the command is `expected` and at least as long as the last field we must read.
bool check_command(const Mailbox& in, uint16_t expected, Field last_needed, ParseError& err) {
    if (!in.has(f::opcode)) return fail(err, "command mailbox shorter than its opcode", 4, in.size());
    if (command_opcode(in) != expected) return fail(err, "unexpected command opcode", 0, in.size());
    if (!in.has(last_needed)) return fail(err, "command mailbox too short", last_needed.bytes_needed(), in.size());
    return true;
}

uint32_t get32(const Mailbox& m, Field fl) { return static_cast<uint32_t>(m.get_or(fl, 0)); }

}  // namespace

const char* command_name(uint16_t opcode) {
    switch (opcode) {
    case cmd::CREATE_CQ: return "CREATE_CQ";
    case cmd::DESTROY_CQ: return "DESTROY_CQ";
    case cmd::QUERY_CQ: return "QUERY_CQ";
    case cmd::CREATE_QP: return "CREATE_QP";
    case cmd::DESTROY_QP: return "DESTROY_QP";
    case cmd::RST2INIT_QP: return "RST2INIT_QP";
    case cmd::INIT2RTR_QP: return "INIT2RTR_QP";
    case cmd::RTR2RTS_QP: return "RTR2RTS_QP";
    case cmd::RTS2RTS_QP: return "RTS2RTS_QP";
    case cmd::SQERR2RTS_QP: return "SQERR2RTS_QP";
    case cmd::QP_2ERR: return "2ERR_QP";
    case cmd::QP_2RST: return "2RST_QP";
    case cmd::QUERY_QP: return "QUERY_QP";
    case cmd::SQD_RTS_QP: return "SQD_RTS_QP";
    case cmd::INIT2INIT_QP: return "INIT2INIT_QP";
    case cmd::CREATE_DCT: return "CREATE_DCT";
    case cmd::DESTROY_DCT: return "DESTROY_DCT";
    default: return "UNKNOWN";
    }
}

bool is_qp_transition(uint16_t opcode) {
    switch (opcode) {
    case cmd::RST2INIT_QP:
    case cmd::INIT2RTR_QP:
    case cmd::RTR2RTS_QP:
    case cmd::RTS2RTS_QP:
    case cmd::SQERR2RTS_QP:
    case cmd::QP_2ERR:
    case cmd::QP_2RST:
    case cmd::SQD_RTS_QP:
    case cmd::INIT2INIT_QP: return true;
    default: return false;
    }
}

bool parse_create_qp(const Mailbox& in, CreateQp& out, ParseError& err) {
    out = CreateQp{};
    if (!check_command(in, cmd::CREATE_QP, f::qp_wq_umem_valid, err)) return false;
    out.st = get32(in, f::qpc_st);
    out.pd = get32(in, f::qpc_pd);
    out.uar_page = get32(in, f::qpc_uar_page);
    out.user_index = get32(in, f::qpc_user_index);
    out.log_rq_size = get32(in, f::qpc_log_rq_size);
    out.log_rq_stride = get32(in, f::qpc_log_rq_stride);
    out.rq_type = get32(in, f::qpc_rq_type);
    out.srqn = get32(in, f::qpc_srqn);
    out.no_sq = get32(in, f::qpc_no_sq) != 0;
    out.log_sq_size = get32(in, f::qpc_log_sq_size);
    out.ts_format = get32(in, f::qpc_ts_format);
    out.send_dbr_mode = get32(in, f::qpc_send_dbr_mode);
    out.cqn_snd = get32(in, f::qpc_cqn_snd);
    out.cqn_rcv = get32(in, f::qpc_cqn_rcv);
    out.dbr_addr = in.get_or(f::qpc_dbr_addr, 0);
    out.dbr_umem_valid = get32(in, f::qpc_dbr_umem_valid) != 0;
    out.dbr_umem_id = get32(in, f::qpc_dbr_umem_id);
    out.wq_umem_offset = in.get_or(f::qp_wq_umem_offset, 0);
    out.wq_umem_id = get32(in, f::qp_wq_umem_id);
    out.wq_umem_valid = get32(in, f::qp_wq_umem_valid) != 0;
    return true;
}

bool parse_create_cq(const Mailbox& in, CreateCq& out, ParseError& err) {
    out = CreateCq{};
    if (!check_command(in, cmd::CREATE_CQ, f::cq_umem_valid, err)) return false;
    out.dbr_umem_valid = get32(in, f::cqc_dbr_umem_valid) != 0;
    out.dbr_umem_id = get32(in, f::cqc_dbr_umem_id);
    out.dbr_addr = in.get_or(f::cqc_dbr_addr, 0);
    out.cqe_sz = get32(in, f::cqc_cqe_sz);
    out.collapsed = get32(in, f::cqc_cc) != 0;
    out.overrun_ignore = get32(in, f::cqc_oi) != 0;
    out.compression = get32(in, f::cqc_cqe_comp_en) != 0;
    out.ts_format = get32(in, f::cqc_ts_format);
    out.log_cq_size = get32(in, f::cqc_log_cq_size);
    out.uar_page = get32(in, f::cqc_uar_page);
    out.c_eqn = get32(in, f::cqc_c_eqn);
    out.cq_umem_offset = in.get_or(f::cq_umem_offset, 0);
    out.cq_umem_id = get32(in, f::cq_umem_id);
    out.cq_umem_valid = get32(in, f::cq_umem_valid) != 0;
    return true;
}

bool parse_create_dct(const Mailbox& in, CreateDct& out, ParseError& err) {
    out = CreateDct{};
    if (!check_command(in, cmd::CREATE_DCT, f::dctc_port, err)) return false;
    out.cqn = get32(in, f::dctc_cqn);
    out.remote_read = get32(in, f::dctc_rre) != 0;
    out.remote_write = get32(in, f::dctc_rwe) != 0;
    out.remote_atomic = get32(in, f::dctc_rae) != 0;
    out.srqn = get32(in, f::dctc_srqn);
    out.pd = get32(in, f::dctc_pd);
    out.dc_access_key = in.get_or(f::dctc_dc_access_key, 0);
    out.mtu = get32(in, f::dctc_mtu);
    out.port = get32(in, f::dctc_port);
    return true;
}

bool parse_modify_qp(const Mailbox& in, ModifyQp& out, ParseError& err) {
    out = ModifyQp{};
    if (!in.has(f::obj_number)) return fail(err, "QP modify command too short for its qpn", 12, in.size());
    out.opcode = command_opcode(in);
    if (!is_qp_transition(out.opcode)) return fail(err, "not a QP state transition command", 0, in.size());
    out.qpn = get32(in, f::obj_number);
    out.opt_param_mask = get32(in, f::modify_opt_param_mask);
    // 2ERR and 2RST carry no QP context; the others may be shorter than a full qpc when the caller only
    // fills what it needs. Fields outside the mailbox stay 0.
    if (out.opcode == cmd::QP_2ERR || out.opcode == cmd::QP_2RST) return true;
    out.remote_qpn = get32(in, f::qpc_remote_qpn);
    out.mtu = get32(in, f::qpc_mtu);
    out.rlid = get32(in, f::qpc_path_rlid);
    out.grh = get32(in, f::qpc_path_grh) != 0;
    if (const uint8_t* gid = in.bytes(f::kQpcPathRgid, sizeof out.rgid)) std::memcpy(out.rgid, gid, sizeof out.rgid);
    out.remote_read = get32(in, f::qpc_rre) != 0;
    out.remote_write = get32(in, f::qpc_rwe) != 0;
    out.remote_atomic = get32(in, f::qpc_rae) != 0;
    out.ack_timeout = get32(in, f::qpc_path_ack_timeout);
    out.retry_count = get32(in, f::qpc_retry_count);
    out.rnr_retry = get32(in, f::qpc_rnr_retry);
    out.min_rnr_nak = get32(in, f::qpc_min_rnr_nak);
    return true;
}

bool parse_create_out(const Mailbox& out, uint32_t& number, ParseError& err) {
    number = 0;
    if (!out.has(f::obj_number)) return fail(err, "create command output too short for its object number",
                                             f::obj_number.bytes_needed(), out.size());
    if (out.get_or(f::out_status, 0) != 0) return fail(err, "create command failed (status != 0)", 0, out.size());
    number = get32(out, f::obj_number);
    return true;
}

bool parse_query_qp_out(const Mailbox& out, QueryQpOut& q, ParseError& err) {
    q = QueryQpOut{};
    if (!out.has(f::qpc_sw_sq_wqebb_counter))
        return fail(err, "QUERY_QP output too short", f::qpc_sw_sq_wqebb_counter.bytes_needed(), out.size());
    if (out.get_or(f::out_status, 0) != 0) return fail(err, "QUERY_QP failed (status != 0)", 0, out.size());
    q.state = get32(out, f::qpc_state);
    q.hw_sq_wqebb_counter = get32(out, f::qpc_hw_sq_wqebb_counter);
    q.sw_sq_wqebb_counter = get32(out, f::qpc_sw_sq_wqebb_counter);
    return true;
}

}  // namespace sigmatrace::gpumem::prm
