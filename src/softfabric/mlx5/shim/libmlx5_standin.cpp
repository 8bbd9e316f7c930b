// libmlx5.so.1 as `sigmatrace fabric` provides it: the real libmlx5 for every device but the fabric's, and the
// fabric provider's mlx5 DevX / direct-verbs implementation (frontend_abi.h) for fabric devices.
//
// How it sits in a process: the launcher puts this file's directory first in LD_LIBRARY_PATH, so that a program
// linked with -lmlx5, and a library that dlopen()s "libmlx5.so.1", get this object. Its own dependency,
// "libmlx5-real.so.1" (a link to the system's libmlx5, next to it), supplies every symbol not defined here, for
// programs and for the forwarding below. libsigmatrace.so, preloaded, still comes first: its mlx5dv wrappers
// trace the call and reach this object as the real one.
#include <dlfcn.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "mlx5/frontend_abi.h"

#define SF_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// The fabric provider's table, once libibverbs has loaded the provider (RDMAV_DRIVERS names it).
const softfabric_mlx5_ops* fabric() {
    static std::atomic<const softfabric_mlx5_ops*> ops{nullptr};
    if (auto* o = ops.load(std::memory_order_acquire)) return o;
    const char* drivers = std::getenv("RDMAV_DRIVERS");
    if (!drivers) return nullptr;
    std::string list = drivers;
    for (size_t start = 0; start <= list.size();) {
        size_t end = list.find_first_of(":,", start);
        if (end == std::string::npos) end = list.size();
        const std::string path = list.substr(start, end - start) + "-rdmav34.so";
        if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
            auto entry = reinterpret_cast<softfabric_mlx5_entry_fn>(dlsym(h, SOFTFABRIC_MLX5_ENTRY));
            if (const softfabric_mlx5_ops* o = entry ? entry(SOFTFABRIC_MLX5_ABI_VERSION) : nullptr) {
                ops.store(o, std::memory_order_release);
                return o;
            }
        }
        start = end + 1;
    }
    return nullptr;
}

bool fabric_context(ibv_context* ctx) {
    const softfabric_mlx5_ops* f = ctx ? fabric() : nullptr;
    return f && f->owns_context(ctx);
}
bool fabric_object(const void* p) {
    const softfabric_mlx5_ops* f = p ? fabric() : nullptr;
    return f && f->owns_object(p);
}

