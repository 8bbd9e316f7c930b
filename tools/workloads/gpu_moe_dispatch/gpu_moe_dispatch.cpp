// Workload (4): an MoE-dispatch-like all-to-all with skewed expert routing, GPU-initiated the DeepEP way. Every PE
// holds --tokens tokens of --hidden bytes and --experts-per-pe experts. Each token goes to its top-2 experts,
// drawn from a Zipf(--zipf) popularity over all experts (expert 0 the most popular), so the PEs owning the
// popular experts receive far more than the others. Like DeepEP's notify_dispatch, the counts are exchanged
// first (MPI_Alltoall) so every sender knows where its tokens land; then the "kernel" (one CPU thread per
// destination, standing in for a warp) RDMA-writes each token into the destination's receive buffer and, every
// 16 tokens and at the end, fetch-adds the count into the destination's per-source counter.
//
// Ground truth (--truth DIR): the WQE files, and DIR/traffic.txt from PE 0: the bytes every PE posted to every
// other PE (from the WQEs it wrote), the inbound bytes per PE from other PEs, and their max/mean (inbound skew
// between nodes when every PE is its own node: `sigmatrace fabric --node rank`). Exit 0 when every token and
// counter arrived.
//
//   mpirun -np 4 sigmatrace fabric --node rank -- gpu_moe_dispatch [--tokens T] [--hidden H] [--zipf S]
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_common/gpu_qp.h"
#include "gpu_common/ibgda_setup.h"
#include "gpu_common/mpi_boot.h"
#include "gpu_common/workload_main.h"

using namespace sigmatrace::workloads;

namespace {

constexpr size_t kSignalEvery = 16;

uint8_t token_byte(size_t src, size_t token, size_t i) { return static_cast<uint8_t>(src * 101 + token * 7 + i); }

}  // namespace

