// The clock of deferred capture: what the data path reads for a record's capture time, and how a consumer turns
// it into the trace clock (CLOCK_MONOTONIC ns, lttng-ust's default clock) when it emits the event.
//
// Why not clock_gettime on the data path: through the vDSO it costs ~20 ns here, and a latency-bound message
// crosses three captures (the poll that returns the receive, the repost, the reply's post); the TSC costs ~9 ns.
// The kernel's own monotonic clock reads the same TSC (clocksource "tsc"), so converting is a matter of one
// (ticks, ns) anchor taken when the consumer starts and the rate measured since the library calibrated: a
// record is at most the age bound old (~1 ms), so a rate error of a few ppm moves it by nanoseconds.
//
// The TSC is used only where the CPU says it is invariant (CPUID 0x80000007 EDX bit 8: constant rate, runs in
// every C-state, synchronised across CPUs); elsewhere ticks are CLOCK_MONOTONIC ns and conversion is identity.
#pragma once

#include <time.h>

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace sigmatrace::interpose::capture_clock {

inline uint64_t monotonic_ns() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace detail {
// Written once by calibrate() (library constructor, single-threaded), read-only afterwards: a process-wide
// property of the machine, so one copy for all threads.
extern bool g_use_tsc;
}  // namespace detail

// The capture time of a record: TSC ticks, or CLOCK_MONOTONIC ns without an invariant TSC.
inline uint64_t now_ticks() noexcept {
#if defined(__x86_64__)
    if (detail::g_use_tsc) [[likely]] return __rdtsc();
#endif
    return monotonic_ns();
}

// The capture time when reading it takes no call (the TSC): false where the clock is clock_gettime, a call.
// For data-path fast paths that hand every case needing a call to their general path, and so make no call.
inline bool now_ticks_without_call(uint64_t& ticks) noexcept {
#if defined(__x86_64__)
    if (detail::g_use_tsc) [[likely]] {
        ticks = __rdtsc();
        return true;
    }
#endif
    (void)ticks;
    return false;
}

// Library constructor: decides TSC or not and takes the first (ticks, ns) pair with a first rate estimate
// (~50 µs of measuring). Safe to call again (a forked child keeps its parent's calibration).
void calibrate() noexcept;

// The trace clock is not CLOCK_MONOTONIC: lttng-ust loaded a clock plugin (LTTNG_UST_CLOCK_PLUGIN), whose
// `read` stamps the events, so records must be converted to the same clock. Called once, when the provider is
// loaded and before tracing starts; calibrates again against `read` (~50 µs). Without an invariant TSC, ticks
// stay CLOCK_MONOTONIC ns and are converted through anchors like TSC ticks.
void use_trace_clock(uint64_t (*read)()) noexcept;

// A conversion point, taken by a consumer before it emits a run of records.
struct Anchor {
    uint64_t ticks = 0;
    uint64_t ns = 0;
    double ns_per_tick = 1.0;
};
Anchor anchor_now() noexcept;

// Trace-clock ns of a capture time no later than the anchor (records are captured before they are consumed).
inline uint64_t to_ns(const Anchor& a, uint64_t ticks) noexcept {
    if (ticks >= a.ticks) return a.ns + static_cast<uint64_t>(static_cast<double>(ticks - a.ticks) * a.ns_per_tick);
    const auto back = static_cast<uint64_t>(static_cast<double>(a.ticks - ticks) * a.ns_per_tick);
    return back < a.ns ? a.ns - back : 0;
}

// A duration in ticks (the age bound, the emitter's cutoff): the first rate estimate is precise enough.
uint64_t ticks_for_ns(uint64_t ns) noexcept;

}  // namespace sigmatrace::interpose::capture_clock
