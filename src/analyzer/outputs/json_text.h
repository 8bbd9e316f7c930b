// JSON text for every document and value the analyzer writes.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace sigmatrace::analyzer {

// `j` as JSON text (`indent` as nlohmann's dump: -1 for one line). Strings that come from a trace (process and
// host names, the names of damaged event classes) are bytes, not necessarily UTF-8: an invalid byte is written
// as U+FFFD, where nlohmann's default would throw and lose the whole output.
inline std::string json_text(const nlohmann::json& j, int indent = -1) {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace sigmatrace::analyzer
