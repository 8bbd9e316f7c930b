// The GPU module's process-wide objects, as libsigmatrace.so uses them: the registry, the watcher (its thread
// started when the first queue is learned, stopped with a final sweep at exit), the set-up observer the hooks
// call, and fork handling. Created on first use by a hook, never destroyed (the watcher may run until exit).
#pragma once

#include "gpumem/memory_classifier.h"
#include "gpumem/memory_reader.h"
#include "gpumem/queue_registry.h"
#include "gpumem/setup_observer.h"
#include "gpumem/watcher.h"

namespace sigmatrace::gpumem {

class GpuMemRuntime {
public:
    static GpuMemRuntime& instance();

    SetupObserver& observer() { return observer_; }
    Watcher& watcher() { return watcher_; }
    QueueRegistry& registry() { return registry_; }
    MemoryClassifier& classifier() { return classifier_; }

    // Stops the watcher thread after a final sweep (library destructor).
    void shutdown();
    // True once instance() has been called: the destructor must not create the runtime just to stop it.
    static bool exists();

private:
    explicit GpuMemRuntime(const WatcherConfig& config);
    static void before_fork();
    static void after_fork_parent();
    static void after_fork_child();

    QueueRegistry registry_;
    MemoryClassifier classifier_;
    ProcessMemoryReader memory_;
    Watcher watcher_;
    SetupObserver observer_;
};

}  // namespace sigmatrace::gpumem
