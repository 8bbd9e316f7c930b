// The watcher's knobs (docs/configuration.md), read once from the environment.
#pragma once

#include <cstdint>

namespace sigmatrace::gpumem {

struct WatcherConfig {
    bool enabled = true;                 // SIGMATRACE_GPU_WATCH (0 disables the watcher thread; set-up is still traced)
    bool autostart = false;              // start the thread when the first queue is learned (the runtime sets it)
    // The sweep period adapts to the risk of losing WQEs: it drops towards the minimum while a ring fills up
    // faster than the watcher drains it (a sweep finding a ring 1/8 full or more), and relaxes towards the
    // maximum otherwise, so the observation delay of a posted WQE stays under the maximum; once no sweep has found
    // anything new for the linger time it keeps relaxing up to the idle period.
    uint64_t min_period_ns = 5'000;      // SIGMATRACE_GPU_WATCH_MIN_PERIOD_US
    uint64_t max_period_ns = 100'000;    // SIGMATRACE_GPU_WATCH_MAX_PERIOD_US
    uint64_t idle_period_ns = 1'000'000; // SIGMATRACE_GPU_WATCH_IDLE_PERIOD_US
    uint64_t linger_ns = 20'000'000;     // SIGMATRACE_GPU_WATCH_LINGER_US
    // SIGMATRACE_GPU_WATCH_GUARD: WQEBBs a producer may be writing beyond its doorbell record while the watcher
    // copies a ring. WQEs that close to being overwritten are counted lost instead of decoded, so a torn copy
    // can never be decoded wrong. -1 = auto: 1/16 of the ring.
    int64_t guard_wqebbs = -1;
    // SIGMATRACE_GPU_WATCH_SETTLE_US: DBR-less queues (no doorbell record to read up to) are read by index
    // scanning, and a WQE found there is decoded only once two sweeps at least this far apart read it
    // byte-identical (index_scanner.h): a WQE still being written is never decoded.
    uint64_t settle_ns = 10'000;
    int cpu = -1;                        // SIGMATRACE_GPU_WATCH_CPU: pin the watcher to this CPU (-1: no pinning)
    bool redact_addresses = false;       // SIGMATRACE_REDACT contains "addr": raddr recorded as 0
    bool redact_keys = false;            // SIGMATRACE_REDACT contains "keys": rkey recorded as 0

    // Reads the variables above; a malformed value is reported on stderr and the default kept.
    static WatcherConfig from_environment();

    uint32_t guard_for(uint32_t wqebbs) const {
        if (guard_wqebbs >= 0) return guard_wqebbs >= wqebbs ? wqebbs : static_cast<uint32_t>(guard_wqebbs);
        return wqebbs / 16;
    }
};

}  // namespace sigmatrace::gpumem
