// Decode throughput of the WQE decoder on one core, and of a whole watcher sweep (doorbell read, ring copy,
// decode, batch emission through a no-op trace callback); the same for DBR-less queues read by index scanning
// (two reads and a compare per WQE). Results: docs/PERFORMANCE.md ("GPU watcher").
#include <benchmark/benchmark.h>

#include <vector>

#include "../../tests/gpumem/fake_producer.h"
#include "gpumem/watcher.h"
#include "mlx5_format/wqe_decoder.h"
#include "provider/trace_callback.h"

namespace sigmatrace::gpumem {
namespace {

using test::WqeImage;

// The WQEs GPU libraries post most: NVSHMEM/DeepEP RDMA WRITE (ctrl + raddr + data), DeepEP's 4-byte inline
// write and its 4-byte masked fetch-add, in a 3:1:1 mix. All one WQEBB.
void fill_mix(test::FakeProducer& prod, uint64_t count) {
    const uint32_t v = 1;
    for (uint64_t i = 0; i < count; ++i) {
        const auto idx = static_cast<uint16_t>(prod.pi());
        switch (i % 5) {
        case 3: prod.post(WqeImage(0x08, idx, 7).raddr(0x1000 + i, 3).inline_data(&v, 4), false); break;
        case 4: prod.post(WqeImage(0x15, idx, 7, 0x08, 0x08).raddr(0x2000, 3).masked_args(4, {1, 0}).data(4, 1, 0), false); break;
        default: prod.post_write(i, false); break;
        }
    }
    prod.ring();
}

void BM_DecodeWqe(benchmark::State& state) {
    const auto n = static_cast<uint32_t>(state.range(0));
    test::FakeProducer prod(n, 7);
    fill_mix(prod, n);
    const RingView view{prod.ring_bytes(), n};
    uint32_t slot = 0;
    uint64_t bytes = 0;
    for (auto _ : state) {
        DecodedWqe w;
        const WqeStatus st = decode_wqe(view, slot, Transport::Rc, w);
        benchmark::DoNotOptimize(st);
        bytes += w.bytes;
        slot = (slot + w.wqebbs) & (n - 1);
    }
    benchmark::DoNotOptimize(bytes);
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeWqe)->Arg(1024);

void ignore_event(EventId, const void*, void*) {}

// A queue read through its doorbell record, or a DBR-less one read by index scanning (two reads of each WQE
// and a compare: a WQE found by one sweep is committed by the next).
SendQueue queue_of(const test::FakeProducer& prod, bool dbr_less, uint64_t key) {
    return dbr_less ? prod.dbr_less_queue(key) : prod.queue(key);
}

// Sweeps that find `batch` new WQEs: doorbell read (or slot scan), copy, guard check, decode, ring_post record emission.
// Items are WQEs; with `dbr_less` the time covers the two sweeps a WQE needs.
void BM_WatcherSweep(benchmark::State& state, bool dbr_less) {
    const auto batch = static_cast<uint64_t>(state.range(0));
    set_trace_callback(&ignore_event, nullptr);
    test::FakeProducer prod(1024, 7);
    QueueRegistry reg;
    reg.add_send_queue(queue_of(prod, dbr_less, 1));
    ProcessMemoryReader mem;
    WatcherConfig cfg;
    cfg.guard_wqebbs = 0;
    cfg.settle_ns = 0;
    Watcher w(reg, mem, cfg);
    w.sweep_once();
    uint64_t decoded = 0;
    for (auto _ : state) {
        state.PauseTiming();
        fill_mix(prod, batch);
        state.ResumeTiming();
        if (dbr_less) w.sweep_once();
        decoded += w.sweep_once();
    }
    if (decoded != batch * state.iterations()) state.SkipWithError("the watcher missed WQEs");
    state.SetItemsProcessed(static_cast<int64_t>(decoded));
    set_trace_callback(nullptr, nullptr);
}
BENCHMARK_CAPTURE(BM_WatcherSweep, doorbell, false)->Arg(1)->Arg(32)->Arg(512);
BENCHMARK_CAPTURE(BM_WatcherSweep, dbr_less, true)->Arg(1)->Arg(32)->Arg(512);

// A sweep over many idle queues: the cost of watching QPs that post nothing (one doorbell read each, or one
// 64-byte read of the next slot for DBR-less queues).
void BM_IdleSweepPerQueue(benchmark::State& state, bool dbr_less) {
    const auto queues = static_cast<size_t>(state.range(0));
    set_trace_callback(&ignore_event, nullptr);
    std::vector<std::unique_ptr<test::FakeProducer>> prods;
    QueueRegistry reg;
    for (size_t i = 0; i < queues; ++i) {
        prods.push_back(std::make_unique<test::FakeProducer>(64, static_cast<uint32_t>(i + 1)));
        reg.add_send_queue(queue_of(*prods.back(), dbr_less, i + 1));
    }
    ProcessMemoryReader mem;
    Watcher w(reg, mem, WatcherConfig{});
    w.sweep_once();
    for (auto _ : state) benchmark::DoNotOptimize(w.sweep_once());
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * queues));
    set_trace_callback(nullptr, nullptr);
}
BENCHMARK_CAPTURE(BM_IdleSweepPerQueue, doorbell, false)->Arg(1)->Arg(256);
BENCHMARK_CAPTURE(BM_IdleSweepPerQueue, dbr_less, true)->Arg(1)->Arg(256);

