// The mlx5 formats that GPU kernels write and the NIC writes back: send WQE segments, the 64-byte CQE and the
// doorbell record, declared here from their documented layouts (rdma-core providers/mlx5/mlx5dv.h and the
// ConnectX PRM; docs/architecture.md, "Platform facts"). Every multi-byte field is
// big-endian in memory; the structs hold raw bytes and the accessors below convert, so a struct can be
// overlaid on any byte image (a ring snapshot, a fuzzer input) without alignment or aliasing concerns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sigmatrace/opcodes.h"

namespace sigmatrace::gpumem::mlx5 {

// ------------------------------------------------------------------------------------------ byte order
inline uint16_t load_be16(const void* p) {
    uint16_t v;
    std::memcpy(&v, p, sizeof v);
    return __builtin_bswap16(v);
}
inline uint32_t load_be32(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return __builtin_bswap32(v);
}
inline uint64_t load_be64(const void* p) {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return __builtin_bswap64(v);
}
inline void store_be16(void* p, uint16_t v) {
    v = __builtin_bswap16(v);
    std::memcpy(p, &v, sizeof v);
}
inline void store_be32(void* p, uint32_t v) {
    v = __builtin_bswap32(v);
    std::memcpy(p, &v, sizeof v);
}
inline void store_be64(void* p, uint64_t v) {
    v = __builtin_bswap64(v);
    std::memcpy(p, &v, sizeof v);
}

// ------------------------------------------------------------------------------------------ send queue geometry
inline constexpr uint32_t kWqeBasicBlock = 64;     // MLX5_SEND_WQE_BB: the unit of the SQ and of its counters
inline constexpr uint32_t kWqeBasicBlockShift = 6;
inline constexpr uint32_t kDsUnit = 16;            // ctrl.ds counts 16-byte units, the ctrl segment included
inline constexpr uint32_t kMaxWqeBasicBlocks = 16; // largest send WQE: 1 KiB (MLX5_SEND_WQE_MAX_WQEBBS)
inline constexpr uint32_t kMaxDs = kMaxWqeBasicBlocks * kWqeBasicBlock / kDsUnit;  // 64

// WQEBBs a WQE of `ds` 16-byte units occupies (DIV_ROUND_UP(ds * 16, 64)).
inline constexpr uint32_t wqebbs_for_ds(uint32_t ds) { return (ds * kDsUnit + kWqeBasicBlock - 1) / kWqeBasicBlock; }

// ------------------------------------------------------------------------------------------ opcodes
// Send WQE opcodes, ctrl segment bits [7:0]: the project's one table (include/sigmatrace/opcodes.h).
namespace op = ::sigmatrace::mlx5op;

// Opcode modifier of the masked ("extended") atomics: bit 3 set means the argument size is
// 4 << (opmod & 7) bytes (0x08 = 4 bytes, DeepEP's IBGDA_4_BYTE_EXT_AMO_OPMOD; 0x09 = 8 bytes, ...).
inline constexpr uint8_t kExtAtomicOpmodFlag = 0x08;

// ctrl.fm_ce_se bits.
inline constexpr uint8_t kCtrlFence = 4 << 5;            // MLX5_WQE_CTRL_FENCE
inline constexpr uint8_t kCtrlSmallFence = 1 << 5;       // MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE
inline constexpr uint8_t kCtrlCqUpdate = 2 << 2;         // MLX5_WQE_CTRL_CQ_UPDATE: the WQE is signalled
inline constexpr uint8_t kCtrlSolicited = 1 << 1;        // MLX5_WQE_CTRL_SOLICITED

inline constexpr uint32_t kInlineSegFlag = 0x80000000u;  // MLX5_INLINE_SEG in the inline byte_count
inline constexpr uint32_t kInlineLengthMask = 0x3ff;     // inline data is at most 1 KiB (the whole WQE)
inline constexpr uint32_t kInvalidLkey = 0x100;          // MLX5_INVALID_LKEY: ends a scatter/gather list
inline constexpr uint32_t kExtendedAvFlag = 0x80000000u; // MLX5_EXTENDED_UD_AV in av.dqp_dct: a 48-byte AV

// ------------------------------------------------------------------------------------------ send WQE segments
// Control segment (struct mlx5_wqe_ctrl_seg), 16 bytes, first in every WQE.
struct CtrlSeg {
    uint8_t opmod_idx_opcode[4];  // [31:24] opmod, [23:8] WQE index (WQEBB counter of its first block), [7:0] opcode
    uint8_t qpn_ds[4];            // [31:8] QP number, [7:0] ds: WQE size in 16-byte units
    uint8_t signature;
    uint8_t dci_stream_channel_id[2];
    uint8_t fm_ce_se;             // fence mode [7:5], completion (CE) [3:2], solicited [1]
    uint8_t imm[4];               // immediate (as written), invalidate rkey, or UMR mkey

