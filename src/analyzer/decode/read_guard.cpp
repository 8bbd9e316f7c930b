#include "analyzer/decode/read_guard.h"

#include <fmt/core.h>

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <new>
#include <optional>
#include <string>
#include <system_error>

namespace sigmatrace::analyzer {

namespace fs = std::filesystem;

namespace {

// Full runs of the analysis (each after a skip), and skips per trace before the whole trace is given up.
constexpr int kMaxRuns = 24;
constexpr int kMaxSkipsPerTrace = 16;
// Memory a read may gain without delivering one message before it counts as stalled (no event needs this).
constexpr uint64_t kRunawayBytes = 256ULL << 20;

double now_s(clockid_t clock) {
    timespec ts{};
    if (clock_gettime(clock, &ts) != 0) return -1;
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The ReadProgress block, in memory a forked child shares with its parent.
struct SharedProgress {
    ReadProgress* p = nullptr;
    SharedProgress() {
        void* m = mmap(nullptr, sizeof(ReadProgress), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) p = new (m) ReadProgress();
    }
    ~SharedProgress() {
        if (p) munmap(p, sizeof(ReadProgress));
    }
    SharedProgress(const SharedProgress&) = delete;
    SharedProgress& operator=(const SharedProgress&) = delete;
};

struct Outcome {
    enum Kind { kExited, kCrashed, kStalled, kReadError, kForkFailed } kind = kExited;
    int status = 0;     // kExited
    int signal = 0;     // kCrashed
    uint32_t phase = 0;
    int32_t trace = -1;
    uint64_t begun = 0, ended = 0;
    std::string error;  // kReadError
    uint64_t runaway_mb = 0;  // kStalled by memory: MiB grown without a message
};

// Runs fn in a child; the watchdog kills it when, while it reads, its progress counter stays still for stall_s
// seconds of its CPU time (CPU, not wall time: a loaded machine slows a read without stalling it), or for
// max(60 s, 12 x stall_s) of wall time (a reader blocked for good).
Outcome run_child(double stall_s, bool retry_errors, const std::function<int(ReadProgress*)>& fn) {
    Outcome out;
    SharedProgress shared;
    if (!shared.p) {
        out.kind = Outcome::kForkFailed;
        return out;
    }
    ReadProgress& prog = *shared.p;
    prog.retry_errors.store(retry_errors ? 1 : 0);
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old);
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, nullptr);
        out.kind = Outcome::kForkFailed;
        return out;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, nullptr);
        // A crash inside Babeltrace reaches the guard as its signal, whatever handler a runtime installed (a
        // sanitizer's reports it and exits 1, which would read as the analysis's own status).
        for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) signal(sig, SIG_DFL);
        const int status = fn(&prog);
        std::fflush(nullptr);
        _exit(status);
    }
    clockid_t cpu_clock{};
    const bool have_cpu = clock_getcpuclockid(pid, &cpu_clock) == 0;
    const double wall_limit = std::max(60.0, 12 * stall_s);
    const long page = sysconf(_SC_PAGESIZE);
    const std::string statm = fmt::format("/proc/{}/statm", pid);
    const auto rss = [&]() -> uint64_t {
        std::FILE* f = std::fopen(statm.c_str(), "r");
        if (!f) return 0;
        unsigned long long size = 0, resident = 0;
        const int n = std::fscanf(f, "%llu %llu", &size, &resident);
        std::fclose(f);
        return n == 2 ? resident * static_cast<uint64_t>(page) : 0;
    };
    uint64_t rss_mark = 0;
    uint64_t last_beats = ~0ULL;
    uint32_t last_phase = ~0U;
    double cpu_mark = 0, wall_mark = now_s(CLOCK_MONOTONIC);
    int wstatus = 0;
    bool stalled = false;
    for (;;) {
        const timespec tick{0, 100'000'000};
        sigtimedwait(&chld, nullptr, &tick);
        const pid_t r = waitpid(pid, &wstatus, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) break;
        const uint32_t phase = prog.phase.load(std::memory_order_relaxed);
        const uint64_t beats = prog.beats.load(std::memory_order_relaxed);
        const double cpu = have_cpu ? now_s(cpu_clock) : 0;
        const double wall = now_s(CLOCK_MONOTONIC);
        const bool reading = phase == ReadProgress::kOpening || phase == ReadProgress::kReading;
        if (!reading || beats != last_beats || phase != last_phase) {
            last_beats = beats;
            last_phase = phase;
            cpu_mark = cpu;
            wall_mark = wall;
            rss_mark = reading ? rss() : 0;
            continue;
        }
        // A damaged sequence length makes Babeltrace build millions of fields for one event: memory grows, often
        // faster than the CPU clock (page faults under memory pressure), with no message read.
        const uint64_t now_rss = rss();
        const bool runaway = now_rss > rss_mark + kRunawayBytes;
        if (runaway || (have_cpu && cpu >= 0 && cpu - cpu_mark >= stall_s) || wall - wall_mark >= wall_limit) {
            out.runaway_mb = runaway ? (now_rss - rss_mark) >> 20 : 0;
            kill(pid, SIGKILL);
            while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
            }
            stalled = true;
            break;
        }
    }
    sigprocmask(SIG_SETMASK, &old, nullptr);
    out.phase = prog.phase.load();
    out.trace = prog.trace.load();
    out.begun = prog.packets_begun.load();
    out.ended = prog.packets_ended.load();
    if (stalled) {
        out.kind = Outcome::kStalled;
    } else if (WIFSIGNALED(wstatus)) {
        out.kind = Outcome::kCrashed;
        out.signal = WTERMSIG(wstatus);
    } else if (prog.read_error.load()) {
        out.kind = Outcome::kReadError;
        out.error.assign(prog.error, strnlen(prog.error, sizeof prog.error));
    } else {
        out.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 2;
    }
    return out;
}

