// Value distributions (latency, barrier spread, message size) kept in a Boost.Histogram with a logarithmic axis:
// fixed memory whatever the number of samples, quantiles within one bin's relative width (about 0.6% with
// the default binning), exact count, min, max and sum kept beside it.
#pragma once

// GCC 12 with -fsanitize=address reports a false "may be used uninitialized" inside Boost.Histogram
// (boost/histogram/multi_index.hpp:37, an index array filled element by element before use) where
// quantile_histogram.cpp instantiates it; the warning's location is in Boost's header, so silencing it for that
// header only (push/pop around the include) keeps it on for our code. Checked with the ASan build
// (-DSIGMATRACE_SANITIZE=ON -DSIGMATRACE_WERROR=ON).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <boost/histogram.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace sigmatrace::analyzer {

class QuantileHistogram {
public:
    // Values are expected in [lo, hi); smaller ones (and 0) land in the underflow bin and read back as lo or
    // less, larger ones in the overflow bin and read back as the exact max. 200 bins per decade: 1.16% per bin.
    explicit QuantileHistogram(double lo = 1.0, double hi = 1e13, unsigned bins_per_decade = 200);

    void add(double v);
    void merge(const QuantileHistogram& other);  // same binning required

    // A value with its bin already found: the analyzer adds each operation's latency and size to several
    // aggregates (total, opcode, QP, process, pair) whose histograms share one binning, and finding the bin
    // (a search, or a logarithm) is most of an add. bin() may be called on any histogram of that binning.
    struct Binned {
        double value;
        int index;  // the axis index: -1 underflow, size() overflow
    };
    // Inline for an integer in the default binning (latencies and sizes: one table load and a comparison or two).
    Binned bin(double v) const {
        if (first_ != nullptr && v >= 1.0 && v < kExactIntegers && static_cast<double>(static_cast<uint64_t>(v)) == v)
            return Binned{v, integer_index(v)};
        return bin_any(v);
    }
    // Same binning as the histogram that made `b`. Inline: every operation's latency comes here.
    void add(const Binned& b) {
        // The storage cell of axis index b.index (cell 0 is the underflow bin), without at()'s index checks and
        // linearization: b.index comes from bin(), within [-1, size()].
        ++boost::histogram::unsafe_access::storage(hist_)[static_cast<std::size_t>(b.index + 1)];
        ++count_;
        min_ = std::min(min_, b.value);
        max_ = std::max(max_, b.value);
        sum_ += b.value;
    }
    void add(const Binned& b, uint64_t n);   // n times
    // Integer values value_of(x) of each x of `items` (a negative one counts as 0, as in add()): each one's bin
    // and cell, and the count, min, max and sum once for them all. The same figures as one add() each (the values and their sum are integers, exact in a
    // double below 2^53), for a fraction of the cost: a run of operations' latencies.
    template <class Items, class ValueOf> void add_integers(const Items& items, ValueOf&& value_of) {
        if (items.empty()) return;
        auto& storage = boost::histogram::unsafe_access::storage(hist_);
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        double sum = 0.0;   // not an integer sum: corrupt times make values near +-2^62, whose sum overflows
        for (const auto& x : items) {
            const int64_t v = std::max<int64_t>(value_of(x), 0);   // as bin() takes a negative value: 0
            lo = std::min(lo, v);
            hi = std::max(hi, v);
            const auto d = static_cast<double>(v);
            sum += d;
            // An integer in [1, 2^53) (one unsigned comparison) skips bin()'s checks that it is one.
            const bool table = first_ != nullptr && static_cast<uint64_t>(v - 1) < kExactIntegerCount - 1;
            ++storage[static_cast<std::size_t>((table ? integer_index(d) : bin_any(d).index) + 1)];
        }
        count_ += items.size();
        min_ = std::min(min_, static_cast<double>(lo));
        max_ = std::max(max_, static_cast<double>(hi));
        sum_ += sum;
    }

    uint64_t count() const { return count_; }
    double min() const { return count_ ? min_ : 0.0; }
    double max() const { return count_ ? max_ : 0.0; }
    double sum() const { return sum_; }
    double mean() const { return count_ ? sum_ / static_cast<double>(count_) : 0.0; }

    // The q-quantile (0 <= q <= 1), nearest-rank definition: the smallest value v such that at least
    // ceil(q * count) samples are <= v, estimated by log-linear interpolation inside v's bin, clamped to
    // [min, max]. 0 when empty.
    double quantile(double q) const;

    // (bin lower edge, bin upper edge, count) for every non-empty bin, in order (plots).
    std::vector<std::tuple<double, double, uint64_t>> nonempty_bins() const;

    // A share's histogram in bytes (share_codec.cpp): its nonzero cells by storage index, and count, min, max
    // and sum. The binning is not carried: both sides build it from the same options.
    std::vector<std::pair<uint32_t, uint64_t>> cells() const;
    void set_cells(const std::vector<std::pair<uint32_t, uint64_t>>& cells);   // into an empty histogram
    template <class Archive> void save(Archive& ar) const { ar(cells(), count_, min_, max_, sum_); }
    template <class Archive> void load(Archive& ar) {
        std::vector<std::pair<uint32_t, uint64_t>> c;
        ar(c, count_, min_, max_, sum_);
        set_cells(c);
    }

private:
    static constexpr double kExactIntegers = 9007199254740992.0;   // 2^53
    static constexpr uint64_t kExactIntegerCount = uint64_t{1} << 53;
    // The axis index of an integer v in [1, 2^53) in the default binning (first_ set).
    int integer_index(double v) const {
        const std::vector<double>& first = *first_;
        const int top = static_cast<int>(first.size()) - 1;
        const uint64_t bits = std::bit_cast<uint64_t>(v);
        const auto e = static_cast<std::size_t>(((bits >> 52) & 0x7FF) - 1023);   // 0..52: v is in [1, 2^53)
        int k = (*start_)[(e << kSubBits) | ((bits >> (52 - kSubBits)) & ((1u << kSubBits) - 1))];
        while (k < top && v >= first[static_cast<std::size_t>(k) + 1]) ++k;   // once at most
        return k - 1;
    }
    // The top mantissa bits of start_'s sub-buckets.
    static constexpr int kSubBits = 8;
    // Any value, any binning: the axis's own index.
    Binned bin_any(double v) const;

    using Axis = boost::histogram::axis::regular<double, boost::histogram::axis::transform::log>;
    using Hist = boost::histogram::histogram<std::tuple<Axis>, boost::histogram::unlimited_storage<>>;
    Hist hist_;
    // For the default binning: first_[k] is the smallest integer whose axis index is k - 1 or more (built once
    // per process from the axis itself), and start_ where an integer's search begins, by its binade and top
    // mantissa bits: an integer value's bin is one load and a comparison or two, with exactly the index the axis
    // gives, no logarithm. Null for other binnings.
    const std::vector<double>* first_ = nullptr;
    const std::vector<uint16_t>* start_ = nullptr;
    uint64_t count_ = 0;
    double min_ = std::numeric_limits<double>::infinity();
    double max_ = -std::numeric_limits<double>::infinity();
    double sum_ = 0.0;
};

}  // namespace sigmatrace::analyzer
