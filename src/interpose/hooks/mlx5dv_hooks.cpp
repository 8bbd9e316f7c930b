// The mlx5 direct-verbs functions that create contexts, QPs and CQs outside libibverbs' exported calls
// (versions in libsigmatrace.map). mlx5dv_open_device opens a context through libibverbs' private path, and
// mlx5dv_create_qp/cq create objects without going through the verbs_context entries, so without these hooks
// such objects would never be wrapped. The DevX functions (GPU-driven queues) live in src/gpumem.
#include <infiniband/mlx5dv.h>

#include <cerrno>

#include "interpose/hooks/export.h"
#include "interpose/state/hook_scope.h"
#include "interpose/state/lifecycle.h"

using namespace sigmatrace::interpose;

ST_EXPORT ibv_context* mlx5dv_open_device(ibv_device* device, mlx5dv_context_attr* attr) {
    auto real = ST_REAL_MLX5(mlx5dv_open_device, "MLX5_1.7");
    if (real == nullptr) return missing_real_errno<ibv_context*>("mlx5dv_open_device", "MLX5_1.7", EOPNOTSUPP);
    return call_and_record(
        real,
        [&](ibv_context* ctx, int) {
            on_context_opened(ctx, OpenVia::mlx5dv_open_device);
        },
        device, attr);
}

ST_EXPORT ibv_qp* mlx5dv_create_qp(ibv_context* ctx, ibv_qp_init_attr_ex* qp_attr, mlx5dv_qp_init_attr* mlx5_attr) {
    auto real = ST_REAL_MLX5(mlx5dv_create_qp, "MLX5_1.3");
    if (real == nullptr) return missing_real_errno<ibv_qp*>("mlx5dv_create_qp", "MLX5_1.3", EOPNOTSUPP);
    return call_and_record(
        real,
        [&](ibv_qp* qp, int err) {
            on_qp_created_ex(ctx, qp, qp_attr, CreateKind::mlx5dv, qp == nullptr ? err : 0);
        },
        ctx, qp_attr, mlx5_attr);
}

ST_EXPORT ibv_cq_ex* mlx5dv_create_cq(ibv_context* ctx, ibv_cq_init_attr_ex* cq_attr, mlx5dv_cq_init_attr* mlx5_attr) {
    auto real = ST_REAL_MLX5(mlx5dv_create_cq, "MLX5_1.1");
    if (real == nullptr) return missing_real_errno<ibv_cq_ex*>("mlx5dv_create_cq", "MLX5_1.1", EOPNOTSUPP);
    return call_and_record(
        real,
        [&](ibv_cq_ex* cq, int err) {
            on_cq_ex_created(ctx, cq, cq_attr, CreateKind::mlx5dv, cq == nullptr ? err : 0);
        },
        ctx, cq_attr, mlx5_attr);
}
