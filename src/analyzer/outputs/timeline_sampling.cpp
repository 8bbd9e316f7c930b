#include "analyzer/outputs/timeline_sampling.h"

#include <fmt/core.h>

#include <algorithm>

namespace sigmatrace::analyzer {

TimelineSampler::TimelineSampler(uint64_t budget) : budget_(budget), level_end_(budget - budget / 2) {
    levels_.push_back({1, 0});
}

bool TimelineSampler::keep() {
    const uint64_t index = seen_++;
    const Level& level = levels_.back();
    if (written_ >= budget_ || index < level.first || (index - level.first) % level.stride != 0) return false;
    ++written_;
    if (written_ >= level_end_ && written_ < budget_) {
        // Half of what is left for the next level, at a quarter of the density, from one stride after this one.
        const uint64_t stride = level.stride * 4;
        level_end_ = written_ + std::max<uint64_t>(1, (budget_ - written_) / 2);
        levels_.push_back({stride, index + stride});
    }
    return true;
}

std::string TimelineSampler::statement() const {
    if (dropped() == 0) return "";
    std::string s = fmt::format("{} of {} operations written (--perfetto-max-ops {}): ", written_, seen_, budget_);
    for (std::size_t i = 0; i < levels_.size() && levels_[i].first < seen_; ++i) {
        const Level& l = levels_[i];
        if (i == 0) {
            const uint64_t end = levels_.size() > 1 ? std::min(seen_, levels_[1].first) : seen_;
            s += fmt::format("every one up to #{}", std::min(end, budget_ - budget_ / 2));
        } else {
            s += fmt::format(", then 1 in {} from #{}", l.stride, l.first + 1);
        }
    }
    return s + " (in reconstruction order, about time order)";
}

}  // namespace sigmatrace::analyzer
