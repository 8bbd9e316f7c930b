// Opcode names shared by the tracer, the watcher and the analyzer. The names are the verbs names without
// their prefix ("RDMA_WRITE", "SEND_WITH_IMM", "RECV", ...: docs/architecture.md, "Names in reports"), so a GPU-posted RDMA WRITE and a
// CPU-posted one land in the same row of a report.
#pragma once

#include <cstdint>
#include <iterator>
#include <string_view>

namespace sigmatrace {

// Values of enum ibv_wr_opcode (infiniband/verbs.h, stable ABI).
enum class WrOpcode : uint8_t {
    RDMA_WRITE = 0,
    RDMA_WRITE_WITH_IMM = 1,
    SEND = 2,
    SEND_WITH_IMM = 3,
    RDMA_READ = 4,
    ATOMIC_CMP_AND_SWP = 5,
    ATOMIC_FETCH_AND_ADD = 6,
    LOCAL_INV = 7,
    BIND_MW = 8,
    SEND_WITH_INV = 9,
    TSO = 10,
    DRIVER1 = 11,
    ATOMIC_WRITE = 15,
};

inline std::string_view wr_opcode_name(uint32_t op) {
    switch (op) {
    case 0: return "RDMA_WRITE";
    case 1: return "RDMA_WRITE_WITH_IMM";
    case 2: return "SEND";
    case 3: return "SEND_WITH_IMM";
    case 4: return "RDMA_READ";
    case 5: return "ATOMIC_CMP_AND_SWP";
    case 6: return "ATOMIC_FETCH_AND_ADD";
    case 7: return "LOCAL_INV";
    case 8: return "BIND_MW";
    case 9: return "SEND_WITH_INV";
    case 10: return "TSO";
    case 11: return "DRIVER1";
    case 15: return "ATOMIC_WRITE";
    default: return "UNKNOWN";
    }
}

// Values of enum ibv_wc_opcode.
inline std::string_view wc_opcode_name(uint32_t op) {
    switch (op) {
    case 0: return "SEND";
    case 1: return "RDMA_WRITE";
    case 2: return "RDMA_READ";
    case 3: return "COMP_SWAP";
    case 4: return "FETCH_ADD";
    case 5: return "BIND_MW";
    case 6: return "LOCAL_INV";
    case 7: return "TSO";
    case 9: return "ATOMIC_WRITE";
    case 128: return "RECV";
    case 129: return "RECV_RDMA_WITH_IMM";
    default: return "UNKNOWN";
    }
}

// Values of enum ibv_wc_status.
inline std::string_view wc_status_name(uint32_t st) {
    static constexpr std::string_view names[] = {
        "SUCCESS",        "LOC_LEN_ERR",    "LOC_QP_OP_ERR",  "LOC_EEC_OP_ERR",   "LOC_PROT_ERR",
        "WR_FLUSH_ERR",   "MW_BIND_ERR",    "BAD_RESP_ERR",   "LOC_ACCESS_ERR",   "REM_INV_REQ_ERR",
        "REM_ACCESS_ERR", "REM_OP_ERR",     "RETRY_EXC_ERR",  "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR",
        "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR",
        "RESP_TIMEOUT_ERR", "GENERAL_ERR",  "TM_ERR",         "TM_RNDV_INCOMPLETE",
    };
    return st < std::size(names) ? names[st] : std::string_view("UNKNOWN");
}

// gpu_qp_create.st of a DC target created with DevX CREATE_DCT (outside the PRM's QP service types, which a DCT
// is not): the event makes its DCT number known on its device, so that DCI WQEs naming it resolve to its process.
inline constexpr uint32_t kGpuQpStDct = 0x100;

// mlx5 send WQE opcodes (ctrl segment bits [7:0]; providers/mlx5/mlx5dv.h MLX5_OPCODE_*): the one table of them,
// used by the GPU watcher's decoder (src/mlx5_format/mlx5_layout.h names it mlx5::op), the software fabric and the
// analyzer.
namespace mlx5op {
inline constexpr uint8_t NOP = 0x00;
inline constexpr uint8_t SEND_INVAL = 0x01;
inline constexpr uint8_t RDMA_WRITE = 0x08;
inline constexpr uint8_t RDMA_WRITE_IMM = 0x09;
inline constexpr uint8_t SEND = 0x0a;
inline constexpr uint8_t SEND_IMM = 0x0b;
inline constexpr uint8_t TSO = 0x0e;
inline constexpr uint8_t WAIT = 0x0f;  // PRM: wait on a CQ or on memory (DOCA GPUNetIO's cross-channel waits)
inline constexpr uint8_t RDMA_READ = 0x10;
inline constexpr uint8_t ATOMIC_CS = 0x11;
inline constexpr uint8_t ATOMIC_FA = 0x12;
inline constexpr uint8_t ATOMIC_MASKED_CS = 0x14;
inline constexpr uint8_t ATOMIC_MASKED_FA = 0x15;
inline constexpr uint8_t FMR = 0x19;
inline constexpr uint8_t LOCAL_INVAL = 0x1b;
inline constexpr uint8_t CONFIG_CMD = 0x1f;
inline constexpr uint8_t SET_PSV = 0x20;
inline constexpr uint8_t DUMP = 0x23;  // NVSHMEM's IBGDA_MLX5_OPCODE_DUMP
inline constexpr uint8_t UMR = 0x25;
inline constexpr uint8_t TAG_MATCHING = 0x28;
inline constexpr uint8_t FLOW_TBL_ACCESS = 0x2c;
inline constexpr uint8_t MMO = 0x2f;
}  // namespace mlx5op

// The verbs opcode a GPU-posted mlx5 WQE corresponds to, or -1 when it moves no data (NOP, DUMP, UMR...).
inline int wr_opcode_from_mlx5(uint8_t op) {
    switch (op) {
    case mlx5op::RDMA_WRITE: return 0;
    case mlx5op::RDMA_WRITE_IMM: return 1;
    case mlx5op::SEND: return 2;
    case mlx5op::SEND_IMM: return 3;
    case mlx5op::RDMA_READ: return 4;
    case mlx5op::ATOMIC_CS:
    case mlx5op::ATOMIC_MASKED_CS: return 5;
    case mlx5op::ATOMIC_FA:
    case mlx5op::ATOMIC_MASKED_FA: return 6;
    case mlx5op::SEND_INVAL: return 9;
    case mlx5op::TSO: return 10;
    default: return -1;
    }
}

// Values of enum ibv_qp_state.
namespace ibv_qps {
inline constexpr int32_t RESET = 0, INIT = 1, RTR = 2, RTS = 3, SQD = 4, SQE = 5, ERR = 6;
}  // namespace ibv_qps

// mlx5 PRM qpc.state (QUERY_QP's answer; mlx5_ifc.h MLX5_QPC_STATE_*) against enum ibv_qp_state (RESET 0, INIT 1,
// RTR 2, RTS 3, SQD 4, SQE 5, ERR 6): the one table, used by the software fabric (its QUERY_QP answer) and the
// analyzer (gpu_qp_query). Index: qpc.state 0 RST .. 7 SQD; 4 SQER is SQE; 5 has no verbs name.
inline constexpr int32_t kIbvQpStateOfQpc[] = {0, 1, 2, 3, 5, -1, 6, 4};
// The enum ibv_qp_state of a qpc.state, or -1 (SUSPENDED and the others with no verbs name).
inline constexpr int32_t ibv_qp_state_from_qpc(uint64_t qpc) {
    return qpc < std::size(kIbvQpStateOfQpc) ? kIbvQpStateOfQpc[qpc] : -1;
}
// The qpc.state of an enum ibv_qp_state (ERR for a value with no qpc state).
inline constexpr uint32_t qpc_state_from_ibv(int32_t state) {
    for (uint32_t q = 0; q < std::size(kIbvQpStateOfQpc); ++q)
        if (kIbvQpStateOfQpc[q] == state) return q;
    return 6;
}

// mlx5 CQE error syndromes (the PRM's table) to enum ibv_wc_status, as the verbs provider reports them: what the
// watcher writes for an error CQE and what the analyzer reads old traces' gpu_cqe syndromes with.
inline uint8_t wc_status_from_mlx5_syndrome(uint8_t syndrome) {
    switch (syndrome) {
    case 0x01: return 1;   // LOCAL_LENGTH_ERR -> LOC_LEN_ERR
    case 0x02: return 2;   // LOCAL_QP_OP_ERR
    case 0x04: return 4;   // LOCAL_PROT_ERR
    case 0x05: return 5;   // WR_FLUSH_ERR
    case 0x06: return 6;   // MW_BIND_ERR
    case 0x10: return 7;   // BAD_RESP_ERR
    case 0x11: return 8;   // LOCAL_ACCESS_ERR
    case 0x12: return 9;   // REMOTE_INVAL_REQ_ERR
    case 0x13: return 10;  // REMOTE_ACCESS_ERR
    case 0x14: return 11;  // REMOTE_OP_ERR
    case 0x15: return 12;  // TRANSPORT_RETRY_CNT_ERR -> RETRY_EXC_ERR
    case 0x16: return 13;  // RNR_RETRY_CNT_ERR
    case 0x22: return 16;  // ABORTED_ERR -> REM_ABORT_ERR
    default: return 21;    // GENERAL_ERR
    }
}

// What an mlx5 error CQE's syndrome means (the PRM's CQE error syndrome table): the words a hang report prints
// beside the hexadecimal value. Empty for a value the table does not name.
inline std::string_view mlx5_syndrome_meaning(uint8_t syndrome) {
    switch (syndrome) {
    case 0x01: return "local length error";
    case 0x02: return "local QP operation error";
    case 0x04: return "local protection error";
    case 0x05: return "work request flushed";
    case 0x06: return "memory window bind error";
    case 0x10: return "bad response";
    case 0x11: return "local access error";
    case 0x12: return "remote invalid request";
    case 0x13: return "remote access error";
    case 0x14: return "remote operation error";
    case 0x15: return "transport retry counter exceeded";
    case 0x16: return "RNR retry counter exceeded";
    case 0x22: return "aborted";
    default: return {};
    }
}

}  // namespace sigmatrace
