// libmlx5.so.1 as `sigmatrace fabric` provides it: the real libmlx5 for every device but the fabric's, and the
// fabric provider's mlx5 DevX / direct-verbs implementation (frontend_abi.h) for fabric devices.
//
// How it sits in a process: the launcher puts this file's directory first in LD_LIBRARY_PATH, so that a program
// linked with -lmlx5, and a library that dlopen()s "libmlx5.so.1", get this object. Its own dependency,
// "libmlx5-real.so.1" (a link to the system's libmlx5, next to it), supplies every symbol not defined here, for
// programs and for the forwarding below. libsigmatrace.so, preloaded, still comes first: its mlx5dv wrappers
// trace the call and reach this object as the real one.
#include <dlfcn.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <concepts>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>

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

// What a failed call returns, in the convention of its return type (libmlx5's, mlx5dv.h): an int is the error
// number itself, a pointer is NULL with errno set.
template <typename R> R failed(int err) {
    if constexpr (std::is_pointer_v<R>) {
        errno = err;
        return nullptr;
    } else {
        static_assert(std::is_same_v<R, int>);
        return err;
    }
}

// Whether an argument belongs to the fabric: a context, a verbs object (by its context), or an mlx5dv object the
// fabric created (DevX object, umem, UAR; mlx5dv_qp_ex).
bool fab(ibv_context* ctx) { return fabric_context(ctx); }
template <typename T>
    requires requires(T* t) {
        { t->context } -> std::convertible_to<ibv_context*>;
    }
