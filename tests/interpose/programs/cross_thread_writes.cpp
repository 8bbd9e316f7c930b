// cross_thread_writes [WRITES]: one thread posts RDMA WRITEs (every 4th signaled, wr_id = its index) on a QP
// connected to a second QP of the same process; another thread polls the send CQ. The case deferred emission
// must get right: the poller's completions are captured on one thread and the posts on another, and their
// events come out of different rings in any order (the analyzer reorders by capture time).
// Prints "posted N completions M"; exit 0 when every signaled WRITE completed successfully, 77 without a device.
#include <infiniband/verbs.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "rc_loopback.h"

namespace {

constexpr int kSignalEvery = 4;
constexpr int kMaxOutstanding = 64;  // signaled WRs in flight (the send queue holds 4x as many WRs)

int fail(const char* what) {
    std::fprintf(stderr, "cross_thread_writes: %s failed: %s\n", what, std::strerror(errno));
    return 1;
}

bool to_rts(ibv_qp* qp, uint32_t dest_qpn, uint16_t dlid) {
    return rc_loopback_to_rts(&ibv_modify_qp, qp, dest_qpn, dlid);
}

}  // namespace

int main(int argc, char** argv) {
    const int writes = (argc > 1 ? std::atoi(argv[1]) : 4000) / kSignalEvery * kSignalEvery;
    int ndev = 0;
    ibv_device** devs = ibv_get_device_list(&ndev);
    if (devs == nullptr || ndev == 0) {
        std::fprintf(stderr, "cross_thread_writes: no RDMA device\n");
        return 77;
    }
    ibv_context* ctx = ibv_open_device(devs[0]);
    ibv_free_device_list(devs);
    if (ctx == nullptr) return fail("ibv_open_device");
    ibv_port_attr port{};
    if (ibv_query_port(ctx, 1, &port) != 0) return fail("ibv_query_port");
    ibv_pd* pd = ibv_alloc_pd(ctx);
    std::vector<char> src(4096, 'x'), dst(4096, 0);
    ibv_mr* smr = pd ? ibv_reg_mr(pd, src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE) : nullptr;
    ibv_mr* dmr = pd ? ibv_reg_mr(pd, dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : nullptr;
    ibv_cq* cq = ibv_create_cq(ctx, 2 * kMaxOutstanding, nullptr, nullptr, 0);
    ibv_cq* peer_cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    if (pd == nullptr || smr == nullptr || dmr == nullptr || cq == nullptr || peer_cq == nullptr) return fail("set-up");
    ibv_qp_init_attr qa{};
    qa.send_cq = cq;
    qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = kMaxOutstanding * kSignalEvery;
    qa.cap.max_recv_wr = 1;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(pd, &qa);
    qa.send_cq = peer_cq;
    qa.recv_cq = peer_cq;
    ibv_qp* peer = ibv_create_qp(pd, &qa);
    if (qp == nullptr || peer == nullptr) return fail("ibv_create_qp");
    if (!to_rts(qp, peer->qp_num, port.lid) || !to_rts(peer, qp->qp_num, port.lid)) return fail("ibv_modify_qp");

    std::atomic<int> credits{kMaxOutstanding};
    std::atomic<int> completions{0};
    std::atomic<bool> failed{false};
    std::thread poller([&] {
        ibv_wc wc[16];
        while (completions.load() < writes / kSignalEvery && !failed.load()) {
            const int n = ibv_poll_cq(cq, 16, wc);
            if (n < 0) failed = true;
            for (int i = 0; i < n; ++i) {
                if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id % kSignalEvery != kSignalEvery - 1) failed = true;
                completions.fetch_add(1);
                credits.fetch_add(1);
            }
        }
    });
    int posted = 0;
    for (; posted < writes && !failed.load(); ++posted) {
        const bool signaled = posted % kSignalEvery == kSignalEvery - 1;
        if (signaled) {
            while (credits.load() == 0 && !failed.load()) std::this_thread::yield();
            credits.fetch_sub(1);
        }
        ibv_sge sge{reinterpret_cast<uint64_t>(src.data()), 512, smr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = static_cast<uint64_t>(posted);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
        wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(dst.data());
        wr.wr.rdma.rkey = dmr->rkey;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(qp, &wr, &bad) != 0) {
            failed = true;
            break;
        }
    }
    poller.join();
    std::printf("posted %d completions %d\n", posted, completions.load());
    const bool ok = !failed.load() && completions.load() == writes / kSignalEvery && dst[0] == 'x';
    ibv_destroy_qp(peer);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(peer_cq);
    ibv_destroy_cq(cq);
    ibv_dereg_mr(dmr);
    ibv_dereg_mr(smr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    return ok ? 0 : 1;
}
