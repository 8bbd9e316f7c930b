// Workload (2): rocSHMEM-style GPU QPs -- plain verbs RC QPs and CQs (ibv_create_cq, ibv_create_qp, ibv_modify_qp),
// whose rings are then handed to the "GPU" with mlx5dv_init_obj(CQ) and mlx5dv_init_obj(QP), and driven directly
// from then on (rocSHMEM's initialize_gpu_qp / mlx5_ring_doorbell / its CQ poll): CPU threads standing in for GPU
// threads write mlx5 WQEs into the exported send ring, put the whole 32-bit producer counter into the doorbell
// record, ring the exported doorbell register, and walk the normal CQ by owner bit, handing each consumed CQE back
// as INVALID and publishing the consumer index.
//
// Each thread, to every PE: an RDMA WRITE of its chunk, an 8-byte fetch-add on the target's per-source counter,
// and every 4th iteration an RDMA READ of the target's counter area. Ground truth (--truth DIR) as for
// gpu_ibgda_put; the run checks counters and data. Exit 0 when all hold.
//
//   mpirun -np 4 sigmatrace fabric --node rank -- gpu_rocshmem_verbs [--iters N] [--threads T] [--bytes B]
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu_common/gpu_qp.h"
#include "gpu_common/mpi_boot.h"
#include "common/verbs/rc_setup.h"
#include "gpu_common/workload_main.h"

using namespace sigmatrace::workloads;
namespace verbs = sigmatrace::verbs;

