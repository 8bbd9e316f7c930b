// A trace read in shares at once (sigmatrace-analyze --jobs N): each share is an Analysis of its own traces' data
// (analysis.h, "Analysis in shares"), read on a thread of its own by the direct reader, every share reading every
// trace's set-up; the shares are then merged into one analysis, which finishes as one reading the whole trace
// would have.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/trace_reader.h"

namespace sigmatrace::analyzer {

struct ShardedRead {
    std::unique_ptr<Analysis> analysis;   // the merged shares; null when they could not be read or merged
    ReadSummary summary;                  // the first share's (every share reads every trace: the same problems)
    std::string not_merged;               // why `analysis` is null
};

// Why a trace cannot be read in shares ("" when it can): fewer than two hosts, a damaged trace (the direct
// reader reads pristine traces only), or SIGMATRACE_ANALYZE_READER=babeltrace.
std::string why_not_sharded(const PlannedRead& planned);

// Reads `planned` in `shares` shares (the i-th host, by name, goes to share i mod shares), each an
// Analysis(options), and merges them. `progress`: the guard's (read_guard.h), shared by the shares' reads; null when unguarded.
ShardedRead read_sharded(const std::filesystem::path& root, PlannedRead& planned, const AnalysisOptions& options,
                         std::size_t shares, ReadProgress* progress);

}  // namespace sigmatrace::analyzer
