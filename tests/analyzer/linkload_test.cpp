// Link-level findings on the software fabric with an injected ground truth. Two recordings (`sigmatrace record`
// of `mpirun -np 4 sigmatrace fabric --node rank --rails 2 --config ... -- st-linkload ...`), made once:
//
//   gray run      links at 1 Gbit/s (125 MB/s); the fabric slows node0/sfab_0 -> node1/sfab_0 by 4x from 0.5 s
//                 to 1.1 s into the ring phase. st-linkload streams 256 KiB WRITEs (8 in flight per stream) on
//                 rail 0 only (both rails opened): a ring (rank r -> r+1) for 1.4 s from a fabric time set after
//                 the job's set-up (1.5 s; 9 s in the ASan build), then 0.5 s of many-to-one (ranks 1..3 -> 0).
//   balanced run  links at 200 Mbit/s, no fault; an all-to-all over both rails for 1.2 s (4 in flight per stream).
//   phases run    links at 1 Gbit/s, no fault; a ring, an incast and an all-to-all of 0.3 s each, 0.15 s idle
//                 between them (rail 0, 8 x 256 KiB in flight per stream).
//
// Expected, from the design: exactly one gray_link (the slowed link, start and end within kEdgeTolerance of the
// fault's, slowdown within 10% of 4), one incast (node0/sfab_0, degree 3, starting within kEdgeTolerance of the
// phase and lasting the phase plus the drain of the queued WRITEs), rail_imbalance 2.0x on every node of the gray
// run; no gray_link, incast or rail_imbalance in the balanced run. Recording inside tests/support/sandbox.sh --lttng.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace sigmatrace::analyzer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kMs = 1'000'000;
// Fault and phases (fabric time, ms).
// The ring starts at fabric time ring_start (after the job's set-up: about 0.5 s in the normal build, 6.5 s in the
// ASan build), the fault kSlowFrom .. kSlowTo after it.
#ifdef SIGMATRACE_SANITIZED_BUILD
constexpr int64_t kRingStartGuess = 9000;
#else
constexpr int64_t kRingStartGuess = 1500;
#endif
constexpr int64_t kRingMs = 1400, kIncastMs = 500, kSlowFrom = 500, kSlowTo = 1100;
// The fault's recording is analyzed asking a gray link to last 6 windows of 50 ms (the fault lasts 12): on a
// machine loaded by a parallel build, a rank descheduled for ~200 ms made a healthy link look 100x slower for 4
// windows, a second gray link the default (4 windows) rightly reports.
constexpr const char* kGrayAnalysis = "--gray-windows 6";
constexpr double kFactor = 4.0;
constexpr double kRate = 125e6;              // 1 Gbit/s: modest copying work for a 2-core CI machine
constexpr uint64_t kSize = 262144, kDepth = 8;
constexpr double kBalancedRate = 25e6;       // 200 Mbit/s x 24 links
constexpr int64_t kPhaseMs = 300, kIdleMs = 150;   // the phases run: three phases, idle time between them
// The detectors find gray start and end within a few ms of the fault's and the incast start within 1 ms of the
// phase on a quiet machine. The tolerances leave room for a loaded CI machine: 25 ms (half a gray window) plus the
// uncertainty of the fabric clock reading.
constexpr int64_t kEdgeTolerance = 25 * kMs;

struct Recording {
    std::string problem;   // why the recording could not be made (the tests fail with it)
    json truth, doc;
    fs::path dir;
};

std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A fabric of this test's own (several may run at once on one machine).
std::string fabric_name(const std::string& what) { return "st-linkload-" + std::to_string(getpid()) + "-" + what; }

int shell(const std::string& cmd) {
    const int s = std::system(cmd.c_str());
    return WIFEXITED(s) ? WEXITSTATUS(s) : 128;
}

