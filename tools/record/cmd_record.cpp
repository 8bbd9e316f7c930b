// sigmatrace record: placeholder until its issue lands.
#include <fmt/core.h>

#include "sigmatrace/commands.h"

namespace sigmatrace::cli {

int cmd_record(Args) {
    fmt::print(stderr, "sigmatrace record: not built yet in this version\n");
    return 2;
}

}  // namespace sigmatrace::cli
