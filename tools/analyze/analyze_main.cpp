// sigmatrace-analyze DIR [--json FILE|-] [--html FILE] [--perfetto FILE [--perfetto-format proto|json]] [--sqlite FILE]
//                    [--baseline FILE] [--fail-on RULE ...]
// (a contract: docs/architecture.md; options beyond it are documented in docs/analyzer.md).
#include "analyze/analyze_main.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <ctime>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sigmatrace/launcher_env.h>

#include "analyze/rank_read.h"
#include "analyzer/analyses/analysis.h"
#include "analyzer/outputs/ci_rules.h"
#include "analyzer/outputs/event_dump.h"
#include "analyzer/outputs/format_units.h"
#include "analyzer/outputs/html_report.h"
#include "analyzer/outputs/perfetto_proto_writer.h"
#include "common/install_layout.h"
#include "analyzer/outputs/perfetto_writer.h"
#include "analyzer/outputs/sqlite_writer.h"
#include "analyzer/decode/read_guard.h"
#include "analyzer/outputs/report_builder.h"
#include "analyzer/outputs/text_report.h"
#include "analyzer/decode/sharded_read.h"
#include "analyzer/decode/trace_reader.h"
#include "sigmatrace/commands.h"
#include "analyzer/outputs/json_text.h"

namespace sigmatrace::analyzer {

namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuleFailed = 1;
constexpr int kExitUsage = 2;
// The trace was read but holds no SigmaTrace event (an unrelated LTTng session, or the tracer was not loaded):
// nothing was analyzed, which a CI job must not mistake for a clean run.
constexpr int kExitNoSigmaTraceEvents = 3;

constexpr const char* kUsage = R"(usage: sigmatrace-analyze DIR [options]

Analyzes every SigmaTrace (LTTng CTF) trace under DIR and prints a report.

outputs:
  --json FILE|-          the analysis document (schema sigmatrace.analysis/2); '-' writes it to stdout
                         instead of the text report
  --html FILE            a self-contained HTML report with plots
  --perfetto FILE        a timeline for ui.perfetto.dev: Perfetto's protobuf trace format (FILE.pftrace), or
                         the Chrome JSON trace format when FILE ends in .json
  --perfetto-format F    proto or json: the timeline's format whatever FILE's name
  --perfetto-max-ops N   operations written to the timeline at most (default 1000000); the file and stderr
                         say how many were left out
  --sqlite FILE          the analysis as an SQLite database: every operation, QPs, processes, windows, links,
                         phases, findings (docs/sqlite.md); FILE is replaced only once complete
  --events FILE|-        every SigmaTrace event as read, one line each, deferred records expanded into the
                         calls they stand for; '-' writes them to stdout instead of the text report
  --quiet                no text report
  --jobs N               read the trace in N shares at once, one thread each (default 1): each share reads
                         every host's set-up and its own hosts' data; merged, they give what one read gives
                         (a trace of one host, a damaged trace, --perfetto, --sqlite, --events and --live
                         read in one share; so does a trace whose shares cannot be merged exactly, with a note)

live (instead of DIR):
  --live URL             follow a session while it records, through lttng-relayd's live port (repeatable:
                         several sessions, a job's hosts, as one analysis):
                         net://RELAYD[:PORT]/host/HOST/SESSION, or net://RELAYD[:PORT]/host/HOST for the host's first
                         session (waited for). Prints each finding as it becomes known (gray link, incast,
                         stalled queue, error storm) with the time of its cause and how long after it was
                         reported; when the session ends (or on Ctrl-C), the usual outputs
  --json-stream          live findings as one JSON object per line on stdout (no text report there)

CI mode (exit 0 = analyzed and no rule failed, 1 = a rule failed, 2 = usage error or unreadable trace,
3 = the trace holds no SigmaTrace event):
  --fail-on RULE         fail when RULE holds, e.g. 'discarded>0', 'errors>0', 'skew>1.5', 'p99[RDMA_WRITE]>50us',
                         'increase(p99)>20%' (repeatable; quote it for the shell)
  --baseline OLD.json    compare with an earlier --json output; without an increase()/decrease() rule it
                         applies the default regression rules (increase(p99)>20%, increase(spread_p99)>20%,
                         increase(errors)>0, increase(discarded)>0)

analysis:
  --barrier-word [RKEY:]ADDR   the barrier's synchronization word (hex), instead of detecting it
  --skew-threshold X           traffic_skew finding above X (default 1.5)
  --error-storm N              error_storm finding from N error completions (default 10)
  --stall-after T              stalled_queue: work outstanding with no completion for T (default 1s)
  --straggler-fraction F       barrier_straggler when last in more than F of the epochs (default 0.5)
  --rail-imbalance X           rail_imbalance finding above X (default 1.5)
  --gray-window T              gray_link: throughput window (default 50ms; units ns us ms s)
  --gray-windows N             gray_link: consecutive slow windows that make one (default 3)
  --gray-fraction F            gray_link: slow below F x its earlier level or its peers' (default 0.5)
  --gray-min-bytes B           gray_link: transfers measured from this size (default 64KiB; units KiB MiB)
  --incast-window T            incast: time resolution (default 1ms)
  --incast-senders N           incast: from N concurrent senders (default 3)
  --incast-share F             incast: a sender counts when the receiver gets F of its data in flight (default 0.5)
  --incast-min-bytes B         incast: transfers counted from this size (default 1KiB)
  --incast-min-duration T      incast: reported from this duration (default 2ms)
  --window T|off               timeline windows' length (default: the trace's length / 128..256), or none
  --window-qps N               QPs with a per-window outstanding series (default 256, the first created)
  --phase-split SPEC           phases: auto (default: barrier epochs, else idle gaps of 1ms), gap:T (idle gaps
                               longer than T), T1,T2,... (cut at these times after the trace's start: 1.5s,3s),
                               opcode:NAME (each operation of NAME starts a phase: opcode:SEND_WITH_IMM), or off
  --port-bandwidth [DEV=]RATE  phases: a port's bandwidth (100Gbit/s, 12.5GB/s; units bit/s B/s with k M G T);
                               DEV is a device (mlx5_0) or node/device; repeatable (default: each port's observed peak)
  --phase-efficiency F         phase_inefficiency below F of the lower bound (default 0.5)
  --phase-min-bytes B          phase_inefficiency for phases that moved at least B (default 1MiB)
  --clock-align auto|off       traces of several hosts: estimate each host's clock from the traffic and move its
                               times onto the reference host's before analysis (auto, the default: a first,
                               lighter read of the trace), or analyze the recorded times (off; still estimated)
)";

