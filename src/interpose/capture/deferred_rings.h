// The rings of deferred emission (deferred_ring.h), and when their records become events.
//
// A thread gets a ring the first time it captures (allocated then, never on the data path afterwards); the
// ring goes back to a free list when the thread exits and is reused by the next thread that needs one. Rings
// are never freed, so any consumer can walk the list at any time.
//
// Records become LTTng events (drained):
//   - by their own thread when it is idle: an empty poll (ibv_poll_cq returning 0, an empty start_poll) drains
//     everything once 16 KiB wait (kIdleDrainBytes) or the oldest record is half the age bound old; before
//     blocking in ibv_get_cq_event, and before destroying a QP/CQ or closing a device, everything;
//   - by their own thread on the data path when the ring is full, or when its oldest record is older than the
//     age bound (SIGMATRACE_DEFER_MAX_AGE_US) at the next capture;
//   - by the emitter thread (SCHED_IDLE), every age bound, for records older than two bounds: a thread that
//     stops posting still gets its events out (with the emitter's vtid: an event's vtid context is the thread
//     that emitted it, which is the capturing thread unless that thread stopped calling verbs or exited);
//   - at thread exit (that thread's ring), by an exit()/quick_exit() handler and the library destructor, before
//     exec* and _exit (every ring), before fork
//     (the forking thread's ring; a forked child drops what it inherited), and from fatal-signal handlers
//     (fatal_signals.h).
// Consumers of one ring never race: each takes the ring's consumer flag (try-lock; the emitter and signal
// handlers skip a busy ring, the data path and exit paths wait for it). The capture path takes nothing.
#pragma once

#include <cstdint>

#include "interpose/capture/deferred_ring.h"

namespace sigmatrace::interpose::deferred {

// One ring and its place in the process-wide list.
struct RingSlot;

// The calling thread's ring, creating it (and the emitter thread) on first use; nullptr if memory for it
// could not be had (the record is then dropped and counted).
Ring* ring_for_this_thread() noexcept;

// Initial-exec TLS: the data path reads it with one %fs-relative load.
extern __thread Ring* tls_ring __attribute__((tls_model("initial-exec")));

// Records the producer failed to keep (no memory for a ring, a ring it could not empty, a record its thread left
// unfinished at exit): reported on stderr at exit when not 0.
void note_dropped_record() noexcept;

// What a drain does when another consumer holds the ring. That consumer is usually the emitter thread, which runs
// at SCHED_IDLE: on a saturated machine it can wait a long time for a CPU while holding a ring.
enum class Wait : uint8_t {
    no,       // skip the ring (emitter, signal handler, idle points)
    briefly,  // wait up to ~100 ms (the data path when its ring is full: what still does not fit is counted dropped)
    yes,      // wait up to ~5 s (exit paths, thread exit, explicit flushes: records not drained now may be lost)
};

// Drains the calling thread's ring: records captured at or before `cutoff_ts`, at most `max_records`.
// Returns how many were emitted. Preserves errno.
uint32_t drain_own(uint64_t cutoff_ts, uint32_t max_records, Wait wait) noexcept;

// Every ring of the process (exit, exec, _exit, fatal signals), waiting for busy rings as `wait` says.
void drain_all(Wait wait) noexcept;

// Library constructor: the thread-exit key. Created before lttng-ust's own keys (which come with the provider,
// at the first RDMA use) so that glibc, which runs key destructors in key order, drains an exiting thread's
// ring while its lttng-ust state still exists.
void init() noexcept;

// The fork protocol: the parent drains the forking thread's ring first (the fork wrapper, before lttng-ust's
// fork hook); the child (pthread_atfork) drops every inherited record, keeps its own thread's ring and frees
// the others; once lttng-ust is running again in the child (the fork wrapper), it starts its emitter if it
// needs one.
void before_fork() noexcept;
void after_fork_child() noexcept;
void after_fork_child_resume() noexcept;

// Tracing started in this process with deferred emission (after the provider's load): registers the exit() and
// quick_exit() drains, which must run before the provider's probe unregisters (deferred_rings.cpp says why).
void tracing_started() noexcept;

// Stops the emitter thread (library destructor), then drains every ring if events still reach a session; what is left
// stays for record's salvage (ring_file.h) or is reported on stderr.
void shutdown() noexcept;

// Tests: how many rings exist / are owned, and the emitter's state.
struct RingStats {
    uint32_t rings = 0;
    uint32_t owned = 0;
    bool emitter_running = false;
    uint64_t dropped_records = 0;
};
RingStats ring_stats() noexcept;

}  // namespace sigmatrace::interpose::deferred
