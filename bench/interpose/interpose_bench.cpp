// Cost of the host-side shim, measured side by side in one run (docs/PERFORMANCE.md, "Tracer"):
//
//   phase 1, no session:  a verb unwrapped (the provider's entry point called by the inline verbs function),
//                         the same verb wrapped with no tracing session, and counters mode;
//   phase 2, traced:      a session records sigmatrace:* (this program starts it with the lttng CLI, against
//                         the session daemon it finds: run it under scripts/with-private-lttng.sh), and the
//                         same verbs run traced, next to a bare LTTng event of the same kind.
//
// Verbs: ibv_post_send of 1 WR, of a chain of 16 WRs, ibv_poll_cq returning 16 completions, and an
// ibv_wr_* list of one RDMA WRITE. The "provider" (bench_provider.cpp) does almost nothing, so the
// differences are the shim's. A summary compares the results with the goals (docs/PERFORMANCE.md, "Tracer").
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <unistd.h>

#include "bench_provider.h"
#include "interpose/capture/capture_clock.h"
#include "interpose/runtime/config.h"
#include "interpose/capture/counters_emitter.h"
#include "interpose/capture/deferred_rings.h"
#include "interpose/state/lifecycle.h"
#include "provider/trace.h"

namespace {

using namespace sigmatrace;
using sigmatrace::bench::BenchDevice;

BenchDevice* g_plain = nullptr;    // never wrapped
BenchDevice* g_wrapped = nullptr;  // wrapped by the shim

constexpr int kChain = 16;
// Traced runs: a fixed count per benchmark (INTERPOSE_BENCH_TRACED_ITERATIONS overrides), small enough that the
// events of all of phase 2 (three emission variants of four verbs, and the bare events) fit the session's
// buffers: 200 000 each discarded ~300 000 events even with 32 MiB x 16 per CPU.
const int64_t kTracedIterations =
    std::getenv("INTERPOSE_BENCH_TRACED_ITERATIONS") ? std::atoll(std::getenv("INTERPOSE_BENCH_TRACED_ITERATIONS")) : 50000;

struct Chains {
    ibv_sge sge{0x1000, 4096, 0x11};
    ibv_send_wr one{};
    ibv_send_wr chain[kChain]{};
    Chains() {
        one.wr_id = 1;
        one.opcode = IBV_WR_RDMA_WRITE;
        one.send_flags = IBV_SEND_SIGNALED;
        one.sg_list = &sge;
        one.num_sge = 1;
        one.wr.rdma.remote_addr = 0xabc000;
        one.wr.rdma.rkey = 0x22;
        for (int i = 0; i < kChain; ++i) {
            chain[i] = one;
            chain[i].wr_id = static_cast<uint64_t>(i);
            chain[i].send_flags = i == kChain - 1 ? IBV_SEND_SIGNALED : 0;
            chain[i].next = i + 1 < kChain ? &chain[i + 1] : nullptr;
        }
    }
};
Chains g_wrs;

// How a traced run emits its data events (interpose/deferred_capture.h).
enum class Emission {
    deferred,   // the default: captured into the thread's ring, drained into deferred_records events when full (the
                // loop has no idle points), drains included
    immediate,  // SIGMATRACE_DEFER=0: one deferred_records event inside each call (a record per event)
    captured,   // deferred, with the drains outside the timed region: the data path's own cost
};

struct Setup {
    interpose::Mode mode = interpose::Mode::ops;
    Emission emission = Emission::deferred;
};

void set_mode(const Setup& s) {
    interpose::Config c;
    c.mode = s.mode;
    c.defer = s.emission != Emission::immediate;
    c.counters_interval_ms = 3600000;  // no periodic emission during a measurement
    // INTERPOSE_BENCH_SALVAGE_DIR: rings in files of that directory, as under `sigmatrace record` (ring_file.h).
    if (const char* dir = std::getenv("INTERPOSE_BENCH_SALVAGE_DIR")) c.salvage_dir = dir;
    interpose::set_config(c);
}

// The captured variant drains every this many iterations, untimed (well within a default ring).
constexpr int64_t kUntimedDrainEvery = 512;

template <typename Body> void run_loop(benchmark::State& state, const Setup& s, Body&& body) {
    if (s.emission != Emission::captured) {
        for (auto _ : state) body();
        return;
    }
    int64_t i = 0;
    for (auto _ : state) {
        body();
        if (++i % kUntimedDrainEvery == 0) {
            state.PauseTiming();
            interpose::deferred::drain_all(interpose::deferred::Wait::yes);
            state.ResumeTiming();
        }
    }
    interpose::deferred::drain_all(interpose::deferred::Wait::yes);
}

void post_one(benchmark::State& state, BenchDevice* d, Setup setup) {
    set_mode(setup);
    ibv_send_wr* bad = nullptr;
    run_loop(state, setup, [&] { benchmark::DoNotOptimize(ibv_post_send(d->qp(), &g_wrs.one, &bad)); });
    state.SetItemsProcessed(state.iterations());
}

void post_chain(benchmark::State& state, BenchDevice* d, Setup setup) {
    set_mode(setup);
    ibv_send_wr* bad = nullptr;
    run_loop(state, setup, [&] { benchmark::DoNotOptimize(ibv_post_send(d->qp(), g_wrs.chain, &bad)); });
    state.SetItemsProcessed(state.iterations() * kChain);
}

void poll16(benchmark::State& state, BenchDevice* d, Setup setup) {
    set_mode(setup);
    sigmatrace::bench::set_completions_per_poll(16);
    ibv_wc wc[16];
    run_loop(state, setup, [&] { benchmark::DoNotOptimize(ibv_poll_cq(d->cq(), 16, wc)); });
    state.SetItemsProcessed(state.iterations() * 16);
}

void wr_api_one(benchmark::State& state, BenchDevice* d, Setup setup) {
    set_mode(setup);
    ibv_qp_ex* q = d->qpx();
    run_loop(state, setup, [&] {
        ibv_wr_start(q);
        q->wr_id = 7;
        q->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_rdma_write(q, 0x22, 0xabc000);
        ibv_wr_set_sge(q, 0x11, 0x1000, 4096);
        benchmark::DoNotOptimize(ibv_wr_complete(q));
    });
    state.SetItemsProcessed(state.iterations());
}

// The event a traced single-WR post emits, emitted directly: the floor of any traced verb.
void bare_event(benchmark::State& state) {
    uint64_t wr_id = 1, raddr = 0xabc000, ah = 0;
    uint8_t opcode = IBV_WR_RDMA_WRITE;
    uint32_t flags = IBV_SEND_SIGNALED, bytes = 4096, rkey = 0x22, imm = 0, rqpn = 0;
    uint16_t sges = 1;
    uint64_t ts = 0;
    st_post_send_rec r{};
    r.ts = &ts;
    r.qp = 0x1234;
    r.qp_num = 0x100;
    r.bad_index = -1;
    r.n = 1;
    r.wr_id = &wr_id;
    r.opcode = &opcode;
    r.send_flags = &flags;
    r.num_sge = &sges;
    r.bytes = &bytes;
    r.raddr = &raddr;
    r.rkey = &rkey;
    r.imm = &imm;
    r.remote_qpn = &rqpn;
    r.ah = &ah;
    for (auto _ : state) {
        if (ST_TRACE_ENABLED(post_send)) ST_TRACE_EMIT(post_send, &r);
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations());
}

// The smallest event of the schema (3 integers), for the fixed part of an event's cost.
void bare_small_event(benchmark::State& state) {
    st_req_notify_cq_rec r{};
    r.cq = 0x1234;
    for (auto _ : state) {
        if (ST_TRACE_ENABLED(req_notify_cq)) ST_TRACE_EMIT(req_notify_cq, &r);
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations());
}

// ------------------------------------------------------------------ session control (lttng CLI)

std::string g_session = "interpose-bench-" + std::to_string(getpid());
std::string g_trace_dir;

int sh(const std::string& cmd) {
    return std::system((cmd + " >/dev/null 2>&1").c_str());
}

bool start_session() {
    g_trace_dir = (std::filesystem::temp_directory_path() / g_session).string();
    const std::string s = " --session=" + g_session;
    if (sh("lttng create " + g_session + " --output=" + g_trace_dir) != 0) return false;
    // 16 x 32 MiB per CPU by default; INTERPOSE_BENCH_SUBBUF / INTERPOSE_BENCH_NUM_SUBBUF override (used to
    // measure which channel size a max-rate producer needs, docs/PERFORMANCE.md).
    const char* subbuf = std::getenv("INTERPOSE_BENCH_SUBBUF");
    const char* num = std::getenv("INTERPOSE_BENCH_NUM_SUBBUF");
    if (sh("lttng enable-channel --userspace --buffers-uid --subbuf-size=" + std::string(subbuf ? subbuf : "32M") +
           " --num-subbuf=" + std::string(num ? num : "16") + s + " ch") != 0)
        return false;
    if (sh("lttng add-context --userspace --channel=ch --type=vpid --type=vtid --type=procname" + s) != 0) return false;
    if (sh("lttng enable-event --userspace --channel=ch 'sigmatrace:*'" + s) != 0) return false;
    if (sh("lttng start " + g_session) != 0) return false;
    // The daemon enables our tracepoints asynchronously.
    for (int i = 0; i < 500 && !ST_TRACE_ENABLED(post_send); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return ST_TRACE_ENABLED(post_send);
}

std::string stop_session() {
    sh("lttng stop " + g_session);
    char buf[4096];
    std::string xml;
    if (FILE* p = popen(("lttng --mi xml list " + g_session + " 2>/dev/null").c_str(), "r")) {
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, p)) > 0) xml.append(buf, n);
        pclose(p);
    }
    sh("lttng destroy " + g_session);
    std::error_code ec;
    std::filesystem::remove_all(g_trace_dir, ec);
    const size_t at = xml.find("<discarded_events>");
    return at == std::string::npos ? "?" : xml.substr(at + 18, xml.find('<', at + 18) - at - 18);
}

