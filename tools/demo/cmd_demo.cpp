// sigmatrace demo: a multi-node RDMA job on the software fabric, recorded and analyzed, in one command.
//
//   sigmatrace record -o OUT/trace -- mpirun -np N ... sigmatrace fabric --node rank -- st-alltoall ...
//   sigmatrace analyze OUT/trace --json OUT/analysis.json --perfetto OUT/timeline.json --html OUT/report.html
//
// Each MPI rank runs on its own fabric node. st-alltoall (tools/workloads/alltoall) writes a skewed all-to-all
// (rank 1 receives --hot-factor times more) and then runs RDMA barriers in which the last rank arrives late, so
// the report has a traffic skew and a barrier straggler to show.
#include <fmt/core.h>
#include <unistd.h>

#include <charconv>
#include <ctime>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "analyze/analyze_main.h"
#include "common/install_layout.h"
#include "record/subprocess.h"
#include "sigmatrace/commands.h"

namespace sigmatrace::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage = R"(usage: sigmatrace demo [--ranks N] [--iters K] [--epochs E] [--late-ms MS] [-o DIR]

Runs an MPI job of N ranks (default 4), each on its own node of the software RDMA fabric: a skewed all-to-all of
RDMA WRITEs (K rounds of 64 KiB to every peer, 4x towards rank 1; default K=40) and E RDMA barriers (default 20)
in which the last rank arrives MS ms late (default 3). The job is recorded with `sigmatrace record` and analyzed;
the report is printed, and the trace, JSON, Perfetto timeline and HTML report are left in DIR (default
./sigmatrace-demo-<time>).
)";

struct DemoOptions {
    int ranks = 4;
    int iters = 40;
    int epochs = 20;
    int late_ms = 3;
    std::string out;
};

bool parse_int(const char* s, int& out, int lo, int hi) {
    const std::string_view v(s);
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    return ec == std::errc() && p == v.data() + v.size() && out >= lo && out <= hi;
}

std::string default_out() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    return (fs::current_path() / (std::string("sigmatrace-demo-") + stamp)).string();
}

// The first executable named `name` on PATH, or "".
std::string on_path(const std::string& name) {
    const char* path = std::getenv("PATH");
    std::string_view rest = path ? path : "/usr/bin:/bin";
    while (!rest.empty()) {
        const auto colon = rest.find(':');
        const fs::path candidate = fs::path(std::string(rest.substr(0, colon))) / name;
        if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
        if (colon == std::string_view::npos) break;
        rest.remove_prefix(colon + 1);
    }
    return "";
}

}  // namespace

int cmd_demo(Args args) {
    DemoOptions o;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string_view a = args[i];
        const bool has_value = i + 1 < args.size();
        if (a == "-h" || a == "--help") {
            fmt::print("{}", kUsage);
            return 0;
        } else if (a == "--ranks" && has_value && parse_int(args[i + 1], o.ranks, 2, 64)) {
            ++i;
        } else if (a == "--iters" && has_value && parse_int(args[i + 1], o.iters, 0, 100000)) {
            ++i;
        } else if (a == "--epochs" && has_value && parse_int(args[i + 1], o.epochs, 0, 100000)) {
            ++i;
        } else if (a == "--late-ms" && has_value && parse_int(args[i + 1], o.late_ms, 0, 10000)) {
            ++i;
        } else if ((a == "-o" || a == "--output") && has_value) {
            o.out = args[++i];
        } else {
            fmt::print(stderr, "sigmatrace demo: invalid argument '{}'\n\n{}", a, kUsage);
            return 2;
        }
    }

    const InstallLayout layout = InstallLayout::from_self();
    const fs::path self = layout.bin_dir() / "sigmatrace";
    const fs::path workload = layout.libexec_dir() / "st-alltoall";
    if (access(workload.c_str(), X_OK) != 0) {
        fmt::print(stderr, "sigmatrace demo: Cannot find the demo workload: path={}; this SigmaTrace was built without "
                           "MPI (install libopenmpi-dev and rebuild)\n", workload.string());
        return 2;
    }
    const std::string mpirun = on_path("mpirun");
    if (mpirun.empty()) {
        fmt::print(stderr, "sigmatrace demo: Cannot find mpirun on PATH: install the Debian package openmpi-bin\n");
        return 2;
    }
    std::error_code ec;
    const fs::path out = fs::absolute(o.out.empty() ? default_out() : o.out, ec);
    if (fs::exists(out / "trace", ec)) {
        fmt::print(stderr, "sigmatrace demo: {} already holds a trace: choose another -o DIR\n", (out / "trace").string());
        return 2;
    }
    fs::create_directories(out, ec);
    if (ec) {
        fmt::print(stderr, "sigmatrace demo: Cannot create the output directory: path={}, reason={}\n", out.string(),
                   ec.message());
        return 2;
    }

    // MPI's own traffic goes through shared memory (vader), never through the RDMA devices being traced.
    std::vector<std::string> cmd = {self.string(), "record", "-o", (out / "trace").string(), "--", mpirun};
    if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
    for (const char* a : {"--oversubscribe", "--mca", "btl", "self,vader", "--mca", "pml", "ob1", "-np"}) cmd.push_back(a);
    cmd.push_back(std::to_string(o.ranks));
    for (const std::string& a : {self.string(), std::string("fabric"), std::string("--node"), std::string("rank"),
                                 std::string("--"), workload.string()})
        cmd.push_back(a);
    for (const std::string& a : {std::string("--iters"), std::to_string(o.iters), std::string("--epochs"),
                                 std::to_string(o.epochs), std::string("--late-ms"), std::to_string(o.late_ms),
                                 std::string("--hot"), std::string("1"), std::string("--hot-factor"), std::string("4")})
        cmd.push_back(a);

    fmt::print("sigmatrace demo: {} ranks on {} fabric nodes: skewed all-to-all, then {} barriers with rank {} "
               "arriving {} ms late\n\n",
               o.ranks, o.ranks, o.epochs, o.ranks - 1, o.late_ms);
    std::fflush(stdout);
    std::string spawn_error;
    const int status = record::run_foreground(cmd, record::current_environment(), &spawn_error);
    if (status != 0) {
        fmt::print(stderr, "sigmatrace demo: the recorded job failed (exit status {}){}{}\n", status,
                   spawn_error.empty() ? "" : ": ", spawn_error);
        return status == 127 ? 2 : status;
    }

    const std::string json = (out / "analysis.json").string();
    const std::string perfetto = (out / "timeline.perfetto.json").string();
    const std::string html = (out / "report.html").string();
    std::vector<std::string> analyze_args = {(out / "trace").string(), "--json", json, "--perfetto", perfetto,
                                             "--html", html};
    std::vector<char*> argv;
    for (auto& a : analyze_args) argv.push_back(a.data());
    fmt::print("\n");
    std::fflush(stdout);
    const int rc = analyzer::analyze_main(std::span<char* const>(argv.data(), argv.size()));
    fmt::print("\nFiles in {}:\n  trace/                  the LTTng trace (sigmatrace analyze {} re-reads it)\n"
               "  analysis.json           the analysis document (schema sigmatrace.analysis/2)\n"
               "  timeline.perfetto.json  the timeline: open it in https://ui.perfetto.dev\n"
               "  report.html             the report with plots, for a browser\n",
               out.string(), (out / "trace").string());
    return rc;
}

}  // namespace sigmatrace::cli
