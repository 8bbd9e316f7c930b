// gpu_gin_hang: the hang of NVIDIA/nccl#2383 on a directly driven ring, with a known ground truth, for hang
// diagnosis of GPU-initiated queues (docs/analyzer.md, "Queue progress and stalls"). Set-up is NCCL GIN's GDAKI
// backend on DOCA GPUNetIO (the GPU_SM_NO_DBR mode of gpu_gin: DevX RC QPs without a doorbell record, a
// send CQ read by index, every WQE signalled); a CPU thread writes what the kernel would. Two PEs:
//   PE 0: a signalled RDMA WRITE of --write-bytes into PE 1's heap (acknowledged: its CQE arrives), then, after
//         --wait-ms (the fabric config takes the link down by then), the signal: an ATOMIC_FETCH_AND_ADD on PE 1's
//         signal word. Its CQE is an error (transport retry exceeded); PE 0 then waits for PE 1's answer forever.
//   PE 1: after --wait-ms too, puts --write-bytes back into PE 0's heap (the reverse direction of the exchange);
//         that put fails the same way, unacknowledged; PE 1 then waits forever for the signal, as GIN's
//         waitSignal does.
// Each PE prints one line "gpu_gin_hang: PE P: ..." once it waits, with what it posted (QP number, the WQE's
// index and remote address, the CQE's syndromes) and what a QUERY_QP of its QP then said (state and send
// counters, as a watchdog asks), so a test can check what the report names.
//
//   mpirun -np 2 sigmatrace fabric --node rank --config FABRIC.conf -- gpu_gin_hang [--write-bytes B] [--wait-ms MS]
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "gpu_common/gpu_qp.h"
#include "gpu_common/ibgda_setup.h"
#include "gpu_common/mpi_boot.h"
#include "gpu_common/workload_main.h"

using namespace sigmatrace::workloads;

namespace {

struct Completion {
    bool error = false;
    uint8_t syndrome = 0, vendor_syndrome = 0;
};

// Waits for the CQE of WQE `index` (every WQE is signalled, so it is the next one): DOCA's poll_one_cq_at.
Completion wait_for(GpuQp& q, uint64_t index) {
    for (;;) {
        const GpuQp::Polled p = q.poll();
        if (p.kind == GpuQp::Cqe::Error) return {true, p.syndrome, p.vendor_syndrome};
        if (p.kind == GpuQp::Cqe::Ok && p.counter == static_cast<uint16_t>(index)) return {};
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

// A watchdog's look at the QP after the error (DOCA's doca_verbs_qp_query: QUERY_QP through DevX): prints
// "QUERY_QP state S hw H sw W" (PRM state, 6 = ERR) for the test to compare with the report.
std::string query_text(IbgdaTransport& t, int pe) {
    IbgdaTransport::QpQuery q;
    std::string error;
    if (!t.query(pe, q, error)) return "QUERY_QP failed: " + error;
    return "QUERY_QP state " + std::to_string(q.state) + " hw " + std::to_string(q.hw_sq_wqebb_counter) + " sw " +
           std::to_string(q.sw_sq_wqebb_counter);
}

[[noreturn]] void wait_forever(const uint8_t* word, int me) {
    for (;;) {
        if (__atomic_load_n(reinterpret_cast<const uint64_t*>(word), __ATOMIC_ACQUIRE) != 0)
            std::fprintf(stderr, "gpu_gin_hang: PE %d: the signal arrived: the fault did not happen\n", me);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

}  // namespace

int main(int argc, char** argv) {
    const PeIdentity id = start_pe(&argc, &argv);
    const int me = id.me;
    size_t write_bytes = 1u << 20;
    uint32_t wait_ms = 3000;
    const CommonOptions common = WorkloadOptions("gpu_gin_hang")
                                     .add("--write-bytes", "B", write_bytes)
                                     .add("--wait-ms", "MS", wait_ms)
                                     .parse(argc, argv);
    if (id.npes != 2) die("gpu_gin_hang needs exactly 2 PEs");
    // Heap: the written buffer, then the signal word and the atomic's fetch result.
    const size_t signal = write_bytes, fetch = write_bytes + 8;
    IbgdaTransport t;
    QpFlavor gin;
    gin.dbr_less = true;
    gin.cq_per_wqe = true;
    std::vector<PeInfo> peers = connect_all(t, common.device, 2, me, 6, write_bytes + 64, gin);
    uint8_t* heap = t.heap();
    const int peer = 1 - me;
    const PeInfo& far = peers[static_cast<size_t>(peer)];
    GpuQp& q = t.qp(peer);
    if (me == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
        const uint64_t r = q.reserve(1);
        q.write_rdma_write(r, reinterpret_cast<uint64_t>(heap), t.heap_lkey(), far.heap_addr, far.heap_rkey,
                           static_cast<uint32_t>(write_bytes), true);
        q.submit(r, 1);
        const Completion c = wait_for(q, r);
        std::printf("gpu_gin_hang: PE 1: qp %u wqe %llu put to 0x%llx completed with %s, syndrome 0x%x, vendor 0x%x; "
                    "%s; waiting for the signal at 0x%llx\n",
                    q.qpn, static_cast<unsigned long long>(r), static_cast<unsigned long long>(far.heap_addr),
                    c.error ? "error" : "success", c.syndrome, c.vendor_syndrome, query_text(t, peer).c_str(),
                    static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(heap + signal)));
        std::fflush(stdout);
        wait_forever(heap + signal, me);
    }
    for (size_t i = 0; i < write_bytes; ++i) heap[i] = static_cast<uint8_t>(i * 7 + 1);
    const uint64_t w = q.reserve(1);
    q.write_rdma_write(w, reinterpret_cast<uint64_t>(heap), t.heap_lkey(), far.heap_addr, far.heap_rkey,
                       static_cast<uint32_t>(write_bytes), true);
    q.submit(w, 1);
    if (wait_for(q, w).error) {
        std::fprintf(stderr, "gpu_gin_hang: PE 0: the write failed: the link went down too early\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    const uint64_t a = q.reserve(1);
    const uint64_t target = far.heap_addr + signal;
    q.write_fetch_add(a, reinterpret_cast<uint64_t>(heap + fetch), t.heap_lkey(), target, far.heap_rkey, 1, true);
    q.submit(a, 1);
    const Completion c = wait_for(q, a);
    std::printf("gpu_gin_hang: PE 0: qp %u wqe %llu atomic to 0x%llx completed with %s, syndrome 0x%x, vendor 0x%x; "
                "%s\n",
                q.qpn, static_cast<unsigned long long>(a), static_cast<unsigned long long>(target),
                c.error ? "error" : "success", c.syndrome, c.vendor_syndrome, query_text(t, peer).c_str());
    std::fflush(stdout);
    wait_forever(heap + signal, me);
}