std::string what_happened(const Outcome& o, double stall_s) {
    switch (o.kind) {
    case Outcome::kCrashed:
        return fmt::format("Babeltrace's CTF reader crashed on it (signal {}, {})", o.signal, strsignal(o.signal));
    case Outcome::kStalled:
        if (o.runaway_mb)
            return fmt::format("Babeltrace's CTF reader allocated {} MiB on it without reading a message", o.runaway_mb);
        return fmt::format("Babeltrace's CTF reader made no progress on it for {} s of CPU time", stall_s);
    case Outcome::kReadError: return fmt::format("Babeltrace's CTF reader failed on it: {}", o.error);
    default: return "unknown";
    }
}

// A read of `dir` (metadata and one stream file) by probe_stream in a child: whether it fails, and how.
struct Probe {
    bool failed = false;
    Outcome o;
};
Probe probe(const fs::path& dir, double stall_s) {
    Probe p;
    p.o = run_child(stall_s, false, [&](ReadProgress* prog) { return probe_stream(dir, *prog) ? 0 : 3; });
    p.failed = p.o.kind == Outcome::kCrashed || p.o.kind == Outcome::kStalled ||
               (p.o.kind == Outcome::kExited && p.o.status == 3);
    return p;
}

// Reads each stream file of the plan alone; in the first whose read fails, halves the packets still suspect
// (those after the last one Babeltrace delivered whole: messages reach the sink in batches, so the last packet
// announced is not necessarily the one being decoded) until one packet is left, which the plan then leaves out.
// False when no stream file fails alone.
bool localize(PlannedRead& planned, double stall_s, const std::string& full_run_what, std::vector<int>& skips) {
    ReadPlan& plan = planned.plan;
    for (std::size_t ti = 0; ti < plan.traces.size(); ++ti) {
        TracePlan& t = plan.traces[ti];
        if (!t.readable) continue;
        for (StreamPlan& s : t.streams) {
            if (s.excluded) continue;
            std::string templ = (fs::temp_directory_path() / "sigmatrace-probe.XXXXXX").string();
            if (mkdtemp(templ.data()) == nullptr) return false;
            const fs::path dir(templ);
            const fs::path file = dir / s.file.filename();
            std::error_code ec;
            fs::create_symlink(fs::absolute(t.dir / "metadata"), dir / "metadata", ec);
            fs::create_symlink(fs::absolute(t.materialized / s.file.filename()), file, ec);
            const Probe whole = probe(dir, stall_s);
            if (!whole.failed) {
                fs::remove_all(dir, ec);
                continue;
            }
            const auto describe = [&](const Probe& p) {
                return p.o.kind == Outcome::kExited ? (p.o.kind == Outcome::kExited && p.o.status == 3 && *p.o.error.c_str()
                                                           ? "Babeltrace's CTF reader failed on it: " + p.o.error
                                                           : full_run_what)
                                                    : what_happened(p.o, stall_s);
            };
            std::string what = describe(whole);
            // The read of packets [from, end) of the stream alone; nullopt when they could not be written.
            const auto probe_packets = [&](std::size_t from, std::size_t end) -> std::optional<Probe> {
                fs::remove(file, ec);
                const std::vector<PacketRange> part(s.packets.begin() + static_cast<std::ptrdiff_t>(from),
                                                    s.packets.begin() + static_cast<std::ptrdiff_t>(end));
                if (!write_packets(s.file, part, file)) return std::nullopt;
                return probe(dir, stall_s);
            };
            const auto fails = [&](std::size_t from, std::size_t end) {
                const std::optional<Probe> p = probe_packets(from, end);
                return p && p->failed;
            };
            std::size_t bad = 0;
            if (s.layout_known && !s.packets.empty()) {
                const std::size_t n = s.packets.size();
                std::size_t lo = std::min<std::size_t>(whole.o.ended, n - 1), hi = n;
                while (hi - lo > 1) {
                    const std::size_t mid = lo + (hi - lo) / 2;
                    const std::optional<Probe> part = probe_packets(lo, mid);
                    if (!part) break;
                    const Probe& p = *part;
                    if (p.failed) {
                        hi = mid;
                        what = describe(p);
                    } else {
                        lo = mid;
                    }
                }
                bad = lo;
                const std::size_t first = std::min<std::size_t>(whole.o.ended, n - 1);
                // Babeltrace 2.0.4 can carry a damaged packet's decoding state into the next ones and fail only at
                // the end of the file: the halving then lands on an innocent packet. Keep it only when the
                // packets from the first suspect up to it fail and without it pass.
                if (whole.o.kind == Outcome::kExited) {
                    const auto fails_up_to = [&](std::size_t end) { return end > first && fails(first, end); };
                    if (!fails_up_to(bad + 1) || fails_up_to(bad)) {
                        fs::remove_all(dir, ec);
                        return false;
                    }
                }
                // It also reads an event that overruns a damaged packet's content on into the next packet, and
                // fails, crashes or runs away there: when the packet found reads well alone, the damage is in the
                // nearest earlier packet that makes it fail. Leaving out the innocent one would move the failure
                // to the packet after it, one run per packet.
                if (bad > first && !fails(bad, bad + 1)) {
                    std::size_t from = bad;
                    while (from > first && !fails(from - 1, bad + 1)) --from;
                    if (from > first) bad = from - 1;   // else no earlier packet makes it fail: the one found stays
                }
            }
            fs::remove_all(dir, ec);
            plan.skip_packet(t, s, bad, what);
            if (++skips[ti] > kMaxSkipsPerTrace)
                plan.skip_trace(t, fmt::format("Babeltrace's CTF reader fails on more than {} of its packets (damaged "
                                               "metadata?)", kMaxSkipsPerTrace));
            return true;
        }
    }
    return false;
}

}  // namespace

