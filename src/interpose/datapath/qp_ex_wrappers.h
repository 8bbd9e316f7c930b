// The ibv_wr_* API: wrappers for the function pointers of struct ibv_qp_ex.
//
// A list of WRs is built between wr_start and wr_complete; each opcode setter (wr_send, wr_rdma_write, ...)
// starts a WR from the QP's current wr_id/wr_flags, and the data setters (wr_set_sge, wr_set_inline_data,
// wr_set_ud_addr, ...) complete it. The wrappers record the list in the QP's state and emit it as post_send
// events (api = 1) at wr_complete, which is when the provider rings the doorbell. wr_start is left to the
// provider: a list opens at its first WR (qp_ex_wrappers.cpp says why).
//
// Providers rewrite some of these pointers after creation (mlx5 sets wr_complete on every transition to RTS
// or RESET), so wrap_qp_ex() is re-run after every ibv_modify_qp: a pointer that is no longer ours becomes
// the new original.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "interpose/state/object_state.h"

namespace sigmatrace::interpose {

// Opcode setters wrapped when the QP was created without a known send_ops_flags (seen only through
// ibv_qp_to_qp_ex): every setter older than the newest ABI additions.
inline constexpr uint64_t kClassicSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                            IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                            IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                            IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |
                                            IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV |
                                            IBV_QP_EX_WITH_TSO;

// Wraps (or re-wraps) the pointers of `qpx`. Only the setters of opcodes in `send_ops_flags` are touched:
// the application can only use those, and a member newer than the running library (wr_atomic_write on an old
// rdma-core) may not exist in the provider's structure at all. `max_wrs` sizes the list buffer (the send
// queue depth bounds how many WRs one list can hold). Under the registry mutex.
void wrap_qp_ex(QpState& s, ibv_qp_ex* qpx, uint64_t send_ops_flags, uint32_t max_wrs);

// After ibv_modify_qp: re-applies the wrappers to pointers the provider replaced.
void rewrap_qp_ex(QpState& s);

}  // namespace sigmatrace::interpose
