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

#include "common/verbs/rc_setup.h"

namespace {

namespace verbs = sigmatrace::verbs;

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
    // Every object is released from its owner: each mode ends the process with them all alive.
    Loopback lb;
    try {
        verbs::Context ctx = verbs::open_device();
        if (!ctx) {
            std::fprintf(stderr, "exit_paths: no RDMA device\n");
            return 77;
        }
        const ibv_port_attr port = verbs::query_port(ctx.get());
        verbs::Pd pd = verbs::alloc_pd(ctx.get());
        static std::vector<char> src(kBytes, 'x'), dst(kBytes, 0);
        lb.src = verbs::reg_mr(pd.get(), src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE).release();
        lb.dst = verbs::reg_mr(pd.get(), dst.data(), dst.size(), verbs::kReadWrite).release();
        lb.cq = verbs::create_cq(ctx.get(), 16).release();
        ibv_cq* peer_cq = verbs::create_cq(ctx.get(), 16).release();
        lb.qp = verbs::create_rc_qp(pd.get(), lb.cq, lb.cq, {.send_wr = 16}).release();
        ibv_qp* peer = verbs::create_rc_qp(pd.get(), peer_cq, peer_cq, {.send_wr = 16}).release();
        verbs::connect_rc(lb.qp, {.qpn = peer->qp_num, .lid = port.lid}, {.mtu = IBV_MTU_1024});
        verbs::connect_rc(peer, {.qpn = lb.qp->qp_num, .lid = port.lid}, {.mtu = IBV_MTU_1024});
        (void)pd.release();
        (void)ctx.release();
    } catch (const verbs::SetupError& e) {
        std::fprintf(stderr, "exit_paths: %s\n", e.what());
        return 1;
    }

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
