// sigmatrace-analyze: placeholder until the analyzer issue lands.
#include "analyze/analyze_main.h"

#include <fmt/core.h>

#include "sigmatrace/commands.h"

namespace sigmatrace::analyzer {

int analyze_main(std::span<char* const>) {
    fmt::print(stderr, "sigmatrace-analyze: not built yet in this version\n");
    return 2;
}

}  // namespace sigmatrace::analyzer

namespace sigmatrace::cli {
int cmd_analyze(Args args) { return analyzer::analyze_main(args); }
}  // namespace sigmatrace::cli
