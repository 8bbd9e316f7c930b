// libFuzzer target: the WQE decoder on arbitrary rings. Input: byte 0 = transport, byte 1 = log2 of the ring
// size in WQEBBs (0..6), bytes 2..3 = first slot, the rest = ring contents (zero-padded or cut to the ring's
// exact size, in an allocation of exactly that size so ASan catches any read outside the ring). Decodes WQEs
// one after another from the slot, as the watcher does, and checks what every "ok" result promises.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mlx5_format/mlx5_layout.h"
#include "mlx5_format/wqe_decoder.h"

using namespace sigmatrace::gpumem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 4) return 0;
    const auto transport = static_cast<Transport>(data[0] % 5);
    const uint32_t wqebbs = 1u << (data[1] % 7);
    uint32_t slot = static_cast<uint32_t>(data[2]) | static_cast<uint32_t>(data[3]) << 8;
    const size_t ring_bytes = size_t{wqebbs} * mlx5::kWqeBasicBlock;
    std::vector<uint8_t> ring(ring_bytes, 0);
    std::memcpy(ring.data(), data + 4, std::min(ring_bytes, size - 4));

    const RingView view{ring.data(), wqebbs};
    for (uint32_t i = 0; i < 2 * wqebbs; ++i) {
        DecodedWqe w;
        static WqePayload payload;  // large: not on the stack
        const WqeStatus st = decode_wqe(view, slot, transport, w, (i & 1) ? &payload : nullptr);
        if ((i & 1) && st == WqeStatus::Ok) {
            if (payload.num_segments != w.num_sge && w.num_sge <= WqePayload::kMaxSegments) std::abort();
            if (payload.inline_length > sizeof payload.inline_bytes) std::abort();
        }
        if (st == WqeStatus::Ok) {
            if (w.ds == 0 || w.ds > mlx5::kMaxDs) std::abort();
            if (w.wqebbs != mlx5::wqebbs_for_ds(w.ds) || w.wqebbs > wqebbs) std::abort();
            if (!known_send_opcode(w.opcode)) std::abort();
            if (w.num_sge >= w.ds) std::abort();
        }
        (void)wqe_status_name(st);
        (void)mlx5_opcode_name(w.opcode);
        slot += w.wqebbs ? w.wqebbs : 1;
    }
    return 0;
}
