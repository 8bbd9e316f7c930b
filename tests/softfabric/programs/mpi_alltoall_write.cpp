// An MPI job on the fabric: one mpirun starts every rank on this machine, `sigmatrace fabric --node rank/K`
// puts K consecutive ranks on each fabric node. Every rank connects an RC QP to every other rank (QP numbers
// and buffer keys exchanged with MPI_Allgather), RDMA-writes a rank-specific pattern into its slot of every
// peer's buffer, and checks what it received. Exit 0 when every slot holds its writer's pattern.
#include <infiniband/verbs.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/verbs/rc_setup.h"

namespace {

namespace verbs = sigmatrace::verbs;

constexpr uint32_t kSlot = 64 * 1024;

struct Info {
    uint16_t lid;
    uint32_t qpn[64];
    uint64_t addr;
    uint32_t rkey;
};

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "mpi_alltoall_write: %s failed\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
}

[[noreturn]] void fail(const verbs::SetupError& e) {
    std::fprintf(stderr, "mpi_alltoall_write: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
}

unsigned char pattern(int writer, size_t i) { return static_cast<unsigned char>(writer * 31 + i * 7 + 1); }

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 64) fail("more than 64 ranks");
    std::vector<Info> all(static_cast<size_t>(size));

    verbs::Context ctx;
    verbs::Pd pd;
    std::vector<unsigned char> recv(static_cast<size_t>(size) * kSlot), send(kSlot);
    for (size_t i = 0; i < kSlot; ++i) send[i] = pattern(rank, i);
    verbs::Mr rmr, smr;
    verbs::Cq cq;
    std::vector<verbs::Qp> qps(static_cast<size_t>(size));
    ibv_port_attr port{};
    try {
        ctx = verbs::open_device("sfab_0");
        if (!ctx) fail("ibv_open_device sfab_0 (run under sigmatrace fabric)");
        port = verbs::query_port(ctx.get());
        pd = verbs::alloc_pd(ctx.get());
        rmr = verbs::reg_mr(pd.get(), recv.data(), recv.size(), verbs::kReadWrite);
        smr = verbs::reg_mr(pd.get(), send.data(), send.size(), verbs::kReadWrite);
        cq = verbs::create_cq(ctx.get(), 2 * size + 2);
        Info mine{};
        mine.lid = port.lid;
        mine.addr = reinterpret_cast<uint64_t>(recv.data());
        mine.rkey = rmr->rkey;
        for (int p = 0; p < size; ++p) {
            if (p == rank) continue;
            qps[p] = verbs::create_rc_qp(pd.get(), cq.get(), cq.get(), {.send_wr = 4});
            mine.qpn[p] = qps[p]->qp_num;
        }
        MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
        for (int p = 0; p < size; ++p)
            if (p != rank) verbs::connect_rc(qps[p].get(), {.qpn = all[p].qpn[rank], .lid = all[p].lid});
    } catch (const verbs::SetupError& e) {
        fail(e);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        ibv_sge sge{reinterpret_cast<uint64_t>(send.data()), kSlot, smr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = static_cast<uint64_t>(p);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = all[p].addr + static_cast<uint64_t>(rank) * kSlot;
        wr.wr.rdma.rkey = all[p].rkey;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(qps[p].get(), &wr, &bad)) fail("ibv_post_send");
    }
    for (int done = 0; done < size - 1;) {
        ibv_wc wc{};
        int n = ibv_poll_cq(cq.get(), 1, &wc);
        if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS)) fail("write completion");
        done += n;
    }
    MPI_Barrier(MPI_COMM_WORLD);  // every write has completed everywhere
    int bad_slots = 0;
    for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        for (size_t i = 0; i < kSlot; ++i) {
            if (recv[static_cast<size_t>(p) * kSlot + i] != pattern(p, i)) {
                ++bad_slots;
                break;
            }
        }
    }
    const char* node = std::getenv("SOFTFABRIC_NODE");
    std::printf("rank %d on %s (LID %u): %d of %d slots correct\n", rank, node ? node : "?", port.lid,
                size - 1 - bad_slots, size - 1);
    int total_bad = 0;
    MPI_Allreduce(&bad_slots, &total_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    // In dependency order, before MPI ends.
    qps.clear();
    cq.reset();
    smr.reset();
    rmr.reset();
    pd.reset();
    ctx.reset();
    MPI_Finalize();
    return total_bad == 0 ? 0 : 1;
}
