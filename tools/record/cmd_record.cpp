// sigmatrace record: run a command under the tracer and leave an LTTng trace of its RDMA operations.
//
//   1. parse the command line; find libsigmatrace.so next to this binary (InstallLayout);
//   2. use the user's lttng-sessiond, or start a private one (lttng_control.h);
//   3. create a session: per-uid channel sized by --channel-size, vpid/vtid/procname contexts, sigmatrace:*;
//   4. run the command with libsigmatrace.so preloaded (traced_environment.h), its launcher told to forward the
//      tracer's variables to remote ranks (rank_forwarding.h), and wait for it;
//   5. stop (waits until all data is in the trace), report the trace path and the discarded-event count,
//      destroy the session, stop a private daemon;
//   6. exit with the command's status.
// Anything that prevents tracing is reported and, before the command runs, stops the recording: a command is
// never run "traced" when it would not be.
#include <dlfcn.h>
#include <fmt/core.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/install_layout.h"
#include "record/crash_recovery.h"
#include "record/job_session.h"
#include "record/lttng_control.h"
#include "record/process_report.h"
#include "record/rank_forwarding.h"
#include "record/record_options.h"
#include "record/subprocess.h"
#include "record/tmpfs_dir.h"
#include "record/traced_environment.h"
#include "sigmatrace/commands.h"

namespace sigmatrace::cli {
namespace {

namespace fs = std::filesystem;
using namespace sigmatrace::record;

constexpr int kUsageError = 2;

void error(const std::string& msg) {
    fmt::print(stderr, "sigmatrace record: error: {}\n", msg);
}

std::string host_name() {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) != 0 || name[0] == 0) return "localhost";
    return name;
}

std::string default_output_dir() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    fs::path base = fs::current_path() / (std::string("sigmatrace-") + stamp);
    fs::path p = base;
    for (int i = 1; fs::exists(p); ++i) p = base.string() + "-" + std::to_string(i);
    return p.string();
}

// The output directory as an absolute path, or an error when it holds something already (traces from two
// recordings mixed in one directory cannot be told apart). `*existed`: whether it was there before (then it is
// the user's, and stays even when nothing is recorded into it).
std::string prepare_output(const std::string& requested, std::string* out, bool* existed) {
    std::error_code ec;
    const fs::path p = requested.empty() ? fs::path(default_output_dir()) : fs::absolute(requested, ec);
    if (ec) return "Cannot use the output directory: path=" + requested + ", reason=" + ec.message();
    *existed = fs::exists(p, ec);
    if (*existed && !(fs::is_directory(p, ec) && fs::is_empty(p, ec)))
        return "Cannot record into " + p.string() + ": it exists and is not an empty directory; choose another -o DIR";
    *out = p.lexically_normal().string();
    return "";
}

// Whether any traced process registered: per-uid (or per-pid) buffers leave a CTF metadata file.
bool trace_has_data(const std::string& dir) {
    // A session rotated while it recorded (SIGUSR1) keeps its data in chunk directories (archives/...), each
    // with a ust/ folder of its own.
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->path().filename() == "metadata" && it->path().string().find("/ust/") != std::string::npos) return true;
    return false;
}

// Whether ended processes left records in their rings. Processes that end with their rings empty remove their
// files: usually nothing is left to salvage, and no salvaging process (an lttng-ust registration) is started.
bool rings_left(const TmpfsDir& dir) {
    if (dir.path().empty()) return false;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir.path(), ec))
        if (e.path().filename().string().rfind("ring-", 0) == 0) return true;
    return false;
}

