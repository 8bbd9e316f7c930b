// The analyzer's command line, shared by `sigmatrace-analyze` and `sigmatrace analyze`.
#pragma once

#include <span>

namespace sigmatrace::analyzer {

// argv-style arguments after the program/verb name. Returns the contract's exit status:
// 0 analyzed and no rule failed, 1 a --fail-on rule or baseline regression failed, 2 usage error or
// unreadable trace.
int analyze_main(std::span<char* const> args);

}  // namespace sigmatrace::analyzer