// Sweeps of a watched CQ (a ring of 1024 64-byte CQEs followed by owner bit, as UCX GDAKI's and DOCA's are) that
// find `batch` new successful completions: each one's owner check, read, decode and emission in a gpu_cqe batch.
// Their QP is none the watcher knows (no send-queue catch-up). Items are CQEs.
void BM_CqSweep(benchmark::State& state) {
    const auto batch = static_cast<uint32_t>(state.range(0));
    constexpr uint32_t kNcqe = 1024;
    set_trace_callback(&ignore_event, nullptr);
    std::vector<uint8_t> storage(kNcqe * 64 + 64);
    uint8_t* ring = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
    for (uint32_t i = 0; i < kNcqe; ++i) test::write_cqe(ring + i * 64, mlx5::cqe_op::REQ, true, 0, 0x66, 0, 0);
    for (uint32_t i = 0; i < kNcqe; ++i) ring[i * 64 + 63] = 0xf1;   // invalid opcode, owner 1: nothing yet
    CompletionQueue cq;
    cq.key = 9;
    cq.cqn = 0x88;
    cq.ring_addr = reinterpret_cast<uint64_t>(ring);
    cq.ncqe = kNcqe;
    QueueRegistry reg;
    reg.add_completion_queue(cq);
    ProcessMemoryReader mem;
    WatcherConfig cfg;
    cfg.settle_ns = 0;
    Watcher w(reg, mem, cfg);
    w.sweep_once();
    uint64_t ci = 0;   // the NIC's producer count
    for (auto _ : state) {
        state.PauseTiming();
        for (uint32_t k = 0; k < batch; ++k, ++ci) {
            const bool owner = (ci / kNcqe) % 2 != 0;
            test::write_cqe(ring + (ci % kNcqe) * 64, mlx5::cqe_op::REQ, owner, static_cast<uint16_t>(ci), 0x66, 64, ci + 1);
        }
        state.ResumeTiming();
        w.sweep_once();
    }
    const uint64_t seen = w.stats().cqes_seen;
    if (seen != uint64_t{batch} * state.iterations()) state.SkipWithError("the watcher missed CQEs");
    state.SetItemsProcessed(static_cast<int64_t>(seen));
    set_trace_callback(nullptr, nullptr);
}
BENCHMARK(BM_CqSweep)->Arg(1)->Arg(32)->Arg(512);

}  // namespace
}  // namespace sigmatrace::gpumem

BENCHMARK_MAIN();
