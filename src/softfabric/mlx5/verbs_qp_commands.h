// DevX commands on verbs QPs of a fabric device (mlx5dv_devx_qp_modify): UCX's DevX memory domain moves every QP
// it created through verbs (UD QPs, and RC QPs, DCIs and DCTs when it creates no DevX objects) through its
// states with PRM commands. The fabric executes them as the equivalent ibv_modify_qp, with the same checks.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

namespace softfabric::mlx5 {

// The verbs access flags the remote-access bits of a QP transition's qpc or a CREATE_DCT's dctc grant (rre, rwe,
// rae: sigmatrace::gpumem::prm::ModifyQp, prm::CreateDct).
template <class Command> uint32_t ibv_access_of(const Command& m) {
    return IBV_ACCESS_LOCAL_WRITE | (m.remote_read ? IBV_ACCESS_REMOTE_READ : 0) |
           (m.remote_write ? IBV_ACCESS_REMOTE_WRITE : 0) | (m.remote_atomic ? IBV_ACCESS_REMOTE_ATOMIC : 0);
}

// One QP state-transition command (RST2INIT, INIT2RTR, RTR2RTS, 2ERR, 2RST) on `qp`. 0: done, `out` holds
// status 0. A mailbox that is no transition of this QP (another opcode, another qpn, too short): EINVAL, as
// the kernel refuses it. A transition the QP's state or type does not allow, or values the device rejects:
// `out` holds status BAD_PARAM and the opcode in its syndrome, and the result is EINVAL (what ibv_modify_qp
// answers for the same transition). A transition the fabric does not model (RTS2RTS, SQERR2RTS, INIT2INIT, SQD2RTS):
// EOPNOTSUPP. errno is set to any nonzero result.
int modify_verbs_qp(ibv_qp* qp, const void* in, size_t inlen, void* out, size_t outlen);

}  // namespace softfabric::mlx5