// Distinct hosts among the readable traces (their metadata's hostname; traces without one not counted).
std::size_t planned_hosts(const PlannedRead& planned) {
    const std::vector<std::string> names = planned_hostnames(planned);
    return static_cast<std::size_t>(std::ranges::count_if(names, [](const std::string& h) { return !h.empty(); }));
}

struct CliOptions {
    std::string dir;
    std::optional<std::string> json_out, html_out, perfetto_out, sqlite_out, events_out, baseline;
    std::vector<std::string> rules;
    uint64_t perfetto_max_ops = kDefaultTimelineBudget;
    std::optional<std::string> perfetto_format;   // "proto" or "json"; unset: by the file name
    bool quiet = false;
    std::vector<std::string> live_urls;
    bool json_stream = false;
    std::size_t jobs = 1;
    bool jobs_given = false;
    AnalysisOptions analysis;
};

bool parse_double(std::string_view s, double& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
}
bool parse_u64(std::string_view s, uint64_t& out, int base = 10) {
    if (base == 16 && (s.starts_with("0x") || s.starts_with("0X"))) s.remove_prefix(2);
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

constexpr int64_t kMaxWindowNs = 3'600'000'000'000;   // an hour: window arithmetic stays far from overflow

// "50ms", "2s", "1500us", "800ns" (a bare number is ns).
bool parse_duration_ns(std::string_view s, int64_t& out) {
    double scale = 1.0;
    for (auto [sfx, f] : {std::pair{"ns", 1.0}, std::pair{"us", 1e3}, std::pair{"ms", 1e6}, std::pair{"s", 1e9}})
        if (s.size() > std::string_view(sfx).size() && s.ends_with(sfx)) {
            s.remove_suffix(std::string_view(sfx).size());
            scale = f;
            break;
        }
    double v = 0.0;
    if (!parse_double(s, v) || !(v > 0.0)) return false;
    out = static_cast<int64_t>(v * scale);
    return out > 0;
}
// "65536", "64KiB", "1MiB".
bool parse_bytes(std::string_view s, uint64_t& out) {
    uint64_t scale = 1;
    for (auto [sfx, f] : {std::pair{"KiB", uint64_t{1} << 10}, std::pair{"MiB", uint64_t{1} << 20}, std::pair{"GiB", uint64_t{1} << 30}})
        if (s.ends_with(sfx)) {
            s.remove_suffix(3);
            scale = f;
            break;
        }
    if (!parse_u64(s, out)) return false;
    out *= scale;
    return true;
}
bool parse_fraction(std::string_view s, double& out) { return parse_double(s, out) && out > 0.0 && out <= 1.0; }

// "100Gbit/s", "12.5GB/s", "800Mbit/s": decimal prefixes, bits or bytes per second; out in bytes per second.
bool parse_rate(std::string_view s, double& out) {
    double unit = 0.0;
    for (auto [sfx, f] : {std::pair{"bit/s", 0.125}, std::pair{"B/s", 1.0}})
        if (s.ends_with(sfx)) {
            s.remove_suffix(std::string_view(sfx).size());
            unit = f;
            break;
        }
    if (unit == 0.0) return false;
    for (auto [pfx, f] : {std::pair{'k', 1e3}, std::pair{'K', 1e3}, std::pair{'M', 1e6}, std::pair{'G', 1e9}, std::pair{'T', 1e12}})
        if (!s.empty() && s.back() == pfx) {
            s.remove_suffix(1);
            unit *= f;
            break;
        }
    double v = 0.0;
    if (!parse_double(s, v) || !(v > 0.0) || !std::isfinite(v)) return false;
    out = v * unit;
    return true;
}

// --phase-split: see the usage text.
std::string parse_phase_split(std::string_view v, PhaseOptions& p) {
    p.enabled = true;
    p.times_ns.clear();
    if (v == "off") {
        p.enabled = false;
    } else if (v == "auto") {
        p.split = PhaseOptions::Split::Auto;
    } else if (v.starts_with("gap:")) {
        if (!parse_duration_ns(v.substr(4), p.gap_ns) || p.gap_ns > kMaxWindowNs)
            return fmt::format("--phase-split: '{}' is not a gap; give gap:T with T between 1ns and 1h (gap:5ms)", v);
        p.split = PhaseOptions::Split::Gap;
    } else if (v.starts_with("opcode:")) {
        const std::string_view name = v.substr(7);
        for (int code = 0; code < 256; ++code)
            if (opcode_name(static_cast<uint8_t>(code)) == name) {
                p.opcode = static_cast<uint8_t>(code);
                p.split = PhaseOptions::Split::Opcode;
                return "";
            }
        return fmt::format("--phase-split: unknown opcode '{}' (RDMA_WRITE, RDMA_WRITE_WITH_IMM, SEND, SEND_WITH_IMM, "
                           "RDMA_READ, ...)", name);
    } else {
        while (!v.empty()) {
            const std::size_t comma = v.find(',');
            const std::string_view item = v.substr(0, comma);
            int64_t t = 0;
            if (!parse_duration_ns(item, t) || t > kMaxWindowNs * 24)
                return fmt::format("--phase-split: '{}' is not a time after the trace's start (1.5s); the split is auto, "
                                   "off, gap:T, opcode:NAME or times T1,T2,...", item);
            if (!p.times_ns.empty() && t <= p.times_ns.back())
                return fmt::format("--phase-split: times must increase, '{}' does not", item);
            p.times_ns.push_back(t);
            v = comma == std::string_view::npos ? std::string_view() : v.substr(comma + 1);
            if (comma != std::string_view::npos && v.empty()) return "--phase-split: a time is missing after the last ','";
        }
        if (p.times_ns.empty()) return "--phase-split needs auto, off, gap:T, opcode:NAME or times T1,T2,...";
        p.split = PhaseOptions::Split::Times;
    }
    return "";
}

// Returns an error message, or "" when the command line is valid.
std::string parse_args(std::span<char* const> args, CliOptions& o, bool& help) {
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string_view a = args[i];
        auto value = [&](std::string& out) -> bool {
            if (i + 1 >= args.size()) return false;
            out = args[++i];
            return true;
        };
        std::string v;
        if (a == "-h" || a == "--help") {
            help = true;
            return "";
        } else if (a == "--live") {
            if (!value(v)) return "--live needs a URL: net://RELAYD/host/HOST[/SESSION]";
            o.live_urls.push_back(v);
        } else if (a == "--json-stream") {
            o.json_stream = true;
        } else if (a == "--json") {
            if (!value(v)) return "--json needs a FILE (or - for stdout)";
            o.json_out = v;
        } else if (a == "--html") {
            if (!value(v)) return "--html needs a FILE";
            o.html_out = v;
        } else if (a == "--perfetto") {
            if (!value(v)) return "--perfetto needs a FILE";
            o.perfetto_out = v;
        } else if (a == "--events") {
            if (!value(v)) return "--events needs a FILE (or - for stdout)";
            o.events_out = v;
        } else if (a == "--perfetto-format") {
            if (!value(v) || (v != "proto" && v != "json")) return "--perfetto-format needs proto or json";
            o.perfetto_format = v;
        } else if (a == "--sqlite") {
            if (!value(v)) return "--sqlite needs a FILE";
            o.sqlite_out = v;
        } else if (a == "--perfetto-max-ops") {
            if (!value(v) || !parse_u64(v, o.perfetto_max_ops)) return "--perfetto-max-ops needs a number";
        } else if (a == "--baseline") {
            if (!value(v)) return "--baseline needs a FILE";
            o.baseline = v;
        } else if (a == "--fail-on") {
            if (!value(v)) return "--fail-on needs a RULE";
            o.rules.push_back(v);
        } else if (a == "--quiet" || a == "-q") {
            o.quiet = true;
        } else if (a == "--jobs" || a == "-j") {
            uint64_t n = 0;
            if (!value(v) || !parse_u64(v, n) || n < 1 || n > 1024) return "--jobs needs a number of shares from 1 to 1024";
            o.jobs = static_cast<std::size_t>(n);
            o.jobs_given = true;
        } else if (a == "--barrier-word") {
            if (!value(v)) return "--barrier-word needs [RKEY:]ADDR";
            BarrierWordSpec w;
            const auto colon = v.find(':');
            uint64_t rkey = 0;
            if (colon != std::string::npos) {
                if (!parse_u64(std::string_view(v).substr(0, colon), rkey, 16))
                    return fmt::format("--barrier-word: '{}' is not a hex rkey", v.substr(0, colon));
                w.rkey = static_cast<uint32_t>(rkey);
                v = v.substr(colon + 1);
            }
            if (!parse_u64(v, w.raddr, 16)) return fmt::format("--barrier-word: '{}' is not a hex address", v);
            o.analysis.barrier.word = w;
        } else if (a == "--skew-threshold") {
            if (!value(v) || !parse_double(v, o.analysis.skew_threshold)) return "--skew-threshold needs a number";
        } else if (a == "--error-storm") {
            if (!value(v) || !parse_u64(v, o.analysis.error_storm_threshold)) return "--error-storm needs a number";
        } else if (a == "--stall-after") {
            if (!value(v) || !parse_duration_ns(v, o.analysis.stall_after_ns)) return "--stall-after needs a duration (1s)";
            if (o.analysis.stall_after_ns < 1000 || o.analysis.stall_after_ns > kMaxWindowNs)
                return "--stall-after must be between 1us and 1h";
        } else if (a == "--straggler-fraction") {
            if (!value(v) || !parse_double(v, o.analysis.straggler_fraction)) return "--straggler-fraction needs a number";
        } else if (a == "--rail-imbalance") {
            if (!value(v) || !parse_double(v, o.analysis.rail_imbalance_threshold))
                return "--rail-imbalance needs a number";
        } else if (a == "--gray-window") {
            if (!value(v) || !parse_duration_ns(v, o.analysis.gray.window_ns)) return "--gray-window needs a duration (50ms)";
            if (o.analysis.gray.window_ns < 1000 || o.analysis.gray.window_ns > kMaxWindowNs)
                return "--gray-window must be between 1us and 1h";
        } else if (a == "--gray-windows") {
            uint64_t n = 0;
            if (!value(v) || !parse_u64(v, n) || n == 0 || n > 1000000) return "--gray-windows needs a count >= 1";
            o.analysis.gray.min_windows = static_cast<uint32_t>(n);
        } else if (a == "--gray-fraction") {
            if (!value(v) || !parse_fraction(v, o.analysis.gray.fraction)) return "--gray-fraction needs a number in (0, 1]";
        } else if (a == "--gray-min-bytes") {
            if (!value(v) || !parse_bytes(v, o.analysis.gray.min_bytes)) return "--gray-min-bytes needs a size (64KiB)";
        } else if (a == "--incast-window") {
            if (!value(v) || !parse_duration_ns(v, o.analysis.incast.window_ns)) return "--incast-window needs a duration (1ms)";
            if (o.analysis.incast.window_ns < 1000 || o.analysis.incast.window_ns > kMaxWindowNs)
                return "--incast-window must be between 1us and 1h";
        } else if (a == "--window") {
            if (!value(v)) return "--window needs a duration (10ms) or off";
            if (v == "off") {
                o.analysis.windows.enabled = false;
            } else {
                if (!parse_duration_ns(v, o.analysis.windows.window_ns)) return "--window needs a duration (10ms) or off";
                if (o.analysis.windows.window_ns < 1000 || o.analysis.windows.window_ns > kMaxWindowNs)
                    return "--window must be between 1us and 1h";
            }
        } else if (a == "--clock-align") {
            if (!value(v) || (v != "auto" && v != "off")) return "--clock-align needs auto or off";
            o.analysis.clock.align = v == "auto";
        } else if (a == "--window-qps") {
            uint64_t n = 0;
            if (!value(v) || !parse_u64(v, n) || n > 1000000) return "--window-qps needs a number (0 to 1000000)";
            o.analysis.windows.max_qps = static_cast<uint32_t>(n);
        } else if (a == "--phase-split") {
            if (!value(v)) return "--phase-split needs auto, off, gap:T, opcode:NAME or times T1,T2,...";
            if (std::string err = parse_phase_split(v, o.analysis.phases); !err.empty()) return err;
        } else if (a == "--port-bandwidth") {
            if (!value(v)) return "--port-bandwidth needs a rate (100Gbit/s) or DEV=RATE";
            const std::string_view sv(v);
            const std::size_t eq = sv.find('=');
            double bps = 0.0;
            if (!parse_rate(eq == std::string_view::npos ? sv : sv.substr(eq + 1), bps))
                return fmt::format("--port-bandwidth: '{}' is not a rate; give RATE or DEV=RATE with RATE like 100Gbit/s "
                                   "or 12.5GB/s", v);
            if (eq == std::string_view::npos)
                o.analysis.phases.port_bytes_per_s = bps;
            else if (eq == 0)
                return fmt::format("--port-bandwidth: '{}' names no device before '='", v);
            else
                o.analysis.phases.device_bytes_per_s.emplace_back(std::string(sv.substr(0, eq)), bps);
        } else if (a == "--phase-efficiency") {
            if (!value(v) || !parse_fraction(v, o.analysis.phases.efficiency_threshold))
                return "--phase-efficiency needs a number in (0, 1]";
        } else if (a == "--phase-min-bytes") {
            if (!value(v) || !parse_bytes(v, o.analysis.phases.finding_min_bytes)) return "--phase-min-bytes needs a size (1MiB)";
        } else if (a == "--incast-senders") {
            uint64_t n = 0;
            if (!value(v) || !parse_u64(v, n) || n < 2 || n > 1000000) return "--incast-senders needs a count >= 2";
            o.analysis.incast.min_senders = static_cast<uint32_t>(n);
        } else if (a == "--incast-share") {
            if (!value(v) || !parse_fraction(v, o.analysis.incast.share)) return "--incast-share needs a number in (0, 1]";
        } else if (a == "--incast-min-bytes") {
            if (!value(v) || !parse_bytes(v, o.analysis.incast.min_bytes)) return "--incast-min-bytes needs a size (1KiB)";
        } else if (a == "--incast-min-duration") {
            if (!value(v) || !parse_duration_ns(v, o.analysis.incast.min_duration_ns))
                return "--incast-min-duration needs a duration (2ms)";
        } else if (a.starts_with("-") && a != "-") {
            return fmt::format("unknown option '{}'", a);
        } else if (o.dir.empty()) {
            o.dir = a;
        } else {
            return fmt::format("one trace directory expected, got '{}' and '{}'", o.dir, a);
        }
    }
    const bool live = !o.live_urls.empty();
    if (live && !o.dir.empty()) return fmt::format("--live reads a relay's session, not a directory ('{}')", o.dir);
    if (o.json_stream && !live) return "--json-stream needs --live";
    if (live && (o.json_stream || o.events_out == "-") && o.json_out == "-")
        return "--json - and the live findings cannot both write to stdout";
    if (o.dir.empty() && !live) return "no trace directory given";
    if (o.json_out == "-" && o.events_out == "-") return "--json and --events cannot both write to stdout";
    return "";
}

