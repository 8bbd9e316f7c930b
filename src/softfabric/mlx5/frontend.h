// The fabric's implementation of mlx5 DevX and direct verbs for its own devices (docs/softfabric.md, "mlx5
// DevX and direct verbs"), compiled into the provider so that it shares the provider's runtime, and reached from
// the libmlx5 stand-in through the C table of frontend_abi.h.
#pragma once

#include <infiniband/verbs.h>

namespace softfabric::mlx5 {

// The provider's destroy_qp / destroy_cq / destroy_srq / destroy_ah call these first: an object whose rings (or
// address vector) were exported with mlx5dv_init_obj stops being driven through them.
void forget_verbs_qp(ibv_qp* qp);
void forget_verbs_cq(ibv_cq* cq);
void forget_verbs_srq(ibv_srq* srq);
void forget_verbs_ah(ibv_ah* ah);
// The provider's modify_qp calls this after moving a QP to RESET: as libmlx5 does, the fabric clears its doorbell
// records, and the exported rings start again at WQE 0 (UCX resets a failed DCI and posts from index 0 again).
void reset_verbs_qp(ibv_qp* qp);

}  // namespace softfabric::mlx5
