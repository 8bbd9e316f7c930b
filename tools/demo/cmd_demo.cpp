// sigmatrace demo: placeholder until its issue lands.
#include <fmt/core.h>

#include "sigmatrace/commands.h"

namespace sigmatrace::cli {

int cmd_demo(Args) {
    fmt::print(stderr, "sigmatrace demo: not built yet in this version\n");
    return 2;
}

}  // namespace sigmatrace::cli
