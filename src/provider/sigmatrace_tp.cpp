// The probe of the "sigmatrace" provider: the one translation unit that instantiates the serializers and the
// tracepoint definitions. It must be linked FIRST into libsigmatrace.so: .init_array runs in link order, so the
// probe registers before any constructor of ours can emit, and .fini_array runs backwards, so it unregisters
// after our destructors (linked last, its constructor's and destructor's events are lost: docs/architecture.md,
// "Platform facts").
//
// Hidden visibility keeps these symbols private to the library that embeds them, so an application with its
// own tracepoints (or a second copy of this provider) cannot clash with ours.
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#define LTTNG_UST_TRACEPOINT_HIDDEN_DEFINITION
#define LTTNG_UST_TRACEPOINT_PROVIDER_HIDDEN_DEFINITION
#include "provider/sigmatrace_tp.h"

#include "provider/probe_desc.h"

namespace sigmatrace {

const lttng_ust_probe_desc* provider_probe_desc() {
    return &lttng_ust__probe_desc___sigmatrace;
}

}  // namespace sigmatrace
