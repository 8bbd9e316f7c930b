#include "interpose/state/process_identity.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "interpose/runtime/config.h"
#include "provider/trace.h"

namespace sigmatrace::interpose {
namespace {

// Launchers and the variables they set, in the order they are trusted. torchrun's RANK/LOCAL_RANK/WORLD_SIZE
// come last: they are generic names another tool may set for other reasons.
constexpr const char* kRankVars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID",
                                     "MV2_COMM_WORLD_RANK", "PALS_RANKID", "FLUX_TASK_RANK", "RANK"};
constexpr const char* kLocalRankVars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                                          "SLURM_LOCALID", "PALS_LOCAL_RANKID", "FLUX_TASK_LOCAL_ID", "LOCAL_RANK"};
constexpr const char* kSizeVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS",
                                     "FLUX_JOB_SIZE", "WORLD_SIZE"};
constexpr const char* kJobVars[] = {"SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "PMIX_NAMESPACE",
                                    "OMPI_MCA_ess_base_jobid"};

template <size_t N> int32_t first_int(const char* (*get)(const char*), const char* const (&vars)[N]) {
    for (const char* var : vars) {
        const char* v = get(var);
        if (v == nullptr || *v == '\0') continue;
        char* end = nullptr;
        errno = 0;
        const long value = std::strtol(v, &end, 10);
        if (errno == 0 && end != nullptr && *end == '\0' && value >= 0 && value <= INT32_MAX)
            return static_cast<int32_t>(value);
    }
    return -1;
}

template <size_t N> std::string first_string(const char* (*get)(const char*), const char* const (&vars)[N]) {
    for (const char* var : vars)
        if (const char* v = get(var); v != nullptr && *v != '\0') return v;
    return {};
}

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
    id.rank = first_int(get, kRankVars);
    id.local_rank = first_int(get, kLocalRankVars);
    id.world_size = first_int(get, kSizeVars);
    id.job_id = first_string(get, kJobVars);
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
