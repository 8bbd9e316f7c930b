// A background thread of the shim that wakes periodically until stopped: the counters emitter
// (counters_emitter.h) and the deferred-emission emitter (deferred_rings.h). One control block per thread,
// allocated once and never destroyed (threads may still run while the process exits).
#pragma once

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace sigmatrace::interpose {

class PeriodicThread {
public:
    // Starts `main` (unless running) with every signal blocked: the application's handlers must never run on
    // our thread. Returns whether the thread runs.
    bool start(void* (*main)(void*)) noexcept;
    // From the thread: sleeps up to `period`; false once stop() was asked (the thread should return).
    bool sleep(std::chrono::nanoseconds period) noexcept;
    // Asks the thread to return and joins it (no-op when not running).
    void stop() noexcept;
    bool running() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return running_;
    }
    // In a forked child: only the forking thread survives, and the mutex may have been held by the vanished
    // thread, so the control block is rebuilt rather than unlocked.
    void reset_after_fork() noexcept;

private:
    std::mutex mutex_;
    std::condition_variable wake_;
    bool running_ = false;
    bool stop_ = false;
    pthread_t thread_{};
};

}  // namespace sigmatrace::interpose
