// libsigmatrace.so's exports of the mlx5dv functions that set up GPU-driven queues. Each calls the real libmlx5
// function (through interpose/real_symbol.h: found even when libmlx5 was dlopen'ed RTLD_LOCAL, and handed out
// by the dlsym/dlvsym interposer to libraries that look it up by handle), then tells the set-up observer what
// happened; tear-down calls tell it first, so the watcher stops reading a ring before it is freed. Only the
// outermost hook reports (a libmlx5 function calling another exported one is one application call).
// errno is what the real call left.
#include <infiniband/mlx5dv.h>

#include <cerrno>

#include "gpumem/gpumem_runtime.h"
#include "gpumem/init_obj_observer.h"
#include "interpose/runtime/activation.h"
#include "interpose/hooks/export.h"
#include "interpose/state/hook_scope.h"

using sigmatrace::gpumem::GpuMemRuntime;
using sigmatrace::gpumem::uptr;
using sigmatrace::interpose::HookScope;
using sigmatrace::interpose::missing_real_errno;

namespace {

// Runs `observe` with errno preserved. A DevX or init_obj set-up call is RDMA use: tracing starts here if
// nothing started it before (interpose/activation.h).
template <typename F> void observe(F&& f) {
    const int saved = errno;
    sigmatrace::interpose::activate_tracing();
    f(GpuMemRuntime::instance().observer());
    errno = saved;
}

}  // namespace

ST_EXPORT struct mlx5dv_devx_umem* mlx5dv_devx_umem_reg(struct ibv_context* ctx, void* addr, size_t size,
                                                        uint32_t access) {
    auto real = ST_REAL_MLX5(mlx5dv_devx_umem_reg, "MLX5_1.7");
    if (!real) return missing_real_errno<mlx5dv_devx_umem*>("mlx5dv_devx_umem_reg", "MLX5_1.7", ENOSYS, nullptr);
    HookScope scope;
    mlx5dv_devx_umem* umem = real(ctx, addr, size, access);
    if (scope.outermost())
        observe([&](auto& o) { o.umem_registered(uptr(ctx), uptr(umem), umem ? umem->umem_id : 0, uptr(addr), size, -1, umem ? 0 : errno); });
    return umem;
}

ST_EXPORT struct mlx5dv_devx_umem* mlx5dv_devx_umem_reg_ex(struct ibv_context* ctx, struct mlx5dv_devx_umem_in* in) {
    auto real = ST_REAL_MLX5(mlx5dv_devx_umem_reg_ex, "MLX5_1.19");
    if (!real) return missing_real_errno<mlx5dv_devx_umem*>("mlx5dv_devx_umem_reg_ex", "MLX5_1.19", ENOSYS, nullptr);
    HookScope scope;
    mlx5dv_devx_umem* umem = real(ctx, in);
    if (scope.outermost() && in) {
        const int fd = (in->comp_mask & MLX5DV_UMEM_MASK_DMABUF) ? in->dmabuf_fd : -1;
        observe([&](auto& o) { o.umem_registered(uptr(ctx), uptr(umem), umem ? umem->umem_id : 0, uptr(in->addr), in->size, fd, umem ? 0 : errno); });
    }
    return umem;
}

ST_EXPORT int mlx5dv_devx_umem_dereg(struct mlx5dv_devx_umem* umem) {
    auto real = ST_REAL_MLX5(mlx5dv_devx_umem_dereg, "MLX5_1.7");
    if (!real) return missing_real_errno<int>("mlx5dv_devx_umem_dereg", "MLX5_1.7", ENOSYS, ENOSYS);
    HookScope scope;
    if (scope.outermost()) observe([&](auto& o) { o.umem_deregistering(uptr(umem)); });
    return real(umem);
}

