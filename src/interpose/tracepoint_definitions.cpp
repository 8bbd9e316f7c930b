// The definitions of libsigmatrace.so's "sigmatrace" tracepoints (the call sites' "enabled" words), with
// dynamic probe linkage: nothing here references the probe, which lives in lib/sigmatrace/libsigmatrace-lttng.so
// and is loaded on first RDMA use (activation.h). The constructor the lttng-ust header adds registers these
// definitions with liblttng-ust-tracepoint.so.1 — a registry without threads or session-daemon contact — so a
// process that never touches RDMA pays only that load.
//
// Linked FIRST into libsigmatrace.so: .fini_array runs backwards, so the definitions unregister after every
// destructor of ours that may still emit (final counters, the GPU watcher's last sweep, deferred records).
// Hidden: an application's own "sigmatrace" definitions (or a second copy of ours) cannot clash.
#define LTTNG_UST_TRACEPOINT_DEFINE
#define LTTNG_UST_TRACEPOINT_PROBE_DYNAMIC_LINKAGE
#define LTTNG_UST_TRACEPOINT_HIDDEN_DEFINITION
#include "provider/sigmatrace_tp.h"
