// libsigmatrace.so start-up and shutdown.
//
// Start-up reads the configuration and installs the provider loader; it does not start tracing: that waits
// for the process's first RDMA use (activation.h), so launchers, shells and other processes that never touch
// verbs never load liblttng-ust.
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "interpose/capture/capture_clock.h"
#include "interpose/runtime/activation.h"
#include "interpose/runtime/config.h"
#include "interpose/capture/counters_emitter.h"
#include "interpose/capture/deferred_rings.h"
#include "interpose/hooks/gpumem_hooks.h"
#include "interpose/state/object_state.h"
#include "interpose/state/process_identity.h"
#include "interpose/capture/ring_file.h"

using namespace sigmatrace::interpose;

namespace {

const char* env(const char* name) {
    return std::getenv(name);
}

// The registry mutex is held across fork() so that the child never inherits it locked by a thread that does
// not exist there. Runs for every fork, including ones that bypass our fork() export.
void before_fork() {
    Registry::instance().mutex().lock();
}
void after_fork_parent() {
    Registry::instance().mutex().unlock();
}
void after_fork_child() {
    Registry::instance().mutex().unlock();
    counters_after_fork_child();
    deferred::after_fork_child();
    activation_after_fork_child();
    reset_process_info_after_fork();
}

__attribute__((constructor)) void sigmatrace_library_init() {
    capture_clock::calibrate();  // before the configuration: its age bound is kept in clock ticks
    std::string errors;
    set_config(parse_config(&env, &errors));
    if (!errors.empty()) {
        ssize_t ignored = ::write(STDERR_FILENO, errors.data(), errors.size());
        (void)ignored;
    }
    pthread_atfork(&before_fork, &after_fork_parent, &after_fork_child);
    deferred::init();
    install_lttng_provider_loader();
}

// The library's only constructor and destructor besides the tracepoint definitions' (which run before and
// after them whatever the link order: tracepoint_definitions.cpp) and exit_hooks.cpp's, which shares nothing with
// these. No namespace-scope object of the library has a dynamic initialiser (tests/interpose/
// init_order_test.sh checks it), so nothing here depends on the order in which the linker laid them out.
__attribute__((destructor)) void sigmatrace_library_fini() {
    // The GPU watcher's final sweep, then the deferred records of every thread, then (counters mode) the
    // remainder of every live QP. The tracepoint definitions unregister after this destructor, but after exit()
    // the provider's probe has already unregistered (deferred_rings.cpp, drain_at_exit): deferred::shutdown then
    // keeps what is left for record's salvage (the exit handler registered when tracing started drained
    // everything captured before it).
    if (sigmatrace_gpumem_shutdown != nullptr) sigmatrace_gpumem_shutdown();
    deferred::shutdown();
    counters_shutdown();
}

}  // namespace

// `sigmatrace record`'s salvage step, run as `sigmatrace salvage-rings DIR` with libsigmatrace.so preloaded after the
// command ended (tools/record): emits what the command's processes left in their ring files (ring_file.h). Writes
// one line to `out` ("records=N processes=P lost=L live=R unreadable=U", or "error=..."); returns 0, or 1 when it
// could not salvage at all.
extern "C" __attribute__((visibility("default"))) int sigmatrace_salvage_rings(const char* dir, char* out, size_t size) {
    if (!activate_tracing_for_salvage()) {
        std::snprintf(out, size, "error=no recording session reaches the salvaging process");
        return 1;
    }
    deferred::SalvageCounts c;
    const char* error = nullptr;
    if (!deferred::salvage_rings(dir, &c, &error)) {
        std::snprintf(out, size, "error=%s (%s)", error, dir);
        return 1;
    }
    std::snprintf(out, size, "records=%llu processes=%u lost=%llu live=%u unreadable=%u",
                  static_cast<unsigned long long>(c.records), c.processes, static_cast<unsigned long long>(c.lost),
                  c.live, c.unreadable);
    return 0;
}
