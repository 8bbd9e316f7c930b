// The fabric's data path, per operation (Google Benchmark). Run under
//   sigmatrace fabric --rails 2 --config unshaped.conf -- verbs_hot_path_bench
// (bench/softfabric/hot_path_bench.sh does). Two RC QPs of this process (sfab_0 -> sfab_1) isolate the
// provider's own cost (the copy is a memcpy); a peer process shows what process_vm_writev adds.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>

#include "verbs_harness.h"

namespace {

using namespace sftest;

struct Loopback {
    Loopback() {
        EndpointOptions a;
        a.device = "sfab_0";
        EndpointOptions b;
        b.device = "sfab_1";
        me = std::make_unique<Endpoint>(a);
        target = std::make_unique<Endpoint>(b);
        me->connect(target->wire());
        target->connect(me->wire());
    }
    std::unique_ptr<Endpoint> me, target;
};

struct CrossProcess {
    CrossProcess() {
        EndpointOptions b;
        b.device = "sfab_1";
        peer = std::make_unique<Peer>(b);
        EndpointOptions a;
        a.device = "sfab_0";
        me = std::make_unique<Endpoint>(a);
        me->connect(peer->wire());
        peer->connect(me->wire());
    }
    std::unique_ptr<Peer> peer;
    std::unique_ptr<Endpoint> me;
};

// ibv_post_send of one signaled RDMA WRITE and ibv_poll_cq of its completion.
template <typename Setup>
void write_and_complete(benchmark::State& state, Endpoint& me, const Wire& target) {
    const auto size = static_cast<uint32_t>(state.range(0));
    ibv_wc wc{};
    for (auto _ : state) {
        if (me.write(1, 0, size, target.addr, target.rkey) != 0) state.SkipWithError("post_send failed");
        while (ibv_poll_cq(me.cq, 1, &wc) == 0) {
        }
        if (wc.status != IBV_WC_SUCCESS) state.SkipWithError("completion with an error");
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * size);
}

void BM_WriteLoopback(benchmark::State& state) {
    static Loopback lb;
    write_and_complete<Loopback>(state, *lb.me, lb.target->wire());
}
BENCHMARK(BM_WriteLoopback)->Arg(8)->Arg(4096)->Arg(65536);

void BM_WriteCrossProcess(benchmark::State& state) {
    static CrossProcess cp;
    write_and_complete<CrossProcess>(state, *cp.me, cp.peer->wire());
}
BENCHMARK(BM_WriteCrossProcess)->Arg(8)->Arg(4096)->Arg(65536);

// An empty poll: what a spinning application pays per ibv_poll_cq when nothing completed.
void BM_PollEmpty(benchmark::State& state) {
    static Loopback lb;
    ibv_wc wc{};
    for (auto _ : state) benchmark::DoNotOptimize(ibv_poll_cq(lb.me->cq, 1, &wc));
}
BENCHMARK(BM_PollEmpty);

// ibv_post_recv of one receive (and the ring entry it takes, given back by a peer's SEND meanwhile).
void BM_PostRecvAndSend(benchmark::State& state) {
    static Loopback lb;
    ibv_wc wc{};
    for (auto _ : state) {
        lb.target->post_recv(1, 0, 64);
        lb.me->send(2, 0, 8);
        while (ibv_poll_cq(lb.me->cq, 1, &wc) == 0) {
        }
        while (ibv_poll_cq(lb.target->cq, 1, &wc) == 0) {
        }
    }
}
BENCHMARK(BM_PostRecvAndSend);

}  // namespace

BENCHMARK_MAIN();
