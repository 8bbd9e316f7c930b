// RankJob without MPI at build time (rank_job.h): rank 0 reads alone.
#include "analyze/rank_job.h"

namespace sigmatrace::analyzer {

std::unique_ptr<RankJob> RankJob::join(int32_t) { return nullptr; }

}  // namespace sigmatrace::analyzer
