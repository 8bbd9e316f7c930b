// What a work request or a completion contributes to an event: the values both emission paths (immediate,
// data_events.cpp; deferred, deferred_capture.cpp) read from the application's structures.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace sigmatrace::interpose {

inline uint32_t sge_bytes(const ibv_sge* sg, int n) noexcept {
    uint32_t sum = 0;
    for (int i = 0; i < n; ++i) sum += sg[i].length;
    return sum;
}

inline bool is_rdma(ibv_wr_opcode op) noexcept {
    return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ;
}
inline bool is_atomic(ibv_wr_opcode op) noexcept {
    return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}
inline bool has_imm(ibv_wr_opcode op) noexcept {
    return op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_IMM;
}

// The remote address and key a send WR carries (0 when its opcode has none; UD QPs have none).
struct RemoteTarget {
    uint64_t raddr = 0;
    uint32_t rkey = 0;
};
inline RemoteTarget remote_target(const ibv_send_wr& w, bool ud) noexcept {
    if (!ud && is_rdma(w.opcode)) return {w.wr.rdma.remote_addr, w.wr.rdma.rkey};
    if (!ud && is_atomic(w.opcode)) return {w.wr.atomic.remote_addr, w.wr.atomic.rkey};
    if (w.opcode == IBV_WR_SEND_WITH_INV || w.opcode == IBV_WR_LOCAL_INV) return {0, w.invalidate_rkey};
    return {};
}

// Index of `bad` in the chain starting at `first`, -1 when absent.
template <typename Wr> int32_t index_in_chain(const Wr* first, const Wr* bad) noexcept {
    if (bad == nullptr) return -1;
    int32_t i = 0;
    for (const Wr* w = first; w != nullptr; w = w->next, ++i)
        if (w == bad) return i;
    return -1;
}

// bad_index of a post event: where *bad_wr points when the call failed, else -1.
template <typename Wr> int32_t bad_index_of(const Wr* first, int ret, Wr* const* bad_wr) noexcept {
    return (ret != 0 && bad_wr != nullptr) ? index_in_chain<Wr>(first, *bad_wr) : -1;
}

}  // namespace sigmatrace::interpose
