// The callback backend of provider/trace.h (provider/trace_callback.h), used by unit tests.
#include "provider/trace_callback.h"

#include <atomic>

#include "provider/trace.h"

// The enabled words: process-wide and mutable because the real backend's (tracepoint state) are; written only by
// set_trace_callback, between a test's runs.
extern "C" {
#define ST_CALLBACK_ON_(event, comment) SIGMATRACE_TRACE_HIDDEN int st_trace_on_##event = 0;
SIGMATRACE_EVENTS(ST_CALLBACK_ON_)
#undef ST_CALLBACK_ON_
}

namespace sigmatrace {
namespace {
std::atomic<TraceCallback> g_callback{nullptr};
std::atomic<void*> g_user{nullptr};

void emit(EventId id, const void* rec) {
    if (auto cb = g_callback.load(std::memory_order_acquire)) cb(id, rec, g_user.load(std::memory_order_relaxed));
}
}  // namespace

void set_trace_callback(TraceCallback cb, void* user) {
    g_user.store(user, std::memory_order_relaxed);
    g_callback.store(cb, std::memory_order_release);
    const int on = cb != nullptr ? 1 : 0;
#define ST_CALLBACK_SET_(event, comment) __atomic_store_n(&st_trace_on_##event, on, __ATOMIC_RELAXED);
    SIGMATRACE_EVENTS(ST_CALLBACK_SET_)
#undef ST_CALLBACK_SET_
}

#define ST_CALLBACK_EMIT_(event, comment)                                                                      \
    void trace::emit_##event(const st_##event##_rec* rec) { emit(EventId::event, rec); }
SIGMATRACE_EVENTS(ST_CALLBACK_EMIT_)
#undef ST_CALLBACK_EMIT_

}  // namespace sigmatrace