// Records st-linkload on 4 nodes with `config` and `args`, and analyzes it. A run in which the traced mpirun
// aborts at exit (lttng-ust's shm assertion in the launcher, a known issue of the tracer in mpirun, see
// docs/interpose.md) is made again, twice at most.
Recording record(const std::string& name, const std::string& config, const std::string& args,
                 const std::string& analyze_args = "") {
    Recording r;
    r.dir = fs::temp_directory_path() / ("st-linkload-" + std::to_string(getpid()) + "-" + name);
    const std::string root = getuid() == 0 ? "--allow-run-as-root " : "";
    for (int attempt = 0; attempt < 3; ++attempt) {
        fs::remove_all(r.dir);
        fs::create_directories(r.dir);
        std::ofstream(r.dir / "fabric.conf") << config;
        // mpirun itself runs untraced (the preload library is handed to the ranks only): a traced mpirun sometimes
        // aborts in lttng-ust's shm teardown (docs/interpose.md). The retry below covers what remains.
        const std::string mpirun = "timeout 120 mpirun " + root + "--oversubscribe -np 4 --mca btl self,vader --mca pml ob1 " +
                                   "env LD_PRELOAD=\"$P\" " + SIGMATRACE + " fabric --name " + fabric_name(name) +
                                   " --node rank --rails 2 --config " +
                                   (r.dir / "fabric.conf").string() + " -- " + ST_LINKLOAD + " " + args + " --truth " +
                                   (r.dir / "truth.json").string();
        const std::string cmd = std::string(SIGMATRACE) + " record -o " + (r.dir / "trace").string() +
                                " -- bash -c 'P=$LD_PRELOAD; exec env -u LD_PRELOAD " + mpirun + "' >" +
                                (r.dir / "run.log").string() + " 2>&1";
        const int rc = shell(cmd);
        const std::string log = slurp(r.dir / "run.log");
        if (rc == 0) break;
        const bool launcher_abort = log.find("shmp_object_destroy") != std::string::npos;
        if (!launcher_abort || attempt == 2) {
            r.problem = "recording failed (exit " + std::to_string(rc) + "): " + cmd + "\n" + log;
            return r;
        }
        std::fprintf(stderr, "note: the traced mpirun aborted at exit (lttng-ust shm assertion); recording again\n");
    }
    const std::string json_path = (r.dir / "analysis.json").string();
    const int rc = shell(std::string(ANALYZER) + " " + (r.dir / "trace").string() + " --quiet " + analyze_args + " --json " + json_path + " 2>" +
                         (r.dir / "analyze.err").string());
    if (rc != 0) {
        r.problem = "sigmatrace-analyze failed (exit " + std::to_string(rc) + "): " + slurp(r.dir / "analyze.err");
        return r;
    }
    r.truth = json::parse(slurp(r.dir / "truth.json"));
    r.doc = json::parse(slurp(json_path));
    return r;
}

std::vector<json> findings(const json& doc, const std::string& kind) {
    std::vector<json> out;
    for (const json& f : doc["findings"])
        if (f["kind"] == kind) out.push_back(f);
    return out;
}

class LinkFindingsOnTheFabric : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        // ctest runs this inside tests/support/sandbox.sh --lttng (own network namespace for MPI, own /dev/shm and
        // session daemon); the fabrics have names of their own anyway.
        if (shell("command -v mpirun >/dev/null 2>&1") != 0) skip_ = "mpirun is not installed (openmpi-bin)";
        else if (!fs::exists(ST_LINKLOAD)) skip_ = "st-linkload was not built (no MPI development files)";
        else if (shell(std::string(SIGMATRACE) + " fabric --name " + fabric_name("probe") + " -- ibv_devices >/dev/null 2>&1") != 0)
            skip_ = "the software fabric does not start here";
    }
    void SetUp() override {
        if (!skip_.empty()) GTEST_SKIP() << skip_;
    }
    static void TearDownTestSuite() {
        for (Recording* r : {gray_.get(), balanced_.get(), phased_.get()}) {
            if (!r) continue;
            if (::testing::UnitTest::GetInstance()->Failed()) std::fprintf(stderr, "kept %s for inspection\n", r->dir.c_str());
            else fs::remove_all(r->dir);
        }
    }

    static const Recording& gray() {
        if (gray_) return *gray_;
        for (int attempt = 0; attempt < 3; ++attempt) {
            const int64_t from = ring_start_ + kSlowFrom, to = ring_start_ + kSlowTo;
            const std::string config = "bandwidth 1Gbit/s\nslow node0/0 -> node1/0 factor 4 from " + std::to_string(from) +
                                       "ms to " + std::to_string(to) + "ms\n";
            gray_ = std::make_unique<Recording>(record(
                "gray", config,
                "--start-at-fabric " + std::to_string(ring_start_) + " --phase ring:" + std::to_string(kRingMs) +
                    " --phase incast:" + std::to_string(kIncastMs) + " --rails-used 1 --size " + std::to_string(kSize) +
                    " --depth " + std::to_string(kDepth),
                kGrayAnalysis));
            if (!gray_->problem.empty() || ring_on_time(*gray_)) break;
            // Set-up took longer than planned (a loaded machine): again, with the schedule well after it. Set-up time
            // varies by several seconds between runs on a loaded machine (18 s, then 29 s, in one sanitized CI run), so
            // the new plan doubles the time it took.
            const int64_t late = (gray_->truth["phases"][0]["begin_unix_ns"].get<int64_t>() - fabric_start(*gray_)) / kMs;
            std::fprintf(stderr, "note: the job's set-up ended at fabric time %lld ms, after the planned %lld ms; recording "
                         "again with a later schedule\n", static_cast<long long>(late), static_cast<long long>(ring_start_));
            ring_start_ = 2 * late + 1000;
        }
        return *gray_;
    }
    // Whether the ring phase started when planned (st-linkload starts late when set-up ends after it).
    static bool ring_on_time(const Recording& r) {
        return r.truth["phases"][0]["begin_unix_ns"].get<int64_t>() <= fabric_start(r) + (ring_start_ + 50) * kMs;
    }
    static const Recording& balanced() {
        if (!balanced_)
            balanced_ = std::make_unique<Recording>(
                record("balanced", "bandwidth 200Mbit/s\n", "--phase alltoall:1200 --rails-used 2 --depth 4"));
        return *balanced_;
    }
    // Three designed phases separated by idle time (longer than the drain of the queued WRITEs, 50 ms), analyzed
    // with the fabric's configured bandwidth as every port's.
    static const Recording& phased() {
        if (!phased_)
            phased_ = std::make_unique<Recording>(record(
                "phases", "bandwidth 1Gbit/s\n",
                "--phase ring:" + std::to_string(kPhaseMs) + " --phase idle:" + std::to_string(kIdleMs) +
                    " --phase incast:" + std::to_string(kPhaseMs) + " --phase idle:" + std::to_string(kIdleMs) +
                    " --phase alltoall:" + std::to_string(kPhaseMs) + " --rails-used 1 --size " + std::to_string(kSize) +
                    " --depth " + std::to_string(kDepth),
                "--port-bandwidth 1Gbit/s"));
        return *phased_;
    }
    // The fabric's start in Unix time, and how well it is known.
    static int64_t fabric_start(const Recording& r) { return r.truth["fabric_start_unix_ns"].get<int64_t>(); }
    static int64_t clock_uncertainty(const Recording& r) { return r.truth["fabric_start_uncertainty_ns"].get<int64_t>() / 2; }

    static inline std::string skip_;
    static inline std::unique_ptr<Recording> gray_, balanced_, phased_;
    static inline int64_t ring_start_ = kRingStartGuess;   // fabric time (ms) the ring phase starts at
};

