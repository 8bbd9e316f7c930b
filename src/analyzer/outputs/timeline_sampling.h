// Which operations a timeline file (Perfetto, either format) keeps when the trace has more than its budget
// (--perfetto-max-ops N): level of detail falling along the trace. Level 0 keeps every operation until N/2 are
// written; level k keeps one operation in 4^k until half of what is left of the budget is written. Each level
// covers twice the operations of the one before, so N spans about N/2 x 2^(log2 N) operations: the whole trace,
// densely at its start and thinner later, never more than N written. Operations come in reconstruction order (about time order), so a level is a stretch of time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sigmatrace::analyzer {

// sigmatrace-analyze's --perfetto-max-ops default, and the Babeltrace2 plugin's budget.
inline constexpr uint64_t kDefaultTimelineBudget = 1000000;

class TimelineSampler {
public:
    explicit TimelineSampler(uint64_t budget);

    // Whether the next operation is written; counts it either way.
    bool keep();

    uint64_t written() const { return written_; }
    uint64_t dropped() const { return seen_ - written_; }
    uint64_t budget() const { return budget_; }
    // "W of T operations written (--perfetto-max-ops N): every one up to #500, then 1 in 4 from #504, ..."
    // (empty when nothing was dropped).
    std::string statement() const;

private:
    struct Level {
        uint64_t stride;
        uint64_t first;   // the 0-based index of the level's first operation kept: one stride after the last one
    };
    uint64_t budget_;
    uint64_t seen_ = 0;
    uint64_t written_ = 0;
    uint64_t level_end_;   // written_ at which the next level starts
    std::vector<Level> levels_;
};

}  // namespace sigmatrace::analyzer
