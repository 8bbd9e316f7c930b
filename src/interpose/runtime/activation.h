// When tracing starts in a process: at its first RDMA use, not when libsigmatrace.so loads.
//
// libsigmatrace.so is preloaded into every process of a recorded command: launchers (mpirun, orted), shells,
// the `sigmatrace` front end, compilers. Those never touch verbs, and must not load liblttng-ust: its listener
// threads and session-daemon state live through the process's fork/close-all-fds/exec sequences, and Open
// MPI's launcher, which closes every descriptor in the forked child before exec, makes lttng-ust abort
// (docs/interpose.md, "When tracing starts"). So libsigmatrace.so links no liblttng-ust; the first set-up
// hook a process reaches (device list, device open/import, mlx5dv_open_device, object creation, the GPU
// module's DevX and init_obj hooks) calls activate_tracing(), which loads the LTTng provider library (through
// the loader the preload library installs) and then emits process_info.
//
// Unit tests and the benchmark install no loader (their provider is linked in or is the callback backend):
// activation then only emits process_info.
#pragma once

#include <signal.h>

#include <cstdio>

#include <string>

namespace sigmatrace::interpose {

// What a loader reports.
struct ProviderLoad {
    bool loaded = false;
    std::string error;  // why not, when !loaded ("dlopen(<path>): <dlerror>")
};
using ProviderLoader = ProviderLoad (*)();

// Installed by libsigmatrace.so's constructor, before the program runs.
void set_provider_loader(ProviderLoader loader) noexcept;
// libsigmatrace.so's loader (provider_loader.cpp: dlopen of lib/sigmatrace/libsigmatrace-lttng.so).
void install_lttng_provider_loader() noexcept;

// Loads the provider on the first call in this process (other threads calling meanwhile wait for that load),
// then emits process_info (again after a fork: see process_identity.h). Later calls cost one acquire load.
// Set-up paths only: the first call may wait for the session daemon's registration
// (LTTNG_UST_REGISTER_TIMEOUT).
void activate_tracing() noexcept;

// True once this process's first RDMA use has loaded the provider (or tried to).
bool tracing_activated() noexcept;

// Record's salvage step (ring_file.h): loads the provider without identifying this process (no process_info, no
// report line). Returns whether deferred_records events reach a session.
bool activate_tracing_for_salvage() noexcept;

// lttng-ust's fork hooks (the calls liblttng-ust-fork.so makes), once the provider is loaded; nullptr before.
struct LttngForkHooks {
    void (*before_fork)(sigset_t*);
    void (*after_fork_parent)(sigset_t*);
    void (*after_fork_child)(sigset_t*);
};
const LttngForkHooks* lttng_fork_hooks() noexcept;
void set_lttng_fork_hooks(const LttngForkHooks* hooks) noexcept;  // by the loader

// lttng-ust's file-descriptor tracker (the calls liblttng-ust-fd.so makes), once the provider is loaded; nullptr
// before. A process that closes descriptors it did not open — Open MPI's launcher closing everything in a
// forked child before exec — would otherwise close lttng-ust's sockets and shared memory under its listener
// threads, which then abort (fd_hooks.cpp).
struct LttngFdGuard {
    int (*safe_close)(int fd, int (*close_cb)(int));
    int (*safe_fclose)(FILE* stream, int (*fclose_cb)(FILE*));
    int (*safe_closefrom)(int lowfd, int (*close_cb)(int));
};
const LttngFdGuard* lttng_fd_guard() noexcept;
void set_lttng_fd_guard(const LttngFdGuard* guard) noexcept;  // by the loader

// lttng_ust_init_thread, once the provider is loaded (nullptr before): a thread whose records a signal handler
// may emit must have lttng-ust's thread-local state allocated first (lttng-ust uses global-dynamic TLS, whose
// first touch can allocate; include/lttng/ust-thread.h).
using LttngInitThread = void (*)();
LttngInitThread lttng_init_thread() noexcept;
void set_lttng_init_thread(LttngInitThread fn) noexcept;  // by the loader

// True on the thread that is loading the provider (lttng-ust forks internally while it starts).
bool activating_on_this_thread() noexcept;

// In a forked child: a load that another thread had in progress will never finish there.
void activation_after_fork_child() noexcept;

// Tests only: back to "never activated", no loader.
void reset_activation_for_testing() noexcept;

}  // namespace sigmatrace::interpose