// Set by SIGINT during a live read: the read stops and the outputs are written. A signal handler can only reach
// a global.
std::atomic<bool> g_live_interrupted{false};

// Prints the live findings of an analysis as they become known, at most every kLiveTickMs.
class LiveReporter {
public:
    LiveReporter(Analysis& a, bool json) : a_(a), json_(json) {}
    void poll(bool now = false) {
        const int64_t t = wall_ns();
        if (!now && t - last_ < int64_t{kLiveTickMs} * 1'000'000) return;
        last_ = t;
        for (const LiveFinding& f : a_.new_live_findings()) {
            const int64_t latency = t - f.event_ns;
            if (json_) {
                nlohmann::json j = f.finding;
                j["event_unix_ns"] = f.event_ns;
                j["reported_unix_ns"] = t;
                j["report_latency_ns"] = latency;
                fmt::print("{}\n", json_text(j));
            } else {
                fmt::print("[live] {} {} at {}, reported {} later: {}\n", f.finding["severity"].get<std::string>(),
                           f.finding["kind"].get<std::string>(), utc_time(f.event_ns),
                           format_ns(static_cast<double>(latency)), f.finding["summary"].get<std::string>());
            }
            std::fflush(stdout);
        }
    }

private:
    static int64_t wall_ns() {
        timespec ts{};
        clock_gettime(CLOCK_REALTIME, &ts);
        return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
    }
    static std::string utc_time(int64_t ns) {
        const time_t secs = static_cast<time_t>(ns / 1'000'000'000);
        tm t{};
        gmtime_r(&secs, &t);
        return fmt::format("{:02}:{:02}:{:02}.{:03} UTC", t.tm_hour, t.tm_min, t.tm_sec, (ns / 1'000'000) % 1000);
    }
    Analysis& a_;
    bool json_;
    int64_t last_ = 0;
};

bool write_file(const std::string& path, const std::string& content, const char* what) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << content;
    f.close();
    if (!f) {
        fmt::print(stderr, "sigmatrace-analyze: Cannot write the {}: path={}\n", what, path);
        return false;
    }
    return true;
}

}  // namespace

