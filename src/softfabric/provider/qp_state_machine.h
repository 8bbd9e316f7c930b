// Which ibv_modify_qp() calls are legal: the transition table of the IB specification (the one the kernel's
// ib_modify_qp_is_ok() implements) for RC, UC and UD QPs. Illegal transitions, missing required attributes
// and attributes not allowed in a transition fail with EINVAL, as on hardware.
#pragma once

#include <infiniband/verbs.h>

namespace softfabric::provider {

struct TransitionRule {
    bool allowed = false;
    int required = 0;  // IBV_QP_* bits that must be present
    int optional = 0;  // IBV_QP_* bits that may be present
};

TransitionRule transition_rule(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to);

// True when `mask` is acceptable for moving a `type` QP from `from` to `to` (IBV_QP_STATE and
// IBV_QP_CUR_STATE are handled by the caller).
bool transition_ok(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to, int mask);

// The same for DC QPs (mlx5's rules): a DCI goes RESET -> INIT (port, P_Key) -> RTR (MTU, the local path) -> RTS
// (timeouts and retries, like RC; no destination: each WQE names one); a DCT goes RESET -> INIT (port, P_Key,
// access) -> RTR (MTU, local path, RNR timer) and stays there.
bool dc_transition_ok(bool initiator, ibv_qp_state from, ibv_qp_state to, int mask);

}  // namespace softfabric::provider
