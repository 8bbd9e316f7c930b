#include "gpumem/watcher_config.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sigmatrace::gpumem {
namespace {

// Parses an integer knob in [lo, hi]; keeps `value` and says why on stderr when the text is not one.
template <typename T> void read_int(const char* name, T& value, long long lo, long long hi) {
    const char* text = std::getenv(name);
    if (!text || !*text) return;
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
        std::fprintf(stderr, "SigmaTrace: ignoring %s=%s: expected an integer in [%lld, %lld]; using %lld\n", name,
                     text, lo, hi, static_cast<long long>(value));
        return;
    }
    value = static_cast<T>(v);
}

}  // namespace

WatcherConfig WatcherConfig::from_environment() {
    WatcherConfig c;
    int enabled = 1;
    read_int("SIGMATRACE_GPU_WATCH", enabled, 0, 1);
    c.enabled = enabled != 0;
    long long min_us = static_cast<long long>(c.min_period_ns / 1000), max_us = static_cast<long long>(c.max_period_ns / 1000);
    long long idle_us = static_cast<long long>(c.idle_period_ns / 1000);
    long long linger_us = static_cast<long long>(c.linger_ns / 1000);
    read_int("SIGMATRACE_GPU_WATCH_MIN_PERIOD_US", min_us, 1, 10'000'000);
    read_int("SIGMATRACE_GPU_WATCH_MAX_PERIOD_US", max_us, 1, 10'000'000);
    read_int("SIGMATRACE_GPU_WATCH_IDLE_PERIOD_US", idle_us, 1, 10'000'000);
    read_int("SIGMATRACE_GPU_WATCH_LINGER_US", linger_us, 0, 100'000'000);
    if (max_us < min_us) {
        std::fprintf(stderr,
                     "SigmaTrace: SIGMATRACE_GPU_WATCH_MAX_PERIOD_US=%lld is below the minimum period %lld us; "
                     "using %lld for both\n", max_us, min_us, min_us);
        max_us = min_us;
    }
    if (idle_us < max_us) idle_us = max_us;  // idle never sweeps faster than busy
    c.min_period_ns = static_cast<uint64_t>(min_us) * 1000;
    c.max_period_ns = static_cast<uint64_t>(max_us) * 1000;
    c.idle_period_ns = static_cast<uint64_t>(idle_us) * 1000;
    c.linger_ns = static_cast<uint64_t>(linger_us) * 1000;
    if (const char* g = std::getenv("SIGMATRACE_GPU_WATCH_GUARD"); g && std::strcmp(g, "auto") != 0)
        read_int("SIGMATRACE_GPU_WATCH_GUARD", c.guard_wqebbs, 0, 1 << 20);
    read_int("SIGMATRACE_GPU_WATCH_CPU", c.cpu, -1, 1 << 16);
    long long settle_us = static_cast<long long>(c.settle_ns / 1000);
    read_int("SIGMATRACE_GPU_WATCH_SETTLE_US", settle_us, 0, 10'000'000);
    c.settle_ns = static_cast<uint64_t>(settle_us) * 1000;
    if (const char* r = std::getenv("SIGMATRACE_REDACT")) {
        c.redact_addresses = std::strstr(r, "addr") != nullptr || std::strcmp(r, "1") == 0 || std::strstr(r, "all");
        c.redact_keys = std::strstr(r, "key") != nullptr || std::strcmp(r, "1") == 0 || std::strstr(r, "all");
    }
    return c;
}

}  // namespace sigmatrace::gpumem
