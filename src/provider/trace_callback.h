// The test callback backend of provider/trace.h (trace_callback.cpp, target sigmatrace_trace_callback): unit
// tests of the shim and the watcher link it instead of LTTng and see every record, with no session daemon.
#pragma once

#include <sigmatrace/schema.h>

namespace sigmatrace {

// Receives every record while set, on the emitting thread. Test-only hook: process-wide because tracepoints are
// process-wide too; tests set it before exercising the code and clear it after. Setting a callback enables every
// event (ST_TRACE_ENABLED is true); clearing it disables them all.
using TraceCallback = void (*)(EventId id, const void* rec, void* user);
void set_trace_callback(TraceCallback cb, void* user);

}  // namespace sigmatrace
