// Counters mode (SIGMATRACE_MODE=counters): the data path only adds to per-QP counters (a few ns per op, no
// event); a background thread emits each QP's qp_counters every SIGMATRACE_COUNTERS_INTERVAL_MS, and a QP's
// remainder is emitted when it is destroyed and when the process exits. Each event carries the totals since
// the previous one for that QP, so summing a QP's events gives its lifetime totals.
#pragma once

#include <cstdint>

#include "interpose/state/object_state.h"

namespace sigmatrace::interpose {

// A QP was added (under the registry mutex): starts the emitter thread if counters mode is on and it is not
// running yet.
void counters_note_qp_added(QpState& s) noexcept;

// Emits what `s` counted since its last event (under the registry mutex).
void counters_flush_qp(QpState& s) noexcept;

// Emits every live QP's remainder and stops the thread (library destructor).
void counters_shutdown() noexcept;

// Tracing started (the provider is loaded): registers the exit()/quick_exit() flush of every live QP's remainder.
// The library destructor is too late for it after exit(): the provider's probe has unregistered by then
// (deferred_rings.cpp, drain_at_exit, says why), and a program that exits with its QPs alive lost every count.
void counters_tracing_started() noexcept;

// In a forked child: the parent's thread does not exist there.
void counters_after_fork_child() noexcept;

}  // namespace sigmatrace::interpose