    uint8_t opcode() const { return opmod_idx_opcode[3]; }
    uint8_t opmod() const { return opmod_idx_opcode[0]; }
    uint16_t wqe_index() const { return static_cast<uint16_t>(load_be32(opmod_idx_opcode) >> 8); }
    uint32_t qpn() const { return load_be32(qpn_ds) >> 8; }
    uint8_t ds() const { return qpn_ds[3]; }
    // The immediate exactly as the 4 bytes sit in the WQE, read as a host integer: the schema records
    // immediates "as written (network order)", like ibv_send_wr.imm_data.
    uint32_t imm_raw() const {
        uint32_t v;
        std::memcpy(&v, imm, sizeof v);
        return v;
    }
};

// Remote address segment (struct mlx5_wqe_raddr_seg), 16 bytes.
struct RaddrSeg {
    uint8_t raddr[8];
    uint8_t rkey[4];
    uint8_t reserved[4];
    uint64_t remote_addr() const { return load_be64(raddr); }
    uint32_t remote_key() const { return load_be32(rkey); }
};

// Data (gather/scatter) segment (struct mlx5_wqe_data_seg), 16 bytes.
struct DataSeg {
    uint8_t byte_count[4];
    uint8_t lkey[4];
    uint8_t addr[8];
    uint32_t length() const { return load_be32(byte_count); }
    uint32_t local_key() const { return load_be32(lkey); }
    uint64_t local_addr() const { return load_be64(addr); }
};

// Inline data header (struct mlx5_wqe_inl_data_seg): 4 bytes, the data follows, the whole padded to 16.
struct InlineSegHeader {
    uint8_t byte_count[4];  // length | kInlineSegFlag
    uint32_t length() const { return load_be32(byte_count) & ~kInlineSegFlag; }
};

// Atomic segment (struct mlx5_wqe_atomic_seg), 16 bytes: compare-and-swap and fetch-and-add on 8 bytes.
struct AtomicSeg {
    uint8_t swap_add[8];
    uint8_t compare[8];
    uint64_t swap_or_add() const { return load_be64(swap_add); }
    uint64_t compare_value() const { return load_be64(compare); }
};

// Address vector of UD and DC initiator WQEs (struct mlx5_wqe_av): 48 bytes, or only its first 16 bytes (the
// "base" or "half" AV that NVSHMEM writes for DCI) when kExtendedAvFlag is clear in dqp_dct.
struct AvBase {
    uint8_t key[8];       // UD: qkey in bytes 0..3; DC: dc access key
    uint8_t dqp_dct[4];   // [31] extended AV, [23:0] destination QPN (UD) or DCT number (DC)
    uint8_t stat_rate_sl;
    uint8_t fl_mlid;
    uint8_t rlid[2];
    bool extended() const { return (load_be32(dqp_dct) & kExtendedAvFlag) != 0; }
    uint32_t remote_qpn() const { return load_be32(dqp_dct) & 0xffffff; }
};
struct Av {
    AvBase base;
    uint8_t reserved0[4];
    uint8_t rmac[6];
    uint8_t tclass;
    uint8_t hop_limit;
    uint8_t grh_gid_fl[4];
    uint8_t rgid[16];
};

// The 32 bytes of a full AV after its base, as two 16-byte units: reserved, rmac, tclass, hop_limit, grh_gid_fl,
// then the remote GID.
struct GrhHalf {
    uint8_t reserved0[4];
    uint8_t rmac[6];
    uint8_t tclass;
    uint8_t hop_limit;
    uint8_t grh_gid_fl[4];
    uint8_t rgid[16];
};
inline constexpr uint32_t kAvGrh = 1u << 30;  // grh_gid_fl: the AV carries a GRH (its remote GID is valid)

// XRC segment (struct mlx5_wqe_xrc_seg), 16 bytes, after ctrl on XRC send QPs.
struct XrcSeg {
    uint8_t xrc_srqn[4];
    uint8_t reserved[12];
};

static_assert(sizeof(CtrlSeg) == 16 && offsetof(CtrlSeg, qpn_ds) == 4 && offsetof(CtrlSeg, signature) == 8 &&
              offsetof(CtrlSeg, fm_ce_se) == 11 && offsetof(CtrlSeg, imm) == 12);
static_assert(sizeof(RaddrSeg) == 16 && offsetof(RaddrSeg, rkey) == 8);
static_assert(sizeof(DataSeg) == 16 && offsetof(DataSeg, lkey) == 4 && offsetof(DataSeg, addr) == 8);
static_assert(sizeof(InlineSegHeader) == 4);
static_assert(sizeof(AtomicSeg) == 16 && offsetof(AtomicSeg, compare) == 8);
static_assert(sizeof(AvBase) == 16 && offsetof(AvBase, dqp_dct) == 8 && offsetof(AvBase, rlid) == 14);
static_assert(sizeof(Av) == 48 && offsetof(Av, rmac) == 20 && offsetof(Av, grh_gid_fl) == 28 &&
              offsetof(Av, rgid) == 32);
static_assert(sizeof(XrcSeg) == 16 && sizeof(GrhHalf) == 32 && offsetof(GrhHalf, rgid) == 16);

// ------------------------------------------------------------------------------------------ doorbell record
// Two big-endian 32-bit counters (MLX5_RCV_DBR = 0, MLX5_SND_DBR = 1). The send one holds the index of the
// next free WQEBB, modulo 2^16; the hardware reads only those 16 bits.
inline constexpr uint32_t kRecvDbrIndex = 0;
inline constexpr uint32_t kSendDbrIndex = 1;
inline constexpr uint32_t kSendDbrOffset = kSendDbrIndex * 4;
inline constexpr uint32_t kDbrBytes = 8;
inline constexpr uint32_t kSendDbrMask = 0xffff;
// A CQ's doorbell record: [0] consumer index (24 bits), [1] arm.
inline constexpr uint32_t kCqConsumerMask = 0xffffff;

// ------------------------------------------------------------------------------------------ completion queue entry
// struct mlx5_cqe64: the last 32 bytes hold everything a requester completion carries.
struct Cqe64 {
    uint8_t rsvd0[22];
    uint8_t slid[2];          // responder: the sender's LID
    uint8_t flags_rqpn[4];    // responder: [29:28] where the GRH is (1 = in the receive buffer), [27:24] SL,
                              // [23:0] the sender's QPN
    uint8_t rsvd28[4];
    uint8_t srqn_uidx[4];
    uint8_t imm_inval_pkey[4];
    uint8_t app;
    uint8_t app_op;
    uint8_t app_info[2];
    uint8_t byte_cnt[4];
    uint8_t timestamp[8];
    uint8_t sop_drop_qpn[4];  // requester: [31:24] the WQE's opcode, [23:0] QPN
    uint8_t wqe_counter[2];   // index of the WQE this CQE completes
    uint8_t signature;
    uint8_t op_own;           // [7:4] CQE opcode, [3:2] format (3 = compressed), [1] SE, [0] owner

