// The environment the recorded command runs with: what makes every process it starts load the tracer and
// register with the session daemon.
#pragma once

#include <string>
#include <vector>

#include "record/subprocess.h"

namespace sigmatrace::record {

#ifdef SIGMATRACE_SANITIZER_PRELOAD
inline constexpr const char* kSanitizerRuntime = SIGMATRACE_SANITIZER_PRELOAD;
#else
inline constexpr const char* kSanitizerRuntime = "";
#endif

struct TraceSetup {
    std::string preload_library;  // absolute path of libsigmatrace.so
    // The sanitizer runtime libsigmatrace.so was built with ("" normally): a sanitizer build's tracer can only
    // be preloaded into ordinary programs (mpirun, perftest, /bin/sh) when that runtime comes first.
    std::string sanitizer_runtime = kSanitizerRuntime;
    std::string mode;             // SIGMATRACE_MODE to force ("" keeps the caller's)
    bool blocking = false;        // LTTNG_UST_ALLOW_BLOCKING=1 (the channel has an infinite blocking timeout)
    std::string report_file;      // SIGMATRACE_RECORD_REPORT ("" leaves it unset): see process_report.h
    std::string salvage_dir;      // SIGMATRACE_SALVAGE_DIR ("" leaves it unset): rings in files, salvaged after
};

// How long a starting process waits for its registration with the session daemon before it runs on, in ms.
// lttng's default (3 s) can be exceeded when many ranks start at once on a small machine, and the events a
// process emits before it is registered are lost; 30 s bounds the wait should a daemon be wedged.
inline constexpr const char* kRegisterTimeoutMs = "30000";

// `base` plus:
//   LD_PRELOAD                 libsigmatrace.so appended (after an existing entry such as a sanitizer runtime,
//                              which must stay first); not added twice. In a sanitizer build, that build's
//                              runtime first (and ASAN_OPTIONS gets detect_leaks=0 unless set: leaks of the
//                              uninstrumented programs it is loaded into are not ours to report, and would
//                              change their exit status; TSAN_OPTIONS gets die_after_fork=0: lttng-ust
//                              starts threads again in a forked child)
//   LTTNG_UST_REGISTER_TIMEOUT kRegisterTimeoutMs unless the caller set one
//   LTTNG_UST_WITHOUT_BADDR_STATEDUMP / _PROCNAME_STATEDUMP = 1 unless set: the state dumps cost start-up
//                              time and their events are not recorded
//   LTTNG_UST_ALLOW_BLOCKING   1 with --blocking
//   SIGMATRACE_MODE            the --mode value, when given
//   SIGMATRACE_SALVAGE_DIR     where the processes' deferred-emission rings live as files, when given
//   SIGMATRACE_RECORD_REPORT   the report file, when given (always this recording's: a nested record
//                              replaces its parent's for its own command)
// Local ranks inherit it; rank_forwarding.h makes a launcher forward rank_variables() to ranks elsewhere.
Environment traced_environment(Environment base, const TraceSetup& setup);

// The variables of a traced environment every rank needs: LD_PRELOAD, the lttng-ust ones set above (and
// LTTNG_UST_ALLOW_BLOCKING when set), every SIGMATRACE_*. Never LTTNG_HOME: a private one exists on this node only.
std::vector<std::string> rank_variables(const Environment& traced);

}  // namespace sigmatrace::record