ST_EXPORT struct mlx5dv_devx_uar* mlx5dv_devx_alloc_uar(struct ibv_context* ctx, uint32_t flags) {
    auto real = ST_REAL_MLX5(mlx5dv_devx_alloc_uar, "MLX5_1.7");
    if (!real) return missing_real_errno<mlx5dv_devx_uar*>("mlx5dv_devx_alloc_uar", "MLX5_1.7", ENOSYS, nullptr);
    HookScope scope;
    mlx5dv_devx_uar* uar = real(ctx, flags);
    if (scope.outermost())
        observe([&](auto& o) {
            o.uar_allocated(uptr(ctx), uptr(uar), uar ? uar->page_id : 0, uar ? uptr(uar->reg_addr) : 0,
                            uar ? uptr(uar->base_addr) : 0, flags, uar ? 0 : errno);
        });
    return uar;
}

ST_EXPORT void mlx5dv_devx_free_uar(struct mlx5dv_devx_uar* uar) {
    auto real = ST_REAL_MLX5(mlx5dv_devx_free_uar, "MLX5_1.7");
    if (!real) {
        missing_real_errno<int>("mlx5dv_devx_free_uar", "MLX5_1.7", ENOSYS, 0);
        return;
    }
    HookScope scope;
    if (scope.outermost()) observe([&](auto& o) { o.uar_freeing(uptr(uar)); });
    real(uar);
}

ST_EXPORT struct mlx5dv_devx_obj* mlx5dv_devx_obj_create(struct ibv_context* ctx, const void* in, size_t inlen,
                                                         void* out, size_t outlen) {
    auto real = ST_REAL_MLX5(mlx5dv_devx_obj_create, "MLX5_1.7");
    if (!real) return missing_real_errno<mlx5dv_devx_obj*>("mlx5dv_devx_obj_create", "MLX5_1.7", ENOSYS, nullptr);
    HookScope scope;
    mlx5dv_devx_obj* obj = real(ctx, in, inlen, out, outlen);
    if (scope.outermost() && obj) observe([&](auto& o) { o.devx_created(uptr(ctx), uptr(obj), in, inlen, out, outlen); });
    return obj;
}

ST_EXPORT int mlx5dv_devx_obj_modify(struct mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out,
                                     size_t outlen) {
    auto real = ST_REAL_MLX5(mlx5dv_devx_obj_modify, "MLX5_1.7");
    if (!real) return missing_real_errno<int>("mlx5dv_devx_obj_modify", "MLX5_1.7", ENOSYS, ENOSYS);
    HookScope scope;
    const int ret = real(obj, in, inlen, out, outlen);
    if (scope.outermost()) observe([&](auto& o) { o.devx_modified(uptr(obj), in, inlen, out, outlen, ret); });
    return ret;
}

ST_EXPORT int mlx5dv_devx_obj_query(struct mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out,
                                    size_t outlen) {
    auto real = ST_REAL_MLX5(mlx5dv_devx_obj_query, "MLX5_1.7");
    if (!real) return missing_real_errno<int>("mlx5dv_devx_obj_query", "MLX5_1.7", ENOSYS, ENOSYS);
    HookScope scope;
    const int ret = real(obj, in, inlen, out, outlen);
    if (scope.outermost()) observe([&](auto& o) { o.devx_queried(uptr(obj), in, inlen, out, outlen, ret); });
    return ret;
}

ST_EXPORT int mlx5dv_devx_obj_destroy(struct mlx5dv_devx_obj* obj) {
    auto real = ST_REAL_MLX5(mlx5dv_devx_obj_destroy, "MLX5_1.7");
    if (!real) return missing_real_errno<int>("mlx5dv_devx_obj_destroy", "MLX5_1.7", ENOSYS, ENOSYS);
    HookScope scope;
    if (scope.outermost()) observe([&](auto& o) { o.devx_destroying(uptr(obj)); });
    return real(obj);
}

// DevX commands on a verbs QP (MLX5_1.8): state transitions of a QP whose rings may have been exported.
ST_EXPORT int mlx5dv_devx_qp_modify(struct ibv_qp* qp, const void* in, size_t inlen, void* out, size_t outlen) {
    auto real = ST_REAL_MLX5(mlx5dv_devx_qp_modify, "MLX5_1.8");
    if (!real) return missing_real_errno<int>("mlx5dv_devx_qp_modify", "MLX5_1.8", ENOSYS, ENOSYS);
    HookScope scope;
    const int ret = real(qp, in, inlen, out, outlen);
    // The QP's own context: a QP modified before its rings are exported (UCX's DevX md moves verbs DCIs and UD
    // QPs this way) is known to the analyzer by (context, QP number) from its qp_create.
    const uint64_t ctx = qp ? uptr(qp->context) : 0;
    if (scope.outermost()) observe([&](auto& o) { o.devx_modified(uptr(qp), in, inlen, out, outlen, ret, ctx); });
    return ret;
}

