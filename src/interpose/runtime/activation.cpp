#include "interpose/runtime/activation.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "interpose/capture/capture_clock.h"
#include "interpose/runtime/config.h"
#include "interpose/capture/counters_emitter.h"
#include "interpose/capture/deferred_rings.h"
#include "interpose/capture/fatal_signals.h"
#include "interpose/state/process_identity.h"
#include "provider/trace.h"

namespace sigmatrace::interpose {
namespace {

enum State : int { kIdle = 0, kLoading = 1, kDone = 2 };

// Process-wide by nature (one provider per process). Written by the activating thread, read by set-up hooks.
std::atomic<int> g_state{kIdle};
std::atomic<ProviderLoader> g_loader{nullptr};
std::atomic<const LttngForkHooks*> g_fork_hooks{nullptr};
std::atomic<const LttngFdGuard*> g_fd_guard{nullptr};
std::atomic<LttngInitThread> g_init_thread{nullptr};
// Initial-exec TLS: read by the fork wrapper, which may run inside the dynamic loader (dlopen of the provider).
__thread bool tls_activating __attribute__((tls_model("initial-exec"))) = false;

void write_all(int fd, const char* text, size_t n) {
    while (n > 0) {
        const ssize_t w = ::write(fd, text, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        text += w;
        n -= static_cast<size_t>(w);
    }
}

// Writes what snprintf put in `buf` (of `size` bytes; `n` its return value, truncated output included).
void write_formatted(int fd, const char* buf, size_t size, int n) {
    if (n > 0) write_all(fd, buf, static_cast<size_t>(n) < size ? static_cast<size_t>(n) : size - 1);
}

// The process's command name, for messages ("mpirun", "ib_write_bw").
void command_name(char* out, size_t size) {
    out[0] = '\0';
    const int fd = ::open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    const ssize_t n = ::read(fd, out, size - 1);
    ::close(fd);
    if (n <= 0) return;
    out[n] = '\0';
    for (char* c = out; *c != '\0'; ++c)
        if (*c == '\n' || *c == ' ') *c = '\0';
}

// `sigmatrace record` hands every traced process a report file (SIGMATRACE_RECORD_REPORT) and reads it after the
// run: one line per process that used RDMA, saying whether its events reach the session. It is how record
// tells "nothing used RDMA" from "a process used RDMA and could not be traced". O_APPEND writes of one short
// line do not interleave. No O_CREAT: on a node where record's directory does not exist, nothing is written.
// "partial": the process's events reach the session, but its registration did not complete while lttng-ust
// waited for it, so some of them may not (below).
enum class Outcome { traced, partial, not_traced };

void report_to_record(Outcome outcome, const std::string& reason) {
    const std::string& path = config().record_report;
    if (path.empty()) return;
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return;
    char comm[32];
    command_name(comm, sizeof comm);
    char line[512];
    const char* word = outcome == Outcome::traced ? "traced" : outcome == Outcome::partial ? "partial" : "not-traced";
    const int n = outcome == Outcome::traced
                      ? std::snprintf(line, sizeof line, "traced pid=%d comm=%s\n", static_cast<int>(getpid()), comm)
                      : std::snprintf(line, sizeof line, "%s pid=%d comm=%s reason=%s\n", word,
                                      static_cast<int>(getpid()), comm, reason.c_str());
    write_formatted(fd, line, sizeof line, n);
    ::close(fd);
}

// lttng-ust's constructor (run inside the load) waits for the session daemon's "registration done" at most
// LTTNG_UST_REGISTER_TIMEOUT, then lets the program go on while its listener thread finishes the registration.
// Until then the session's objects may be only partly in place. In the one such case seen (a starved machine),
// the process's events were enabled, yet everything it wrote on one of the two CPUs was lost without being
// counted as discarded: consistent with that CPU's buffer not being mapped yet (lttng-ust's reserve returns
// -EIO for a buffer it does not have, and nothing counts it). Nothing public says whether the wait ran out;
// its length does: a load that lasted the whole timeout is one whose wait ran out.
bool registration_wait_ran_out(uint64_t load_ns) {
    const long timeout_ms = config().register_timeout_ms;
    return timeout_ms > 0 && load_ns >= static_cast<uint64_t>(timeout_ms) * 1000000;
}

void load_provider() {
    const ProviderLoader loader = g_loader.load(std::memory_order_acquire);
    if (loader == nullptr) return;  // unit tests, benchmark: the provider is linked in (or the callback backend)
    tls_activating = true;
    const uint64_t start = capture_clock::monotonic_ns();
    const ProviderLoad result = loader();
    const uint64_t load_ns = capture_clock::monotonic_ns() - start;
    tls_activating = false;
    if (!result.loaded) {
        char msg[768];
        const int n = std::snprintf(msg, sizeof msg,
                                    "sigmatrace: cannot load the LTTng provider: %s; this process (pid %d) is NOT "
                                    "traced (reinstall SigmaTrace, or set SIGMATRACE_PROVIDER to the library)\n",
                                    result.error.c_str(), static_cast<int>(getpid()));
        write_formatted(STDERR_FILENO, msg, sizeof msg, n);
        report_to_record(Outcome::not_traced, "provider: " + result.error);
        return;
    }
    // Deferred emission: records a thread has not emitted yet must not die with a crash or a kill.
    if (config().mode == Mode::ops && config().defer) {
        install_fatal_signal_handlers();
        deferred::tracing_started();
    }
    counters_tracing_started();
    // The provider registered with the session daemon while loading (lttng-ust waits up to
    // LTTNG_UST_REGISTER_TIMEOUT); a recording session enables every sigmatrace event, so a disabled
    // process_info here means the registration did not complete in time.
    if (!ST_TRACE_ENABLED(process_info)) {
        report_to_record(Outcome::not_traced, "no recording session reached this process (registration with the "
                                              "session daemon did not complete within LTTNG_UST_REGISTER_TIMEOUT)");
        return;
    }
    if (!registration_wait_ran_out(load_ns)) {
        report_to_record(Outcome::traced, {});
        return;
    }
    char reason[256];
    std::snprintf(reason, sizeof reason,
                  "registration with the session daemon not complete after %.1f s (LTTNG_UST_REGISTER_TIMEOUT=%ld ms); "
                  "events of this process may be missing from the trace",
                  static_cast<double>(load_ns) / 1e9, config().register_timeout_ms);
    char msg[512];
    const int n = std::snprintf(msg, sizeof msg,
                                "sigmatrace: %s (pid %d; an overloaded machine or session daemon: raise "
                                "LTTNG_UST_REGISTER_TIMEOUT)\n",
                                reason, static_cast<int>(getpid()));
    write_formatted(STDERR_FILENO, msg, sizeof msg, n);
    report_to_record(Outcome::partial, reason);
}

}  // namespace

void set_provider_loader(ProviderLoader loader) noexcept {
    g_loader.store(loader, std::memory_order_release);
}

void activate_tracing() noexcept {
    if (g_state.load(std::memory_order_acquire) == kDone) {
        emit_process_info_once();  // cheap when done; emits again in a forked child
        return;
    }
    if (config().mode == Mode::off) return;
    int expected = kIdle;
    if (g_state.compare_exchange_strong(expected, kLoading, std::memory_order_acq_rel)) {
        const int saved = errno;
        load_provider();
        g_state.store(kDone, std::memory_order_release);
        errno = saved;
    } else if (expected == kLoading) {
        if (tls_activating) return;  // reached again from inside the load
        // Another thread is loading (and maybe waiting for the session daemon): its events, and ours, need the
        // provider, so wait for it rather than emit into nothing.
        const timespec pause{0, 1000000};
        while (g_state.load(std::memory_order_acquire) == kLoading) nanosleep(&pause, nullptr);
    }
    emit_process_info_once();
}

bool activate_tracing_for_salvage() noexcept {
    // No process_info and no report line: the salvaging process is not one of the traced command's.
    int expected = kIdle;
    if (g_state.compare_exchange_strong(expected, kLoading, std::memory_order_acq_rel)) {
        if (const ProviderLoader loader = g_loader.load(std::memory_order_acquire); loader != nullptr) (void)loader();
        g_state.store(kDone, std::memory_order_release);
    }
    return ST_TRACE_ENABLED(deferred_records);
}

bool tracing_activated() noexcept {
    return g_state.load(std::memory_order_acquire) == kDone;
}

const LttngForkHooks* lttng_fork_hooks() noexcept {
    return g_fork_hooks.load(std::memory_order_acquire);
}

void set_lttng_fork_hooks(const LttngForkHooks* hooks) noexcept {
    g_fork_hooks.store(hooks, std::memory_order_release);
}

const LttngFdGuard* lttng_fd_guard() noexcept {
    return g_fd_guard.load(std::memory_order_acquire);
}

void set_lttng_fd_guard(const LttngFdGuard* guard) noexcept {
    g_fd_guard.store(guard, std::memory_order_release);
}

LttngInitThread lttng_init_thread() noexcept {
    return g_init_thread.load(std::memory_order_acquire);
}

void set_lttng_init_thread(LttngInitThread fn) noexcept {
    g_init_thread.store(fn, std::memory_order_release);
}

bool activating_on_this_thread() noexcept {
    return tls_activating;
}

void activation_after_fork_child() noexcept {
    // Only the forking thread exists in the child. If another thread was in the middle of loading the provider,
    // that load never completes here: the child stays untraced rather than wait forever.
    if (!tls_activating && g_state.load(std::memory_order_relaxed) == kLoading)
        g_state.store(kDone, std::memory_order_relaxed);
}

void reset_activation_for_testing() noexcept {
    g_state.store(kIdle, std::memory_order_relaxed);
    g_loader.store(nullptr, std::memory_order_relaxed);
    g_fork_hooks.store(nullptr, std::memory_order_relaxed);
    g_fd_guard.store(nullptr, std::memory_order_relaxed);
    g_init_thread.store(nullptr, std::memory_order_relaxed);
}

}  // namespace sigmatrace::interpose
