// The read in shares across the ranks of a job (rank_job.h; docs/analyzer.md, "Under mpirun"): rank 0 orders each
// read, every rank reads its share (sharded_read.h, read_share) and the others send theirs to rank 0 in bytes,
// where they are merged in rank order, as read_sharded() merges the shares of its threads.
#pragma once

#include <filesystem>

#include "analyze/rank_job.h"
#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/sharded_read.h"
#include "analyzer/decode/trace_reader.h"

namespace sigmatrace::analyzer {

// Rank 0: has every rank read its share of `planned` with `options` (the clock pass when
// options.clock.constraints_only, the estimate sent along when options.clock.applied) and merges them. Waits for
// every rank's answer whatever happens: `analysis` is null, with the reason, when a share could not be read,
// sent or merged.
ShardedRead read_by_ranks(RankJob& job, const std::filesystem::path& root, PlannedRead& planned,
                          const AnalysisOptions& options);

// The other ranks: reads their share for each order of rank 0's until it says stop, and returns the exit
// status. `parsed`: whether this rank's arguments parsed (rank 0's did not either: it then just says stop).
int serve_share_orders(RankJob& job, const std::filesystem::path& root, bool parsed, const AnalysisOptions& options);

}  // namespace sigmatrace::analyzer
