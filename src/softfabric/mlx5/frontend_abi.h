/*
 * The C interface between the fabric provider (libsoftfabric-rdmav34.so, which implements mlx5 DevX and direct
 * verbs for fabric devices: src/softfabric/mlx5/) and the libmlx5 stand-in that `sigmatrace fabric` puts in
 * front of the real libmlx5 (src/softfabric/mlx5/shim/). The stand-in finds the provider the process already
 * loaded (RDMAV_DRIVERS) and asks it for this table; every call on a fabric context or object goes through it,
 * every other call to the real libmlx5.
 *
 * Plain C types only: the two libraries share no C++ objects. Bump kSoftfabricMlx5AbiVersion on any change.
 */
#pragma once

#include <infiniband/mlx5dv.h>
#include <stddef.h>
#include <stdint.h>

#define SOFTFABRIC_MLX5_ABI_VERSION 4u
#define SOFTFABRIC_MLX5_ENTRY "softfabric_mlx5_frontend"

#ifdef __cplusplus
extern "C" {
#endif

struct softfabric_mlx5_ops {
    uint32_t abi_version;
    uint32_t size;  /* sizeof(struct softfabric_mlx5_ops) of the provider */
    /* 1 when the context / object belongs to the fabric. */
    int (*owns_context)(struct ibv_context* ctx);
    int (*owns_object)(const void* umem_uar_or_devx_obj);
    /* mlx5dv entry points, same contracts as libmlx5's (errno set on failure). */
    struct mlx5dv_devx_umem* (*umem_reg)(struct ibv_context* ctx, void* addr, size_t size, uint32_t access);
    int (*umem_dereg)(struct mlx5dv_devx_umem* umem);
    struct mlx5dv_devx_uar* (*alloc_uar)(struct ibv_context* ctx, uint32_t flags);
    void (*free_uar)(struct mlx5dv_devx_uar* uar);
    struct mlx5dv_devx_obj* (*obj_create)(struct ibv_context* ctx, const void* in, size_t inlen, void* out,
                                          size_t outlen);
    int (*obj_modify)(struct mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out, size_t outlen);
    int (*obj_query)(struct mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out, size_t outlen);
    int (*obj_destroy)(struct mlx5dv_devx_obj* obj);
    int (*query_eqn)(struct ibv_context* ctx, uint32_t vector, uint32_t* eqn);
    /* mlx5dv_init_obj for fabric QPs, CQs, SRQs, PDs and AHs (every object named in obj must be a fabric one). */
    int (*init_obj)(struct mlx5dv_obj* obj, uint64_t obj_type);
    /* mlx5dv_query_device, mlx5dv_create_cq and mlx5dv_create_qp on a fabric context. */
    int (*query_device)(struct ibv_context* ctx, struct mlx5dv_context* attrs);
    struct ibv_cq_ex* (*create_cq)(struct ibv_context* ctx, struct ibv_cq_init_attr_ex* cq_attr,
                                   struct mlx5dv_cq_init_attr* mlx5_attr);
    struct ibv_qp* (*create_qp)(struct ibv_context* ctx, struct ibv_qp_init_attr_ex* qp_attr,
                                struct mlx5dv_qp_init_attr* mlx5_attr);
    /* mlx5dv_qp_ex_from_ibv_qp_ex on a fabric QP, and 1 when an mlx5dv_qp_ex is one it returned. */
    struct mlx5dv_qp_ex* (*qp_ex_from_ibv_qp_ex)(struct ibv_qp_ex* qp);
    int (*owns_qp_ex)(const struct mlx5dv_qp_ex* mqp);
    /* mlx5dv_devx_general_cmd on a fabric context. */
    int (*general_cmd)(struct ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen);
    /* mlx5dv_devx_qp_modify on a fabric verbs QP. */
    int (*verbs_qp_modify)(struct ibv_qp* qp, const void* in, size_t inlen, void* out, size_t outlen);
};

/* Exported by the provider. NULL when the provider was built for another ABI version. */
typedef const struct softfabric_mlx5_ops* (*softfabric_mlx5_entry_fn)(uint32_t abi_version);

#ifdef __cplusplus
}
#endif
