// Deferred emission and signals that end the process: records a thread captured but has not emitted yet would
// die with it. When tracing starts with deferred emission, handlers are installed for the crash signals
// (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS: unless ignored) and for the termination signals
// whose action is still the default (SIGTERM, SIGINT, SIGHUP, SIGQUIT: what launchers and timeouts send). The
// handler emits the receiving thread's records, then every other thread's (rings another consumer holds are
// skipped: try-lock only), and hands the signal on: to the handler that was installed before (called as it
// would have been), or — for the default action — restores it and raises the signal again, so the process
// ends exactly as it would have (same signal, same core dump).
//
// LTTng-UST tracepoints may run in signal handlers once the thread's lttng-ust state exists
// (include/lttng/ust-thread.h: lttng_ust_init_thread, called when a thread gets its ring; its ring buffer
// supports nesting over an interrupted event); draining allocates nothing and takes no lock.
//
// A handler the application installs later replaces ours (and may chain to it). SIGKILL cannot be caught: under
// `sigmatrace record` the rings are files that record salvages after the process is gone (ring_file.h), as it
// does the rings a handler skipped; elsewhere a killed thread loses the records of at most its last
// SIGMATRACE_DEFER_MAX_AGE_US (docs/interpose.md, "Exit paths").
#pragma once

namespace sigmatrace::interpose {

// Installs the handlers once per process (called when tracing starts, deferred emission only).
void install_fatal_signal_handlers() noexcept;

// Tests: puts back the actions that were in place before.
void uninstall_fatal_signal_handlers_for_testing() noexcept;

}  // namespace sigmatrace::interpose