#define REQUIRE_RUN(r)                       \
    do {                                     \
        ASSERT_EQ((r).problem, std::string()); \
    } while (0)

TEST_F(LinkFindingsOnTheFabric, TheSlowedLinkIsTheOnlyGrayLink) {
    const Recording& r = gray();
    REQUIRE_RUN(r);
    // The ring phase covers the fault with healthy windows on both sides (else set-up was too slow here).
    const json& ring = r.truth["phases"][0];
    ASSERT_EQ(ring["pattern"], "ring");
    ASSERT_TRUE(ring_on_time(r)) << "the job's set-up ended after the planned start, three times";
    const std::vector<json> gray_links = findings(r.doc, "gray_link");
    ASSERT_EQ(gray_links.size(), 1u) << r.doc["findings"].dump(1);
    const json& e = gray_links[0]["evidence"];
    EXPECT_EQ(e["link"]["src"], (json{{"node", "node0"}, {"device", "sfab_0"}}));
    EXPECT_EQ(e["link"]["dst"], (json{{"node", "node1"}, {"device", "sfab_0"}}));
    const int64_t tolerance = kEdgeTolerance + clock_uncertainty(r);
    const int64_t t1 = fabric_start(r) + (ring_start_ + kSlowFrom) * kMs, t2 = fabric_start(r) + (ring_start_ + kSlowTo) * kMs;
    EXPECT_NEAR(static_cast<double>(e["start_unix_ns"].get<int64_t>()), static_cast<double>(t1), static_cast<double>(tolerance))
        << "start - fault start = " << (e["start_unix_ns"].get<int64_t>() - t1) / 1e6 << " ms";
    EXPECT_NEAR(static_cast<double>(e["end_unix_ns"].get<int64_t>()), static_cast<double>(t2), static_cast<double>(tolerance))
        << "end - fault end = " << (e["end_unix_ns"].get<int64_t>() - t2) / 1e6 << " ms";
    std::printf("measured: gray link start - fault start %+.2f ms, end - fault end %+.2f ms, slowdown %.3f "
                "(fabric clock known within %.1f ms)\n",
                static_cast<double>(e["start_unix_ns"].get<int64_t>() - t1) / 1e6,
                static_cast<double>(e["end_unix_ns"].get<int64_t>() - t2) / 1e6, e["slowdown"].get<double>(),
                static_cast<double>(clock_uncertainty(r)) / 1e6);
    EXPECT_FALSE(e["until_end"].get<bool>());
    // The duration needs no clock alignment: start and end share the clock error.
    EXPECT_NEAR(e["duration_ns"].get<double>(), static_cast<double>((kSlowTo - kSlowFrom) * kMs), static_cast<double>(kEdgeTolerance));
    EXPECT_NEAR(e["slowdown"].get<double>(), kFactor, 0.1 * kFactor);
    EXPECT_NEAR(e["own_earlier_bytes_per_s"].get<double>(), kRate, 0.05 * kRate);
    EXPECT_NEAR(e["peers_bytes_per_s"].get<double>(), kRate, 0.05 * kRate);
    EXPECT_NEAR(e["throughput_bytes_per_s"].get<double>(), kRate / kFactor, 0.1 * kRate / kFactor);
    EXPECT_TRUE(e["below_own_earlier_level"].get<bool>());
    EXPECT_TRUE(e["below_peers"].get<bool>());
    EXPECT_EQ(e["window_ns"], 50 * kMs);
    EXPECT_EQ(e["fraction"], 0.5);
    // Every healthy link's median throughput is the configured rate. The slowed link is slow 0.6 s of its 1.4 s:
    // with the two windows the fault's edges cut and the phase's partial first and last windows, its median
    // window can be a mixed one (under CI load), so it is held to a median between the slowed and the
    // configured rate and to reaching the configured rate in some window. Not to a best window near it:
    // completions held up by a stall land together in the next window, above the configured rate.
    std::set<std::pair<std::string, std::string>> links;
    for (const json& l : r.doc["links"]) {
        links.insert({l["src"]["node"].get<std::string>(), l["dst"]["node"].get<std::string>()});
        const double p50 = l["throughput_bytes_per_s"]["p50"].get<double>();
        if (l["src"] == e["link"]["src"] && l["dst"] == e["link"]["dst"]) {
            EXPECT_GE(l["throughput_bytes_per_s"]["max"].get<double>(), 0.95 * kRate) << l.dump();
            EXPECT_GT(p50, 0.9 * kRate / kFactor) << l.dump();
            EXPECT_LT(p50, 1.05 * kRate) << l.dump();
        } else {
            EXPECT_NEAR(p50, kRate, 0.05 * kRate) << l.dump();
        }
    }
    EXPECT_EQ(links, (std::set<std::pair<std::string, std::string>>{
                         {"node0", "node1"}, {"node1", "node2"}, {"node2", "node3"}, {"node3", "node0"},
                         {"node1", "node0"}, {"node2", "node0"}}));
}