int main(int argc, char** argv) {
    const PeIdentity id = start_pe(&argc, &argv);
    const int me = id.me, npes = id.npes;
    size_t tokens = 256, hidden = 1024, experts_per_pe = 4;
    double zipf = 1.2;
    const CommonOptions common = WorkloadOptions("gpu_moe_dispatch")
                                     .add("--tokens", "T", tokens)
                                     .add("--hidden", "H", hidden)
                                     .add("--experts-per-pe", "E", experts_per_pe)
                                     .add("--zipf", "S", zipf)
                                     .parse(argc, argv);
    const size_t n = static_cast<size_t>(npes), experts = experts_per_pe * n;

    // Routing: the top-2 distinct experts of each token, from a Zipf popularity (seeded per PE: reproducible).
    std::vector<double> weight(experts);
    for (size_t e = 0; e < experts; ++e) weight[e] = 1.0 / std::pow(static_cast<double>(e + 1), zipf);
    std::mt19937_64 rng(0x5eed + static_cast<uint64_t>(me));
    std::discrete_distribution<size_t> pick(weight.begin(), weight.end());
    std::vector<std::vector<size_t>> to(n);  // tokens to send to each PE (a token twice if both experts are there)
    for (size_t tok = 0; tok < tokens; ++tok) {
        const size_t e1 = pick(rng);
        size_t e2 = pick(rng);
        while (e2 == e1) e2 = pick(rng);
        to[e1 / experts_per_pe].push_back(tok);
        to[e2 / experts_per_pe].push_back(tok);
    }
    // notify_dispatch: how many each PE will receive from each PE, hence where our tokens go.
    std::vector<uint64_t> send_count(n), recv_count(n);
    for (size_t pe = 0; pe < n; ++pe) send_count[pe] = to[pe].size();
    MPI_Alltoall(send_count.data(), 1, MPI_UINT64_T, recv_count.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    std::vector<uint64_t> recv_offset(n, 0);  // in tokens, per source, in our receive buffer
    for (size_t src = 1; src < n; ++src) recv_offset[src] = recv_offset[src - 1] + recv_count[src - 1];
    const uint64_t recv_total = recv_offset[n - 1] + recv_count[n - 1];
    std::vector<uint64_t> my_offset_at(n);  // where our block starts in each destination's buffer
    MPI_Alltoall(recv_offset.data(), 1, MPI_UINT64_T, my_offset_at.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    uint64_t max_recv = recv_total;
    MPI_Allreduce(MPI_IN_PLACE, &max_recv, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);

    // Heap: [our tokens][receive buffer (max over PEs)][counter per source][fetch results per warp]
    const size_t recv_off = tokens * hidden, counter_off = recv_off + max_recv * hidden, fetch_off = counter_off + n * 8;
    IbgdaTransport t;
    TruthLog truth;
    std::vector<PeInfo> peers = connect_all(t, common.device, npes, me, 10, fetch_off + n * 8 + 64);
    t.set_truth(&truth);
    uint8_t* heap = t.heap();
    for (size_t tok = 0; tok < tokens; ++tok)
        for (size_t i = 0; i < hidden; ++i) heap[tok * hidden + i] = token_byte(static_cast<size_t>(me), tok, i);
    MPI_Barrier(MPI_COMM_WORLD);

    std::vector<uint64_t> bytes_to(n, 0);
    std::vector<std::thread> warps;
    for (size_t dst = 0; dst < n; ++dst) {
        warps.emplace_back([&, dst] {
            GpuQp& q = t.qp(static_cast<int>(dst));
            const PeInfo& p = peers[dst];
            const uint64_t lbase = reinterpret_cast<uint64_t>(heap);
            size_t since_signal = 0;
            for (size_t k = 0; k < to[dst].size(); ++k) {
                const size_t tok = to[dst][k];
                const bool signal = ++since_signal == kSignalEvery || k + 1 == to[dst].size();
                const uint64_t b = q.reserve(signal ? 2 : 1);
                q.write_rdma_write(b, lbase + tok * hidden, t.heap_lkey(), p.heap_addr + recv_off + (my_offset_at[dst] + k) * hidden,
                                   p.heap_rkey, static_cast<uint32_t>(hidden), true);
                bytes_to[dst] += hidden;
                if (signal) {
                    q.write_fetch_add(b + 1, lbase + fetch_off + dst * 8, t.heap_lkey(),
                                      p.heap_addr + counter_off + static_cast<size_t>(me) * 8, p.heap_rkey, since_signal, true);
                    bytes_to[dst] += 8;
                    since_signal = 0;
                }
                q.submit(b, signal ? 2 : 1);
            }
            q.quiet(q.ready_head.load());
        });
    }
    for (auto& w : warps) w.join();
    MPI_Barrier(MPI_COMM_WORLD);

    int bad = 0;
    for (size_t src = 0; src < n; ++src) {
        uint64_t c;
        std::memcpy(&c, heap + counter_off + src * 8, 8);
        if (c != recv_count[src]) {
            std::fprintf(stderr, "PE %d: %llu tokens counted from PE %zu, expected %llu\n", me, static_cast<unsigned long long>(c),
                         src, static_cast<unsigned long long>(recv_count[src]));
            ++bad;
        }
    }
    // Every received token must be one of its sender's tokens, intact (first byte names it, the rest follows).
    for (size_t src = 0; src < n; ++src)
        for (uint64_t k = 0; k < recv_count[src]; ++k) {
            const uint8_t* tok = heap + recv_off + (recv_offset[src] + k) * hidden;
            bool found = false;
            for (size_t cand = 0; cand < tokens && !found; ++cand)
                found = tok[0] == token_byte(src, cand, 0) && tok[hidden - 1] == token_byte(src, cand, hidden - 1) &&
                        tok[hidden / 2] == token_byte(src, cand, hidden / 2);
            if (!found) {
                std::fprintf(stderr, "PE %d: received token %llu of PE %zu is not one it sent\n", me,
                             static_cast<unsigned long long>(k), src);
                ++bad;
                break;
            }
        }

    std::vector<uint64_t> matrix(n * n);
    MPI_Gather(bytes_to.data(), npes, MPI_UINT64_T, matrix.data(), npes, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (!common.truth_dir.empty()) {
        write_truth(common, truth, me);
        if (me == 0) {
            FILE* f = std::fopen((common.truth_dir + "/traffic.txt").c_str(), "w");
            if (!f) die("Cannot write " + common.truth_dir + "/traffic.txt");
            std::vector<double> inbound(n, 0);
            for (size_t s = 0; s < n; ++s)
                for (size_t d = 0; d < n; ++d) {
                    std::fprintf(f, "bytes %zu %zu %llu\n", s, d, static_cast<unsigned long long>(matrix[s * n + d]));
                    if (s != d) inbound[d] += static_cast<double>(matrix[s * n + d]);
                }
            double sum = 0, mx = 0;
            for (size_t d = 0; d < n; ++d) {
                std::fprintf(f, "inbound %zu %.0f\n", d, inbound[d]);
                sum += inbound[d];
                mx = std::max(mx, inbound[d]);
            }
            std::fprintf(f, "inbound_skew %.6f\n", mx / (sum / static_cast<double>(n)));
            std::fclose(f);
        }
    }
    std::printf("gpu_moe_dispatch PE %d: sent %zu tokens (%zu WQEs), received %llu; tokens and counters %s\n", me,
                [&] { size_t s = 0; for (auto& v : to) s += v.size(); return s; }(), truth.size(),
                static_cast<unsigned long long>(recv_total), bad ? "WRONG" : "correct");
    return job_exit_status(bad);
}
