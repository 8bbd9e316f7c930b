// exit_paths MODE WRITES: a loopback RC QP pair in one process; WRITES signaled 4 KiB RDMA WRITEs, each polled to
// its completion, then the process ends by MODE without destroying anything:
//   return      returns from main            exit        exit(0)
//   quick_exit  quick_exit(0)                _exit       _exit(0)
//   sigkill     raise(SIGKILL) after the last completion
//   abort       abort() (SIGABRT, default action: the tracer's fatal-signal handler drains, then the process dies)
//   thread      the WRITEs are done by a second thread, which exits; main then returns
//   exec        execs /bin/true after the last completion
//   forever     posts until it is killed from outside (WRITES is ignored); prints "running" after the first write
// Prints "writes N" (the WRITEs it completed) before ending; exit 77 without a device.
#include <infiniband/verbs.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "rc_loopback.h"

namespace {

constexpr uint32_t kBytes = 4096;

struct Loopback {
    ibv_qp* qp = nullptr;
    ibv_cq* cq = nullptr;
    ibv_mr* src = nullptr;
    ibv_mr* dst = nullptr;
};

bool write_one(const Loopback& lb, uint64_t id) {
    ibv_sge sge{reinterpret_cast<uint64_t>(lb.src->addr), kBytes, lb.src->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(lb.dst->addr);
    wr.wr.rdma.rkey = lb.dst->rkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(lb.qp, &wr, &bad) != 0) return false;
    ibv_wc wc{};
    int n = 0;
    while ((n = ibv_poll_cq(lb.cq, 1, &wc)) == 0) {
    }
    return n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == id;
}

int fail(const char* what) {
    std::fprintf(stderr, "exit_paths: %s failed: %s\n", what, std::strerror(errno));
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: exit_paths MODE WRITES\n");
        return 2;
    }
    const std::string mode = argv[1];
    const int writes = std::atoi(argv[2]);
    Loopback lb;
    int ndev = 0;
    ibv_device** devs = ibv_get_device_list(&ndev);
    if (devs == nullptr || ndev == 0) {
        std::fprintf(stderr, "exit_paths: no RDMA device\n");
        return 77;
    }
    ibv_context* ctx = ibv_open_device(devs[0]);
    ibv_free_device_list(devs);
    if (ctx == nullptr) return fail("ibv_open_device");
    ibv_port_attr port{};
    if (ibv_query_port(ctx, 1, &port) != 0) return fail("ibv_query_port");
    ibv_pd* pd = ibv_alloc_pd(ctx);
    static std::vector<char> src(kBytes, 'x'), dst(kBytes, 0);
    lb.src = pd ? ibv_reg_mr(pd, src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE) : nullptr;
    lb.dst = pd ? ibv_reg_mr(pd, dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : nullptr;
    lb.cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    ibv_cq* peer_cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    if (pd == nullptr || lb.src == nullptr || lb.dst == nullptr || lb.cq == nullptr || peer_cq == nullptr)
        return fail("set-up");
    ibv_qp_init_attr qa{};
    qa.send_cq = lb.cq;
    qa.recv_cq = lb.cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 16;
    qa.cap.max_recv_wr = 1;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    lb.qp = ibv_create_qp(pd, &qa);
    qa.send_cq = peer_cq;
    qa.recv_cq = peer_cq;
    ibv_qp* peer = ibv_create_qp(pd, &qa);
    if (lb.qp == nullptr || peer == nullptr) return fail("ibv_create_qp");
    auto modify = [](ibv_qp* q, ibv_qp_attr* a, int m) { return ibv_modify_qp(q, a, m); };
    if (!rc_loopback_to_rts(modify, lb.qp, peer->qp_num, port.lid) ||
        !rc_loopback_to_rts(modify, peer, lb.qp->qp_num, port.lid))
        return fail("ibv_modify_qp");

    if (mode == "forever") {
        for (uint64_t i = 0;; ++i) {
            if (!write_one(lb, i)) return fail("RDMA WRITE");
            if (i == 0) {
                std::printf("running\n");
                std::fflush(stdout);
            }
        }
    }
    bool ok = true;
    auto run = [&] {
        for (int i = 0; i < writes && ok; ++i) ok = write_one(lb, static_cast<uint64_t>(i));
    };
    if (mode == "thread") std::thread(run).join();
    else run();
    if (!ok) return fail("RDMA WRITE");
    std::printf("writes %d\n", writes);
    std::fflush(stdout);
    if (mode == "return" || mode == "thread") return 0;
    if (mode == "abort") std::abort();
    if (mode == "exec") {
        execl("/bin/true", "true", static_cast<char*>(nullptr));
        return fail("execl");
    }
    if (mode == "exit") std::exit(0);
    if (mode == "quick_exit") std::quick_exit(0);
    if (mode == "_exit") _exit(0);
    if (mode == "sigkill") raise(SIGKILL);
    std::fprintf(stderr, "exit_paths: unknown mode %s\n", mode.c_str());
    return 2;
}
