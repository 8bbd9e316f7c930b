// Turning a captured record (deferred_ring.h) into its LTTng event: the same event, field for field, that
// immediate emission writes from the application's structures (data_events.h), plus `ts`, the capture time.
#pragma once

#include "interpose/deferred_ring.h"

namespace sigmatrace::interpose::deferred {

// Emits `rec`'s event (nothing for a pad record). Allocates nothing, takes no lock: callable from the emitter
// thread, exit paths and signal handlers. May change errno (callers keep it).
void emit_record(const RecordHeader* rec) noexcept;

}  // namespace sigmatrace::interpose::deferred
