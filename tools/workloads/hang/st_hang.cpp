// st-hang: a job that hangs the way NVIDIA/nccl#2383 did, with a known ground truth, for hang diagnosis
// (docs/analyzer.md, "Queue progress and stalls"). Two ranks, one RC QP each way (MPI bootstraps them).
//   rank 0: a signaled RDMA WRITE of --write-bytes into rank 1 (acknowledged), then, after --wait-ms (the
//           fabric config takes the link down by then), a signaled ATOMIC_FETCH_AND_ADD on rank 1's flag word:
//           it fails with IBV_WC_RETRY_EXC_ERR. Rank 0 then waits for rank 1's answer forever.
//   rank 1: waits forever for the flag to change, as a GPU kernel waiting for a signal would.
// Each rank prints one line "st-hang: rank R: ..." once it is waiting, with what it posted (QP number, the
// atomic's remote address), so a test can check what the report names.
#include <infiniband/verbs.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/verbs/rc_setup.h"

namespace {

namespace verbs = sigmatrace::verbs;
constexpr uint8_t kPort = 1;

struct Endpoint {
    uint32_t qpn = 0;
    uint16_t lid = 0;
    uint8_t gid[16] = {};
    uint64_t buf_addr = 0;
    uint32_t buf_rkey = 0;
    uint64_t flag_addr = 0;
    uint32_t flag_rkey = 0;
};

[[noreturn]] void fail(int rank, const char* what) {
    std::fprintf(stderr, "st-hang: rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
}

ibv_wc wait_one(ibv_cq* cq) {
    ibv_wc wc{};
    while (ibv_poll_cq(cq, 1, &wc) == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    return wc;
}

[[noreturn]] void wait_forever(volatile uint64_t* flag) {
    for (;;) {
        if (*flag != 0) std::fprintf(stderr, "st-hang: the flag changed: the fault did not happen\n");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) fail(rank, "needs exactly 2 ranks");
    uint32_t write_bytes = 4u << 20;
    uint32_t wait_ms = 3000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--write-bytes") == 0) write_bytes = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 0));
        else if (std::strcmp(argv[i], "--wait-ms") == 0) wait_ms = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 0));
        else fail(rank, "usage: st-hang [--write-bytes N] [--wait-ms MS]");
    }
    const int peer = 1 - rank;
    try {
        verbs::Context ctx = verbs::open_device("sfab_0");
        if (!ctx) fail(rank, "no sfab_0 device (run it under `sigmatrace fabric`)");
        verbs::Pd pd = verbs::alloc_pd(ctx.get());
        verbs::Cq cq = verbs::create_cq(ctx.get(), 64);
        std::vector<uint8_t> buf(write_bytes, static_cast<uint8_t>(rank + 1));
        auto* flag = static_cast<uint64_t*>(std::aligned_alloc(64, 64));
        *flag = 0;
        auto* result = static_cast<uint64_t*>(std::aligned_alloc(64, 64));
        verbs::Mr buf_mr = verbs::reg_mr(pd.get(), buf.data(), buf.size(), verbs::kFullAccess);
        verbs::Mr flag_mr = verbs::reg_mr(pd.get(), flag, 64, verbs::kFullAccess);
        verbs::Mr result_mr = verbs::reg_mr(pd.get(), result, 64, IBV_ACCESS_LOCAL_WRITE);
        verbs::Qp qp = verbs::create_rc_qp(pd.get(), cq.get(), cq.get(), verbs::RcCaps{.send_wr = 16});
        Endpoint mine{}, theirs[2]{};
        mine.qpn = qp->qp_num;
        mine.lid = verbs::query_port(ctx.get(), kPort).lid;
        ibv_gid gid{};
        if (ibv_query_gid(ctx.get(), kPort, 0, &gid) == 0) std::memcpy(mine.gid, gid.raw, 16);
        mine.buf_addr = reinterpret_cast<uint64_t>(buf.data());
        mine.buf_rkey = buf_mr->rkey;
        mine.flag_addr = reinterpret_cast<uint64_t>(flag);
        mine.flag_rkey = flag_mr->rkey;
        MPI_Allgather(&mine, sizeof mine, MPI_BYTE, theirs, sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
        const Endpoint& far = theirs[peer];
        verbs::connect_rc(qp.get(), {.qpn = far.qpn, .lid = far.lid, .gid = far.gid},
                          {.access = verbs::kFullAccess, .rd_atomic = 4, .port = kPort});
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1) {
            std::printf("st-hang: rank 1: qp %u waiting for the flag at 0x%llx\n", qp->qp_num,
                        static_cast<unsigned long long>(mine.flag_addr));
            std::fflush(stdout);
            wait_forever(flag);
        }
        ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), write_bytes, buf_mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = 1;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = far.buf_addr;
        wr.wr.rdma.rkey = far.buf_rkey;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(qp.get(), &wr, &bad) != 0) fail(rank, "ibv_post_send (write)");
        if (ibv_wc wc = wait_one(cq.get()); wc.status != IBV_WC_SUCCESS) {
            std::fprintf(stderr, "st-hang: rank 0: the write failed (%s): the link went down too early\n",
                         ibv_wc_status_str(wc.status));
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
        ibv_sge asge{reinterpret_cast<uint64_t>(result), 8, result_mr->lkey};
        ibv_send_wr aw{};
        aw.wr_id = 2;
        aw.sg_list = &asge;
        aw.num_sge = 1;
        aw.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        aw.send_flags = IBV_SEND_SIGNALED;
        aw.wr.atomic.remote_addr = far.flag_addr;
        aw.wr.atomic.rkey = far.flag_rkey;
        aw.wr.atomic.compare_add = 1;
        if (ibv_post_send(qp.get(), &aw, &bad) != 0) fail(rank, "ibv_post_send (atomic)");
        const ibv_wc wc = wait_one(cq.get());
        std::printf("st-hang: rank 0: qp %u atomic to 0x%llx completed with %s, vendor_err 0x%x\n", qp->qp_num,
                    static_cast<unsigned long long>(far.flag_addr), ibv_wc_status_str(wc.status), wc.vendor_err);
        std::fflush(stdout);
        wait_forever(flag);
    } catch (const verbs::SetupError& e) {
        fail(rank, e.what());
    }
}
