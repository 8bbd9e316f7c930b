#include "analyzer/analyses/quantile_histogram.h"

#include <algorithm>
#include <cmath>

namespace sigmatrace::analyzer {

namespace bh = boost::histogram;

QuantileHistogram::QuantileHistogram(double lo, double hi, unsigned bins_per_decade)
    : hist_(bh::make_histogram_with(bh::unlimited_storage<>(),
                                    Axis(static_cast<unsigned>(std::ceil(std::log10(hi / lo) * bins_per_decade)),
                                         lo, hi))) {}

void QuantileHistogram::add(double v) {
    add(bin(v));
}

QuantileHistogram::Binned QuantileHistogram::bin(double v) const {
    if (!(v >= 0.0)) v = 0.0;  // also maps NaN to 0: a histogram must never see NaN
    return Binned{v, static_cast<int>(hist_.axis().index(v))};
}

void QuantileHistogram::add(const Binned& b) {
    ++hist_.at(b.index);
    ++count_;
    min_ = std::min(min_, b.value);
    max_ = std::max(max_, b.value);
    sum_ += b.value;
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

}  // namespace sigmatrace::analyzer
