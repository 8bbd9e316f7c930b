// The probe of the "sigmatrace" provider, the tracepoint definitions and the LTTng backend of provider/trace.h in
// one object, for programs that emit directly (st-synth, the benchmarks, the schema drift test; target
// sigmatrace_provider_lttng). It must be linked FIRST: .init_array runs in link order, so the probe registers
// before any constructor of the program can emit, and .fini_array runs backwards, so it unregisters after the
// program's destructors (linked last, their events are lost: docs/architecture.md, "Platform facts").
//
// Hidden visibility keeps these symbols private to the library that embeds them, so an application with its
// own tracepoints (or a second copy of this provider) cannot clash with ours.
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#define LTTNG_UST_TRACEPOINT_HIDDEN_DEFINITION
#define LTTNG_UST_TRACEPOINT_PROVIDER_HIDDEN_DEFINITION
#include "provider/sigmatrace_tp.h"

#include "provider/probe_desc.h"
#include "provider/trace_lttng_backend.h"

namespace sigmatrace {

const lttng_ust_probe_desc* provider_probe_desc() {
    return &lttng_ust__probe_desc___sigmatrace;
}

}  // namespace sigmatrace
