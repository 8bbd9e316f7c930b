// Turns what mlx5dv_init_obj returned for verbs QPs and CQs (struct mlx5dv_qp / mlx5dv_cq, rdma-core's public
// mlx5dv.h) into the observer's ExportedQp / ExportedCq.
#pragma once

#include <cstdint>

struct mlx5dv_obj;

namespace sigmatrace::gpumem {

class SetupObserver;

// After a successful mlx5dv_init_obj(obj, obj_type): reports the QP and CQ outputs it filled.
void observe_init_obj(SetupObserver& observer, const mlx5dv_obj* obj, uint64_t obj_type);

}  // namespace sigmatrace::gpumem
