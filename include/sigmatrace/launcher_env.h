// The environment variables through which job launchers (Open MPI, PMIx, MPICH/Hydra, MVAPICH, Slurm, PALS,
// Flux, torchrun) tell a process its place in a job. The tracer stamps a process's rank from them
// (process_info), `sigmatrace fabric --node rank` derives a node from them, and `sigmatrace-analyze` learns
// whether it was started as several ranks: one table, so that they agree.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

namespace sigmatrace::launcher {

// In the order they are trusted. torchrun's RANK/LOCAL_RANK/WORLD_SIZE come last: they are generic names another
// tool may set for other reasons.
inline constexpr const char* kRankVars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID",
                                            "MV2_COMM_WORLD_RANK", "PALS_RANKID", "FLUX_TASK_RANK", "RANK"};
inline constexpr const char* kLocalRankVars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                                 "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "PALS_LOCAL_RANKID",
                                                 "FLUX_TASK_LOCAL_ID", "LOCAL_RANK"};
// How many ranks the launcher placed on this process's node (MPICH/Hydra's MPI_LOCALNRANKS; Slurm gives no plain
// count per node).
inline constexpr const char* kLocalSizeVars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                                 "MV2_COMM_WORLD_LOCAL_SIZE", "PALS_LOCAL_SIZE"};
inline constexpr const char* kSizeVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE",
                                            "SLURM_NTASKS", "FLUX_JOB_SIZE", "WORLD_SIZE"};
inline constexpr const char* kJobVars[] = {"SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "PMIX_NAMESPACE",
                                           "OMPI_MCA_ess_base_jobid"};
// Set only in a process whose launcher runs a server MPI_Init can reach: PMIx (Open MPI's mpirun, srun
// --mpi=pmix), PMI (srun --mpi=pmi2, MPICH's Hydra) or Open MPI's own daemon. Rank variables alone (a batch
// script's SLURM_PROCID, a test's) are not: MPI_Init would look for a server that is not there.
inline constexpr const char* kMpiServerVars[] = {"PMIX_NAMESPACE", "PMI_FD", "PMI_PORT", "OMPI_MCA_orte_hnp_uri"};

// A launcher's own rank and size variables, set together for each process it starts: a process that finds both
// of one pair was started as one of `size` ranks by that launcher (a rank variable alone may be inherited from
// a job step, as Slurm's batch step passes SLURM_PROCID to everything a script runs).
struct RankPair {
    const char* rank;
    const char* size;
};
inline constexpr RankPair kRankPairs[] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                          {"PMI_RANK", "PMI_SIZE"},
                                          {"MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"},
                                          {"SLURM_PROCID", "SLURM_NTASKS"},
                                          {"FLUX_TASK_RANK", "FLUX_JOB_SIZE"}};

// `text` as a decimal integer in [0, INT32_MAX], nothing else.
inline std::optional<int32_t> parse_index(const char* text) {
    if (text == nullptr || *text < '0' || *text > '9') return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(text, &end, 10);
    if (errno != 0 || end == nullptr || *end != '\0' || value < 0 || value > INT32_MAX) return std::nullopt;
    return static_cast<int32_t>(value);
}

// The first of `vars` that `get` (getenv, or a test's) finds set to such an integer; -1 when none is.
template <typename Get, std::size_t N> int32_t first_index(Get&& get, const char* const (&vars)[N]) {
    for (const char* var : vars)
        if (const std::optional<int32_t> v = parse_index(get(var))) return *v;
    return -1;
}

// The first of `vars` that `get` finds set and not empty; empty when none is.
template <typename Get, std::size_t N> std::string first_string(Get&& get, const char* const (&vars)[N]) {
    for (const char* var : vars)
        if (const char* v = get(var); v != nullptr && *v != '\0') return v;
    return {};
}

// This process's place among the ranks a launcher started together, from the first pair of kRankPairs whose
// two variables are both set to integers; nullopt when none is (not started by a launcher as one of several).
struct Place {
    int32_t rank = 0;
    int32_t size = 1;
    const char* rank_var = nullptr;
};
template <typename Get> std::optional<Place> place_in_job(Get&& get) {
    for (const RankPair& p : kRankPairs) {
        const std::optional<int32_t> rank = parse_index(get(p.rank));
        const std::optional<int32_t> size = parse_index(get(p.size));
        if (rank && size && *rank < *size) return Place{*rank, *size, p.rank};
    }
    return std::nullopt;
}

}  // namespace sigmatrace::launcher
