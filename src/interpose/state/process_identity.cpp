#include "interpose/state/process_identity.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include <sigmatrace/launcher_env.h>

#include "interpose/runtime/config.h"
#include "provider/trace.h"

namespace sigmatrace::interpose {
namespace {

// Whether this process has identified itself, and whether a thread is doing it now (a flag rather than a
// mutex, so that a fork in the middle cannot leave the child with a held lock). Both reset in a forked child.
std::atomic<bool> g_emitted{false};
std::atomic<bool> g_claimed{false};

const char* env(const char* name) {
    return std::getenv(name);
}

}  // namespace

ProcessIdentity read_process_identity(const char* (*get)(const char*)) {
    ProcessIdentity id;
    id.pid = static_cast<int32_t>(getpid());
    id.ppid = static_cast<int32_t>(getppid());
    id.rank = launcher::first_index(get, launcher::kRankVars);
    id.local_rank = launcher::first_index(get, launcher::kLocalRankVars);
    id.world_size = launcher::first_index(get, launcher::kSizeVars);
    id.job_id = launcher::first_string(get, launcher::kJobVars);
    if (const char* node = get("SOFTFABRIC_NODE"); node != nullptr && *node != '\0') {
        id.hostname = node;
    } else {
        char host[HOST_NAME_MAX + 1] = {};
        if (gethostname(host, sizeof host - 1) == 0) id.hostname = host;
    }
    return id;
}

void emit_process_info_once() noexcept {
    if (g_emitted.load(std::memory_order_acquire)) return;
    if (config().mode == Mode::off || !ST_TRACE_ENABLED(process_info)) return;
    bool expected = false;
    if (!g_claimed.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) return;
    const int saved = errno;
    const ProcessIdentity id = read_process_identity(&env);
    st_process_info_rec r{};
    r.schema_version = SIGMATRACE_SCHEMA_VERSION;
    r.schema_minor = SIGMATRACE_SCHEMA_MINOR;
    r.pid = id.pid;
    r.ppid = id.ppid;
    r.rank = id.rank;
    r.local_rank = id.local_rank;
    r.world_size = id.world_size;
    r.mode = config().mode == Mode::counters ? 1u : 0u;
    r.redact = config().redact;
    r.hostname = id.hostname.c_str();
    r.job_id = id.job_id.c_str();
    // Deferred: the bound on how far a data event follows its capture while the process's CPUs are not all
    // busy (deferred_rings.h: the emitter takes records two age bounds old, every bound).
    r.defer_us = (config().mode == Mode::ops && config().defer) ? 3 * config().defer_max_age_us : 0;
    ST_TRACE_EMIT(process_info, &r);
    g_emitted.store(true, std::memory_order_release);
    errno = saved;
}

void reset_process_info_after_fork() noexcept {
    g_emitted.store(false, std::memory_order_release);
    g_claimed.store(false, std::memory_order_release);
}

}  // namespace sigmatrace::interpose