TEST_F(LinkFindingsOnTheFabric, IncastOnTheReceiverOfTheManyToOnePhase) {
    const Recording& r = gray();
    REQUIRE_RUN(r);
    const std::vector<json> incasts = findings(r.doc, "incast");
    ASSERT_EQ(incasts.size(), 1u) << r.doc["findings"].dump(1);
    const json& e = incasts[0]["evidence"];
    EXPECT_EQ(e["receiver"], (json{{"node", "node0"}, {"device", "sfab_0"}}));
    EXPECT_EQ(e["degree"], 3);
    EXPECT_EQ(e["senders"], (json{"node1/sfab_0", "node2/sfab_0", "node3/sfab_0"}));
    EXPECT_EQ(e["episodes"], 1);
    const json& phase = r.truth["phases"][1];
    ASSERT_EQ(phase["pattern"], "incast");
    EXPECT_NEAR(static_cast<double>(e["start_unix_ns"].get<int64_t>()), phase["begin_unix_ns"].get<double>(),
                static_cast<double>(kEdgeTolerance));
    // The phase, then the senders' queued WRITEs drain: depth x size at the link's rate (16.8 ms).
    const double drain = static_cast<double>(kDepth * kSize) / kRate * 1e9;
    std::printf("measured: incast start - phase start %+.2f ms, duration - (phase + drain) %+.2f ms, mean degree %.2f\n",
                (e["start_unix_ns"].get<double>() - phase["begin_unix_ns"].get<double>()) / 1e6,
                (e["duration_ns"].get<double>() - static_cast<double>(kIncastMs * kMs) - drain) / 1e6,
                e["mean_degree"].get<double>());
    EXPECT_NEAR(e["duration_ns"].get<double>(), static_cast<double>(kIncastMs * kMs) + drain,
                static_cast<double>(kEdgeTolerance));
}

