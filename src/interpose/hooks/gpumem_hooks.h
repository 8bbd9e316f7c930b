// Calls from the host-side shim into the GPU queue watcher (src/gpumem), linked into the same
// libsigmatrace.so. Weak: builds without the GPU module (unit tests of the shim) leave them null.
//
// A verbs QP or CQ whose rings were exported with mlx5dv_init_obj may be watched by the GPU module; the ring
// memory is freed by the real ibv_destroy_qp / ibv_destroy_cq, so the watcher must stop reading it first.
// The shim calls these from its destroy wrappers before the real call (outside its own registry lock).
#pragma once

#include <infiniband/verbs.h>

extern "C" {
__attribute__((weak, visibility("hidden"))) void sigmatrace_gpumem_before_destroy_qp(struct ibv_qp* qp);
__attribute__((weak, visibility("hidden"))) void sigmatrace_gpumem_before_destroy_cq(struct ibv_cq* cq);
// Stops the watcher after a final sweep; called by the library's one destructor (library_init.cpp), first.
__attribute__((weak, visibility("hidden"))) void sigmatrace_gpumem_shutdown();
}
