#include <atomic>
#include <cstdlib>
#include "interpose/capture/counters_emitter.h"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <mutex>
#include <new>

#include "interpose/capture/capture_clock.h"
#include "interpose/runtime/config.h"
#include "interpose/capture/periodic_thread.h"
#include "provider/trace.h"

namespace sigmatrace::interpose {
namespace {

// The emitter thread (its own control block, not the registry's mutex: the thread sleeps on it).
PeriodicThread& emitter() {
    static PeriodicThread* e = new PeriodicThread();  // never destroyed: see Registry::instance()
    return *e;
}

QpCountersSnapshot snapshot(const QpCounters& c) noexcept {
    QpCountersSnapshot s;
    s.posted_wrs = c.total(kPostedWrs);
    s.posted_bytes = c.total(kPostedBytes);
    s.recv_wrs = c.total(kRecvWrs);
    s.completions = c.total(kCompletions);
    s.error_completions = c.total(kErrorCompletions);
    s.post_errors = c.total(kPostErrors);
    return s;
}

void* emitter_main(void*) {
    while (emitter().sleep(std::chrono::milliseconds(config().counters_interval_ms))) {
        Registry& reg = Registry::instance();
        std::lock_guard<std::mutex> lock(reg.mutex());
        for (QpState* s : reg.live_qps()) counters_flush_qp(*s);
    }
    return nullptr;
}

void start_emitter() noexcept {
    emitter().start(&emitter_main);
}

}  // namespace

void counters_note_qp_added(QpState& s) noexcept {
    s.emitted_at_ns = capture_clock::monotonic_ns();
    if (config().mode == Mode::counters) start_emitter();
}

void counters_flush_qp(QpState& s) noexcept {
    const QpCountersSnapshot now = snapshot(s.counters);
    if (now == s.emitted) return;
    const uint64_t t = capture_clock::monotonic_ns();
    if (ST_TRACE_ENABLED(qp_counters)) {
        const int saved = errno;
        st_qp_counters_rec r{};
        r.qp = reinterpret_cast<uint64_t>(s.qp.load(std::memory_order_relaxed));
        r.qp_num = s.qp_num.load(std::memory_order_relaxed);
        r.interval_ns = t - s.emitted_at_ns;
        r.posted_wrs = now.posted_wrs - s.emitted.posted_wrs;
        r.posted_bytes = now.posted_bytes - s.emitted.posted_bytes;
        r.recv_wrs = now.recv_wrs - s.emitted.recv_wrs;
        r.completions = now.completions - s.emitted.completions;
        r.error_completions = now.error_completions - s.emitted.error_completions;
        r.post_errors = now.post_errors - s.emitted.post_errors;
        ST_TRACE_EMIT(qp_counters, &r);
        errno = saved;
    }
    // Without a session the counts are dropped like any untraced event: the next event covers what follows.
    s.emitted = now;
    s.emitted_at_ns = t;
}

void counters_shutdown() noexcept {
    emitter().stop();
    // Only counters mode has anything to flush; in ops mode the exit path must not even take the registry
    // mutex (another thread could be holding it in a blocked destroy call, and exit would hang).
    if (config().mode != Mode::counters) return;
    Registry& reg = Registry::instance();
    std::lock_guard<std::mutex> lock(reg.mutex());
    for (QpState* s : reg.live_qps()) counters_flush_qp(*s);
}

namespace {
void flush_at_exit() {
    Registry& reg = Registry::instance();
    std::lock_guard<std::mutex> lock(reg.mutex());
    for (QpState* s : reg.live_qps()) counters_flush_qp(*s);  // the destructor's flush then finds nothing new
}
}  // namespace

void counters_tracing_started() noexcept {
    static std::atomic<bool> registered{false};
    if (config().mode != Mode::counters || registered.exchange(true)) return;
    std::atexit(&flush_at_exit);
    std::at_quick_exit(&flush_at_exit);
}

void counters_after_fork_child() noexcept {
    // Only the forking thread survives a fork; the emitter's mutex may have been held by the (vanished)
    // emitter thread, so the control block is rebuilt rather than unlocked.
    emitter().reset_after_fork();
    Registry& reg = Registry::instance();
    if (config().mode == Mode::counters && !reg.live_qps().empty()) start_emitter();
}

}  // namespace sigmatrace::interpose
