// cross_thread_writes [WRITES]: one thread posts RDMA WRITEs (every 4th signaled, wr_id = its index) on a QP
// connected to a second QP of the same process; another thread polls the send CQ. The case deferred emission
// must get right: the poller's completions are captured on one thread and the posts on another, and their
// events come out of different rings in any order (the analyzer reorders by capture time).
// Prints "posted N completions M"; exit 0 when every signaled WRITE completed successfully, 77 without a device.
#include <infiniband/verbs.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "common/verbs/rc_setup.h"

namespace {

namespace verbs = sigmatrace::verbs;

constexpr int kSignalEvery = 4;
constexpr int kMaxOutstanding = 64;  // signaled WRs in flight (the send queue holds 4x as many WRs)

}  // namespace

int main(int argc, char** argv) try {
    const int writes = (argc > 1 ? std::atoi(argv[1]) : 4000) / kSignalEvery * kSignalEvery;
    // Declared in dependency order, so that they are destroyed QPs first.
    const verbs::Context ctx = verbs::open_device();
    if (!ctx) {
        std::fprintf(stderr, "cross_thread_writes: no RDMA device\n");
        return 77;
    }
    const ibv_port_attr port = verbs::query_port(ctx.get());
    const verbs::Pd pd = verbs::alloc_pd(ctx.get());
    std::vector<char> src(4096, 'x'), dst(4096, 0);
    const verbs::Mr smr = verbs::reg_mr(pd.get(), src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    const verbs::Mr dmr = verbs::reg_mr(pd.get(), dst.data(), dst.size(), verbs::kReadWrite);
    const verbs::Cq cq = verbs::create_cq(ctx.get(), 2 * kMaxOutstanding);
    const verbs::Cq peer_cq = verbs::create_cq(ctx.get(), 16);
    const verbs::RcCaps caps{.send_wr = kMaxOutstanding * kSignalEvery};
    const verbs::Qp qp = verbs::create_rc_qp(pd.get(), cq.get(), cq.get(), caps);
    const verbs::Qp peer = verbs::create_rc_qp(pd.get(), peer_cq.get(), peer_cq.get(), caps);
    verbs::connect_rc(qp.get(), {.qpn = peer->qp_num, .lid = port.lid}, {.mtu = IBV_MTU_1024});
    verbs::connect_rc(peer.get(), {.qpn = qp->qp_num, .lid = port.lid}, {.mtu = IBV_MTU_1024});

    std::atomic<int> credits{kMaxOutstanding};
    std::atomic<int> completions{0};
    std::atomic<bool> failed{false};
    std::thread poller([&] {
        ibv_wc wc[16];
        while (completions.load() < writes / kSignalEvery && !failed.load()) {
            const int n = ibv_poll_cq(cq.get(), 16, wc);
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
        if (ibv_post_send(qp.get(), &wr, &bad) != 0) {
            failed = true;
            break;
        }
    }
    poller.join();
    std::printf("posted %d completions %d\n", posted, completions.load());
    const bool ok = !failed.load() && completions.load() == writes / kSignalEvery && dst[0] == 'x';
    return ok ? 0 : 1;
} catch (const verbs::SetupError& e) {
    std::fprintf(stderr, "cross_thread_writes: %s\n", e.what());
    return 1;
}