// The timeline's windows (default length: the trace's span in 128..256 windows). Inside the fault, past the
// drain of the queued WRITEs (depth x size at the slowed rate) and the edge tolerance, the slowed link's windows
// carry a quarter of the rate and the other ring links the rate: the mean and the median over those windows
// within 5%, and 70% of the windows within 10% (a stall of the fabric's process on a loaded machine moves every
// link's bytes from one window to the next; the windows are short, ~8 ms, about four WRITEs of a healthy link).
TEST_F(LinkFindingsOnTheFabric, WindowsShowTheSlowedLinkAtAQuarter) {
    const Recording& r = gray();
    REQUIRE_RUN(r);
    ASSERT_TRUE(ring_on_time(r));
    const json& tl = r.doc["timeline"];
    const int64_t width = tl["window_ns"].get<int64_t>();
    const json& windows = tl["windows"];
    ASSERT_GT(windows.size(), 128u);
    ASSERT_LE(windows.size(), 256u);
    const int64_t margin = static_cast<int64_t>(static_cast<double>(kDepth * kSize) / (kRate / kFactor) * 1e9) +
                           kEdgeTolerance + clock_uncertainty(r);
    const int64_t t1 = fabric_start(r) + (ring_start_ + kSlowFrom) * kMs + margin;
    const int64_t t2 = fabric_start(r) + (ring_start_ + kSlowTo) * kMs - margin;
    const json slowed_src{{"node", "node0"}, {"device", "sfab_0"}}, slowed_dst{{"node", "node1"}, {"device", "sfab_0"}};
    std::map<std::string, std::vector<double>> rates;   // "src->dst" node names -> bytes/s per window
    for (const json& w : windows) {
        if (w["start_ns"].get<int64_t>() < t1 || w["end_ns"].get<int64_t>() > t2) continue;
        ASSERT_EQ(w["end_ns"].get<int64_t>() - w["start_ns"].get<int64_t>(), width);
        std::map<std::string, double> in_window;
        for (const json& l : w["links"])
            in_window[l["src"]["node"].get<std::string>() + "->" + l["dst"]["node"].get<std::string>()] =
                l["bytes_per_s"].get<double>();
        for (const char* ring_link : {"node0->node1", "node1->node2", "node2->node3", "node3->node0"})
            rates[ring_link].push_back(in_window[ring_link]);
    }
    ASSERT_GE(rates["node0->node1"].size(), 5u) << "window " << width << " ns, fault inner span " << (t2 - t1) << " ns";
    for (const auto& [link, v] : rates) {
        const double want = link == "node0->node1" ? kRate / kFactor : kRate;
        double sum = 0;
        std::size_t close = 0;
        for (double x : v) {
            sum += x;
            close += std::abs(x - want) <= 0.1 * want;
        }
        std::vector<double> sorted = v;
        std::sort(sorted.begin(), sorted.end());
        const double mean = sum / static_cast<double>(v.size()), median = sorted[sorted.size() / 2];
        std::printf("measured: %s over %zu windows of %.1f ms inside the fault: mean %.4f, median %.4f of the expected "
                    "rate, %zu within 10%%\n", link.c_str(), v.size(), static_cast<double>(width) / 1e6, mean / want,
                    median / want, close);
        EXPECT_NEAR(mean, want, 0.05 * want) << link;
        EXPECT_NEAR(median, want, 0.05 * want) << link;
        EXPECT_GE(static_cast<double>(close), 0.7 * static_cast<double>(v.size())) << link;
    }
    // The slowed link's own node matrix cell agrees with its link (one rail used).
    for (const json& w : windows) {
        double link_bytes = 0, cell_bytes = 0;
        for (const json& l : w["links"])
            if (l["src"] == slowed_src && l["dst"] == slowed_dst) link_bytes = l["bytes"].get<double>();
        for (const json& c : w["node_matrix"])
            if (c["src"] == "node0" && c["dst"] == "node1") cell_bytes = c["bytes"].get<double>();
        EXPECT_EQ(link_bytes, cell_bytes);
    }
}

// The receiver of the many-to-one phase: 3 concurrent senders inside the phase, at most 1 outside it (the ring's
// node3 -> node0, or nothing).
TEST_F(LinkFindingsOnTheFabric, WindowsCountConcurrentSendersPerReceiver) {
    const Recording& r = gray();
    REQUIRE_RUN(r);
    const json& phase = r.truth["phases"][1];
    ASSERT_EQ(phase["pattern"], "incast");
    const json receiver{{"node", "node0"}, {"device", "sfab_0"}};
    const int64_t drain = static_cast<int64_t>(static_cast<double>(kDepth * kSize) / kRate * 1e9);
    const int64_t begin = phase["begin_unix_ns"].get<int64_t>(), end = phase["end_unix_ns"].get<int64_t>();
    std::size_t inside = 0, outside = 0;
    double mean_sum = 0;
    for (const json& w : r.doc["timeline"]["windows"]) {
        const int64_t s = w["start_ns"].get<int64_t>(), e = w["end_ns"].get<int64_t>();
        uint32_t senders = 0;
        double mean = 0;
        for (const json& rc : w["receivers"])
            if (rc["receiver"] == receiver) {
                senders = rc["senders"].get<uint32_t>();
                mean = rc["mean_senders"].get<double>();
            }
        if (s >= begin + kEdgeTolerance && e <= end) {
            ++inside;
            mean_sum += mean;
            EXPECT_EQ(senders, 3u) << w.dump();
        } else if (e <= begin - kEdgeTolerance || s >= end + drain + kEdgeTolerance) {
            ++outside;
            EXPECT_LE(senders, 1u) << w.dump();
        }
    }
    ASSERT_GE(inside, 5u);
    ASSERT_GE(outside, 5u);
    std::printf("measured: time-weighted concurrent senders over the phase's %zu inner windows %.3f\n", inside,
                mean_sum / static_cast<double>(inside));
    EXPECT_NEAR(mean_sum / static_cast<double>(inside), 3.0, 0.15);
}

