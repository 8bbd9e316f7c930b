#include "interpose/capture/capture_clock.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace sigmatrace::interpose::capture_clock {

namespace detail {
bool g_use_tsc = false;
}  // namespace detail

namespace {

// The calibration pair and the first rate: see detail::g_use_tsc for why they are process-wide.
uint64_t g_base_ticks = 0;
uint64_t g_base_ns = 0;
double g_first_ns_per_tick = 1.0;
// The trace clock when it is not CLOCK_MONOTONIC (use_trace_clock): set once at the provider's load, before
// any record is converted, read-only afterwards.
uint64_t (*g_trace_clock)() = nullptr;

uint64_t trace_ns() noexcept {
    return g_trace_clock != nullptr ? g_trace_clock() : monotonic_ns();
}

uint64_t raw_ticks() noexcept {
#if defined(__x86_64__)
    if (detail::g_use_tsc) return __rdtsc();
#endif
    return monotonic_ns();
}

bool invariant_tsc() noexcept {
#if defined(__x86_64__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) == 0 || eax < 0x80000007u) return false;
    if (__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (edx & (1u << 8)) != 0;
#else
    return false;
#endif
}

// One (ticks, ns) pair: the trace-clock read bracketed by two tick reads, ticks at their midpoint; retried when
// a preemption or interrupt widened the bracket.
void read_pair(uint64_t& ticks, uint64_t& ns) noexcept {
    uint64_t best_width = UINT64_MAX;
    for (int i = 0; i < 8; ++i) {
        const uint64_t t0 = raw_ticks();
        const uint64_t n = trace_ns();
        const uint64_t t1 = raw_ticks();
        if (t1 - t0 < best_width) {
            best_width = t1 - t0;
            ticks = t0 + (t1 - t0) / 2;
            ns = n;
        }
    }
}

// The base pair and the first rate, against the current trace clock.
void take_base() noexcept {
    uint64_t t0 = 0, n0 = 0, t1 = 0, n1 = 0;
    read_pair(t0, n0);
    do read_pair(t1, n1);
    while (n1 - n0 < 50000);  // 50 µs: the first rate within ~0.1%, used only for bounds until drains refine it
    g_first_ns_per_tick = static_cast<double>(n1 - n0) / static_cast<double>(t1 - t0);
    g_base_ticks = t0;
    g_base_ns = n0;
}

}  // namespace

void calibrate() noexcept {
    if (g_base_ns != 0) return;
    detail::g_use_tsc = invariant_tsc();
    if (!detail::g_use_tsc) {
        g_base_ticks = g_base_ns = monotonic_ns();
        return;
    }
    take_base();
}

void use_trace_clock(uint64_t (*read)()) noexcept {
    g_trace_clock = read;
    take_base();
}

Anchor anchor_now() noexcept {
    Anchor a;
    if (!detail::g_use_tsc && g_trace_clock == nullptr) {
        a.ticks = a.ns = monotonic_ns();
        return a;
    }
    read_pair(a.ticks, a.ns);
    // The rate over everything since calibration: the longer the base, the smaller the error of the pairs.
    const uint64_t dt = a.ticks - g_base_ticks;
    a.ns_per_tick = (dt > 0 && a.ns > g_base_ns && a.ns - g_base_ns >= 50000)
                        ? static_cast<double>(a.ns - g_base_ns) / static_cast<double>(dt)
                        : g_first_ns_per_tick;
    return a;
}

uint64_t ticks_for_ns(uint64_t ns) noexcept {
    if (!detail::g_use_tsc) return ns;
    return static_cast<uint64_t>(static_cast<double>(ns) / g_first_ns_per_tick);
}

}  // namespace sigmatrace::interpose::capture_clock
