// The libmlx5 entry points of gpu_ibgda_put_private_libmlx5 (see private_libmlx5.h): resolved once from a private
// handle, mlx5dv_init_obj by version (dlvsym; MLX5_1.2, or the version in ST_PRIVATE_INIT_OBJ_VERSION, e.g.
// MLX5_1.0, whose behaviour differs only for CQs) and the rest by name (dlsym). A missing library or symbol ends the
// program with a message naming it.
#include "private_libmlx5.h"

#include <dlfcn.h>
#include <infiniband/mlx5dv.h>

#include <cstdio>
#include <cstdlib>

namespace {

void* library() {
    static void* const handle = [] {
        void* h = dlopen("libmlx5.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            std::fprintf(stderr, "private libmlx5: dlopen(libmlx5.so.1, RTLD_LOCAL) failed: %s\n", dlerror());
            std::exit(2);
        }
        return h;
    }();
    return handle;
}

template <typename Fn> Fn resolve(const char* name, const char* version = nullptr) {
    void* p = version ? dlvsym(library(), name, version) : dlsym(library(), name);
    if (!p) {
        std::fprintf(stderr, "private libmlx5: %s%s%s not found by handle: %s\n", name, version ? "@" : "",
                     version ? version : "", dlerror());
        std::exit(2);
    }
    return reinterpret_cast<Fn>(p);
}

// Opened before main(), before libibverbs scans its providers: on the fabric, a dlopen("libmlx5.so.1") that comes
// after libibverbs loaded the system's mlx5 provider (libmlx5-rdmav34.so, soname libmlx5.so.1) returns that
// object, not the fabric's stand-in, and it refuses the fabric's devices (docs/gpumem.md, "Private libmlx5").
[[maybe_unused]] void* const opened_at_start = library();

}  // namespace

#define PRIVATE_CALL(name, ...)                                                       \
    static const auto fn = resolve<decltype(&st_private_##name)>(#name __VA_OPT__(, ) __VA_ARGS__); \
    return fn

extern "C" {
int st_private_mlx5dv_init_obj(mlx5dv_obj* obj, uint64_t type) {
    const char* version = std::getenv("ST_PRIVATE_INIT_OBJ_VERSION");
    PRIVATE_CALL(mlx5dv_init_obj, version ? version : "MLX5_1.2")(obj, type);
}
mlx5dv_devx_umem* st_private_mlx5dv_devx_umem_reg(ibv_context* ctx, void* addr, size_t size, uint32_t access) {
    PRIVATE_CALL(mlx5dv_devx_umem_reg)(ctx, addr, size, access);
}
int st_private_mlx5dv_devx_umem_dereg(mlx5dv_devx_umem* umem) { PRIVATE_CALL(mlx5dv_devx_umem_dereg)(umem); }
mlx5dv_devx_uar* st_private_mlx5dv_devx_alloc_uar(ibv_context* ctx, uint32_t flags) {
    PRIVATE_CALL(mlx5dv_devx_alloc_uar)(ctx, flags);
}
void st_private_mlx5dv_devx_free_uar(mlx5dv_devx_uar* uar) { PRIVATE_CALL(mlx5dv_devx_free_uar)(uar); }
mlx5dv_devx_obj* st_private_mlx5dv_devx_obj_create(ibv_context* ctx, const void* in, size_t inlen, void* out,
                                                   size_t outlen) {
    PRIVATE_CALL(mlx5dv_devx_obj_create)(ctx, in, inlen, out, outlen);
}
int st_private_mlx5dv_devx_obj_query(mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out, size_t outlen) {
    PRIVATE_CALL(mlx5dv_devx_obj_query)(obj, in, inlen, out, outlen);
}
int st_private_mlx5dv_devx_obj_modify(mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out, size_t outlen) {
    PRIVATE_CALL(mlx5dv_devx_obj_modify)(obj, in, inlen, out, outlen);
}
int st_private_mlx5dv_devx_obj_destroy(mlx5dv_devx_obj* obj) { PRIVATE_CALL(mlx5dv_devx_obj_destroy)(obj); }
int st_private_mlx5dv_devx_general_cmd(ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen) {
    PRIVATE_CALL(mlx5dv_devx_general_cmd)(ctx, in, inlen, out, outlen);
}
int st_private_mlx5dv_devx_query_eqn(ibv_context* ctx, uint32_t vector, uint32_t* eqn) {
    PRIVATE_CALL(mlx5dv_devx_query_eqn)(ctx, vector, eqn);
}
}
