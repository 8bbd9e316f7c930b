// Human-readable numbers for reports and finding summaries: 12.3 MiB, 4.56 us, 2.13x.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace sigmatrace::analyzer {

std::string format_bytes(double bytes);      // "512 B", "1.50 KiB", "3.20 GiB"
std::string format_ns(double ns);            // "850 ns", "4.56 us", "12.3 ms", "1.20 s"
std::string format_count(uint64_t n);        // "1234567" -> "1,234,567"
std::string ns_or_dash(const nlohmann::json& v);  // a report's time in ns as format_ns() writes it, "-" when absent

}  // namespace sigmatrace::analyzer