// Every stream keeps --depth WRITEs of --size bytes in flight: each QP that wrote has that many outstanding at most.
TEST_F(LinkFindingsOnTheFabric, OutstandingWorkIsTheSendWindow) {
    const Recording& r = gray();
    REQUIRE_RUN(r);
    std::size_t writers = 0;
    for (const json& q : r.doc["qps"]) {
        if (q["bytes"].get<uint64_t>() < kSize) continue;
        ++writers;
        ASSERT_TRUE(q.contains("outstanding")) << q.dump();
        const json& o = q["outstanding"];
        EXPECT_EQ(o["max_wrs"], kDepth) << q.dump();
        EXPECT_EQ(o["max_bytes"], kDepth * kSize) << q.dump();
        EXPECT_EQ(o["p99_bytes"], kDepth * kSize) << q.dump();
        EXPECT_EQ(o["rnr_events"], 0) << q.dump();
    }
    // The ring's 4 streams and the many-to-one phase's 2 others (node3 -> node0 is a ring stream).
    EXPECT_EQ(writers, 6u);
    // Per process pair and window: each writing pair has one QP, so its summed maximum is that QP's, the send
    // window at most and exactly at its peak; its time-weighted mean, while the stream runs, stays within one WR
    // of the window (a completion and the post it lets in are microseconds apart).
    std::map<std::pair<int64_t, int64_t>, std::pair<uint64_t, double>> peak;   // (src pid, dst pid) -> max, mean
    for (const json& w : r.doc["timeline"]["windows"])
        for (const json& p : w["peers"]) {
            if (p["max_wrs_sum"].get<uint64_t>() == 0) continue;
            EXPECT_EQ(p["qps"], 1) << p.dump();
            EXPECT_LE(p["max_wrs_sum"].get<uint64_t>(), kDepth) << p.dump();
            EXPECT_LE(p["mean_wrs"].get<double>(), static_cast<double>(kDepth) + 1e-9) << p.dump();
            auto& [max_wrs, mean] = peak[{p["src"]["pid"].get<int64_t>(), p["dst"]["pid"].get<int64_t>()}];
            max_wrs = std::max(max_wrs, p["max_wrs_sum"].get<uint64_t>());
            mean = std::max(mean, p["mean_wrs"].get<double>());
        }
    EXPECT_EQ(peak.size(), 6u);
    double lowest = static_cast<double>(kDepth);
    for (const auto& [pair, m] : peak) lowest = std::min(lowest, m.second);
    std::printf("measured: per writing pair, the highest window mean of outstanding WRs: at least %.4f\n", lowest);
    for (const auto& [pair, m] : peak) {
        EXPECT_EQ(m.first, kDepth) << pair.first << " -> " << pair.second;
        EXPECT_GT(m.second, static_cast<double>(kDepth) - 1.0) << pair.first << " -> " << pair.second;
    }
}

TEST_F(LinkFindingsOnTheFabric, RailImbalanceWhereTrafficUsesOneRail) {
    const Recording& r = gray();
    REQUIRE_RUN(r);
    // Every node opened sfab_0 and sfab_1 and moved everything on sfab_0: max/mean over its two NICs is 2.
    std::map<std::string, json> by_node;
    for (const json& f : findings(r.doc, "rail_imbalance")) by_node[f["evidence"]["node"]] = f["evidence"];
    ASSERT_EQ(by_node.size(), 4u) << r.doc["findings"].dump(1);
    for (const auto& [node, e] : by_node) {
        EXPECT_DOUBLE_EQ(e["ratio"].get<double>(), 2.0) << node;
        EXPECT_EQ(e["bytes_per_device"]["sfab_1"], 0) << node;
        EXPECT_GT(e["bytes_per_device"]["sfab_0"].get<uint64_t>(), 0u) << node;
    }
    // Rails: exactly the bytes st-linkload wrote, both NICs listed.
    std::map<std::pair<std::string, std::string>, uint64_t> tx, want;
    for (const json& row : r.doc["rails"]) tx[{row["node"], row["device"]}] = row["bytes_tx"];
    for (const json& t : r.truth["transfers"]) want[{t["src"], t["device"]}] += t["bytes"].get<uint64_t>();
    for (const char* n : {"node0", "node1", "node2", "node3"}) want[{n, "sfab_1"}] += 0;
    EXPECT_EQ(tx, want);
}