// The real libmlx5's definition of name@version.
void* real_symbol(const char* name, const char* version) {
    static void* handle = dlopen("libmlx5-real.so.1", RTLD_NOW | RTLD_NOLOAD);
    void* fn = handle ? dlvsym(handle, name, version) : nullptr;
    if (!fn) std::fprintf(stderr, "libmlx5 stand-in: the real libmlx5 has no %s@%s\n", name, version);
    return fn;
}
#define REAL(fn, version)                                                                                      \
    ([]() {                                                                                                    \
        static auto real_ = reinterpret_cast<decltype(&fn)>(real_symbol(#fn, version));                      \
        return real_;                                                                                          \
    }())

template <typename T> T no_real(T value) {
    errno = ENOSYS;
    return value;
}

}  // namespace

SF_EXPORT bool mlx5dv_is_supported(struct ibv_device* device) {
    if (device && fabric() && std::strncmp(device->name, "sfab_", 5) == 0) return true;
    auto real = REAL(mlx5dv_is_supported, "MLX5_1.8");
    return real ? real(device) : false;
}

// A fabric device opens as a plain fabric context: its DevX commands (MLX5DV_CONTEXT_FLAGS_DEVX) are those the
// fabric implements (docs/softfabric.md), on any of its contexts.
SF_EXPORT struct ibv_context* mlx5dv_open_device(struct ibv_device* device, struct mlx5dv_context_attr* attr) {
    if (device && fabric() && std::strncmp(device->name, "sfab_", 5) == 0) {
        if (attr && (attr->flags & ~uint32_t{MLX5DV_CONTEXT_FLAGS_DEVX})) {
            errno = EOPNOTSUPP;
            return nullptr;
        }
        ibv_context* ctx = ibv_open_device(device);
        if (!ctx || fabric_context(ctx)) return ctx;
        ibv_close_device(ctx);  // named like a fabric NIC, driven by another provider: the real library decides
    }
    auto real = REAL(mlx5dv_open_device, "MLX5_1.7");
    return real ? real(device, attr) : no_real<ibv_context*>(nullptr);
}

SF_EXPORT int mlx5dv_query_device(struct ibv_context* ctx, struct mlx5dv_context* attrs) {
    if (fabric_context(ctx)) return fabric()->query_device(ctx, attrs);
    auto real = REAL(mlx5dv_query_device, "MLX5_1.0");
    return real ? real(ctx, attrs) : ENOSYS;
}

SF_EXPORT struct ibv_cq_ex* mlx5dv_create_cq(struct ibv_context* ctx, struct ibv_cq_init_attr_ex* cq_attr,
                                            struct mlx5dv_cq_init_attr* mlx5_attr) {
    if (fabric_context(ctx)) return fabric()->create_cq(ctx, cq_attr, mlx5_attr);
    auto real = REAL(mlx5dv_create_cq, "MLX5_1.1");
    return real ? real(ctx, cq_attr, mlx5_attr) : no_real<ibv_cq_ex*>(nullptr);
}

SF_EXPORT struct ibv_qp* mlx5dv_create_qp(struct ibv_context* ctx, struct ibv_qp_init_attr_ex* qp_attr,
                                         struct mlx5dv_qp_init_attr* mlx5_attr) {
    if (fabric_context(ctx)) return fabric()->create_qp(ctx, qp_attr, mlx5_attr);
    auto real = REAL(mlx5dv_create_qp, "MLX5_1.3");
    return real ? real(ctx, qp_attr, mlx5_attr) : no_real<ibv_qp*>(nullptr);
}

// The fabric raises no DevX events (its objects report errors in CQEs only): an event channel is refused as on
// a kernel without DevX event support.
SF_EXPORT struct mlx5dv_devx_event_channel* mlx5dv_devx_create_event_channel(
    struct ibv_context* ctx, enum mlx5dv_devx_create_event_channel_flags flags) {
    if (fabric_context(ctx)) {
        errno = EOPNOTSUPP;
        return nullptr;
    }
    auto real = REAL(mlx5dv_devx_create_event_channel, "MLX5_1.11");
    return real ? real(ctx, flags) : no_real<mlx5dv_devx_event_channel*>(nullptr);
}

SF_EXPORT struct mlx5dv_devx_umem* mlx5dv_devx_umem_reg(struct ibv_context* ctx, void* addr, size_t size,
                                                        uint32_t access) {
    if (fabric_context(ctx)) return fabric()->umem_reg(ctx, addr, size, access);
    auto real = REAL(mlx5dv_devx_umem_reg, "MLX5_1.7");
    return real ? real(ctx, addr, size, access) : no_real<mlx5dv_devx_umem*>(nullptr);
}

SF_EXPORT struct mlx5dv_devx_umem* mlx5dv_devx_umem_reg_ex(struct ibv_context* ctx, struct mlx5dv_devx_umem_in* in) {
    if (fabric_context(ctx)) {
        if (!in || (in->comp_mask & MLX5DV_UMEM_MASK_DMABUF)) {
            errno = EOPNOTSUPP;  // the fabric has no dmabuf importer
            return nullptr;
        }
        return fabric()->umem_reg(ctx, in->addr, in->size, in->access);
    }
    auto real = REAL(mlx5dv_devx_umem_reg_ex, "MLX5_1.19");
    return real ? real(ctx, in) : no_real<mlx5dv_devx_umem*>(nullptr);
}

SF_EXPORT int mlx5dv_devx_umem_dereg(struct mlx5dv_devx_umem* umem) {
    if (fabric_object(umem)) return fabric()->umem_dereg(umem);
    auto real = REAL(mlx5dv_devx_umem_dereg, "MLX5_1.7");
    return real ? real(umem) : ENOSYS;
}

SF_EXPORT struct mlx5dv_devx_uar* mlx5dv_devx_alloc_uar(struct ibv_context* ctx, uint32_t flags) {
    if (fabric_context(ctx)) return fabric()->alloc_uar(ctx, flags);
    auto real = REAL(mlx5dv_devx_alloc_uar, "MLX5_1.7");
    return real ? real(ctx, flags) : no_real<mlx5dv_devx_uar*>(nullptr);
}

SF_EXPORT void mlx5dv_devx_free_uar(struct mlx5dv_devx_uar* uar) {
    if (fabric_object(uar)) return fabric()->free_uar(uar);
    if (auto real = REAL(mlx5dv_devx_free_uar, "MLX5_1.7")) real(uar);
}

SF_EXPORT struct mlx5dv_devx_obj* mlx5dv_devx_obj_create(struct ibv_context* ctx, const void* in, size_t inlen,
                                                         void* out, size_t outlen) {
    if (fabric_context(ctx)) return fabric()->obj_create(ctx, in, inlen, out, outlen);
    auto real = REAL(mlx5dv_devx_obj_create, "MLX5_1.7");
    return real ? real(ctx, in, inlen, out, outlen) : no_real<mlx5dv_devx_obj*>(nullptr);
}

SF_EXPORT int mlx5dv_devx_obj_modify(struct mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out,
                                     size_t outlen) {
    if (fabric_object(obj)) return fabric()->obj_modify(obj, in, inlen, out, outlen);
    auto real = REAL(mlx5dv_devx_obj_modify, "MLX5_1.7");
    return real ? real(obj, in, inlen, out, outlen) : ENOSYS;
}

SF_EXPORT int mlx5dv_devx_obj_query(struct mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out,
                                    size_t outlen) {
    if (fabric_object(obj)) return fabric()->obj_query(obj, in, inlen, out, outlen);
    auto real = REAL(mlx5dv_devx_obj_query, "MLX5_1.7");
    return real ? real(obj, in, inlen, out, outlen) : ENOSYS;
}

SF_EXPORT int mlx5dv_devx_obj_destroy(struct mlx5dv_devx_obj* obj) {
    if (fabric_object(obj)) return fabric()->obj_destroy(obj);
    auto real = REAL(mlx5dv_devx_obj_destroy, "MLX5_1.7");
    return real ? real(obj) : ENOSYS;
}

SF_EXPORT int mlx5dv_devx_query_eqn(struct ibv_context* ctx, uint32_t vector, uint32_t* eqn) {
    if (fabric_context(ctx)) return fabric()->query_eqn(ctx, vector, eqn);
    auto real = REAL(mlx5dv_devx_query_eqn, "MLX5_1.7");
    return real ? real(ctx, vector, eqn) : ENOSYS;
}

SF_EXPORT int mlx5dv_devx_general_cmd(struct ibv_context* ctx, const void* in, size_t inlen, void* out,
                                      size_t outlen) {
    if (fabric_context(ctx)) return EOPNOTSUPP;  // no HCA capabilities to query on the fabric
    auto real = REAL(mlx5dv_devx_general_cmd, "MLX5_1.7");
    return real ? real(ctx, in, inlen, out, outlen) : ENOSYS;
}

SF_EXPORT int mlx5dv_devx_qp_modify(struct ibv_qp* qp, const void* in, size_t inlen, void* out, size_t outlen) {
    if (qp && fabric_context(qp->context)) return EOPNOTSUPP;  // verbs QPs on the fabric: use ibv_modify_qp
    auto real = REAL(mlx5dv_devx_qp_modify, "MLX5_1.8");
    return real ? real(qp, in, inlen, out, outlen) : ENOSYS;
}

SF_EXPORT int mlx5dv_devx_qp_query(struct ibv_qp* qp, const void* in, size_t inlen, void* out, size_t outlen) {
    if (qp && fabric_context(qp->context)) return EOPNOTSUPP;  // QUERY_QP is not emulated: use ibv_query_qp
    auto real = REAL(mlx5dv_devx_qp_query, "MLX5_1.8");
    return real ? real(qp, in, inlen, out, outlen) : ENOSYS;
}

namespace {

// Which of the objects named in an init_obj call are the fabric's: all (1), none (0) or a mix (-1).
int fabric_share(const mlx5dv_obj* obj, uint64_t type) {
    int fab = 0, other = 0;
    auto count = [&](ibv_context* ctx) { (fabric_context(ctx) ? fab : other)++; };
    if ((type & MLX5DV_OBJ_QP) && obj->qp.in) count(obj->qp.in->context);
    if ((type & MLX5DV_OBJ_CQ) && obj->cq.in) count(obj->cq.in->context);
    if ((type & MLX5DV_OBJ_PD) && obj->pd.in) count(obj->pd.in->context);
    if ((type & MLX5DV_OBJ_SRQ) && obj->srq.in) count(obj->srq.in->context);
    if ((type & MLX5DV_OBJ_AH) && obj->ah.in) count(obj->ah.in->context);
    if (fab && other) return -1;
    return fab ? 1 : 0;
}

int init_obj(mlx5dv_obj* obj, uint64_t type, const char* version) {
    const int share = obj ? fabric_share(obj, type) : 0;
    if (share < 0) return EINVAL;  // objects of a fabric device and of another one in one call
    if (share > 0) return fabric()->init_obj(obj, type);
    using Fn = int (*)(mlx5dv_obj*, uint64_t);
    auto real = reinterpret_cast<Fn>(real_symbol("mlx5dv_init_obj", version));
    return real ? real(obj, type) : ENOSYS;
}

}  // namespace

SF_EXPORT int mlx5dv_init_obj(struct mlx5dv_obj* obj, uint64_t obj_type) { return init_obj(obj, obj_type, "MLX5_1.2"); }

// The MLX5_1.0 compatibility version (it returns the CQ's UAR differently; the fabric's is the same either way).
SF_EXPORT int softfabric_mlx5dv_init_obj_1_0(struct mlx5dv_obj* obj, uint64_t obj_type);
__asm__(".symver softfabric_mlx5dv_init_obj_1_0, mlx5dv_init_obj@MLX5_1.0");
SF_EXPORT int softfabric_mlx5dv_init_obj_1_0(struct mlx5dv_obj* obj, uint64_t obj_type) {
    return init_obj(obj, obj_type, "MLX5_1.0");
}
