#include "mlx5_format/wqe_decoder.h"

#include <cstring>

#include "mlx5_format/mlx5_layout.h"

namespace sigmatrace::gpumem {
namespace {

using namespace mlx5;

// Reads the WQE's 16-byte units through the ring's wrap-around. Every access is masked into the ring, so a
// lying ds can make us read the wrong bytes of the ring but never bytes outside it.
class UnitReader {
public:
    UnitReader(const RingView& ring, uint32_t slot)
        : base_(ring.base), mask_(ring.wqebbs * kWqeBasicBlock - 1),
          start_((slot & (ring.wqebbs - 1)) * kWqeBasicBlock) {}

    // Copies units [unit, unit + count) into dst (count * 16 bytes).
    void read(uint32_t unit, uint32_t count, void* dst) const {
        auto* out = static_cast<uint8_t*>(dst);
        for (uint32_t i = 0; i < count; ++i)
            std::memcpy(out + i * kDsUnit, base_ + ((start_ + (unit + i) * kDsUnit) & mask_), kDsUnit);
    }
    template <typename Seg> Seg unit(uint32_t index) const {
        static_assert(sizeof(Seg) % kDsUnit == 0 || sizeof(Seg) < kDsUnit);
        uint8_t buf[(sizeof(Seg) + kDsUnit - 1) / kDsUnit * kDsUnit];
        read(index, sizeof buf / kDsUnit, buf);
        Seg seg;
        std::memcpy(&seg, buf, sizeof seg);
        return seg;
    }

private:
    const uint8_t* base_;
    uint32_t mask_;
    uint32_t start_;
};

enum class Body : uint8_t { None, Gather, Rdma, Atomic, MaskedAtomic, Unknown };

Body body_of(uint8_t opcode) {
    switch (opcode) {
    case op::SEND:
    case op::SEND_IMM:
    case op::SEND_INVAL:
    case op::DUMP: return Body::Gather;
    case op::RDMA_WRITE:
    case op::RDMA_WRITE_IMM:
    case op::RDMA_READ: return Body::Rdma;
    case op::ATOMIC_CS:
    case op::ATOMIC_FA: return Body::Atomic;
    case op::ATOMIC_MASKED_CS:
    case op::ATOMIC_MASKED_FA: return Body::MaskedAtomic;
    // Control-only: no remote data movement to describe (memory registration, signature, NOP, ...), or a
    // raw-Ethernet TSO whose headers are not RDMA. Reported with their ctrl fields and bytes = 0.
    case op::NOP:
    case op::WAIT:
    case op::TSO:
    case op::FMR:
    case op::LOCAL_INVAL:
    case op::CONFIG_CMD:
    case op::SET_PSV:
    case op::UMR:
    case op::TAG_MATCHING:
    case op::FLOW_TBL_ACCESS:
    case op::MMO: return Body::None;
    default: return Body::Unknown;
    }
}

// The opcodes that carry a transport prefix (address vector, XRC segment): those that send to a peer.
bool addresses_peer(Body body) {
    return body == Body::Gather || body == Body::Rdma || body == Body::Atomic || body == Body::MaskedAtomic;
}

// Copies `len` inline bytes that start `skip` bytes into unit `unit` (they may wrap around the ring).
void copy_inline(const UnitReader& r, uint32_t unit, uint32_t skip, uint32_t len, WqePayload& p) {
    uint8_t buf[kDsUnit];
    uint32_t copied = 0;
    while (copied < len && p.inline_length < sizeof p.inline_bytes) {
        r.read(unit, 1, buf);
        for (uint32_t i = skip; i < kDsUnit && copied < len && p.inline_length < sizeof p.inline_bytes; ++i, ++copied)
            p.inline_bytes[p.inline_length++] = buf[i];
        skip = 0;
        ++unit;
    }
}

// Walks data and inline segments from `unit` to the end of the WQE.
WqeStatus read_gather_list(const UnitReader& r, uint32_t unit, uint32_t ds, DecodedWqe& out, WqePayload* payload) {
    uint64_t bytes = 0;
    while (unit < ds) {
        const auto seg = r.unit<DataSeg>(unit);
        const uint32_t bc = seg.length();
        if (bc & kInlineSegFlag) {
            const uint32_t len = bc & ~kInlineSegFlag;
            const uint32_t room = (ds - unit) * kDsUnit - sizeof(InlineSegHeader);
            if (len > room) return WqeStatus::BadInline;
            out.has_inline = true;
            bytes += len;
            if (payload) copy_inline(r, unit, sizeof(InlineSegHeader), len, *payload);
            unit += (sizeof(InlineSegHeader) + len + kDsUnit - 1) / kDsUnit;
            continue;
        }
        if (seg.local_key() == kInvalidLkey) break;  // list terminator
        bytes += bc;
        if (payload && payload->num_segments < WqePayload::kMaxSegments)
            payload->segments[payload->num_segments++] = {seg.local_addr(), bc, seg.local_key()};
        ++out.num_sge;
        ++unit;
    }
    // A WQE moves at most 2 GiB per data segment and has at most 63 of them; clamp rather than wrap.
    out.bytes = bytes > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(bytes);
    return WqeStatus::Ok;
}

}  // namespace

WqeStatus decode_wqe(const RingView& ring, uint32_t slot, Transport transport, DecodedWqe& out,
                     WqePayload* payload) {
    out = DecodedWqe{};
    if (payload) {
        payload->num_segments = 0;
        payload->inline_length = 0;
        payload->atomic_swap_mask = payload->atomic_compare_mask = payload->atomic_field_boundary = 0;
    }
    if (!ring.base || ring.wqebbs == 0 || (ring.wqebbs & (ring.wqebbs - 1)) != 0) return WqeStatus::BadRing;
    const UnitReader r(ring, slot);

    const auto ctrl = r.unit<CtrlSeg>(0);
    out.wqe_index = ctrl.wqe_index();
    out.opcode = ctrl.opcode();
    out.opmod = ctrl.opmod();
    out.fm_ce_se = ctrl.fm_ce_se;
    out.qpn = ctrl.qpn();
    out.ds = ctrl.ds();
    const uint32_t ds = out.ds;
    if (ds == 0 || ds > kMaxDs || ds * kDsUnit > ring.wqebbs * kWqeBasicBlock) return WqeStatus::BadDs;
    out.wqebbs = static_cast<uint8_t>(wqebbs_for_ds(ds));

    const Body body = body_of(out.opcode);
    if (body == Body::Unknown) return WqeStatus::UnknownOpcode;
    if (out.opcode == op::RDMA_WRITE_IMM || out.opcode == op::SEND_IMM) out.imm = ctrl.imm_raw();
    if (body == Body::None) return WqeStatus::Ok;

    uint32_t unit = 1;
    if (addresses_peer(body)) {
        switch (transport) {
        case Transport::Rc:
        case Transport::Uc: break;
        case Transport::Xrc: unit += 1; break;
        case Transport::Ud:
        case Transport::Dci: {
            if (unit >= ds) return WqeStatus::Truncated;
            const auto av = r.unit<AvBase>(unit);
            out.remote_qpn = av.remote_qpn();
            out.av_rlid = load_be16(av.rlid);
            // UD WQEs always carry the full AV; DC ones may carry the 16-byte base.
            const bool full = transport == Transport::Ud || av.extended();
            if (full && unit + 2 < ds) {
                // The GRH half: its GID is valid when the AV says it carries a GRH.
                const auto grh = r.unit<GrhHalf>(unit + 1);
                if (load_be32(grh.grh_gid_fl) & kAvGrh) {
                    out.av_gid_prefix = load_be64(grh.rgid);
                    out.av_gid_iid = load_be64(grh.rgid + 8);
                }
            }
            unit += full ? sizeof(Av) / kDsUnit : sizeof(AvBase) / kDsUnit;
            break;
        }
        }
        if (unit > ds) return WqeStatus::Truncated;
    }

    switch (body) {
    case Body::Gather: return read_gather_list(r, unit, ds, out, payload);
    case Body::Rdma: {
        if (unit + 1 > ds) return WqeStatus::Truncated;
        const auto raddr = r.unit<RaddrSeg>(unit);
        out.raddr = raddr.remote_addr();
        out.rkey = raddr.remote_key();
        return read_gather_list(r, unit + 1, ds, out, payload);
    }
    case Body::Atomic: {
        if (unit + 2 > ds) return WqeStatus::Truncated;
        const auto raddr = r.unit<RaddrSeg>(unit);
        const auto atomic = r.unit<AtomicSeg>(unit + 1);
        out.raddr = raddr.remote_addr();
        out.rkey = raddr.remote_key();
        out.atomic_arg = atomic.swap_or_add();
        out.atomic_compare = out.opcode == op::ATOMIC_CS ? atomic.compare_value() : 0;
        const WqeStatus st = read_gather_list(r, unit + 2, ds, out, payload);
        out.bytes = 8;  // the operation's size, whatever the local buffer's segment says
        return st;
    }
    case Body::MaskedAtomic: {
        // Argument size: 8 bytes for the classic masked atomics; 4 << (opmod & 7) for the extended ones.
        uint32_t size = 8;
        if (out.opmod & kExtAtomicOpmodFlag) {
            const uint32_t log = out.opmod & 7;
            if (log > 3) return WqeStatus::BadAtomicSize;  // 4..32 bytes are defined
            size = 4u << log;
        }
        // FA: {add, field boundary}; CS: {swap, compare, swap mask, compare mask}; each `size` bytes.
        const uint32_t arg_bytes = (out.opcode == op::ATOMIC_MASKED_FA ? 2 : 4) * size;
        const uint32_t arg_units = (arg_bytes + kDsUnit - 1) / kDsUnit;
        if (unit + 1 + arg_units > ds) return WqeStatus::Truncated;
        const auto raddr = r.unit<RaddrSeg>(unit);
        out.raddr = raddr.remote_addr();
        out.rkey = raddr.remote_key();
        uint8_t args[8 * kDsUnit];
        r.read(unit + 1, arg_units, args);
        const auto field = [&](uint32_t i) -> uint64_t {
            const uint8_t* p = args + i * size;
            return size == 4 ? load_be32(p) : load_be64(p);  // wider ones: their first (most significant) 8 bytes
        };
        out.atomic_arg = field(0);
        out.atomic_compare = out.opcode == op::ATOMIC_MASKED_CS ? field(1) : 0;
        if (payload) {
            if (out.opcode == op::ATOMIC_MASKED_CS) {
                payload->atomic_swap_mask = field(2);
                payload->atomic_compare_mask = field(3);
            } else {
                payload->atomic_field_boundary = field(1);
            }
        }
        const WqeStatus st = read_gather_list(r, unit + 1 + arg_units, ds, out, payload);
        out.bytes = size;
        return st;
    }
    default: return WqeStatus::Ok;
    }
}

bool known_send_opcode(uint8_t opcode) { return body_of(opcode) != Body::Unknown; }

const char* mlx5_opcode_name(uint8_t opcode) {
    switch (opcode) {
    case op::NOP: return "NOP";
    case op::SEND_INVAL: return "SEND_INVAL";
    case op::RDMA_WRITE: return "RDMA_WRITE";
    case op::RDMA_WRITE_IMM: return "RDMA_WRITE_IMM";
    case op::SEND: return "SEND";
    case op::SEND_IMM: return "SEND_IMM";
    case op::TSO: return "TSO";
    case op::WAIT: return "WAIT";
    case op::RDMA_READ: return "RDMA_READ";
    case op::ATOMIC_CS: return "ATOMIC_CS";
    case op::ATOMIC_FA: return "ATOMIC_FA";
    case op::ATOMIC_MASKED_CS: return "ATOMIC_MASKED_CS";
    case op::ATOMIC_MASKED_FA: return "ATOMIC_MASKED_FA";
    case op::FMR: return "FMR";
    case op::LOCAL_INVAL: return "LOCAL_INVAL";
    case op::CONFIG_CMD: return "CONFIG_CMD";
    case op::SET_PSV: return "SET_PSV";
    case op::DUMP: return "DUMP";
    case op::UMR: return "UMR";
    case op::TAG_MATCHING: return "TAG_MATCHING";
    case op::FLOW_TBL_ACCESS: return "FLOW_TBL_ACCESS";
    case op::MMO: return "MMO";
    default: return "UNKNOWN";
    }
}

const char* wqe_status_name(WqeStatus status) {
    switch (status) {
    case WqeStatus::Ok: return "ok";
    case WqeStatus::BadDs: return "bad ds";
    case WqeStatus::UnknownOpcode: return "unknown opcode";
    case WqeStatus::Truncated: return "segments past ds";
    case WqeStatus::BadInline: return "inline data past the WQE end";
    case WqeStatus::BadAtomicSize: return "undefined masked-atomic size";
    case WqeStatus::BadRing: return "unusable ring view";
    }
    return "?";
}

}  // namespace sigmatrace::gpumem
