// libsigmatrace.so start-up and shutdown.
//
// Start-up reads the configuration and installs the provider loader; it does not start tracing: that waits
// for the process's first RDMA use (activation.h), so launchers, shells and other processes that never touch
// verbs never load liblttng-ust.
#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "interpose/capture_clock.h"
#include "interpose/activation.h"
#include "interpose/config.h"
#include "interpose/counters_emitter.h"
#include "interpose/deferred_rings.h"
#include "interpose/gpumem_hooks.h"
#include "interpose/object_state.h"
#include "interpose/process_identity.h"

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
    // remainder of every live QP, while the tracepoint definitions and the provider (loaded later than this
    // library: finalised after it) still stand.
    if (sigmatrace_gpumem_shutdown != nullptr) sigmatrace_gpumem_shutdown();
    deferred::shutdown();
    counters_shutdown();
}

}  // namespace