// Runs the salvage step in a process of its own (libsigmatrace.so preloaded, not identifying itself: it is no
// process of the command) while the session records, and reports what it did. `avoid_cpus`: CPUs whose
// buffers take no more events (crash_recovery.h); the salvage runs on the others.
void salvage_rings(const TmpfsDir& dir, Environment env, const std::vector<int>& avoid_cpus) {
    std::error_code ec;
    env = without(without(std::move(env), "SIGMATRACE_RECORD_REPORT"), "SIGMATRACE_SALVAGE_DIR");
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    std::vector<std::string> argv = {self.string(), std::string(kSalvageVerb), dir.path()};
    if (!avoid_cpus.empty()) {
        cpu_set_t set;
        CPU_ZERO(&set);
        std::string cpus;
        if (sched_getaffinity(0, sizeof set, &set) == 0)
            for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
                if (CPU_ISSET(cpu, &set) && std::find(avoid_cpus.begin(), avoid_cpus.end(), cpu) == avoid_cpus.end())
                    cpus += (cpus.empty() ? "" : ",") + std::to_string(cpu);
        if (cpus.empty())
            error("every CPU's LTTng buffer is stalled by a killed process: the salvaged records may not reach the "
                  "trace");
        else
            argv.push_back("--cpus=" + cpus);
    }
    const Captured c = run_captured(argv, env);
    // Its counts are its last line (lttng-ust may have said something before).
    std::string line = c.trimmed_output();
    if (const size_t nl = line.rfind('\n'); nl != std::string::npos) line = line.substr(nl + 1);
    unsigned long long records = 0, lost = 0;
    unsigned processes = 0, live = 0, unreadable = 0;
    if (c.status != 0 || std::sscanf(line.c_str(), "records=%llu processes=%u lost=%llu live=%u unreadable=%u", &records,
                                     &processes, &lost, &live, &unreadable) != 5) {
        error("cannot salvage the records that ended processes left in their rings (" + line +
              "); records of processes that ended by _exit or a kill may be missing from the trace");
        return;
    }
    if (records != 0 || lost != 0)
        fmt::print(stderr, "sigmatrace record: salvaged {} records that {} process(es) left unemitted (ended by _exit, "
                           "a kill, or after their tracer shut down)\n", records, processes);
    if (lost != 0)
        error(fmt::format("{} captured records could not be salvaged (a post interrupted inside the provider's call, or "
                          "a damaged ring): the trace is incomplete, and the analyzer says so", lost));
    if (live != 0)
        fmt::print(stderr, "sigmatrace record: warning: {} ring(s) of processes still running after the command were "
                           "not salvaged: their last records may be missing\n", live);
}

}  // namespace

// `sigmatrace salvage-rings DIR`: see salvage_rings above. Prints one line of counts.
int cmd_salvage_rings(Args args) {
    constexpr std::string_view kCpus = "--cpus=";
    if (args.empty() || args.size() > 2 || (args.size() == 2 && std::string_view(args[1]).rfind(kCpus, 0) != 0)) {
        fmt::print(stderr, "usage: sigmatrace {} DIR [--cpus=N,N...] (internal: run by sigmatrace record)\n",
                   kSalvageVerb);
        return 2;
    }
    if (args.size() == 2) {
        // The salvaged events are written to the buffers of the CPU that runs this process.
        cpu_set_t set;
        CPU_ZERO(&set);
        for (std::string_view rest = std::string_view(args[1]).substr(kCpus.size()); !rest.empty();) {
            const auto comma = rest.find(',');
            const std::string item(rest.substr(0, comma));
            rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
            int cpu = -1;
            const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), cpu);
            if (ec != std::errc() || end != item.data() + item.size() || cpu < 0 || cpu >= CPU_SETSIZE) {
                fmt::print(stderr, "sigmatrace {}: {}: '{}' is not a CPU number (0 to {})\n", kSalvageVerb, args[1], item,
                           CPU_SETSIZE - 1);
                return 2;
            }
            CPU_SET(cpu, &set);
        }
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            fmt::print(stderr, "sigmatrace {}: cannot run on CPUs {}: {}\n", kSalvageVerb, args[1], std::strerror(errno));
    }
    using Salvage = int (*)(const char*, char*, size_t);
    auto fn = reinterpret_cast<Salvage>(dlsym(RTLD_DEFAULT, "sigmatrace_salvage_rings"));
    if (fn == nullptr) {
        fmt::print("error=libsigmatrace.so is not preloaded\n");
        return 1;
    }
    char out[256] = {};
    const int rc = fn(args[0], out, sizeof out);
    fmt::print("{}\n", out);
    return rc;
}

