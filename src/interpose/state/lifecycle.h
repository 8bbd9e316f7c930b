// What the set-up wrappers do around the real calls: wrap the new object's function tables, keep per-object
// state, and emit the object-life events (device_open, port_info, cq/qp/srq/mr/ah life, qp_modify).
//
// The exported wrappers (verbs_hooks.cpp, mlx5dv_hooks.cpp) and the verbs_context wrappers (context_ops.cpp)
// call these after the real function returned, from the outermost wrapper only (hook_scope.h). They are also
// what the unit tests drive directly, with hand-made verbs objects.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace sigmatrace::interpose {

// device_open.via
enum class OpenVia : uint32_t { open_device = 0, import_device = 1, mlx5dv_open_device = 2, discovered = 3 };
// cq_create.kind / qp_create.kind
enum class CreateKind : uint32_t { verbs = 0, extended = 1, mlx5dv = 2 };
// mr_reg.kind
enum class MrKind : uint32_t { reg_mr = 0, reg_mr_iova = 1, reg_mr_iova2 = 2, reg_dmabuf_mr = 3 };

void on_context_opened(ibv_context* ctx, OpenVia via);
void on_context_closed(ibv_context* ctx, int ret);
// Wraps a context the tracer has not seen open (one opened through a path no hook covers); emits its
// device_open with via = discovered. Called by every hook that receives a context or an object of one.
void ensure_context_known(ibv_context* ctx);

void on_qp_created(ibv_context* ctx, ibv_qp* qp, const ibv_qp_init_attr* attr, CreateKind kind, int err);
void on_qp_created_ex(ibv_context* ctx, ibv_qp* qp, const ibv_qp_init_attr_ex* attr, CreateKind kind, int err);
void on_qp_modified(ibv_qp* qp, const ibv_qp_attr* attr, int attr_mask, int ret);
// Destroys through `real`: tells the GPU module first, emits the QP's final counters, runs the real destroy
// under the registry mutex (so no new QP can be registered at the same address before this one's state is
// released), then emits qp_destroy. Returns what `real` returned, with its errno.
int destroy_qp(ibv_qp* qp, int (*real)(ibv_qp*));
// ibv_qp_to_qp_ex: make sure the ibv_wr_* pointers of `qpx` are wrapped.
void on_qp_ex_obtained(ibv_qp* qp, ibv_qp_ex* qpx);

void on_cq_created(ibv_context* ctx, ibv_cq* cq, int cqe, ibv_comp_channel* channel, int err);
void on_cq_ex_created(ibv_context* ctx, ibv_cq_ex* cq, const ibv_cq_init_attr_ex* attr, CreateKind kind, int err);
// As destroy_qp, for CQs (classic and extended).
int destroy_cq(ibv_cq* cq, int (*real)(ibv_cq*));

void on_srq_created(ibv_context* ctx, ibv_srq* srq, uint32_t max_wr, int err);
void on_srq_destroyed(ibv_srq* srq, int ret);

void on_mr_registered(ibv_pd* pd, ibv_mr* mr, uint64_t addr, uint64_t length, uint64_t iova, uint32_t access,
                      MrKind kind, int err);
void on_mr_deregistered(ibv_mr* mr, int ret);

void on_ah_created(ibv_pd* pd, ibv_ah* ah, const ibv_ah_attr* attr, int err);

void on_cq_event(ibv_comp_channel* channel, ibv_cq* cq, int ret);

// Deferred emission: the calling thread is about to block, or to close something its captured records refer
// to; its records become events first (errno kept).
void before_blocking() noexcept;

// The libibverbs queries device_open/port_info need, and ibv_qp_to_qp_ex. The library uses the real
// libibverbs functions; unit tests, whose contexts are hand-made, install their own.
struct VerbsQueries {
    int (*query_device)(ibv_context*, ibv_device_attr*);
    int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*);
    int (*query_gid)(ibv_context*, uint8_t, int, ibv_gid*);
    ibv_qp_ex* (*qp_to_qp_ex)(ibv_qp*);
};
void set_verbs_queries(const VerbsQueries* q) noexcept;  // nullptr: the real libibverbs functions

// Forgets every context, QP and CQ (tests only: the objects they point to are gone).
void reset_lifecycle_for_testing();

}  // namespace sigmatrace::interpose