bool fab(T* o) {
    return o && fabric_context(o->context);
}
bool fab(ibv_qp_ex* qp) { return qp && fabric_context(qp->qp_base.context); }
bool fab(mlx5dv_devx_obj* o) { return fabric_object(o); }
bool fab(mlx5dv_qp_ex* mqp) {
    const softfabric_mlx5_ops* f = mqp ? fabric() : nullptr;
    return f && f->owns_qp_ex(mqp);
}
bool fab(const mlx5dv_flow_action_attr* actions, size_t n) {  // the objects mlx5dv_create_flow's actions name
    for (size_t i = 0; actions && i < n; ++i) {
        const mlx5dv_flow_action_attr& a = actions[i];
        if ((a.type == MLX5DV_FLOW_ACTION_DEST_IBV_QP && fab(a.qp)) ||
            ((a.type == MLX5DV_FLOW_ACTION_DEST_DEVX || a.type == MLX5DV_FLOW_ACTION_COUNTERS_DEVX) && fab(a.obj)))
            return true;
    }
    return false;
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

SF_EXPORT int mlx5dv_devx_general_cmd(struct ibv_context* ctx, const void* in, size_t inlen, void* out,
                                      size_t outlen) {
    if (fabric_context(ctx)) return fabric()->general_cmd(ctx, in, inlen, out, outlen);
    auto real = REAL(mlx5dv_devx_general_cmd, "MLX5_1.7");
    return real ? real(ctx, in, inlen, out, outlen) : ENOSYS;
}

SF_EXPORT int mlx5dv_devx_query_eqn(struct ibv_context* ctx, uint32_t vector, uint32_t* eqn) {
    if (fabric_context(ctx)) return fabric()->query_eqn(ctx, vector, eqn);
    auto real = REAL(mlx5dv_devx_query_eqn, "MLX5_1.7");
    return real ? real(ctx, vector, eqn) : ENOSYS;
}

SF_EXPORT int mlx5dv_devx_qp_modify(struct ibv_qp* qp, const void* in, size_t inlen, void* out, size_t outlen) {
    if (fab(qp)) return fabric()->verbs_qp_modify(qp, in, inlen, out, outlen);
    auto real = REAL(mlx5dv_devx_qp_modify, "MLX5_1.8");
    return real ? real(qp, in, inlen, out, outlen) : ENOSYS;
}

// ------------------------------------------------------------------------------------------ DevX event channels
// The fabric raises no asynchronous events (a QP's errors reach its CQ as error CQEs; the verbs async fd stays
// quiet too), so a channel on a fabric context is a descriptor that never becomes readable: subscriptions of
// fabric objects to it are accepted and never deliver, and reading it finds nothing (EAGAIN), as a channel of a
// device whose objects raise no event. The stand-in owns these channels; every other goes to the real library.
namespace {

class FabricChannels {
public:
    mlx5dv_devx_event_channel* create() {
        auto* ch = new mlx5dv_devx_event_channel{};
        ch->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (ch->fd < 0) {
            delete ch;
            return nullptr;
        }
        std::lock_guard lk(mu_);
        channels_.insert(ch);
        return ch;
    }
    bool owns(const mlx5dv_devx_event_channel* ch) {
        std::lock_guard lk(mu_);
        return channels_.count(ch) != 0;
    }
    bool destroy(mlx5dv_devx_event_channel* ch) {
        {
            std::lock_guard lk(mu_);
            if (!channels_.erase(ch)) return false;
        }
        close(ch->fd);
        delete ch;
        return true;
    }

private:
    std::mutex mu_;  // channels are created and destroyed by any thread of the application
    std::set<const mlx5dv_devx_event_channel*> channels_;
};

// Process lifetime (a channel may be destroyed from an exit handler).
FabricChannels& channels() {
    static auto* c = new FabricChannels();
    return *c;
}

}  // namespace

SF_EXPORT struct mlx5dv_devx_event_channel* mlx5dv_devx_create_event_channel(
    struct ibv_context* ctx, enum mlx5dv_devx_create_event_channel_flags flags) {
    if (fab(ctx)) {
        if (flags & ~uint32_t{MLX5DV_DEVX_CREATE_EVENT_CHANNEL_FLAGS_OMIT_EV_DATA}) return failed<mlx5dv_devx_event_channel*>(EINVAL);
        return channels().create();
    }
    auto real = REAL(mlx5dv_devx_create_event_channel, "MLX5_1.11");
    return real ? real(ctx, flags) : no_real<mlx5dv_devx_event_channel*>(nullptr);
}

SF_EXPORT void mlx5dv_devx_destroy_event_channel(struct mlx5dv_devx_event_channel* ch) {
    if (ch && channels().destroy(ch)) return;
    if (auto real = REAL(mlx5dv_devx_destroy_event_channel, "MLX5_1.11")) real(ch);
}

SF_EXPORT int mlx5dv_devx_subscribe_devx_event(struct mlx5dv_devx_event_channel* ch, struct mlx5dv_devx_obj* obj,
                                               uint16_t events_sz, uint16_t events_num[], uint64_t cookie) {
    if (ch && channels().owns(ch)) return (!obj || fab(obj)) && events_sz && events_num ? 0 : EINVAL;
    if (fab(obj)) return EOPNOTSUPP;  // a fabric object on another device's channel
    auto real = REAL(mlx5dv_devx_subscribe_devx_event, "MLX5_1.11");
    return real ? real(ch, obj, events_sz, events_num, cookie) : ENOSYS;
}

SF_EXPORT int mlx5dv_devx_subscribe_devx_event_fd(struct mlx5dv_devx_event_channel* ch, int fd,
                                                  struct mlx5dv_devx_obj* obj, uint16_t event_num) {
    if (ch && channels().owns(ch)) return fd >= 0 && (!obj || fab(obj)) ? 0 : EINVAL;
    if (fab(obj)) return EOPNOTSUPP;
    auto real = REAL(mlx5dv_devx_subscribe_devx_event_fd, "MLX5_1.11");
    return real ? real(ch, fd, obj, event_num) : ENOSYS;
}

SF_EXPORT ssize_t mlx5dv_devx_get_event(struct mlx5dv_devx_event_channel* ch,
                                        struct mlx5dv_devx_async_event_hdr* event_data, size_t event_resp_len) {
    if (ch && channels().owns(ch)) {
        errno = EAGAIN;
        return -1;
    }
    auto real = REAL(mlx5dv_devx_get_event, "MLX5_1.11");
    return real ? real(ch, event_data, event_resp_len) : no_real<ssize_t>(-1);
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

SF_EXPORT struct mlx5dv_qp_ex* mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex* qp) {
    if (fab(qp)) return fabric()->qp_ex_from_ibv_qp_ex(qp);
    auto real = REAL(mlx5dv_qp_ex_from_ibv_qp_ex, "MLX5_1.10");
    return real ? real(qp) : no_real<mlx5dv_qp_ex*>(nullptr);
}

// ------------------------------------------------------------------------------------------------ refusals
// Every other function of libmlx5 that can be handed a fabric context or object: on one it fails as mlx5 does
// for a feature the device lacks (EOPNOTSUPP, in the function's return convention) and never reaches the real
// library, which would take the fabric's object for its own; anything else goes to the real library unchanged.
// ON_FABRIC is the test on the call's arguments. Functions whose every argument comes from a creator refused
// here (flow matchers, DR domains and everything under them, event channels, command completions, EQs, MSI
// vectors, VARs, packet pacing, schedulers, crypto logins, DEKs, mkeys, steering anchors) and the VFIO device
// list are not defined here: they cannot meet a fabric object, and reach the real library directly.
#define SF_REFUSED(ret, fn, version, params, args, on_fabric)                                                  \
    SF_EXPORT ret fn params {                                                                                  \
        if (on_fabric) return failed<ret>(EOPNOTSUPP);                                                         \
        auto real = REAL(fn, version);                                                                         \
        return real ? real args : failed<ret>(ENOSYS);                                                         \
    }

using cvoid = const void;
// DevX commands on verbs objects.
SF_REFUSED(int, mlx5dv_devx_qp_query, "MLX5_1.8", (ibv_qp* q, cvoid* i, size_t il, void* o, size_t ol),
           (q, i, il, o, ol), fab(q))
SF_REFUSED(int, mlx5dv_devx_cq_modify, "MLX5_1.8", (ibv_cq* q, cvoid* i, size_t il, void* o, size_t ol),
           (q, i, il, o, ol), fab(q))
SF_REFUSED(int, mlx5dv_devx_cq_query, "MLX5_1.8", (ibv_cq* q, cvoid* i, size_t il, void* o, size_t ol),
           (q, i, il, o, ol), fab(q))
SF_REFUSED(int, mlx5dv_devx_srq_modify, "MLX5_1.8", (ibv_srq* q, cvoid* i, size_t il, void* o, size_t ol),
           (q, i, il, o, ol), fab(q))
SF_REFUSED(int, mlx5dv_devx_srq_query, "MLX5_1.8", (ibv_srq* q, cvoid* i, size_t il, void* o, size_t ol),
           (q, i, il, o, ol), fab(q))
SF_REFUSED(int, mlx5dv_devx_wq_modify, "MLX5_1.8", (ibv_wq* q, cvoid* i, size_t il, void* o, size_t ol),
           (q, i, il, o, ol), fab(q))
SF_REFUSED(int, mlx5dv_devx_wq_query, "MLX5_1.8", (ibv_wq* q, cvoid* i, size_t il, void* o, size_t ol),
           (q, i, il, o, ol), fab(q))
SF_REFUSED(int, mlx5dv_devx_ind_tbl_modify, "MLX5_1.8",
           (ibv_rwq_ind_table* t, cvoid* i, size_t il, void* o, size_t ol), (t, i, il, o, ol), fab(t))
SF_REFUSED(int, mlx5dv_devx_ind_tbl_query, "MLX5_1.8",
           (ibv_rwq_ind_table* t, cvoid* i, size_t il, void* o, size_t ol), (t, i, il, o, ol), fab(t))
// DevX asynchronous commands.
SF_REFUSED(mlx5dv_devx_cmd_comp*, mlx5dv_devx_create_cmd_comp, "MLX5_1.9", (ibv_context* c), (c), fab(c))
SF_REFUSED(int, mlx5dv_devx_obj_query_async, "MLX5_1.9",
           (mlx5dv_devx_obj* o, cvoid* i, size_t il, size_t ol, uint64_t id, mlx5dv_devx_cmd_comp* cc),
           (o, i, il, ol, id, cc), fab(o))
SF_REFUSED(mlx5dv_devx_eq*, mlx5dv_devx_create_eq, "MLX5_1.23",
           (ibv_context* c, cvoid* i, size_t il, void* o, size_t ol), (c, i, il, o, ol), fab(c))
SF_REFUSED(mlx5dv_devx_msi_vector*, mlx5dv_devx_alloc_msi_vector, "MLX5_1.23", (ibv_context* c), (c), fab(c))
// Context features: port and clock queries, context attributes, reserved QPNs, device memory, VARs, packet
// pacing, schedulers, crypto.
SF_REFUSED(int, _mlx5dv_query_port, "MLX5_1.19", (ibv_context* c, uint32_t p, mlx5dv_port* info, size_t len),
           (c, p, info, len), fab(c))
SF_REFUSED(int, mlx5dv_get_clock_info, "MLX5_1.4", (ibv_context* c, mlx5dv_clock_info* info), (c, info), fab(c))
SF_REFUSED(int, mlx5dv_set_context_attr, "MLX5_1.2", (ibv_context* c, enum mlx5dv_set_ctx_attr_type t, void* a),
           (c, t, a), fab(c))
SF_REFUSED(int, mlx5dv_reserved_qpn_alloc, "MLX5_1.18", (ibv_context* c, uint32_t* qpn), (c, qpn), fab(c))
SF_REFUSED(int, mlx5dv_reserved_qpn_dealloc, "MLX5_1.18", (ibv_context* c, uint32_t qpn), (c, qpn), fab(c))
SF_REFUSED(ibv_dm*, mlx5dv_alloc_dm, "MLX5_1.10", (ibv_context* c, ibv_alloc_dm_attr* a, mlx5dv_alloc_dm_attr* m),
           (c, a, m), fab(c))
SF_REFUSED(void*, mlx5dv_dm_map_op_addr, "MLX5_1.19", (ibv_dm* dm, uint8_t op), (dm, op), fab(dm))
SF_REFUSED(mlx5dv_var*, mlx5dv_alloc_var, "MLX5_1.12", (ibv_context* c, uint32_t f), (c, f), fab(c))
SF_REFUSED(mlx5dv_pp*, mlx5dv_pp_alloc, "MLX5_1.13", (ibv_context* c, size_t sz, cvoid* pp, uint32_t f),
           (c, sz, pp, f), fab(c))
SF_REFUSED(mlx5dv_sched_node*, mlx5dv_sched_node_create, "MLX5_1.17", (ibv_context* c, const mlx5dv_sched_attr* a),
           (c, a), fab(c))
SF_REFUSED(mlx5dv_sched_leaf*, mlx5dv_sched_leaf_create, "MLX5_1.17", (ibv_context* c, const mlx5dv_sched_attr* a),
           (c, a), fab(c))
SF_REFUSED(int, mlx5dv_crypto_login, "MLX5_1.21", (ibv_context* c, mlx5dv_crypto_login_attr* a), (c, a), fab(c))
SF_REFUSED(int, mlx5dv_crypto_login_query_state, "MLX5_1.21", (ibv_context* c, enum mlx5dv_crypto_login_state* s),
           (c, s), fab(c))
SF_REFUSED(int, mlx5dv_crypto_logout, "MLX5_1.21", (ibv_context* c), (c), fab(c))
SF_REFUSED(mlx5dv_crypto_login_obj*, mlx5dv_crypto_login_create, "MLX5_1.24",
           (ibv_context* c, mlx5dv_crypto_login_attr_ex* a), (c, a), fab(c))
SF_REFUSED(mlx5dv_dek*, mlx5dv_dek_create, "MLX5_1.21", (ibv_context* c, mlx5dv_dek_init_attr* a), (c, a),
           fab(c) || (a && fab(a->pd)))
SF_REFUSED(mlx5dv_mkey*, mlx5dv_create_mkey, "MLX5_1.10", (mlx5dv_mkey_init_attr* a), (a), a && fab(a->pd))
SF_REFUSED(int, mlx5dv_vfio_process_events, "MLX5_1.21", (ibv_context* c), (c), fab(c))
// Flow steering and DR (the fabric has no packet steering; a flow of another device may not name fabric objects).
SF_REFUSED(mlx5dv_flow_matcher*, mlx5dv_create_flow_matcher, "MLX5_1.6",
           (ibv_context* c, mlx5dv_flow_matcher_attr* a), (c, a), fab(c))
SF_REFUSED(ibv_flow*, mlx5dv_create_flow, "MLX5_1.6",
           (mlx5dv_flow_matcher* m, mlx5dv_flow_match_parameters* v, size_t n, mlx5dv_flow_action_attr a[]),
           (m, v, n, a), fab(a, n))
SF_REFUSED(ibv_flow_action*, mlx5dv_create_flow_action_esp, "MLX5_1.5",
           (ibv_context* c, ibv_flow_action_esp_attr* e, mlx5dv_flow_action_esp* m), (c, e, m), fab(c))
SF_REFUSED(ibv_flow_action*, mlx5dv_create_flow_action_modify_header, "MLX5_1.7",
           (ibv_context* c, size_t sz, uint64_t a[], enum mlx5dv_flow_table_type t), (c, sz, a, t), fab(c))
SF_REFUSED(ibv_flow_action*, mlx5dv_create_flow_action_packet_reformat, "MLX5_1.7",
           (ibv_context* c, size_t sz, void* d, enum mlx5dv_flow_action_packet_reformat_type r,
            enum mlx5dv_flow_table_type t),
           (c, sz, d, r, t), fab(c))
SF_REFUSED(mlx5dv_steering_anchor*, mlx5dv_create_steering_anchor, "MLX5_1.24",
           (ibv_context* c, mlx5dv_steering_anchor_attr* a), (c, a), fab(c))
SF_REFUSED(mlx5dv_dr_domain*, mlx5dv_dr_domain_create, "MLX5_1.10", (ibv_context* c, enum mlx5dv_dr_domain_type t),
           (c, t), fab(c))
SF_REFUSED(mlx5dv_dr_action*, mlx5dv_dr_action_create_dest_ibv_qp, "MLX5_1.10", (ibv_qp* q), (q), fab(q))
SF_REFUSED(mlx5dv_dr_action*, mlx5dv_dr_action_create_dest_devx_tir, "MLX5_1.15", (mlx5dv_devx_obj* o), (o), fab(o))
SF_REFUSED(mlx5dv_dr_action*, mlx5dv_dr_action_create_flow_counter, "MLX5_1.10", (mlx5dv_devx_obj* o, uint32_t off),
           (o, off), fab(o))
SF_REFUSED(mlx5dv_dr_action*, mlx5dv_dr_action_create_aso, "MLX5_1.17",
           (mlx5dv_dr_domain* d, mlx5dv_devx_obj* o, uint32_t off, uint32_t f, uint8_t reg), (d, o, off, f, reg),
           fab(o))
SF_REFUSED(int, mlx5dv_dr_aso_other_domain_link, "MLX5_1.22",
           (mlx5dv_devx_obj* o, mlx5dv_dr_domain* peer, mlx5dv_dr_domain* d, uint32_t f, uint8_t reg),
           (o, peer, d, f, reg), fab(o))
SF_REFUSED(int, mlx5dv_dr_aso_other_domain_unlink, "MLX5_1.22", (mlx5dv_devx_obj* o, mlx5dv_dr_domain* d), (o, d),
           fab(o))
// QP, AH and WQ features beyond what mlx5dv_create_qp accepts on the fabric.
SF_REFUSED(ibv_wq*, mlx5dv_create_wq, "MLX5_1.3", (ibv_context* c, ibv_wq_init_attr* a, mlx5dv_wq_init_attr* m),
           (c, a, m), fab(c))
SF_REFUSED(int, mlx5dv_query_qp_lag_port, "MLX5_1.14", (ibv_qp* q, uint8_t* p, uint8_t* ap), (q, p, ap), fab(q))
SF_REFUSED(int, mlx5dv_modify_qp_lag_port, "MLX5_1.14", (ibv_qp* q, uint8_t p), (q, p), fab(q))
SF_REFUSED(int, mlx5dv_modify_qp_udp_sport, "MLX5_1.17", (ibv_qp* q, uint16_t sport), (q, sport), fab(q))
SF_REFUSED(int, mlx5dv_modify_qp_sched_elem, "MLX5_1.17",
           (ibv_qp* q, const mlx5dv_sched_leaf* req, const mlx5dv_sched_leaf* resp), (q, req, resp), fab(q))
SF_REFUSED(int, mlx5dv_dci_stream_id_reset, "MLX5_1.21", (ibv_qp* q, uint16_t id), (q, id), fab(q))
SF_REFUSED(int, mlx5dv_map_ah_to_qp, "MLX5_1.20", (ibv_ah* ah, uint32_t qpn), (ah, qpn), fab(ah))
SF_REFUSED(int, mlx5dv_qp_cancel_posted_send_wrs, "MLX5_1.20", (mlx5dv_qp_ex* q, uint64_t id), (q, id), fab(q))

// The one file-descriptor return: -1 with errno, not an error number that would read as a descriptor.
SF_EXPORT int mlx5dv_vfio_get_events_fd(struct ibv_context* ctx) {
    if (fab(ctx)) {
        errno = EOPNOTSUPP;
        return -1;
    }
    auto real = REAL(mlx5dv_vfio_get_events_fd, "MLX5_1.21");
    return real ? real(ctx) : no_real(-1);
}
