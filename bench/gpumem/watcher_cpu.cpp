// The watcher thread's CPU use while a producer thread posts WQEs at a fixed rate into host-memory rings:
//   bench_gpumem_watcher_cpu [RATE_WQE_PER_S ...]      (default: 10000 100000 1000000)
// For each rate: 4 QPs of 1024 WQEBBs, 2 s of posting (paced in 50 us steps), the watcher with its default
// adaptive period; prints the watcher thread's CPU time / wall time, WQEs decoded and lost. Events go to a
// counting trace callback (the LTTng cost per event is measured separately in docs/PERFORMANCE.md).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "../../tests/gpumem/fake_producer.h"
#include "gpumem/watcher.h"
#include "provider/trace_callback.h"

#include <sigmatrace/deferred_records_wire.h>

using namespace sigmatrace;
using namespace sigmatrace::gpumem;

namespace {
std::atomic<uint64_t> g_wqes{0};
void count_event(EventId id, const void* rec, void*) {
    // The watcher's WQEs are ring_post records in deferred_records events.
    if (id != EventId::deferred_records) return;
    const auto* r = static_cast<const st_deferred_records_rec*>(rec);
    sigmatrace::records::walk_records(r->words, r->n, [](const sigmatrace::records::RecordHeader& h) {
        if (h.kind == sigmatrace::records::RecordKind::ring_post) g_wqes.fetch_add(h.n, std::memory_order_relaxed);
    });
}
}  // namespace

int main(int argc, char** argv) {
    std::vector<double> rates;
    for (int i = 1; i < argc; ++i) rates.push_back(std::atof(argv[i]));
    if (rates.empty()) rates = {1e4, 1e5, 1e6};
    constexpr int kQps = 4;
    constexpr double kSeconds = 2.0;
    set_trace_callback(&count_event, nullptr);
    std::printf("%14s %10s %12s %12s %10s %12s %12s\n", "rate(WQE/s)", "cpu(%)", "posted", "decoded", "lost",
                "period(us)", "maxgap(us)");
    for (double rate : rates) {
        std::vector<std::unique_ptr<test::FakeProducer>> prods;
        QueueRegistry reg;
        for (int q = 0; q < kQps; ++q) {
            prods.push_back(std::make_unique<test::FakeProducer>(1024, 100 + q));
            reg.add_send_queue(prods.back()->queue(q + 1));
        }
        ProcessMemoryReader mem;
        Watcher w(reg, mem, WatcherConfig::from_environment());
        g_wqes = 0;
        if (!w.start()) {
            std::fprintf(stderr, "Cannot start the watcher thread\n");
            return 1;
        }
        const auto t0 = std::chrono::steady_clock::now();
        const uint64_t cpu0 = w.thread_cpu_ns();
        uint64_t posted = 0;
        // Pace in 50 us steps: post what the rate allows so far, spread over the QPs.
        for (;;) {
            const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (elapsed >= kSeconds) break;
            const auto due = static_cast<uint64_t>(rate * elapsed);
            while (posted < due) {
                prods[posted % kQps]->post_write(posted);
                ++posted;
            }
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        const uint64_t cpu1 = w.thread_cpu_ns();
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const uint64_t period = w.period_ns();
        w.stop();
        const auto st = w.stats();
        std::printf("%14.0f %10.2f %12llu %12llu %10llu %12.1f %12.1f\n", rate, 100.0 * double(cpu1 - cpu0) / 1e9 / wall,
                    static_cast<unsigned long long>(posted), static_cast<unsigned long long>(g_wqes.load()),
                    static_cast<unsigned long long>(st.wqes_lost), double(period) / 1000.0,
                    double(st.max_sweep_gap_ns) / 1000.0);
    }
    set_trace_callback(nullptr, nullptr);
    return 0;
}