int cmd_record(Args args) {
    std::vector<std::string_view> argv(args.begin(), args.end());
    RecordOptions opt;
    if (std::string e = parse_record_args(argv, &opt); !e.empty()) {
        error(e);
        fmt::print(stderr, "\n{}", kRecordUsage);
        return kUsageError;
    }
    if (opt.help) {
        fmt::print("{}", kRecordUsage);
        return 0;
    }

    const fs::path library = InstallLayout::from_self().preload_library();
    if (access(library.c_str(), R_OK) != 0) {
        error("Cannot find the tracer library: path=" + library.string() +
              " (it is installed beside bin/sigmatrace, in lib/; reinstall SigmaTrace)");
        return kUsageError;
    }
    std::string daemon_error;
    std::unique_ptr<SessionDaemon> daemon = SessionDaemon::acquire(&daemon_error);
    if (!daemon) {
        error(daemon_error + "; the command was not run");
        return kUsageError;
    }
    // A rank of a job records into its host's shared session (job_session.h); with a private daemon, which no
    // other rank sees, it records alone.
    const std::optional<std::string> job = daemon->is_private() ? std::nullopt : job_key(current_environment());
    std::string output;
    bool output_existed = false;
    auto prepare = [&]() -> bool {
        if (!opt.relay_url.empty()) return true;
        std::string requested = opt.output;
        // Every host's ranks write a trace of their own: DIR/HOST, as lttng-relayd files them.
        if (job) requested = (fs::path(requested.empty() ? default_output_dir() : requested) / host_name()).string();
        if (std::string e = prepare_output(requested, &output, &output_existed); !e.empty()) {
            error(e);
            return false;
        }
        // The hosts of a job start their sessions at the same moment, each making DIR/HOST; lttng-sessiond makes
        // missing parents by looking first and then creating, and fails ("Create directory failed") when another
        // host's daemon made DIR in between. DIR is made here, where a directory that already exists is no error.
        if (job) {
            std::error_code ec;
            const fs::path parent = fs::path(output).parent_path();
            fs::create_directories(parent, ec);
            if (ec) {
                error("Cannot create the output directory " + parent.string() + ": " + ec.message());
                return false;
            }
        }
        return true;
    };
    if (!job && !prepare()) return kUsageError;

    // Where traced processes say whether their events reach the session (process_report.h).
    const ReportFile report_file;
    const TmpfsDir salvage_dir("sigmatrace-rings");
    if (!report_file.error().empty())
        fmt::print(stderr, "sigmatrace record: warning: {}; processes that cannot be traced will not be listed\n",
                   report_file.error());
    int status = 0;
    bool traced_something = true;
    bool last_of_job = true;   // this process closes the session (always, outside a job)
    size_t job_others = 0;     // ranks still recording into the job's session when this one left
    std::optional<RecordingSession::Loss> loss;
    std::string loss_error;
    std::string spawn_error;  // the command could not be started at all
    {
        RecordingSession session(*daemon, job ? "sigmatrace-" + *job : std::string());
        ChannelSettings channel;
        channel.subbuffer_size = subbuffer_size(opt.channel_size);
        channel.subbuffers = kSubBuffers;
        channel.blocking = opt.blocking;
        // The ring buffers as files, for recovery (crash_recovery.h): a local trace of one recording only (a
        // relay's trace is on another machine; a job's session outlives this process), and only on tmpfs (on a
        // disk every event would be written twice).
        const TmpfsDir buffers_dir("sigmatrace-buffers",
                                   opt.relay_url.empty() && !job ? TmpfsDir::tmpfs_only : TmpfsDir::none);
        bool started_here = false;   // this process created the session (not another rank of its job)
        if (job) {
            std::string e;
            std::optional<LockedJobFile> file = LockedJobFile::open(daemon->run_dir(), *job, &e);
            if (!file) {
                error(e + "; the command was not run");
                return kUsageError;
            }
            JobMembers members = file->read();
            members.prune(process_alive);
            if (!session.exists()) {
                if (!prepare()) return kUsageError;
                if (std::string e2 = session.start(output, opt.relay_url, channel); !e2.empty()) {
                    error(e2 + "; the command was not run");
                    return kUsageError;
                }
                members.output = output;
                members.members.clear();
                started_here = true;
            } else {
                output = members.output;
                output_existed = true;  // another rank made it
            }
            members.members.push_back(getpid());
            if (std::string e2 = file->write(members); !e2.empty()) error(e2);
        } else if (std::string e = session.start(output, opt.relay_url, channel, buffers_dir.path()); !e.empty()) {
            error(e + "; the command was not run");
            return kUsageError;
        } else {
            started_here = true;
        }
        if (const std::string live = live_url_of(opt.relay_url, host_name(), session.name()); started_here && !live.empty())
            fmt::print(stderr, "sigmatrace record: streaming session {} to {}; follow it live with `sigmatrace-analyze "
                       "--live {}`\n", session.name(), opt.relay_url, live);

        TraceSetup setup;
        setup.preload_library = library.string();
        setup.mode = opt.mode;
        setup.blocking = opt.blocking;
        setup.report_file = report_file.path();
        setup.salvage_dir = salvage_dir.path();
        const Environment env = traced_environment(current_environment(), setup);
        std::string launcher_path;
        const Launcher launcher = identify_launcher(opt.command.front(), env, &launcher_path);
        const LaunchPlan plan =
            forward_to_ranks(opt.command, env, rank_variables(env), launcher,
                             launcher == Launcher::open_mpi ? env_list_from_param_files(env, launcher_path) : "");
        if (launcher != Launcher::other)
            fmt::print(stderr, "sigmatrace record: ranks on other machines get the tracer's variables: {}\n", plan.how);
        // SIGUSR1 makes what was recorded so far readable without stopping the command (a hung job:
        // docs/interpose.md, "A job that hangs").
        status = run_foreground(plan.command, plan.env, &spawn_error, [&session] {
            bool ok = false;
            const std::string said = session.rotate(&ok);
            if (ok)
                fmt::print(stderr, "sigmatrace record: rotated: {}\n", said);
            else
                error(said);
        });
        if (!spawn_error.empty()) error(spawn_error);
        if (!opt.relay_url.empty())
            if (std::string why = relay_unreachable(opt.relay_url); !why.empty())
                error("lttng-relayd at " + opt.relay_url + " went away during the recording (" + why +
                      "): what it received before stays in its output, events recorded after are NOT in the trace "
                      "(LTTng drops what it cannot send)");

        // The job's other ranks on this host may still record: then only what this rank's processes left in
        // their rings is added, and the session goes on.
        std::optional<LockedJobFile> file;
        if (job) {
            std::string e;
            file = LockedJobFile::open(daemon->run_dir(), *job, &e);
            if (!file) error(e + "; this rank leaves the session as if it were the last");
            JobMembers members = file ? file->read() : JobMembers{};
            std::erase(members.members, getpid());
            members.prune(process_alive);
            job_others = members.members.size();
            last_of_job = job_others == 0;
            if (file)
                if (std::string e2 = file->write(members); !e2.empty()) error(e2);
            if (last_of_job)
                session.adopt();
            else
                session.release();
        }
        if (!last_of_job) {
            if (rings_left(salvage_dir)) salvage_rings(salvage_dir, env, {});
        } else {
            // Stopped before the salvage, so that what LTTng cannot deliver is known (and recovered) first, and the
            // salvaged records go to the CPUs whose buffers still take events.
            if (std::string e = session.stop(); !e.empty()) error(e);
            Recovery recovery;
            if (!buffers_dir.path().empty()) {
                timespec now{};
                clock_gettime(CLOCK_MONOTONIC, &now);
                const uint64_t stop_ns = static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec);
                recovery = recover_undelivered(buffers_dir.path(), output, stop_ns, daemon->tool_environment());
                if (!recovery.error.empty())
                    error("cannot recover what LTTng left undelivered in its buffers: " + recovery.error);
                if (!recovery.where.empty()) {
                    fmt::print(stderr,
                               "sigmatrace record: recovered {} packet(s), {} bytes, that LTTng could not deliver (a "
                               "process killed while writing an event stalls its CPU's buffer): {}\n",
                               recovery.packets, recovery.bytes, recovery.where);
                    session.destroy_without_waiting();
                    daemon->expect_stuck();
                }
            }
            if (rings_left(salvage_dir)) {
                if (std::string e = session.restart(); !e.empty()) {
                    error(e + "; the records ended processes left unemitted are not in the trace");
                } else {
                    salvage_rings(salvage_dir, env, recovery.stalled_cpus);
                    if (std::string e2 = session.stop(); !e2.empty()) error(e2);
                }
            }
            loss = session.loss(&loss_error);
            // Destroyed while the job file is locked: a rank arriving now creates a new session instead of
            // joining one that goes away.
            session.destroy();
        }
    }  // the session is destroyed here (when this process closes it); the trace is then complete

    bool output_removed = false;
    if (!last_of_job) {
        fmt::print(stderr,
                   "sigmatrace record: this rank's events are in the host's session sigmatrace-{} ({} other rank(s) "
                   "still recording; the last one closes it and reports the trace)\n",
                   *job, job_others);
    } else if (opt.relay_url.empty()) {
        traced_something = trace_has_data(output);
        // A command that never started leaves a directory with no trace in it: if this recording created it,
        // it goes (a directory the user made stays: it may be a mount point or carry permissions they chose).
        if (!traced_something && !spawn_error.empty() && !output_existed) {
            std::error_code ec;
            fs::remove_all(output, ec);
            output_removed = !ec;
        }
        if (!output_removed) fmt::print(stderr, "sigmatrace record: trace: {}\n", output);
    } else {
        fmt::print(stderr, "sigmatrace record: trace sent to the relay at {}\n", opt.relay_url);
    }
    if (!last_of_job) {
        // The session's loss is known once it stops: its last rank reports it.
    } else if (loss) {
        fmt::print(stderr, "sigmatrace record: discarded events: {}\n", loss->discarded_events());
        if (loss->data.any())
            fmt::print(stderr,
                       "sigmatrace record: warning: {} events were discarded ({} packets lost) because the ring "
                       "buffers were full; record again with a larger --channel-size (now {} MiB per CPU) or with "
                       "--blocking\n",
                       loss->data.events, loss->data.packets, opt.channel_size >> 20);
        if (loss->setup.any())
            fmt::print(stderr,
                       "sigmatrace record: warning: {} set-up events were discarded ({} packets lost): a burst of "
                       "object creations filled the set-up channel ({}, {} x {} KiB per CPU, not sized by "
                       "--channel-size), and the analysis may not know the objects they described; record again "
                       "with --blocking\n",
                       loss->setup.events, loss->setup.packets, kSetupChannelName, kSetupSubbuffers,
                       kSetupSubbufferSize >> 10);
    } else {
        error(loss_error);
    }
    // Tracing starts in a process at its first RDMA use: processes that never touch RDMA are not in the trace.
    const ProcessReport report = report_file.read();
    const int traced = report.traced + static_cast<int>(report.partial.size());
    if (!report_file.path().empty()) fmt::print(stderr, "sigmatrace record: traced processes: {}\n", traced);
    for (const std::string& p : report.not_traced) error("a process used RDMA but is NOT in the trace: " + p);
    for (const std::string& p : report.partial) error("a process's trace may be INCOMPLETE: " + p);
    if (!last_of_job) {
        // Whether the host's trace holds anything is for its last rank to say.
    } else if (!traced_something && traced > 0)
        error(std::to_string(traced) + " process(es) started tracing, but the trace is empty");
    else if (!traced_something && !spawn_error.empty())
        fmt::print(stderr, "sigmatrace record: note: the trace is empty: the command did not start{}\n",
                   output_removed ? fmt::format(" (its directory {} was removed)", output) : std::string());
    else if (!traced_something && report.not_traced.empty())
        fmt::print(stderr,
                   "sigmatrace record: note: the trace is empty: no process of the command used RDMA through the "
                   "tracer (a statically linked program, or one {} cannot be preloaded into, is not seen: ld.so "
                   "prints why)\n",
                   library.string());
    return status;
}

}  // namespace sigmatrace::cli