TEST_F(LinkFindingsOnTheFabric, BalancedRunHasNoLinkFindings) {
    const Recording& r = balanced();
    REQUIRE_RUN(r);
    for (const char* kind : {"gray_link", "incast", "rail_imbalance", "traffic_skew"})
        EXPECT_TRUE(findings(r.doc, kind).empty()) << kind << ": " << r.doc["findings"].dump(1);
    // What the detectors looked at: 24 links (4 nodes x 3 peers x 2 rails), each measured, at the configured rate.
    ASSERT_EQ(r.doc["links"].size(), 24u);
    for (const json& l : r.doc["links"]) {
        EXPECT_GE(l["measured_windows"].get<uint64_t>(), 15u) << l.dump();
        EXPECT_NEAR(l["throughput_bytes_per_s"]["p50"].get<double>(), kBalancedRate, 0.05 * kBalancedRate) << l.dump();
    }
    // Both rails of every node carry the same bytes.
    std::map<std::string, std::vector<uint64_t>> per_node;
    for (const json& row : r.doc["rails"]) per_node[row["node"]].push_back(row["bytes_tx"].get<uint64_t>() + row["bytes_rx"].get<uint64_t>());
    ASSERT_EQ(per_node.size(), 4u);
    for (const auto& [node, v] : per_node) {
        ASSERT_EQ(v.size(), 2u) << node;
        EXPECT_NEAR(static_cast<double>(v[0]), static_cast<double>(v[1]), 0.05 * static_cast<double>(v[0])) << node;
    }
}