ST_EXPORT int mlx5dv_devx_qp_query(struct ibv_qp* qp, const void* in, size_t inlen, void* out, size_t outlen) {
    auto real = ST_REAL_MLX5(mlx5dv_devx_qp_query, "MLX5_1.8");
    if (!real) return missing_real_errno<int>("mlx5dv_devx_qp_query", "MLX5_1.8", ENOSYS, ENOSYS);
    HookScope scope;
    const int ret = real(qp, in, inlen, out, outlen);
    const uint64_t ctx = qp ? uptr(qp->context) : 0;
    if (scope.outermost()) observe([&](auto& o) { o.devx_queried(uptr(qp), in, inlen, out, outlen, ret, ctx); });
    return ret;
}

// mlx5dv_init_obj has two versions: @@MLX5_1.2 (default) and the MLX5_1.0 compatibility one, which returns the
// CQ's UAR differently. Each export forwards to the real function of its own version.
ST_EXPORT int mlx5dv_init_obj(struct mlx5dv_obj* obj, uint64_t obj_type) {
    auto real = ST_REAL_MLX5(mlx5dv_init_obj, "MLX5_1.2");
    if (!real) return missing_real_errno<int>("mlx5dv_init_obj", "MLX5_1.2", ENOSYS, ENOSYS);
    HookScope scope;
    const int ret = real(obj, obj_type);
    if (scope.outermost() && ret == 0)
        observe([&](auto& o) { sigmatrace::gpumem::observe_init_obj(o, obj, obj_type); });
    return ret;
}

ST_EXPORT int sigmatrace_mlx5dv_init_obj_1_0(struct mlx5dv_obj* obj, uint64_t obj_type);
__asm__(".symver sigmatrace_mlx5dv_init_obj_1_0, mlx5dv_init_obj@MLX5_1.0");
ST_EXPORT int sigmatrace_mlx5dv_init_obj_1_0(struct mlx5dv_obj* obj, uint64_t obj_type) {
    auto real = ST_REAL_MLX5(mlx5dv_init_obj, "MLX5_1.0");
    if (!real) return missing_real_errno<int>("mlx5dv_init_obj", "MLX5_1.0", ENOSYS, ENOSYS);
    HookScope scope;
    const int ret = real(obj, obj_type);
    if (scope.outermost() && ret == 0)
        observe([&](auto& o) { sigmatrace::gpumem::observe_init_obj(o, obj, obj_type); });
    return ret;
}

// Called by the interpose shim's ibv_destroy_qp / ibv_destroy_cq wrappers before the real destroy
// (src/interpose/hooks/gpumem_hooks.h): the watcher sweeps the exported rings one last time and forgets them.
extern "C" __attribute__((visibility("hidden"))) void sigmatrace_gpumem_before_destroy_qp(struct ibv_qp* qp) {
    if (GpuMemRuntime::exists()) observe([&](auto& o) { o.verbs_object_destroying(uptr(qp)); });
}
extern "C" __attribute__((visibility("hidden"))) void sigmatrace_gpumem_before_destroy_cq(struct ibv_cq* cq) {
    if (GpuMemRuntime::exists()) observe([&](auto& o) { o.verbs_object_destroying(uptr(cq)); });
}

// Called first by libsigmatrace.so's one destructor (src/interpose/hooks/library_init.cpp), while the tracepoint
// definitions are still registered (tracepoint_definitions.cpp): the watcher's final sweep can still emit.
extern "C" __attribute__((visibility("hidden"))) void sigmatrace_gpumem_shutdown() {
    if (GpuMemRuntime::exists()) GpuMemRuntime::instance().shutdown();
}
