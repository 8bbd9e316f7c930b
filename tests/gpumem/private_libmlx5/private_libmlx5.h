// Force-included (-include) into the sources of gpu_ibgda_put to build gpu_ibgda_put_private_libmlx5: every libmlx5
// function the workload calls is renamed to a definition in private_libmlx5.cpp, which reaches libmlx5 only through
// dlopen("libmlx5.so.1", RTLD_LOCAL) and dlsym/dlvsym by handle, as MORI and NCCL's vendored DOCA do. The program
// is not linked against libmlx5, so the tracer sees none of these calls through the exported symbols.
#pragma once

#define mlx5dv_init_obj st_private_mlx5dv_init_obj
#define mlx5dv_devx_umem_reg st_private_mlx5dv_devx_umem_reg
#define mlx5dv_devx_umem_dereg st_private_mlx5dv_devx_umem_dereg
#define mlx5dv_devx_alloc_uar st_private_mlx5dv_devx_alloc_uar
#define mlx5dv_devx_free_uar st_private_mlx5dv_devx_free_uar
#define mlx5dv_devx_obj_create st_private_mlx5dv_devx_obj_create
#define mlx5dv_devx_obj_query st_private_mlx5dv_devx_obj_query
#define mlx5dv_devx_obj_modify st_private_mlx5dv_devx_obj_modify
#define mlx5dv_devx_obj_destroy st_private_mlx5dv_devx_obj_destroy
#define mlx5dv_devx_general_cmd st_private_mlx5dv_devx_general_cmd
#define mlx5dv_devx_query_eqn st_private_mlx5dv_devx_query_eqn
