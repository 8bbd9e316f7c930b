// How call sites emit SigmaTrace events. The backend is chosen at build time (rdma-core does the same with
// its tracing macro), so call sites never change:
//
//   SIGMATRACE_TRACE_LTTNG     LTTng-UST tracepoints of provider "sigmatrace" (libsigmatrace.so).
//   SIGMATRACE_TRACE_CALLBACK  a function pointer set by the test (unit tests of the shim and the watcher run
//                              without a session daemon and still see every record).
//   SIGMATRACE_TRACE_NONE      nothing: the records are never built.
//
//   if (ST_TRACE_ENABLED(post_send)) { ...fill rec...; ST_TRACE_EMIT(post_send, &rec); }
//   ST_TRACE(qp_create, &rec);   // when building the record is cheap
//
// ST_TRACE_ENABLED costs one load and one branch with LTTng and no session (docs/architecture.md, "Platform
// facts"); build expensive arguments (walking a WR chain) only behind it.
#pragma once

#include <sigmatrace/schema.h>

#if defined(SIGMATRACE_TRACE_LTTNG)

#include "provider/sigmatrace_tp.h"
#define ST_TRACE_ENABLED(event) lttng_ust_tracepoint_enabled(sigmatrace, event)
#define ST_TRACE_EMIT(event, rec) lttng_ust_do_tracepoint(sigmatrace, event, rec)
#define ST_TRACE(event, rec) lttng_ust_tracepoint(sigmatrace, event, rec)

#elif defined(SIGMATRACE_TRACE_CALLBACK)

#include <atomic>

namespace sigmatrace {
// Receives every record while set. Test-only hook: a process-wide pointer because tracepoints are
// process-wide too; tests set it before exercising the code and clear it after.
using TraceCallback = void (*)(EventId id, const void* rec, void* user);
void set_trace_callback(TraceCallback cb, void* user);
bool trace_callback_set();
void trace_callback_emit(EventId id, const void* rec);

template <typename Rec> inline void trace_emit(const Rec* rec) {
    trace_callback_emit(EventIdOf<Rec>::value, rec);
}
}  // namespace sigmatrace

#define ST_TRACE_ENABLED(event) (::sigmatrace::trace_callback_set())
#define ST_TRACE_EMIT(event, rec)                                                                              \
    ::sigmatrace::trace_emit<st_##event##_rec>(rec)
#define ST_TRACE(event, rec)                                                                                   \
    do {                                                                                                       \
        if (ST_TRACE_ENABLED(event)) ST_TRACE_EMIT(event, rec);                                                \
    } while (0)

#elif defined(SIGMATRACE_TRACE_NONE)

#define ST_TRACE_ENABLED(event) false
#define ST_TRACE_EMIT(event, rec) ((void)(rec))
#define ST_TRACE(event, rec) ((void)0)

#else
#error "Define one of SIGMATRACE_TRACE_LTTNG, SIGMATRACE_TRACE_CALLBACK, SIGMATRACE_TRACE_NONE"
#endif
