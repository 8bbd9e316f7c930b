// --html FILE: an HTML report in one offline file: the text report's sections as tables, plus interactive charts
// drawn by Apache ECharts, inlined with the data (throughput per link over time with gray-link episodes shaded,
// senders per receiver, outstanding bytes per QP, phase efficiency, the traffic matrix, latency distributions,
// rails, barrier spread). Without the library the report keeps every table and says why charts are missing.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace sigmatrace::analyzer {

// The charting library's file name under the install tree's data directory (share/sigmatrace).
inline constexpr const char* kChartingLibraryFile = "echarts.min.js";

// The library's text from DATA_DIR, or nothing when it is missing or unreadable.
std::optional<std::string> load_charting_library(const std::filesystem::path& data_dir);

// charting_library: the text of echarts.min.js, inlined into the page; nothing gives a tables-only report.
std::string render_html_report(const nlohmann::json& doc, const std::optional<std::string>& charting_library);

}  // namespace sigmatrace::analyzer
