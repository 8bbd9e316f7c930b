#include "analyzer/analyses/quantile_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace sigmatrace::analyzer {

namespace bh = boost::histogram;

namespace {

constexpr double kDefaultLo = 1.0, kDefaultHi = 1e13;
constexpr unsigned kDefaultBinsPerDecade = 200;

// first[k] (k = 0 .. size + 1): the smallest integer x >= 0 whose axis index is >= k - 1, found by asking the
// axis itself around exp()'s estimate; the axis index is monotonic in x, so these thresholds reproduce it.
template <class Axis>
std::vector<double> integer_thresholds(const Axis& axis, double exact_integers) {
    const int size = axis.size();
    std::vector<double> first(static_cast<std::size_t>(size) + 2, 0.0);
    const double llo = std::log(axis.value(0)), lhi = std::log(axis.value(size));
    double x = 0;
    for (int k = 1; k <= size + 1; ++k) {
        const int want = k - 1;
        double guess = std::ceil(std::exp(llo + (lhi - llo) * want / size));
        if (!(guess >= x)) guess = x;   // thresholds never decrease
        x = std::min(guess, exact_integers - 1);
        while (x > first[static_cast<std::size_t>(k - 1)] && axis.index(x - 1) >= want) x -= 1;
        while (x < exact_integers - 1 && axis.index(x) < want) x += 1;
        first[static_cast<std::size_t>(k)] = x;
    }
    return first;
}

// For each binade of the integers below 2^53 (exponent 0..52) split in 256 by the top 8 bits of the mantissa: the
// threshold index k of its smallest value (first[k] <= x0 < first[k + 1]). A sub-bucket (at most 1/256 of its
// value wide) is narrower than a default bin (1.16%), so an integer in it is at k or k + 1.
std::vector<uint16_t> sub_bucket_starts(const std::vector<double>& first, int sub_bits) {
    std::vector<uint16_t> start(std::size_t{53} << sub_bits);
    for (int e = 0; e < 53; ++e)
        for (int m = 0; m < (1 << sub_bits); ++m) {
            const double x0 = std::ldexp(1.0 + m / static_cast<double>(1 << sub_bits), e);
            const auto k = std::upper_bound(first.begin(), first.end(), x0) - first.begin() - 1;
            start[(static_cast<std::size_t>(e) << sub_bits) | static_cast<std::size_t>(m)] = static_cast<uint16_t>(k);
        }
    return start;
}

}  // namespace

QuantileHistogram::QuantileHistogram(double lo, double hi, unsigned bins_per_decade)
    : hist_(bh::make_histogram_with(bh::unlimited_storage<>(),
                                    Axis(static_cast<unsigned>(std::ceil(std::log10(hi / lo) * bins_per_decade)),
                                         lo, hi))) {
    if (lo == kDefaultLo && hi == kDefaultHi && bins_per_decade == kDefaultBinsPerDecade) {
        // Immutable once built (thread-safe initialization), shared by every histogram of this binning.
        static const std::vector<double> kFirst = integer_thresholds(hist_.axis(), kExactIntegers);
        static const std::vector<uint16_t> kStart = sub_bucket_starts(kFirst, kSubBits);
        // A bin is ln(10) / bins_per_decade of its value wide (about), a sub-bucket at most 2^-kSubBits.
        static_assert(kDefaultBinsPerDecade < 2.302585 * (1 << kSubBits), "a sub-bucket must be narrower than a bin");
        first_ = &kFirst;
        start_ = &kStart;
    }
}

void QuantileHistogram::add(double v) {
    add(bin(v));
}

QuantileHistogram::Binned QuantileHistogram::bin_any(double v) const {
    if (!(v >= 0.0)) v = 0.0;  // also maps NaN to 0: a histogram must never see NaN
    return Binned{v, static_cast<int>(hist_.axis().index(v))};
}

void QuantileHistogram::add(const Binned& b, uint64_t n) {
    if (n == 0) return;
    bh::unsafe_access::storage(hist_)[static_cast<std::size_t>(b.index + 1)] += n;   // integral: stays a count
    count_ += n;
    min_ = std::min(min_, b.value);
    max_ = std::max(max_, b.value);
    // The same sum as n single adds while it stays an exact integer (values are integers: sizes, nanoseconds).
    sum_ += b.value * static_cast<double>(n);
}

void QuantileHistogram::merge(const QuantileHistogram& other) {
    if (other.count_ == 0) return;
    hist_ += other.hist_;
    count_ += other.count_;
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
    sum_ += other.sum_;
}

double QuantileHistogram::quantile(double q) const {
    if (count_ == 0) return 0.0;
    q = std::clamp(q, 0.0, 1.0);
    const double target = std::max(1.0, std::ceil(q * static_cast<double>(count_)));
    double cumulative = 0.0;
    // bh::indexed with coverage::all visits underflow (-1), the bins, then overflow.
    for (auto&& cell : bh::indexed(hist_, bh::coverage::all)) {
        const double c = static_cast<double>(*cell);
        if (c == 0.0) continue;
        if (cumulative + c >= target) {
            const int idx = cell.index();
            if (idx < 0) return min_;                                  // underflow: below lo
            if (idx >= static_cast<int>(hist_.axis().size())) return max_;  // overflow
            const double lo = cell.bin().lower(), hi = cell.bin().upper();
            const double frac = (target - cumulative) / c;              // position inside the bin, (0, 1]
            const double v = lo * std::pow(hi / lo, frac);
            return std::clamp(v, min_, max_);
        }
        cumulative += c;
    }
    return max_;
}

std::vector<std::tuple<double, double, uint64_t>> QuantileHistogram::nonempty_bins() const {
    std::vector<std::tuple<double, double, uint64_t>> out;
    for (auto&& cell : bh::indexed(hist_, bh::coverage::all)) {
        const double c = static_cast<double>(*cell);
        if (c == 0.0) continue;
        const int idx = cell.index();
        double lo, hi;
        if (idx < 0) {
            lo = 0.0;
            hi = hist_.axis().value(0);
        } else if (idx >= static_cast<int>(hist_.axis().size())) {
            lo = hist_.axis().value(hist_.axis().size());
            hi = max_;
        } else {
            lo = cell.bin().lower();
            hi = cell.bin().upper();
        }
        out.emplace_back(lo, hi, static_cast<uint64_t>(c));
    }
    return out;
}

std::vector<std::pair<uint32_t, uint64_t>> QuantileHistogram::cells() const {
    std::vector<std::pair<uint32_t, uint64_t>> out;
    const auto& storage = bh::unsafe_access::storage(hist_);
    for (std::size_t i = 0; i < storage.size(); ++i)
        if (const auto n = static_cast<uint64_t>(static_cast<double>(storage[i])); n != 0)
            out.emplace_back(static_cast<uint32_t>(i), n);
    return out;
}

void QuantileHistogram::set_cells(const std::vector<std::pair<uint32_t, uint64_t>>& cells) {
    auto& storage = bh::unsafe_access::storage(hist_);
    for (const auto& [i, n] : cells)
        if (i < storage.size()) storage[i] += n;
}

}  // namespace sigmatrace::analyzer
