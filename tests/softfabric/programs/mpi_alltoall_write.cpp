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

namespace {

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

unsigned char pattern(int writer, size_t i) { return static_cast<unsigned char>(writer * 31 + i * 7 + 1); }

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 64) fail("more than 64 ranks");

    ibv_device** list = ibv_get_device_list(nullptr);
    if (!list || !list[0]) fail("ibv_get_device_list (run under sigmatrace fabric)");
    ibv_context* ctx = nullptr;
    for (int i = 0; list[i] && !ctx; ++i)
        if (!std::strcmp(ibv_get_device_name(list[i]), "sfab_0")) ctx = ibv_open_device(list[i]);
    if (!ctx) fail("ibv_open_device sfab_0");
    ibv_port_attr port{};
    ibv_query_port(ctx, 1, &port);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    std::vector<unsigned char> recv(static_cast<size_t>(size) * kSlot), send(kSlot);
    for (size_t i = 0; i < kSlot; ++i) send[i] = pattern(rank, i);
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    ibv_mr* rmr = ibv_reg_mr(pd, recv.data(), recv.size(), access);
    ibv_mr* smr = ibv_reg_mr(pd, send.data(), send.size(), access);
    ibv_cq* cq = ibv_create_cq(ctx, 2 * size + 2, nullptr, nullptr, 0);
    if (!pd || !rmr || !smr || !cq) fail("resource creation");

    std::vector<ibv_qp*> qps(static_cast<size_t>(size));
    Info mine{};
    mine.lid = port.lid;
    mine.addr = reinterpret_cast<uint64_t>(recv.data());
    mine.rkey = rmr->rkey;
    for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        ibv_qp_init_attr qa{};
        qa.send_cq = qa.recv_cq = cq;
        qa.qp_type = IBV_QPT_RC;
        qa.cap.max_send_wr = 4;
        qa.cap.max_recv_wr = 1;
        qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
        qps[p] = ibv_create_qp(pd, &qa);
        if (!qps[p]) fail("ibv_create_qp");
        mine.qpn[p] = qps[p]->qp_num;
    }
    std::vector<Info> all(static_cast<size_t>(size));
    MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);

    for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags = access;
        if (ibv_modify_qp(qps[p], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
            fail("modify INIT");
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_4096;
        a.dest_qp_num = all[p].qpn[rank];
        a.ah_attr.dlid = all[p].lid;
        a.ah_attr.port_num = 1;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        if (ibv_modify_qp(qps[p], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
            fail("modify RTR");
        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 1;
        if (ibv_modify_qp(qps[p], &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
            fail("modify RTS");
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
        if (ibv_post_send(qps[p], &wr, &bad)) fail("ibv_post_send");
    }
    for (int done = 0; done < size - 1;) {
        ibv_wc wc{};
        int n = ibv_poll_cq(cq, 1, &wc);
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
    for (auto* qp : qps)
        if (qp) ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(rmr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    MPI_Finalize();
    return total_bad == 0 ? 0 : 1;
}