    uint8_t opcode() const { return op_own >> 4; }
    bool owner() const { return (op_own & 1) != 0; }
    uint8_t format() const { return (op_own >> 2) & 3; }
    uint16_t wqe_index() const { return load_be16(wqe_counter); }
    uint32_t qpn() const { return load_be32(sop_drop_qpn) & 0xffffff; }
    uint8_t wqe_opcode() const { return sop_drop_qpn[0]; }
    uint32_t bytes() const { return load_be32(byte_cnt); }
    uint64_t hw_timestamp() const { return load_be64(timestamp); }
    // Error CQEs (struct mlx5_err_cqe, opcode REQ_ERR or RESP_ERR) reuse bytes 54 and 55 of the timestamp
    // area for the vendor syndrome and the syndrome; meaningless for other opcodes.
    uint8_t vendor_syndrome() const { return timestamp[6]; }
    uint8_t syndrome() const { return timestamp[7]; }
};
static_assert(sizeof(Cqe64) == 64 && offsetof(Cqe64, slid) == 22 && offsetof(Cqe64, flags_rqpn) == 24 &&
              offsetof(Cqe64, srqn_uidx) == 32 && offsetof(Cqe64, byte_cnt) == 44 &&
              offsetof(Cqe64, timestamp) == 48 && offsetof(Cqe64, sop_drop_qpn) == 56 &&
              offsetof(Cqe64, wqe_counter) == 60 && offsetof(Cqe64, op_own) == 63);

// CQE opcodes (op_own [7:4]).
namespace cqe_op {
inline constexpr uint8_t REQ = 0;
inline constexpr uint8_t RESP_WR_IMM = 1;
inline constexpr uint8_t RESP_SEND = 2;
inline constexpr uint8_t RESP_SEND_IMM = 3;
inline constexpr uint8_t RESP_SEND_INV = 4;
inline constexpr uint8_t RESIZE_CQ = 5;
inline constexpr uint8_t NO_PACKET = 6;
inline constexpr uint8_t SIGNATURE_ERR = 12;  // MLX5_CQE_SIG_ERR (renamed: SIG_ERR is a <signal.h> macro)
inline constexpr uint8_t REQ_ERR = 13;
inline constexpr uint8_t RESP_ERR = 14;
inline constexpr uint8_t INVALID = 15;
}  // namespace cqe_op
inline constexpr uint8_t kCqeFormatCompressed = 3;

}  // namespace sigmatrace::gpumem::mlx5
