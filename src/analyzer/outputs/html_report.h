// --html FILE: a self-contained HTML report (no scripts, no external resources): the text report's sections as
// tables, plus inline SVG plots: latency distribution per opcode, the node-to-node traffic heat map, bytes per
// rail, and barrier spread per epoch. Rendered from the analysis document.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace sigmatrace::analyzer {

std::string render_html_report(const nlohmann::json& doc);

}  // namespace sigmatrace::analyzer
