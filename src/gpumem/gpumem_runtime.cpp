#include "gpumem/gpumem_runtime.h"

#include <pthread.h>

#include <atomic>
#include <mutex>

namespace sigmatrace::gpumem {
namespace {

std::atomic<GpuMemRuntime*> g_runtime{nullptr};  // process-wide by nature: the hooks are process-wide

WatcherConfig runtime_config() {
    WatcherConfig c = WatcherConfig::from_environment();
    c.autostart = c.enabled;
    return c;
}

}  // namespace

GpuMemRuntime::GpuMemRuntime(const WatcherConfig& config)
    : watcher_(registry_, memory_, config), observer_(registry_, classifier_, &watcher_) {}

GpuMemRuntime& GpuMemRuntime::instance() {
    if (auto* r = g_runtime.load(std::memory_order_acquire)) return *r;
    static std::once_flag once;
    std::call_once(once, [] {
        // Leaked on purpose: hooks and the watcher thread may use it until the very end of the process.
        auto* r = new GpuMemRuntime(runtime_config());
        pthread_atfork(&GpuMemRuntime::before_fork, &GpuMemRuntime::after_fork_parent, &GpuMemRuntime::after_fork_child);
        g_runtime.store(r, std::memory_order_release);
    });
    return *g_runtime.load(std::memory_order_acquire);
}

bool GpuMemRuntime::exists() { return g_runtime.load(std::memory_order_acquire) != nullptr; }

void GpuMemRuntime::shutdown() { watcher_.stop(); }

// Locks are taken in the order the code takes them (sweep, then registry) and held across fork(), so the child
// never inherits one held by a thread it does not have.
void GpuMemRuntime::before_fork() {
    auto& r = instance();
    r.watcher_.lock_for_fork();
    r.registry_.lock_for_fork();
}

void GpuMemRuntime::after_fork_parent() {
    auto& r = instance();
    r.registry_.unlock_after_fork();
    r.watcher_.unlock_after_fork_in_parent();
}

void GpuMemRuntime::after_fork_child() {
    // The child has no watcher thread, and the parent's queues are not its own (DevX objects belong to the
    // parent's device file). It learns its own queues from its own set-up calls.
    auto& r = instance();
    r.registry_.unlock_after_fork();
    r.watcher_.reset_in_child();
    r.registry_.clear();
}

}  // namespace sigmatrace::gpumem
