// The definitions of libsigmatrace.so's "sigmatrace" tracepoints, and with them the module's event backend
// (provider/trace_lttng_backend.h: the call sites' "enabled" words are the tracepoints' state words), with
// dynamic probe linkage: nothing here references the probe, which lives in lib/sigmatrace/libsigmatrace-lttng.so
// and is loaded on first RDMA use (activation.h). The constructor the lttng-ust header adds registers these
// definitions with liblttng-ust-tracepoint.so.1 — a registry without threads or session-daemon contact — so a
// process that never touches RDMA pays only that load.
//
// The header registers the definitions from a constructor and unregisters them from a destructor, both of
// default priority: where they run among this library's other constructors and destructors would follow the link
// order, which differs between CMake generators. Both are reference-counted, so one more reference, taken before
// every default-priority constructor and dropped after every default-priority destructor (priority 101, the
// first one not reserved for the implementation), keeps the definitions registered while any code of ours may
// still emit (final counters, the GPU watcher's last sweep, deferred records).
// Hidden: an application's own "sigmatrace" definitions (or a second copy of ours) cannot clash.
#define LTTNG_UST_TRACEPOINT_DEFINE
#define LTTNG_UST_TRACEPOINT_PROBE_DYNAMIC_LINKAGE
#define LTTNG_UST_TRACEPOINT_HIDDEN_DEFINITION
#include "provider/sigmatrace_tp.h"
#include "provider/trace_lttng_backend.h"

namespace {

__attribute__((constructor(101))) void hold_tracepoint_definitions() {
    lttng_ust__tracepoints__init();
    lttng_ust__tracepoints__ptrs_init();
}

__attribute__((destructor(101))) void release_tracepoint_definitions() {
    lttng_ust__tracepoints__ptrs_destroy();
    lttng_ust__tracepoints__destroy();
}

}  // namespace
