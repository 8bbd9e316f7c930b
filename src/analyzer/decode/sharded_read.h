// A trace read in shares at once (sigmatrace-analyze --jobs N): each share is an Analysis of its own traces' data
// (analysis.h, "Analysis in shares"), read on a thread of its own by the direct reader, every share reading every
// trace's set-up; the shares are then merged into one analysis, which finishes as one reading the whole trace
// would have.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/trace_reader.h"

namespace sigmatrace::analyzer {

struct ShardedRead {
    std::unique_ptr<Analysis> analysis;   // the merged shares; null when they could not be read or merged
    ReadSummary summary;                  // the first share's (every share reads every trace: the same problems)
    std::string not_merged;               // why `analysis` is null
    std::vector<uint64_t> share_bytes;    // read by ranks: the size of each other rank's share as it was sent
};

// Why finished shares were not merged (Analysis::merge_share() refused).
inline constexpr const char* kSharesNotMerged =
    "the shares could not be merged (objects made from data events alone, or a link, incast sender or barrier word "
    "whose shares cannot be joined exactly: docs/architecture.md, \"Analysis in shares\")";

// Why a trace cannot be read in shares ("" when it can): fewer than two hosts, a damaged trace (the direct
// reader reads pristine traces only), or SIGMATRACE_ANALYZE_READER=babeltrace.
std::string why_not_sharded(const PlannedRead& planned);

// The hosts of share k of `shares`: the i-th host, by name, goes to share i mod shares.
std::vector<std::string> share_hosts(const PlannedRead& planned, std::size_t k, std::size_t shares);

// Reads share k of `shares` of `planned`: an Analysis(options) of those hosts' data and every host's set-up,
// finished (finish_share()). What a rank of `sigmatrace-analyze` under mpirun reads; read_sharded() reads each
// on a thread. `progress` as for read_sharded(), the plan materialized when it is not null.
struct ShareRead {
    std::unique_ptr<Analysis> analysis;
    ReadSummary summary;
};
ShareRead read_share(const std::filesystem::path& root, PlannedRead& planned, const AnalysisOptions& options,
                     std::size_t k, std::size_t shares, ReadProgress* progress);

// Reads `planned` in `shares` shares (the i-th host, by name, goes to share i mod shares), each an
// Analysis(options), and merges them. `progress`: the guard's (read_guard.h), shared by the shares' reads; null when unguarded.
ShardedRead read_sharded(const std::filesystem::path& root, PlannedRead& planned, const AnalysisOptions& options,
                         std::size_t shares, ReadProgress* progress);

}  // namespace sigmatrace::analyzer