// ------------------------------------------------------------------ results and summary

// Records each benchmark's real time per item (ns) while printing as usual.
class Collector : public benchmark::ConsoleReporter {
public:
    void ReportRuns(const std::vector<Run>& runs) override {
        for (const Run& r : runs) {
            const auto it = r.counters.find("items_per_second");
            if (it != r.counters.end() && it->second.value > 0) ns_per_item[r.run_name.function_name] = 1e9 / it->second.value;
        }
        ConsoleReporter::ReportRuns(runs);
    }
    std::map<std::string, double> ns_per_item;
};

// `iterations` 0: Google Benchmark chooses. Traced runs use a fixed count, so that the events they emit fit the
// session's buffers (a discarded event costs less than a recorded one and would flatter the result).
// `wrapped`: the wrapped variants to run next to the unwrapped one, by name.
void register_all(const std::string& phase, const std::vector<std::pair<std::string, Setup>>& wrapped, int64_t iterations) {
    auto reg = [&](const std::string& name, auto fn, BenchDevice* d, Setup s) {
        benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark((phase + name).c_str(), fn, d, s);
        if (iterations > 0) b->Iterations(iterations);
    };
    auto each = [&](const std::string& verb, auto fn) {
        reg(verb + "/unwrapped", fn, g_plain, Setup{});
        for (const auto& [name, setup] : wrapped) reg(verb + "/" + name, fn, g_wrapped, setup);
    };
    each("post_send_1", post_one);
    each("post_send_16_chain", post_chain);
    each("poll_cq_16", poll16);
    each("wr_api_1", wr_api_one);
}

