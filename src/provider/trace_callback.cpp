// The callback backend of provider/trace.h (SIGMATRACE_TRACE_CALLBACK), used by unit tests.
#include "provider/trace.h"

namespace sigmatrace {
namespace {
// Process-wide because the real backend (tracepoints) is process-wide; written only by tests, between runs.
std::atomic<TraceCallback> g_callback{nullptr};
std::atomic<void*> g_user{nullptr};
}  // namespace

void set_trace_callback(TraceCallback cb, void* user) {
    g_user.store(user, std::memory_order_relaxed);
    g_callback.store(cb, std::memory_order_release);
}

bool trace_callback_set() {
    return g_callback.load(std::memory_order_relaxed) != nullptr;
}

void trace_callback_emit(EventId id, const void* rec) {
    if (auto cb = g_callback.load(std::memory_order_acquire)) cb(id, rec, g_user.load(std::memory_order_relaxed));
}

}  // namespace sigmatrace
