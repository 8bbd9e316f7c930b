#include "interpose/state/hook_scope.h"

namespace sigmatrace::interpose {

__thread int tls_hook_depth __attribute__((tls_model("initial-exec"))) = 0;

}  // namespace sigmatrace::interpose