ibv_qp_ex* bench_qp_to_qp_ex(ibv_qp* qp) {
    return reinterpret_cast<ibv_qp_ex*>(qp);
}
int bench_query_device(ibv_context*, ibv_device_attr* a) {
    *a = ibv_device_attr{};
    return 0;
}
int bench_query_port(ibv_context*, uint8_t, ibv_port_attr*) {
    return EINVAL;
}
int bench_query_gid(ibv_context*, uint8_t, int, ibv_gid*) {
    return EINVAL;
}
constexpr interpose::VerbsQueries kQueries{&bench_query_device, &bench_query_port, &bench_query_gid, &bench_qp_to_qp_ex};

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    static BenchDevice plain, wrapped;
    g_plain = &plain;
    g_wrapped = &wrapped;
    interpose::set_verbs_queries(&kQueries);
    interpose::capture_clock::calibrate();  // what libsigmatrace.so's constructor does
    set_mode(Setup{});
    interpose::on_context_opened(wrapped.ctx(), interpose::OpenVia::open_device);
    ibv_qp_init_attr_ex attr{};
    attr.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = 128;
    attr.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
    interpose::on_qp_created_ex(wrapped.ctx(), wrapped.qp(), &attr, interpose::CreateKind::extended, 0);

    Collector out;
    std::printf("== phase 1: no tracing session ==\n");
    register_all("1:", {{"wrapped_no_session", Setup{}}}, 0);
    const Setup counters{interpose::Mode::counters, Emission::deferred};
    RegisterBenchmark("1:post_send_1/counters", post_one, g_wrapped, counters);
    RegisterBenchmark("1:post_send_16_chain/counters", post_chain, g_wrapped, counters);
    RegisterBenchmark("1:poll_cq_16/counters", poll16, g_wrapped, counters);
    // INTERPOSE_BENCH_SKIP_PHASE1=1: only the traced phase (profiling it with perf).
    if (const char* skip = std::getenv("INTERPOSE_BENCH_SKIP_PHASE1"); skip == nullptr || std::string(skip) != "1")
        benchmark::RunSpecifiedBenchmarks(&out, "^1:");

    std::printf("\n== phase 2: traced (session recording sigmatrace:*) ==\n");
    if (!start_session()) {
        std::printf("No session daemon answered or the session could not start: phase 2 skipped "
                    "(run under scripts/with-private-lttng.sh)\n");
    } else {
        register_all("2:",
                     {{"traced", Setup{interpose::Mode::ops, Emission::deferred}},
                      {"traced_captured", Setup{interpose::Mode::ops, Emission::captured}},
                      {"traced_immediate", Setup{interpose::Mode::ops, Emission::immediate}}},
                     kTracedIterations);
        benchmark::RegisterBenchmark("2:event/bare_post_send", bare_event)->Iterations(kTracedIterations);
        benchmark::RegisterBenchmark("2:event/bare_3_integers", bare_small_event)->Iterations(kTracedIterations);
        benchmark::RunSpecifiedBenchmarks(&out, std::getenv("INTERPOSE_BENCH_PHASE2_FILTER") ? std::getenv("INTERPOSE_BENCH_PHASE2_FILTER") : "^2:");
        std::printf("discarded events during phase 2: %s\n", stop_session().c_str());
    }

    auto at = [&](const std::string& name) {
        const auto it = out.ns_per_item.find(name);
        return it == out.ns_per_item.end() ? -1.0 : it->second;
    };
    std::printf("\n== summary (ns per WR or completion; goals in docs/PERFORMANCE.md) ==\n");
    const double unwrapped = at("1:post_send_1/unwrapped"), no_session = at("1:post_send_1/wrapped_no_session");
    std::printf("wrapped, no session - unwrapped      : %6.2f ns  (goal <= 5 ns)\n", no_session - unwrapped);
    std::printf("  16-WR chain per WR                 : %6.2f ns\n",
                at("1:post_send_16_chain/wrapped_no_session") - at("1:post_send_16_chain/unwrapped"));
    std::printf("  16-completion poll per completion  : %6.2f ns\n", at("1:poll_cq_16/wrapped_no_session") - at("1:poll_cq_16/unwrapped"));
    std::printf("  ibv_wr_* list of 1                 : %6.2f ns\n", at("1:wr_api_1/wrapped_no_session") - at("1:wr_api_1/unwrapped"));
    std::printf("counters mode - unwrapped, 1 WR      : %6.2f ns  (goal < 10 ns per op)\n", at("1:post_send_1/counters") - unwrapped);
    std::printf("  16-WR chain per WR                 : %6.2f ns\n", at("1:post_send_16_chain/counters") - at("1:post_send_16_chain/unwrapped"));
    std::printf("  16-completion poll per completion  : %6.2f ns\n", at("1:poll_cq_16/counters") - at("1:poll_cq_16/unwrapped"));
    if (at("2:event/bare_post_send") > 0) {
        const double bare = at("2:event/bare_post_send");
        std::printf("bare LTTng event (post_send, n=1)    : %6.2f ns\n", bare);
        std::printf("bare LTTng event (3 integers)        : %6.2f ns\n", at("2:event/bare_3_integers"));
        // Per WR or completion, less the unwrapped verb: deferred (the default; its drains included, the loop has
        // no idle point so they run on the data path), the data path alone (captured), and immediate.
        auto row = [&](const char* what, const std::string& verb, double per, const char* goal) {
            const double base = at("2:" + verb + "/unwrapped");
            std::printf("%-37s: deferred %6.2f ns, captured %6.2f ns, immediate %6.2f ns  %s\n",
                        what, (at("2:" + verb + "/traced") - base) / per,
                        (at("2:" + verb + "/traced_captured") - base) / per,
                        (at("2:" + verb + "/traced_immediate") - base) / per, goal);
        };
        // Google Benchmark's items are WRs/completions already for the chain and the poll (ns per item).
        row("traced 1 WR", "post_send_1", 1, "(goal: <= bare event + 20 ns)");
        row("traced 16-WR chain, per WR", "post_send_16_chain", 1, "(goal < 40 ns)");
        row("traced 16-completion poll, per compl.", "poll_cq_16", 1, "(goal < 40 ns)");
        row("traced ibv_wr_* list of 1", "wr_api_1", 1, "");
    }
    interpose::counters_shutdown();
    benchmark::Shutdown();
    return 0;
}