// CI rules name the findings: findings.gray_link>0 (or findings[gray_link]>0) fails on the gray run, passes on the
// balanced one.
TEST_F(LinkFindingsOnTheFabric, FailOnRulesTargetTheFindings) {
    const Recording& g = gray();
    REQUIRE_RUN(g);
    const Recording& b = balanced();
    REQUIRE_RUN(b);
    const std::string rules =
        std::string(" --quiet ") + kGrayAnalysis + " --fail-on 'findings.gray_link>0' --fail-on 'findings[incast]>0' 2>";
    const fs::path err = g.dir / "rules.err";
    EXPECT_EQ(shell(std::string(ANALYZER) + " " + (g.dir / "trace").string() + rules + err.string()), 1);
    const std::string msg = slurp(err);
    EXPECT_NE(msg.find("FAILED rule 'findings.gray_link>0': findings[gray_link] = 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("FAILED rule 'findings[incast]>0': findings[incast] = 1"), std::string::npos) << msg;
    EXPECT_EQ(shell(std::string(ANALYZER) + " " + (b.dir / "trace").string() + rules + (b.dir / "rules.err").string()), 0)
        << slurp(b.dir / "rules.err");
}

// Phases: the three designed ones found (the idle time between them is far longer than the 1 ms gap threshold),
// each with exactly the bytes st-linkload posted in it on every port, the lower bound that the busiest port's
// designed bytes set at the configured 1 Gbit/s (within 2%), and an efficiency in (0, 1].
TEST_F(LinkFindingsOnTheFabric, PhasesAreTheDesignedOnesWithTheirLowerBounds) {
    const Recording& r = phased();
    REQUIRE_RUN(r);
    std::vector<std::size_t> designed;   // indexes of the truth's traffic phases
    for (std::size_t k = 0; k < r.truth["phases"].size(); ++k)
        if (r.truth["phases"][k]["pattern"] != "idle") designed.push_back(k);
    ASSERT_EQ(designed.size(), 3u);
    const json& phases = r.doc["phases"];
    ASSERT_EQ(phases.size(), designed.size()) << phases.dump(1);
    for (std::size_t i = 0; i < designed.size(); ++i) {
        const json& truth = r.truth["phases"][designed[i]];
        const json& p = phases[i];
        // Bytes posted in the phase, by port ("node/device tx|rx").
        std::map<std::string, uint64_t> want;
        for (const json& t : r.truth["transfers"]) {
            const uint64_t b = t["bytes_by_phase"][designed[i]].get<uint64_t>();
            if (b == 0) continue;
            want[t["src"].get<std::string>() + "/" + t["device"].get<std::string>() + " tx"] += b;
            want[t["dst"].get<std::string>() + "/" + t["device"].get<std::string>() + " rx"] += b;
        }
        std::map<std::string, uint64_t> got;
        for (const json& port : p["ports"])
            got[port["node"].get<std::string>() + "/" + port["device"].get<std::string>() + " " +
                port["direction"].get<std::string>()] = port["bytes"].get<uint64_t>();
        EXPECT_EQ(got, want) << truth["pattern"];
        uint64_t busiest = 0;
        std::string binding;
        for (const auto& [port, b] : want)
            if (b > busiest) {
                busiest = b;
                binding = port;
            }
        const double bound = static_cast<double>(busiest) / kRate * 1e9;
        const double lower = p["lower_bound_ns"].get<double>(), eff = p["efficiency"].get<double>();
        std::printf("measured: %s phase: lower bound %.2f ms (designed %.2f ms), duration %.2f ms, efficiency %.3f\n",
                    truth["pattern"].get<std::string>().c_str(), lower / 1e6, bound / 1e6,
                    p["duration_ns"].get<double>() / 1e6, eff);
        EXPECT_NEAR(lower, bound, 0.02 * bound) << truth["pattern"];
        EXPECT_GT(eff, 0.0);
        EXPECT_LE(eff, 1.0);
        EXPECT_EQ(p["bandwidth_source"], "configured");
        EXPECT_EQ(p["delimiter"], "gap");
        // The phase starts with its first WRITE, within the edge tolerance of the schedule.
        EXPECT_NEAR(p["start_unix_ns"].get<double>(), truth["begin_unix_ns"].get<double>(), static_cast<double>(kEdgeTolerance));
        if (truth["pattern"] == "incast") {
            EXPECT_EQ(p["binding_port"], (json{{"node", "node0"}, {"device", "sfab_0"}, {"direction", "rx"}}));
        }
        // The fabric shapes each directed link, not each port (docs/softfabric.md, "Link model"): a ring's port
        // carries one link and runs near the bound; the incast's receiver and the all-to-all's ports carry 3
        // links at the rate each, faster than a port bound of 1 Gbit/s, which the phase says.
        if (truth["pattern"] == "ring") {
            EXPECT_GT(eff, 0.9);
            EXPECT_FALSE(p["faster_than_bound"].get<bool>());
        } else {
            EXPECT_EQ(eff, 1.0);
            EXPECT_TRUE(p["faster_than_bound"].get<bool>());
        }
    }
    EXPECT_TRUE(findings(r.doc, "phase_inefficiency").empty()) << r.doc["findings"].dump(1);
}

// The same trace against a port bandwidth 4x the fabric's link rate and an efficiency threshold of 0.8: every
// phase runs below it (the ring at a quarter of its bound, the others at three quarters: 3 links per port), a
// phase_inefficiency finding each, with the efficiency the 1 Gbit/s bound gives over 4; the many-to-one phase's
// names the incast on its receiver.
TEST_F(LinkFindingsOnTheFabric, PhaseFarFromItsBoundIsAFinding) {
    const Recording& r = phased();
    REQUIRE_RUN(r);
    const std::string json_path = (r.dir / "analysis4x.json").string();
    ASSERT_EQ(shell(std::string(ANALYZER) + " " + (r.dir / "trace").string() +
                    " --quiet --port-bandwidth 4Gbit/s --phase-efficiency 0.8 --json " + json_path),
              0);
    const json doc = json::parse(slurp(json_path));
    const std::vector<json> found = findings(doc, "phase_inefficiency");
    ASSERT_EQ(found.size(), 3u) << doc["findings"].dump(1);
    for (std::size_t i = 0; i < found.size(); ++i) {
        const json& e = found[i]["evidence"];
        const json& at1g = r.doc["phases"][i];
        EXPECT_EQ(e["phase"], i);
        EXPECT_EQ(e["binding_port"], at1g["binding_port"]);
        const double want = at1g["lower_bound_ns"].get<double>() / 4 / at1g["duration_ns"].get<double>();
        EXPECT_NEAR(e["efficiency"].get<double>(), want, 1e-6);
        EXPECT_NEAR(e["efficiency"].get<double>(), i == 0 ? 0.25 : 0.75, 0.05);
        bool incast = false;
        for (const json& c : e["causes"])
            incast |= c["kind"] == "incast" && c["receiver"] == json{{"node", "node0"}, {"device", "sfab_0"}};
        EXPECT_EQ(incast, i == 1) << e["causes"].dump();
    }
}

}  // namespace
}  // namespace sigmatrace::analyzer
