// The text report printed on stdout: what a person reads in a minute. Rendered from the analysis document,
// in this order: one-line summary, findings, operations per opcode, traffic matrix and skew, rails,
// barriers, processes, warnings.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace sigmatrace::analyzer {

std::string render_text_report(const nlohmann::json& doc);

}  // namespace sigmatrace::analyzer
