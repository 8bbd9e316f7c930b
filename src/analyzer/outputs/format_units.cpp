#include "analyzer/outputs/format_units.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace sigmatrace::analyzer {

namespace {
// Three significant digits, no trailing noise: 1.50, 12.3, 456.
std::string three_digits(double v) {
    const double a = std::fabs(v);
    if (a >= 100.0 || a == 0.0) return fmt::format("{:.0f}", v);
    if (a >= 10.0) return fmt::format("{:.1f}", v);
    return fmt::format("{:.2f}", v);
}
}  // namespace

std::string format_bytes(double bytes) {
    static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 1024.0) return fmt::format("{:.0f} B", bytes);
    int u = 0;
    while (bytes >= 1024.0 && u < 5) {
        bytes /= 1024.0;
        ++u;
    }
    return three_digits(bytes) + " " + units[u];
}

std::string format_ns(double ns) {
    if (ns < 1000.0) return fmt::format("{:.0f} ns", ns);
    if (ns < 1e6) return three_digits(ns / 1e3) + " us";
    if (ns < 1e9) return three_digits(ns / 1e6) + " ms";
    return three_digits(ns / 1e9) + " s";
}

std::string format_count(uint64_t n) {
    std::string digits = std::to_string(n);
    std::string out;
    const std::size_t len = digits.size();
    for (std::size_t i = 0; i < len; ++i) {
        out.push_back(digits[i]);
        if ((len - i - 1) % 3 == 0 && i + 1 < len) out.push_back(',');
    }
    return out;
}

std::string ns_or_dash(const nlohmann::json& v) {
    return v.is_number() ? format_ns(v.get<double>()) : std::string("-");
}

}  // namespace sigmatrace::analyzer
