// A log-linear histogram of non-negative integers (8 sub-buckets per power of two, so a quantile is within
// 12.5%): integer arithmetic only, for the per-operation summaries of the timeline windows and of outstanding
// work, where a logarithm per sample would be most of the cost. Counts grow to the highest bucket used.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

namespace sigmatrace::analyzer {

class IntHistogram {
public:
    [[gnu::always_inline]] void add(uint64_t v) {
        const std::size_t b = bucket_of(v);
        if (b >= counts_.size()) [[unlikely]]
            grow(b);
        ++counts_[b];
        ++count_;
        max_ = std::max(max_, v);
    }
    void merge(const IntHistogram& o);
    uint64_t count() const { return count_; }
    uint64_t max() const { return max_; }
    // Nearest-rank quantile (0 <= q <= 1): the upper edge of the bucket holding it, at most the max seen; 0 when
    // empty.
    uint64_t quantile(double q) const;
    template <class Archive> void serialize(Archive& ar) { ar(counts_, count_, max_); }   // share_codec.cpp

    [[gnu::always_inline]] static std::size_t bucket_of(uint64_t v) {
        if (v < 8) return static_cast<std::size_t>(v);
        const int e = std::bit_width(v) - 1;   // >= 3
        return 8 + static_cast<std::size_t>(e - 3) * 8 + static_cast<std::size_t>((v >> (e - 3)) & 7);
    }

private:
    void grow(std::size_t b);   // to hold bucket b

    std::vector<uint32_t> counts_;
    uint64_t count_ = 0;
    uint64_t max_ = 0;
};

}  // namespace sigmatrace::analyzer