namespace {

struct Peer {
    uint32_t lid;
    uint32_t qpn[PeInfo::kMaxPes];
    uint64_t addr;
    uint32_t rkey;
};

uint8_t pattern(size_t src, size_t i) { return static_cast<uint8_t>(src * 13 + i * 3 + 1); }

int run(int argc, char** argv) {
    const PeIdentity id = start_pe(&argc, &argv);
    const int me = id.me, npes = id.npes;
    size_t iters = 32, threads = 2, bytes = 2048;
    const CommonOptions common = WorkloadOptions("gpu_rocshmem_verbs")
                                     .add("--iters", "N", iters)
                                     .add("--threads", "T", threads)
                                     .add("--bytes", "B", bytes)
                                     .parse(argc, argv);
    if (npes > PeInfo::kMaxPes) die("too many PEs");
    const size_t n = static_cast<size_t>(npes);
    // Heap: [send chunk][recv slot per source][counter per source][read-back area per thread][fetch results]
    const size_t recv_off = bytes, counter_off = recv_off + n * bytes, read_off = counter_off + n * 8;
    const size_t fetch_off = read_off + threads * n * 8, heap_bytes = fetch_off + threads * 8 + 64;

    verbs::Context ctx = verbs::open_device(common.device);
    if (!ctx) die("Cannot open " + common.device + " (run under `sigmatrace fabric`)");
    const ibv_port_attr port = verbs::query_port(ctx.get());
    verbs::Pd pd = verbs::alloc_pd(ctx.get());
    std::vector<uint8_t> heap(heap_bytes, 0);
    verbs::Mr mr = verbs::reg_mr(pd.get(), heap.data(), heap.size(), verbs::kFullAccess);
    for (size_t i = 0; i < bytes; ++i) heap[i] = pattern(static_cast<size_t>(me), i);

    // rocSHMEM's create_queues: one CQ per QP, plain verbs.
    std::vector<verbs::Cq> cqs(n);
    std::vector<verbs::Qp> qps(n);
    Peer mine{};
    mine.lid = port.lid;
    mine.addr = reinterpret_cast<uint64_t>(heap.data());
    mine.rkey = mr->rkey;
    for (size_t pe = 0; pe < n; ++pe) {
        cqs[pe] = verbs::create_cq(ctx.get(), 255);
        qps[pe] = verbs::create_rc_qp(pd.get(), cqs[pe].get(), cqs[pe].get(), {.send_wr = 256});
        mine.qpn[pe] = qps[pe]->qp_num;
    }
    std::vector<Peer> peers(n);
    MPI_Allgather(&mine, sizeof mine, MPI_BYTE, peers.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
    for (size_t pe = 0; pe < n; ++pe)
        verbs::connect_rc(qps[pe].get(), {.qpn = peers[pe].qpn[me], .lid = static_cast<uint16_t>(peers[pe].lid)},
                          {.access = verbs::kFullAccess, .rd_atomic = 16});

    // initialize_gpu_qp: the CQ first, then the QP; from here on the "GPU" drives them.
    TruthLog truth;
    std::vector<std::unique_ptr<GpuQp>> gq(n);
    for (size_t pe = 0; pe < n; ++pe) {
        mlx5dv_cq dcq{};
        mlx5dv_qp dqp{};
        mlx5dv_obj obj{};
        obj.cq.in = cqs[pe].get();
        obj.cq.out = &dcq;
        if (int err = mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ)) die("mlx5dv_init_obj(CQ): " + std::string(std::strerror(err)));
        obj = {};
        obj.qp.in = qps[pe].get();
        obj.qp.out = &dqp;
        if (int err = mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP)) die("mlx5dv_init_obj(QP): " + std::string(std::strerror(err)));
        auto g = std::make_unique<GpuQp>();
        g->qpn = qps[pe]->qp_num;
        g->wqe = static_cast<uint8_t*>(dqp.sq.buf);
        g->nwqes = dqp.sq.wqe_cnt;
        g->dbrec = reinterpret_cast<uint32_t*>(&dqp.dbrec[1]);
        g->bf = static_cast<uint64_t*>(dqp.bf.reg);
        g->cqe = static_cast<const uint8_t*>(dcq.buf);
        g->cq_ncqe = dcq.cqe_cnt;
        g->cq_dbrec = reinterpret_cast<uint32_t*>(&dcq.dbrec[0]);
        g->dbr_full_counter = true;
        g->truth = &truth;
        if (!g->wqe || !g->dbrec || !g->bf || dcq.cqe_size != 64) die("mlx5dv_init_obj returned an unusable QP or CQ");
        gq[pe] = std::move(g);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    std::vector<std::thread> gpu_threads;
    const uint32_t lkey = mr->lkey;
    uint8_t* base = heap.data();
    for (size_t th = 0; th < threads; ++th) {
        gpu_threads.emplace_back([&, th] {
            for (size_t it = 0; it < iters; ++it) {
                for (size_t k = 0; k < n; ++k) {
                    const size_t pe = (static_cast<size_t>(me) + 1 + k + th) % n;
                    GpuQp& q = *gq[pe];
                    const Peer& p = peers[pe];
                    const bool read = it % 4 == 3;
                    const uint64_t b = q.reserve(read ? 3 : 2);
                    q.write_rdma_write(b, reinterpret_cast<uint64_t>(base), lkey, p.addr + recv_off + static_cast<size_t>(me) * bytes,
                                       p.rkey, static_cast<uint32_t>(bytes), true);
                    q.write_fetch_add(b + 1, reinterpret_cast<uint64_t>(base + fetch_off + th * 8), lkey,
                                      p.addr + counter_off + static_cast<size_t>(me) * 8, p.rkey, 1, true);
                    if (read)
                        q.write_rdma_read(b + 2, reinterpret_cast<uint64_t>(base + read_off + (th * n + pe) * 8), lkey,
                                          p.addr + counter_off + static_cast<size_t>(me) * 8, p.rkey, 8, true);
                    q.submit(b, read ? 3 : 2);
                }
            }
        });
    }
    for (auto& t : gpu_threads) t.join();
    for (size_t pe = 0; pe < n; ++pe) gq[pe]->quiet(gq[pe]->ready_head.load());
    MPI_Barrier(MPI_COMM_WORLD);

    int bad = 0;
    for (size_t src = 0; src < n; ++src) {
        uint64_t c;
        std::memcpy(&c, base + counter_off + src * 8, 8);
        if (c != threads * iters) {
            std::fprintf(stderr, "PE %d: counter of PE %zu is %llu, expected %zu\n", me, src, static_cast<unsigned long long>(c),
                         threads * iters);
            ++bad;
        }
        for (size_t i = 0; i < bytes; ++i)
            if (base[recv_off + src * bytes + i] != pattern(src, i)) {
                std::fprintf(stderr, "PE %d: slot of PE %zu differs at byte %zu\n", me, src, i);
                ++bad;
                break;
            }
    }
    write_truth(common, truth, me);
    std::printf("gpu_rocshmem_verbs PE %d: %zu WQEs posted on %d QPs; counters and data %s\n", me, truth.size(), npes,
                bad ? "WRONG" : "correct");
    for (size_t pe = 0; pe < n; ++pe) {  // each QP, then its CQ
        qps[pe].reset();
        cqs[pe].reset();
    }
    mr.reset();
    pd.reset();
    ctx.reset();
    return job_exit_status(bad);
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const verbs::SetupError& e) {
        die(std::string("gpu_rocshmem_verbs: ") + e.what());
    }
}
