// How call sites emit SigmaTrace events. Call sites compile against no backend: each event is
//
//   int st_trace_on_<event>                                   its "enabled" word (non-zero: emit)
//   void sigmatrace::trace::emit_<event>(const st_<event>_rec*)   hands one record to the backend
//
// both hidden, and both defined by whichever backend is linked into the module (rdma-core's one tracing macro,
// chosen at link time instead of per translation unit, so the shim's and the watcher's sources compile once):
//
//   LTTng-UST (provider/trace_lttng_backend.h, in the translation unit that defines the tracepoints:
//     libsigmatrace.so's runtime/tracepoint_definitions.cpp, or sigmatrace_tp.cpp in programs that emit
//     directly). The enabled word is an assembler alias of the tracepoint's own `state` field, so a disabled
//     event costs what lttng_ust_tracepoint_enabled costs: one load and one branch, no extra indirection
//     (docs/architecture.md, "Platform facts"). emit_<event> is the tracepoint's call into the probes.
//   The test callback (trace_callback.cpp, provider/trace_callback.h): unit tests see every record through a
//     function pointer, with no session daemon; the enabled words are set while a callback is.
//
// A module that links call sites and no backend fails to link (libsigmatrace.so links with --no-undefined).
//
//   if (ST_TRACE_ENABLED(post_send)) { ...fill rec...; ST_TRACE_EMIT(post_send, &rec); }
//   ST_TRACE(qp_create, &rec);   // when building the record is cheap
//
// Build expensive arguments (walking a WR chain) only behind ST_TRACE_ENABLED.
#pragma once

#include <sigmatrace/schema.h>

// Hidden: the words and functions are the module's own, resolved without the GOT or the PLT (one load from a
// PC-relative address), and never exported from libsigmatrace.so.
#define SIGMATRACE_TRACE_HIDDEN __attribute__((visibility("hidden")))

// C names: the LTTng backend defines the words with the assembler, by these names.
extern "C" {
#define ST_TRACE_DECLARE_ON_(event, comment) extern SIGMATRACE_TRACE_HIDDEN int st_trace_on_##event;
SIGMATRACE_EVENTS(ST_TRACE_DECLARE_ON_)
#undef ST_TRACE_DECLARE_ON_
}

namespace sigmatrace::trace {
#define ST_TRACE_DECLARE_EMIT_(event, comment) SIGMATRACE_TRACE_HIDDEN void emit_##event(const st_##event##_rec* rec);
SIGMATRACE_EVENTS(ST_TRACE_DECLARE_EMIT_)
#undef ST_TRACE_DECLARE_EMIT_
}  // namespace sigmatrace::trace

// A volatile load, as lttng-ust's own CMM_LOAD_SHARED: the word is written by another thread (the session
// daemon's listener) at any time. Not __atomic_load_n: GCC then lays the test out of line (the disabled path takes
// two more jumps, ~0.3 ns). ThreadSanitizer sees a volatile access as a plain one, so its builds use the atomic
// load (the callback backend's stores are atomic).
#if defined(__SANITIZE_THREAD__)
#define ST_TRACE_LOAD_(word) __atomic_load_n(&(word), __ATOMIC_RELAXED)
#else
#define ST_TRACE_LOAD_(word) (*static_cast<const volatile int*>(&(word)))
#endif
#define ST_TRACE_ENABLED(event) (__builtin_expect(ST_TRACE_LOAD_(::st_trace_on_##event) != 0, 0))
#define ST_TRACE_EMIT(event, rec) ::sigmatrace::trace::emit_##event(rec)
#define ST_TRACE(event, rec)                                                                                   \
    do {                                                                                                       \
        if (ST_TRACE_ENABLED(event)) ST_TRACE_EMIT(event, rec);                                                \
    } while (0)