int analyze_main(std::span<char* const> args) {
    // Started as several ranks (mpirun, srun) of a build with MPI, under a launcher MPI reaches: the ranks read
    // the trace in shares and rank 0 merges them and writes the outputs (rank_read.h). Otherwise rank 0 does it
    // whole and the others leave at once rather than repeat it and race for the same files; the cores of the
    // ranks placed on rank 0's node are then free: without --jobs, it reads in that many shares.
    const std::optional<launcher::Place> place = launcher::place_in_job(std::getenv);
    std::unique_ptr<RankJob> ranks = place && place->size > 1 ? RankJob::join(place->size) : nullptr;
    if (place && place->rank > 0 && !ranks) return kExitOk;
    CliOptions o;
    bool help = false;
    const std::string parse_error = parse_args(args, o, help);
    // The other ranks answer rank 0's orders (it reports a bad argument, and then has them stop).
    if (ranks && ranks->rank() > 0) return serve_share_orders(*ranks, o.dir, parse_error.empty() && !help, o.analysis);
    if (!parse_error.empty()) {
        fmt::print(stderr, "sigmatrace-analyze: {}\n\n{}", parse_error, kUsage);
        return kExitUsage;
    }
    if (help) {
        fmt::print("{}", kUsage);
        return kExitOk;
    }
    if (ranks) {
        if (!o.quiet)
            fmt::print(stderr,
                       "sigmatrace-analyze: started as rank 0 of {} ({}): the ranks read the trace in shares, one "
                       "each, and this rank merges them and writes the outputs\n",
                       ranks->size(), place->rank_var);
    } else if (place && place->size > 1) {
        const int32_t local = launcher::first_index(std::getenv, launcher::kLocalSizeVars);
        if (!o.jobs_given && local > 1) o.jobs = static_cast<std::size_t>(std::min(local, place->size));
        if (!o.quiet)
            fmt::print(stderr,
                       "sigmatrace-analyze: started as rank 0 of {} ({}): this rank analyzes the whole trace{} and "
                       "the others exit (the analysis is not sharded across ranks)\n",
                       place->size, place->rank_var,
                       o.jobs > 1 && !o.jobs_given
                           ? fmt::format(", in {} shares on threads when it can (--jobs {}: the ranks on its node)", o.jobs, o.jobs)
                           : "");
    }

    // Rules and baseline first: a typo should not cost a long analysis.
    std::vector<Rule> rules;
    bool compares = false;
    for (const std::string& text : o.rules) {
        std::string err;
        auto r = parse_rule(text, err);
        if (!r) {
            fmt::print(stderr, "sigmatrace-analyze: {}\n", err);
            return kExitUsage;
        }
        compares |= r->mode != RuleMode::Absolute;
        rules.push_back(std::move(*r));
    }
    std::optional<nlohmann::json> baseline;
    if (o.baseline) {
        std::ifstream f(*o.baseline);
        if (!f) {
            fmt::print(stderr, "sigmatrace-analyze: Cannot open the baseline: path={}\n", *o.baseline);
            return kExitUsage;
        }
        try {
            baseline = nlohmann::json::parse(f);
        } catch (const std::exception& e) {
            fmt::print(stderr, "sigmatrace-analyze: Cannot parse the baseline: path={}, reason={}\n", *o.baseline, e.what());
            return kExitUsage;
        }
        if (!baseline->is_object() || (baseline->value("schema", "") != kAnalysisSchema &&
                                        baseline->value("schema", "") != kAnalysisSchemaV1)) {
            fmt::print(stderr, "sigmatrace-analyze: The baseline is not a SigmaTrace analysis: path={}, expected schema {}\n",
                       *o.baseline, kAnalysisSchema);
            return kExitUsage;
        }
        if (!compares)
            for (const std::string& text : default_baseline_rules()) {
                std::string err;
                rules.push_back(*parse_rule(text, err));
            }
    }

    // The read and everything after it: in a guarded child (read_guard.h) unless SIGMATRACE_ANALYZE_STALL_S=0.
    const bool live = !o.live_urls.empty();
    PlannedRead planned = live ? PlannedRead{} : plan_read(o.dir);
    // --jobs, or the ranks: shares, unless an output needs every operation in one analysis or the trace cannot
    // be shared. Rank 0 then reads alone, and the others are told to stop at once.
    std::size_t shares = ranks ? static_cast<std::size_t>(ranks->size()) : o.jobs;
    const auto sharers = [&] { return ranks ? fmt::format("{} ranks", shares) : fmt::format("--jobs {}", shares); };
    if (shares > 1) {
        std::string why;
        if (live) why = "--live follows one analysis";
        else if (o.perfetto_out || o.sqlite_out || o.events_out) why = "--perfetto, --sqlite and --events take every operation in one analysis";
        else why = why_not_sharded(planned);
        if (!why.empty()) {
            fmt::print(stderr, "sigmatrace-analyze: {}: reading in one share: {}\n", sharers(), why);
            shares = 1;
            ranks.reset();
        }
    }
    std::vector<uint64_t> share_bytes;   // the ranks' read: what each other rank sent
    const auto analyze = [&](ReadProgress* progress) -> int {
        // A read in shares: the merged analysis, else null (the trace is then read in one, with a note).
        const auto read_in_shares = [&](const AnalysisOptions& options, ReadSummary& read) -> std::unique_ptr<Analysis> {
            if (shares <= 1) return nullptr;
            ShardedRead r = ranks ? read_by_ranks(*ranks, o.dir, planned, options)
                                  : read_sharded(o.dir, planned, options, shares, progress);
            read = std::move(r.summary);
            share_bytes = std::move(r.share_bytes);
            if (!r.analysis && !read.retry) {
                fmt::print(stderr, "sigmatrace-analyze: {}: reading in one share: {}\n", sharers(), r.not_merged);
                shares = 1;
                ranks.reset();
            }
            return std::move(r.analysis);
        };
        // Several hosts: their clocks are estimated by a first read and the second moves their times by it.
        AnalysisOptions options = o.analysis;
        if (!live && options.clock.align && planned_hosts(planned) >= 2) {
            AnalysisOptions first = options;
            first.clock.constraints_only = true;
            ReadSummary read;
            std::unique_ptr<Analysis> clocks = read_in_shares(first, read);
            if (read.retry) return kExitOk;
            if (!clocks) {
                clocks = std::make_unique<Analysis>(first);
                read = read_planned(o.dir, planned, *clocks, nullptr, progress);
            }
            if (read.retry) return kExitOk;
            if (read.fatal) {
                for (const std::string& p : read.problems) fmt::print(stderr, "sigmatrace-analyze: {}\n", p);
                return kExitUsage;
            }
            options.clock.applied = clocks->finish_clocks();
        }
        ReadSummary read;
        std::unique_ptr<Analysis> merged = read_in_shares(options, read);
        ranks.reset();   // no more reads: the other ranks leave while this one finishes
        if (read.retry) return kExitOk;
        const bool read_done = merged != nullptr;
        const std::unique_ptr<Analysis> holder = read_done ? std::move(merged) : std::make_unique<Analysis>(options);
        Analysis& analysis = *holder;
        std::unique_ptr<PerfettoWriter> perfetto;
        std::unique_ptr<PerfettoProtoWriter> perfetto_proto;
        if (o.perfetto_out) {
            const bool json = o.perfetto_format ? *o.perfetto_format == "json" : o.perfetto_out->ends_with(".json");
            bool opened = false;
            if (json) {
                perfetto = std::make_unique<PerfettoWriter>(analysis.topology(), o.perfetto_max_ops);
                opened = perfetto->open(*o.perfetto_out);
                analysis.add_listener(perfetto.get());
            } else {
                perfetto_proto = std::make_unique<PerfettoProtoWriter>(analysis.topology(), o.perfetto_max_ops);
                opened = perfetto_proto->open(*o.perfetto_out);
                analysis.add_listener(perfetto_proto.get());
            }
            if (!opened) {
                fmt::print(stderr, "sigmatrace-analyze: Cannot write the timeline: path={}: {}\n", *o.perfetto_out,
                           std::strerror(errno));
                return kExitUsage;
            }
        }
        // --sqlite: a path it cannot write fails the run (non-zero exit) but not the other outputs.
        std::unique_ptr<SqliteWriter> sqlite;
        bool sqlite_failed = false;
        if (o.sqlite_out) {
            sqlite = std::make_unique<SqliteWriter>(analysis.topology());
            if (sqlite->open(*o.sqlite_out)) {
                analysis.add_listener(sqlite.get());
            } else {
                fmt::print(stderr,
                           "sigmatrace-analyze: Cannot write the SQLite database: path={}, reason={} (is its "
                           "directory there and writable?); the other outputs are still written\n",
                           *o.sqlite_out, sqlite->error());
                sqlite.reset();
                sqlite_failed = true;
            }
        }

        // --events: a file of our own, or stdout (then in place of the text report).
        std::unique_ptr<EventDump> dump;
        if (o.events_out) {
            dump = EventDump::open(*o.events_out);
            if (!dump) {
                fmt::print(stderr, "sigmatrace-analyze: Cannot write the events: path={}: {}\n", *o.events_out,
                           std::strerror(errno));
                return kExitUsage;
            }
        }

        if (read_done) {
            // Read in shares above.
        } else if (live) {
            LiveReporter reporter(analysis, o.json_stream);
            LiveRead follow;
            follow.urls = o.live_urls;
            follow.tick = [&] {
                reporter.poll();
                return !g_live_interrupted.load(std::memory_order_relaxed);
            };
            struct sigaction sa{};
            sa.sa_handler = [](int) { g_live_interrupted.store(true, std::memory_order_relaxed); };
            sigaction(SIGINT, &sa, nullptr);
            std::vector<std::string> session_urls;
            read = read_live(follow, analysis, session_urls);
            reporter.poll(true);
            for (const std::string& u : session_urls) fmt::print(stderr, "sigmatrace-analyze: read live from {}\n", u);
        } else {
            read = read_planned(o.dir, planned, analysis, dump.get(), progress);
        }
        if (read.retry) return kExitOk;  // the guard reads again without the packet at fault
        for (const std::string& p : read.notes) fmt::print(stderr, "sigmatrace-analyze: {}\n", p);
        for (const std::string& p : read.problems) fmt::print(stderr, "sigmatrace-analyze: {}\n", p);
        if (read.fatal) return kExitUsage;
        for (const std::string& p : read.problems) analysis.on_read_problem(p);
        analysis.set_trace_paths(read.trace_dirs);

        nlohmann::json doc = analysis.finish();
        if (read_done) doc["analyzer"]["shares"] = shares;
        if (read_done && !share_bytes.empty()) doc["analyzer"]["share_bytes"] = share_bytes;
        const bool no_events = analysis.events() == 0;
        if (no_events)
            fmt::print(stderr,
                       "sigmatrace-analyze: No SigmaTrace events in the trace: path={}, events={} (all of other "
                       "providers); record with `sigmatrace record -- CMD` (or enable sigmatrace:* in the LTTng "
                       "session) with libsigmatrace.so loaded into CMD\n",
                       o.dir, read.foreign_events);

        // CI rules.
        int status = kExitOk;
        nlohmann::json ci = nlohmann::json::array();
        for (const Rule& r : rules) {
            const RuleResult res = evaluate_rule(r, doc, baseline ? &*baseline : nullptr);
            ci.push_back({{"rule", res.rule}, {"failed", res.failed}, {"details", res.details}});
            if (res.failed) status = kExitRuleFailed;
            fmt::print(stderr, "sigmatrace-analyze: {} rule '{}'", res.failed ? "FAILED" : "passed", res.rule);
            if (res.failed || (res.details.size() == 1 && res.details[0].starts_with("no value")))
                for (const std::string& d : res.details) fmt::print(stderr, "{} {}", &d == &res.details[0] ? ":" : ";", d);
            fmt::print(stderr, "\n");
        }
        if (!rules.empty()) doc["ci"] = {{"rules", ci}, {"failed", status == kExitRuleFailed}};

        bool ok = true;
        if (perfetto || perfetto_proto) {
            const bool closed = perfetto ? perfetto->close() : perfetto_proto->close(&doc);
            if (!closed) fmt::print(stderr, "sigmatrace-analyze: Cannot write the timeline: path={}\n", *o.perfetto_out);
            ok &= closed;
            const uint64_t dropped = perfetto ? perfetto->dropped() : perfetto_proto->dropped();
            if (dropped)
                fmt::print(stderr, "sigmatrace-analyze: The timeline holds {}: path={}\n",
                           perfetto ? perfetto->sampling() : perfetto_proto->sampling(), *o.perfetto_out);
        }
        if (sqlite && !sqlite->close(doc, o.dir)) {
            fmt::print(stderr, "sigmatrace-analyze: Cannot write the SQLite database: path={}, reason={}\n",
                       *o.sqlite_out, sqlite->error());
            sqlite_failed = true;
        }
        ok &= !sqlite_failed;
        if (dump && !dump->finish()) {
            fmt::print(stderr, "sigmatrace-analyze: Cannot write the events: path={}\n", *o.events_out);
            ok = false;
        }
        if (o.html_out) ok &= write_file(*o.html_out, render_html_report(doc, load_charting_library(InstallLayout::from_self().data_dir())), "HTML report");
        const bool json_to_stdout = o.json_out && *o.json_out == "-";
        const bool live_to_stdout = live;   // the live findings went there
        const bool events_to_stdout = o.events_out && *o.events_out == "-";
        if (o.json_out && !json_to_stdout) ok &= write_file(*o.json_out, json_text(doc, 2) + "\n", "JSON document");
        if (json_to_stdout)
            fmt::print("{}\n", json_text(doc, 2));
        else if (!o.quiet && !events_to_stdout && !(live_to_stdout && o.json_stream))
            fmt::print("{}", render_text_report(doc));
        if (!ok) return kExitUsage;
        if (no_events) return kExitNoSigmaTraceEvents;
        return status;
    };
    const double stall_s = stall_seconds_from_env();
    // The ranks' read runs in this process (a forked child cannot talk to the other ranks): it reads pristine
    // traces with the direct reader only, which the guard is not for.
    if (stall_s <= 0 || planned.fatal || live || ranks) return analyze(nullptr);
    return run_guarded(o.dir, planned, stall_s, analyze);
}

}  // namespace sigmatrace::analyzer

namespace sigmatrace::cli {
int cmd_analyze(Args args) { return analyzer::analyze_main(args); }
}  // namespace sigmatrace::cli
