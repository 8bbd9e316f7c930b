// libsoftfabric-clock.so: an LTTng-UST clock plugin (LTTNG_UST_CLOCK_PLUGIN) that gives a fabric node the clock
// of a host whose clock is off: the trace clock reads
//
//     t + offset + drift * (t - epoch)        t: CLOCK_MONOTONIC ns
//
// with offset (ns), drift (parts per million) and epoch (the fabric's start, shared by every node, so that all
// nodes' clocks agree at offset 0 and drift 0) from SOFTFABRIC_CLOCK_OFFSET_NS, SOFTFABRIC_CLOCK_DRIFT_PPM and
// SOFTFABRIC_CLOCK_EPOCH_NS. `sigmatrace fabric` sets them, and this plugin, for the nodes its configuration
// gives a `clock` statement (docs/softfabric.md). It is the ground truth of clock-alignment tests: what the
// analyzer recovers from the traffic is compared with what was injected here.
//
// The clock keeps the name, description and frequency of lttng-ust's default (monotonic, ns): the session
// daemon describes that clock in the trace's metadata, so a skewed node's events carry skewed times in a trace
// that says nothing of it, as a host with a wrong clock would.
#include <lttng/ust-clock.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

// Read from the environment once, by lttng-ust's constructor (single-threaded), read-only afterwards: the clock
// callback takes no argument, so its parameters can only live here.
struct Skew {
    int64_t offset_ns = 0;
    double drift = 0;  // fraction, not ppm
    uint64_t epoch_ns = 0;
};
Skew g_skew;

uint64_t monotonic_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t skewed_read64() {
    const uint64_t t = monotonic_ns();
    const double since = static_cast<double>(static_cast<int64_t>(t - g_skew.epoch_ns));
    return t + static_cast<uint64_t>(g_skew.offset_ns + static_cast<int64_t>(since * g_skew.drift));
}

uint64_t freq() { return 1000000000ull; }
const char* name() { return "monotonic"; }
const char* description() { return "Monotonic Clock"; }

bool parse(const char* var, double* out) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') return true;
    char* end = nullptr;
    *out = std::strtod(v, &end);
    return end != v && *end == '\0';
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void lttng_ust_clock_plugin_init() {
    double offset = 0, drift_ppm = 0, epoch = 0;
    if (!parse("SOFTFABRIC_CLOCK_OFFSET_NS", &offset) || !parse("SOFTFABRIC_CLOCK_DRIFT_PPM", &drift_ppm) ||
        !parse("SOFTFABRIC_CLOCK_EPOCH_NS", &epoch)) {
        std::fprintf(stderr, "libsoftfabric-clock: SOFTFABRIC_CLOCK_OFFSET_NS, _DRIFT_PPM or _EPOCH_NS is not a "
                             "number; the trace clock is left unskewed\n");
        return;
    }
    g_skew.offset_ns = static_cast<int64_t>(offset);
    g_skew.drift = drift_ppm * 1e-6;
    g_skew.epoch_ns = static_cast<uint64_t>(epoch);
    if (lttng_ust_trace_clock_set_read64_cb(&skewed_read64) != 0 || lttng_ust_trace_clock_set_freq_cb(&freq) != 0 ||
        lttng_ust_trace_clock_set_name_cb(&name) != 0 || lttng_ust_trace_clock_set_description_cb(&description) != 0 ||
        lttng_ust_enable_trace_clock_override() != 0)
        std::fprintf(stderr, "libsoftfabric-clock: lttng-ust refused the clock override; the trace clock is left "
                             "unskewed\n");
}
