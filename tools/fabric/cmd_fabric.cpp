// sigmatrace fabric: placeholder until its issue lands.
#include <fmt/core.h>

#include "sigmatrace/commands.h"

namespace sigmatrace::cli {

int cmd_fabric(Args) {
    fmt::print(stderr, "sigmatrace fabric: not built yet in this version\n");
    return 2;
}

}  // namespace sigmatrace::cli
