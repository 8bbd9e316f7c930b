// Loading lib/sigmatrace/libsigmatrace-lttng.so, the LTTng provider, on a process's first RDMA use
// (activation.h says why not at start-up). libsigmatrace.so only: unit tests and the benchmark link their
// provider.
//
// The library is found beside libsigmatrace.so (lib/ -> lib/sigmatrace/), the same relocatable layout the
// tools use, or at SIGMATRACE_PROVIDER. dlopen runs liblttng-ust's constructor — it starts the listener
// threads and waits for the session daemon's registration — then the probe's, which registers the
// "sigmatrace" events and connects our call sites. The handle is never closed (lttng-ust: a provider in use
// must not be dlclose'd).
#include <dlfcn.h>
#include <limits.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "interpose/capture/capture_clock.h"
#include "interpose/runtime/activation.h"
#include "interpose/runtime/config.h"
#include "interpose/runtime/real_symbol.h"

namespace sigmatrace::interpose {
namespace {

constexpr const char* kProviderRelative = "sigmatrace/libsigmatrace-lttng.so";

std::string default_provider_path() {
    Dl_info info{};
    // Any function of libsigmatrace.so locates it.
    if (dladdr(reinterpret_cast<const void*>(&default_provider_path), &info) == 0 || info.dli_fname == nullptr)
        return {};
    std::string self = info.dli_fname;
    const size_t slash = self.rfind('/');
    if (slash == std::string::npos) return kProviderRelative;  // loaded by bare name: relative to the cwd is all we know
    return self.substr(0, slash + 1) + kProviderRelative;
}

// Filled once, by the one loading thread, before being published.
LttngForkHooks g_hooks{};
LttngFdGuard g_fd_guard{};

template <typename Fn> void find(void* handle, const char* name, Fn* out) {
    *out = reinterpret_cast<Fn>(real_dlsym(handle, name));
}

ProviderLoad load_lttng_provider() {
    ProviderLoad r;
    std::string path = config().provider_path;
    if (path.empty()) path = default_provider_path();
    if (path.empty()) {
        r.error = "cannot locate libsigmatrace.so (dladdr failed), so not its provider either";
        return r;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = dlerror();
        r.error = "dlopen(" + path + "): " + (why != nullptr ? why : "unknown error");
        return r;
    }
    // liblttng-ust (and its liblttng-ust-common) are the provider's dependencies: a lookup through the
    // provider's handle finds their exports (all of them since lttng-ust 2.13).
    find(handle, "lttng_ust_before_fork", &g_hooks.before_fork);
    find(handle, "lttng_ust_after_fork_parent", &g_hooks.after_fork_parent);
    find(handle, "lttng_ust_after_fork_child", &g_hooks.after_fork_child);
    if (g_hooks.before_fork != nullptr && g_hooks.after_fork_parent != nullptr && g_hooks.after_fork_child != nullptr)
        set_lttng_fork_hooks(&g_hooks);
    LttngInitThread init_thread = nullptr;
    find(handle, "lttng_ust_init_thread", &init_thread);
    set_lttng_init_thread(init_thread);
    find(handle, "lttng_ust_safe_close_fd", &g_fd_guard.safe_close);
    find(handle, "lttng_ust_safe_fclose_stream", &g_fd_guard.safe_fclose);
    find(handle, "lttng_ust_safe_closefrom_fd", &g_fd_guard.safe_closefrom);
    if (g_fd_guard.safe_close != nullptr && g_fd_guard.safe_fclose != nullptr && g_fd_guard.safe_closefrom != nullptr)
        set_lttng_fd_guard(&g_fd_guard);
    // A clock plugin stamps the events with its clock: the records' capture times follow it.
    if (const char* plugin = std::getenv("LTTNG_UST_CLOCK_PLUGIN"); plugin != nullptr && *plugin != '\0') {
        using Read64 = uint64_t (*)();
        int (*get_read64)(Read64*) = nullptr;
        find(handle, "lttng_ust_trace_clock_get_read64_cb", &get_read64);
        Read64 read64 = nullptr;
        if (get_read64 != nullptr && get_read64(&read64) == 0 && read64 != nullptr) capture_clock::use_trace_clock(read64);
    }
    r.loaded = true;
    return r;
}

}  // namespace

// Called by the library constructor.
void install_lttng_provider_loader() noexcept {
    set_provider_loader(&load_lttng_provider);
}

}  // namespace sigmatrace::interpose
