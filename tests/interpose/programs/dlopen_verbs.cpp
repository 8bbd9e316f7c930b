// dlopen_verbs MODE [ITERATIONS]: a verbs program that, like NCCL, NVSHMEM or rocSHMEM, does not link
// libibverbs: it dlopens it and looks every function up by handle.
//
//   nccl     dlopen("libibverbs.so", RTLD_NOW|RTLD_LOCAL) + dlvsym(handle, name, "IBVERBS_1.1")
//   nvshmem  dlopen("libibverbs.so.1", RTLD_NOW|RTLD_LOCAL) + dlsym(handle, name)
//   mlx5     dlopen("libmlx5.so.1") + dlsym(handle, "mlx5dv_open_device") (tried on the device first),
//            then the nvshmem way for the rest
//
// It prints which object each function came from ("symbol ibv_create_qp from libsigmatrace.so"), then, on the
// first device, connects two RC QPs to each other and posts ITERATIONS receives, ITERATIONS signaled SENDs
// (wr_id 1000+i) and ITERATIONS RDMA WRITEs of which only the last is signaled (wr_id 2000+i), and polls every
// completion. Exit 0 when all completed with the right data; 77 when there is no device.
#include <dlfcn.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/verbs/rc_setup.h"

namespace {

struct Verbs {
    decltype(&ibv_get_device_list) get_device_list;
    decltype(&ibv_free_device_list) free_device_list;
    decltype(&ibv_open_device) open_device;
    decltype(&ibv_close_device) close_device;
    decltype(&ibv_alloc_pd) alloc_pd;
    decltype(&ibv_dealloc_pd) dealloc_pd;
    ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int);
    decltype(&ibv_dereg_mr) dereg_mr;
    decltype(&ibv_create_cq) create_cq;
    decltype(&ibv_destroy_cq) destroy_cq;
    decltype(&ibv_create_qp) create_qp;
    decltype(&ibv_destroy_qp) destroy_qp;
    decltype(&ibv_modify_qp) modify_qp;
    int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*);
};

