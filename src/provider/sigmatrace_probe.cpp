// The probe of the "sigmatrace" provider, built alone as lib/sigmatrace/libsigmatrace-lttng.so.
//
// libsigmatrace.so defines its tracepoints with LTTNG_UST_TRACEPOINT_PROBE_DYNAMIC_LINKAGE and links no part of
// lttng-ust but the small registry its tracepoint definitions load (liblttng-ust-tracepoint.so.1: no thread, no
// session daemon). It dlopen's this library on a process's first RDMA use: loading it loads liblttng-ust (its
// listener threads register with the session daemon) and registers the probe, which connects the call sites.
// Processes that never touch RDMA (mpirun, orted, shells, compilers) never load liblttng-ust at all
// (docs/interpose.md, "When tracing starts").
//
// Hidden provider symbol: nothing references it (dynamic linkage), and an application with a provider of its own
// cannot clash with it.
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_PROVIDER_HIDDEN_DEFINITION
#include "provider/sigmatrace_tp.h"