double stall_seconds_from_env() {
    constexpr double kDefault = 5;
    const char* v = std::getenv("SIGMATRACE_ANALYZE_STALL_S");
    if (v == nullptr || *v == '\0') return kDefault;
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(s >= 0) || s > 86400) {
        fmt::print(stderr, "sigmatrace-analyze: Ignoring SIGMATRACE_ANALYZE_STALL_S={}: expected seconds (0..86400)\n", v);
        return kDefault;
    }
    return s;
}

int run_guarded(const fs::path& root, PlannedRead& planned, double stall_s, const std::function<int(ReadProgress*)>& body) {
    load_babeltrace_plugins();   // once, here: every run and probe below is a forked child
    std::vector<int> skips(planned.plan.traces.size(), 0);
    bool give_up_on_errors = false;
    for (int run = 0;; ++run) {
        if (!planned.plan.materialize()) return body(nullptr);  // reports the scratch problem, reads nothing more
        if (run > kMaxRuns + 2 * kMaxSkipsPerTrace * static_cast<int>(skips.size())) {
            fmt::print(stderr, "sigmatrace-analyze: Cannot read the trace: path={}, reason=Babeltrace's CTF reader kept "
                               "failing after {} runs without the packets at fault\n", root.string(), run);
            return 2;
        }
        // The last run keeps today's unguarded behaviour on a read error: stop there, keep what was read.
        const bool last = give_up_on_errors || run + 1 >= kMaxRuns;
        const Outcome o = run_child(stall_s, !last, body);
        if (o.kind == Outcome::kForkFailed) return body(nullptr);  // no guard possible: read in-process
        if (o.kind == Outcome::kExited) return o.status;
        const bool opening = o.phase == ReadProgress::kOpening || o.phase == ReadProgress::kStarting;
        if (o.kind == Outcome::kCrashed && o.phase == ReadProgress::kAnalyzing) {
            // The analysis itself failed after its read ended: not the trace's doing; fail as it did.
            std::fflush(nullptr);
            signal(o.signal, SIG_DFL);
            raise(o.signal);
            return 2;
        }
        const std::string what = what_happened(o, stall_s);
        if (opening && o.trace >= 0 && static_cast<std::size_t>(o.trace) < planned.plan.traces.size()) {
            planned.plan.skip_trace(planned.plan.traces[static_cast<std::size_t>(o.trace)],
                                    what + " while opening it (metadata or stream index)");
            continue;
        }
        if (!localize(planned, stall_s, what, skips)) {
            if (o.kind == Outcome::kReadError) {
                // No packet shown to be at fault: the next run stops at the error and keeps what it read.
                give_up_on_errors = true;
                continue;
            }
            // Nothing fails alone (the streams fail only together, or in the muxer): the traces are given up.
            for (TracePlan& t : planned.plan.traces)
                if (t.readable) planned.plan.skip_trace(t, what + "; no stream file fails alone");
        }
    }
}

}  // namespace sigmatrace::analyzer
