#include "analyzer/analyses/int_histogram.h"

#include <cmath>

namespace sigmatrace::analyzer {

namespace {
// The largest value of bucket b.
uint64_t bucket_upper(std::size_t b) {
    if (b < 8) return b;
    const int e = static_cast<int>((b - 8) / 8) + 3;
    const uint64_t sub = (b - 8) % 8;
    const uint64_t lo = (uint64_t{1} << e) | (sub << (e - 3));
    return lo + ((uint64_t{1} << (e - 3)) - 1);
}
}  // namespace

void IntHistogram::grow(std::size_t b) { counts_.resize(std::max(b + 1, 2 * counts_.size()), 0); }

void IntHistogram::merge(const IntHistogram& o) {
    if (o.counts_.size() > counts_.size()) counts_.resize(o.counts_.size(), 0);
    for (std::size_t b = 0; b < o.counts_.size(); ++b) counts_[b] += o.counts_[b];
    count_ += o.count_;
    max_ = std::max(max_, o.max_);
}

uint64_t IntHistogram::quantile(double q) const {
    if (count_ == 0) return 0;
    const auto rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_))));
    uint64_t seen = 0;
    for (std::size_t b = 0; b < counts_.size(); ++b) {
        seen += counts_[b];
        if (seen >= rank) return std::min(bucket_upper(b), max_);
    }
    return max_;
}

}  // namespace sigmatrace::analyzer