const char* object_of(void* fn) {
    Dl_info info{};
    if (fn == nullptr || dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return "(none)";
    const char* slash = std::strrchr(info.dli_fname, '/');
    return slash != nullptr ? slash + 1 : info.dli_fname;
}

template <typename Fn> bool load(void* handle, const char* name, bool versioned, Fn* out) {
    void* p = versioned ? dlvsym(handle, name, "IBVERBS_1.1") : dlsym(handle, name);
    std::printf("symbol %s from %s\n", name, object_of(p));
    *out = reinterpret_cast<Fn>(p);
    return p != nullptr;
}

int fail(const char* what) {
    std::fprintf(stderr, "dlopen_verbs: %s failed: %s\n", what, std::strerror(errno));
    return 1;
}

// The shared bring-up's three transitions, applied through the looked-up ibv_modify_qp (connect_rc would link
// libibverbs).
bool to_rts(const Verbs& v, ibv_qp* qp, uint32_t dest_qpn, uint16_t dlid) {
    for (auto& t : sigmatrace::verbs::rc_transitions({.qpn = dest_qpn, .lid = dlid}, {.mtu = IBV_MTU_1024}))
        if (v.modify_qp(qp, &t.attr, t.mask) != 0) return false;
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: dlopen_verbs nccl|nvshmem|mlx5 [ITERATIONS]\n");
        return 2;
    }
    const std::string mode = argv[1];
    const int iterations = argc > 2 ? std::atoi(argv[2]) : 16;
    const bool versioned = mode == "nccl";
    const char* lib = mode == "nccl" ? "libibverbs.so" : "libibverbs.so.1";
    void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
        std::fprintf(stderr, "dlopen_verbs: cannot dlopen %s: %s\n", lib, dlerror());
        return 77;
    }
    Verbs v{};
    bool ok = load(h, "ibv_get_device_list", versioned, &v.get_device_list) &&
              load(h, "ibv_free_device_list", versioned, &v.free_device_list) &&
              load(h, "ibv_open_device", versioned, &v.open_device) &&
              load(h, "ibv_close_device", versioned, &v.close_device) && load(h, "ibv_alloc_pd", versioned, &v.alloc_pd) &&
              load(h, "ibv_dealloc_pd", versioned, &v.dealloc_pd) && load(h, "ibv_reg_mr", versioned, &v.reg_mr) &&
              load(h, "ibv_dereg_mr", versioned, &v.dereg_mr) && load(h, "ibv_create_cq", versioned, &v.create_cq) &&
              load(h, "ibv_destroy_cq", versioned, &v.destroy_cq) && load(h, "ibv_create_qp", versioned, &v.create_qp) &&
              load(h, "ibv_destroy_qp", versioned, &v.destroy_qp) && load(h, "ibv_modify_qp", versioned, &v.modify_qp) &&
              load(h, "ibv_query_port", versioned, &v.query_port);
    if (!ok) return fail("symbol lookup");

    int n = 0;
    ibv_device** devs = v.get_device_list(&n);
    if (devs == nullptr || n == 0) {
        std::printf("no RDMA device\n");
        return 77;
    }
    if (mode == "mlx5") {
        void* m = dlopen("libmlx5.so.1", RTLD_NOW | RTLD_LOCAL);
        if (m == nullptr) {
            std::fprintf(stderr, "dlopen_verbs: cannot dlopen libmlx5.so.1: %s\n", dlerror());
            return 77;
        }
        void* p = dlsym(m, "mlx5dv_open_device");
        std::printf("symbol mlx5dv_open_device from %s\n", object_of(p));
        auto mlx5_open = reinterpret_cast<decltype(&mlx5dv_open_device)>(p);
        mlx5dv_context_attr attr{};
        errno = 0;
        ibv_context* c = mlx5_open(devs[0], &attr);
        // Not an mlx5 device on the software fabric: the real function's answer, unchanged by the tracer.
        std::printf("mlx5dv_open_device: %s errno=%d\n", c != nullptr ? "context" : "NULL", c != nullptr ? 0 : errno);
        if (c != nullptr) v.close_device(c);
    }

    ibv_context* ctx = v.open_device(devs[0]);
    if (ctx == nullptr) return fail("ibv_open_device");
    ibv_port_attr port{};
    if (v.query_port(ctx, 1, &port) != 0) return fail("ibv_query_port");
    ibv_pd* pd = v.alloc_pd(ctx);
    const size_t chunk = 256;
    std::vector<char> src(chunk * 2, 0), dst(chunk * 2 + chunk * static_cast<size_t>(iterations), 0);
    ibv_mr* smr = v.reg_mr(pd, src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    ibv_mr* dmr = v.reg_mr(pd, dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ibv_cq* cq = v.create_cq(ctx, 4 * iterations + 16, nullptr, nullptr, 0);
    if (pd == nullptr || smr == nullptr || dmr == nullptr || cq == nullptr) return fail("set-up");
    ibv_qp_init_attr qa{};
    qa.send_cq = cq;
    qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = static_cast<uint32_t>(2 * iterations + 4);
    qa.cap.max_recv_wr = static_cast<uint32_t>(iterations + 4);
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    ibv_qp* a = v.create_qp(pd, &qa);
    ibv_qp* b = v.create_qp(pd, &qa);
    if (a == nullptr || b == nullptr) return fail("ibv_create_qp");
    if (!to_rts(v, a, b->qp_num, port.lid) || !to_rts(v, b, a->qp_num, port.lid)) return fail("ibv_modify_qp");

    std::memset(src.data(), 'S', chunk);
    std::memset(src.data() + chunk, 'W', chunk);
    for (int i = 0; i < iterations; ++i) {
        ibv_sge sge{reinterpret_cast<uint64_t>(dst.data() + 2 * chunk + chunk * static_cast<size_t>(i)),
                    static_cast<uint32_t>(chunk), dmr->lkey};
        ibv_recv_wr r{};
        r.wr_id = 3000 + static_cast<uint64_t>(i);
        r.sg_list = &sge;
        r.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (ibv_post_recv(b, &r, &bad) != 0) return fail("ibv_post_recv");
    }
    for (int i = 0; i < iterations; ++i) {
        ibv_sge s1{reinterpret_cast<uint64_t>(src.data()), static_cast<uint32_t>(chunk), smr->lkey};
        ibv_send_wr send{};
        send.wr_id = 1000 + static_cast<uint64_t>(i);
        send.sg_list = &s1;
        send.num_sge = 1;
        send.opcode = IBV_WR_SEND;
        send.send_flags = IBV_SEND_SIGNALED;
        ibv_sge s2{reinterpret_cast<uint64_t>(src.data() + chunk), static_cast<uint32_t>(chunk), smr->lkey};
        ibv_send_wr write{};
        write.wr_id = 2000 + static_cast<uint64_t>(i);
        write.sg_list = &s2;
        write.num_sge = 1;
        write.opcode = IBV_WR_RDMA_WRITE;
        write.send_flags = i == iterations - 1 ? IBV_SEND_SIGNALED : 0;
        write.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(dst.data() + chunk);
        write.wr.rdma.rkey = dmr->rkey;
        send.next = &write;  // one post: SEND then WRITE
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(a, &send, &bad) != 0) return fail("ibv_post_send");
    }
    const int expected = iterations /*sends*/ + 1 /*last write*/ + iterations /*receives*/;
    int done = 0, errors = 0;
    for (int spins = 0; done < expected && spins < 50000000; ++spins) {
        ibv_wc wc[16];
        const int got = ibv_poll_cq(cq, 16, wc);
        if (got < 0) return fail("ibv_poll_cq");
        for (int k = 0; k < got; ++k) errors += wc[k].status != IBV_WC_SUCCESS;
        done += got;
    }
    bool data_ok = dst[chunk] == 'W' && dst[2 * chunk - 1] == 'W';
    for (int i = 0; i < iterations; ++i) data_ok = data_ok && dst[2 * chunk + chunk * static_cast<size_t>(i)] == 'S';
    std::printf("completions %d of %d, errors %d, data %s\n", done, expected, errors, data_ok ? "ok" : "WRONG");

    v.destroy_qp(a);
    v.destroy_qp(b);
    v.destroy_cq(cq);
    v.dereg_mr(smr);
    v.dereg_mr(dmr);
    v.dealloc_pd(pd);
    v.close_device(ctx);
    v.free_device_list(devs);
    return (done == expected && errors == 0 && data_ok) ? 0 : 1;
}
