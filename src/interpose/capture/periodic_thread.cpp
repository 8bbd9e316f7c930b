#include "interpose/capture/periodic_thread.h"

#include <signal.h>

#include <new>

namespace sigmatrace::interpose {

bool PeriodicThread::start(void* (*main)(void*)) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_) return true;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    stop_ = false;
    running_ = pthread_create(&thread_, nullptr, main, nullptr) == 0;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return running_;
}

bool PeriodicThread::sleep(std::chrono::nanoseconds period) noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait_for(lock, period, [this] { return stop_; });
    return !stop_;
}

void PeriodicThread::stop() noexcept {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!running_) return;
        stop_ = true;
    }
    wake_.notify_all();
    pthread_join(thread_, nullptr);
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
}

void PeriodicThread::reset_after_fork() noexcept {
    new (this) PeriodicThread();
}

}  // namespace sigmatrace::interpose
