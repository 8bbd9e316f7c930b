// The tracer's knobs (SIGMATRACE_* environment variables, documented with their defaults in
// docs/configuration.md), read once when libsigmatrace.so loads.
//
// The data path reads one word, data_path_flags(), derived from the configuration: one load and a test per
// wrapped call.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace sigmatrace::interpose {

enum class Mode : uint32_t {
    ops = 0,       // per-operation events (default)
    counters = 1,  // per-QP counters, emitted periodically as qp_counters
    off = 2,       // wrap nothing: the library only forwards calls
};

// Event categories (SIGMATRACE_EVENTS). Set-up events (process, device, object life) are always emitted:
// without them no other event can be interpreted.
enum Category : uint32_t {
    kCategorySend = 1u << 0,    // post_send (ibv_post_send and the ibv_wr_* API)
    kCategoryRecv = 1u << 1,    // post_recv, post_srq_recv
    kCategoryPoll = 1u << 2,    // poll_cq (ibv_poll_cq and extended-CQ poll passes)
    kCategoryNotify = 1u << 3,  // req_notify_cq, cq_event
    kCategoryAll = kCategorySend | kCategoryRecv | kCategoryPoll | kCategoryNotify,
};

// SIGMATRACE_REDACT bits, as written in process_info.redact.
enum Redact : uint32_t {
    kRedactAddresses = 1u << 0,  // remote and registered addresses become 0
    kRedactKeys = 1u << 1,       // rkeys and lkeys become 0
};

struct Config {
    Mode mode = Mode::ops;
    uint32_t categories = kCategoryAll;
    uint32_t redact = 0;
    uint32_t counters_interval_ms = 1000;
    bool debug = false;  // SIGMATRACE_DEBUG=1: say on stderr what gets wrapped
    // Deferred emission of data-path events (deferred_ring.h): SIGMATRACE_DEFER (1 = on, 0 = every event is
    // emitted inside the wrapped call), SIGMATRACE_DEFER_MAX_AGE_US (how long a captured record may wait for
    // its event), SIGMATRACE_DEFER_RING_KB (per-thread ring size).
    bool defer = true;
    uint32_t defer_max_age_us = 1000;
    uint32_t defer_ring_kb = 256;
    // SIGMATRACE_PROVIDER: the LTTng provider library to load on first RDMA use (empty: lib/sigmatrace/
    // libsigmatrace-lttng.so beside libsigmatrace.so).
    std::string provider_path;
    // SIGMATRACE_RECORD_REPORT: set by `sigmatrace record`, the file each process that used RDMA appends one
    // line to (traced or not, and why): see activation.cpp.
    std::string record_report;
    // SIGMATRACE_SALVAGE_DIR: set by `sigmatrace record`, a directory (on /dev/shm) where each capturing thread's
    // deferred-emission ring lives as a file instead of anonymous memory, so that record can emit what a process
    // left in its rings after the process is gone (_exit, SIGKILL): ring_file.h.
    std::string salvage_dir;
    // LTTNG_UST_REGISTER_TIMEOUT as lttng-ust reads it (ms; -1 waits forever, 0 not at all; unset: 3000): how long
    // its constructor, run by the provider's load, waits for the session daemon. A load that lasts that long
    // means lttng-ust gave up waiting, and the registration may never have completed (activation.cpp).
    long register_timeout_ms = 3000;
};

// Parses the SIGMATRACE_* variables through `get` (getenv in the library). Unknown values keep the default and
// append a line to *errors ("sigmatrace: Ignoring SIGMATRACE_MODE=fast: expected ops, counters or off").
Config parse_config(const char* (*get)(const char*), std::string* errors);

// The configuration in force. Set once by the library constructor (and by tests/benchmarks between runs).
const Config& config() noexcept;
void set_config(const Config& c) noexcept;

// Data-path flags derived from the configuration.
enum DataPathFlag : uint32_t {
    kFlagSendEvents = 1u << 0,
    kFlagRecvEvents = 1u << 1,
    kFlagPollEvents = 1u << 2,
    kFlagNotifyEvents = 1u << 3,
    kFlagCounting = 1u << 4,
    kFlagDefer = 1u << 5,  // data-path events are captured into the thread's ring and emitted later
};

namespace detail {
// Written by set_config only (process start, tests); read relaxed on every wrapped call.
inline std::atomic<uint32_t> g_data_path_flags{kFlagSendEvents | kFlagRecvEvents | kFlagPollEvents | kFlagNotifyEvents};
// SIGMATRACE_DEFER_MAX_AGE_US in capture-clock ticks (capture_clock.h), for the data path's age checks;
// set with the flags (the clock is calibrated before the configuration is set).
inline std::atomic<uint64_t> g_defer_max_age_ticks{0};
// What background threads (the deferred-emission emitter) read instead of config(), which a test may replace
// while they run: the age bound in ns and the redaction bits.
inline std::atomic<uint64_t> g_defer_max_age_ns{1000000};
inline std::atomic<uint32_t> g_redact{0};
}  // namespace detail

inline uint32_t data_path_flags() noexcept {
    return detail::g_data_path_flags.load(std::memory_order_relaxed);
}
inline uint64_t defer_max_age_ticks() noexcept {
    return detail::g_defer_max_age_ticks.load(std::memory_order_relaxed);
}
inline uint64_t defer_max_age_ns() noexcept {
    return detail::g_defer_max_age_ns.load(std::memory_order_relaxed);
}
inline uint32_t redact_bits() noexcept {
    return detail::g_redact.load(std::memory_order_relaxed);
}

}  // namespace sigmatrace::interpose
