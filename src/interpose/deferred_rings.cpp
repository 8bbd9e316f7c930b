#include "interpose/deferred_rings.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <new>

#include "interpose/activation.h"
#include "interpose/config.h"
#include "interpose/deferred_events.h"
#include "interpose/deferred_records_writer.h"
#include "interpose/periodic_thread.h"

namespace sigmatrace::interpose::deferred {

__thread Ring* tls_ring __attribute__((tls_model("initial-exec"))) = nullptr;

struct RingSlot {
    explicit RingSlot(std::byte* memory, uint64_t capacity) noexcept : ring(memory, capacity) {}
    Ring ring;
    std::atomic<pid_t> owner{0};       // tid of the thread producing into it, 0 when free
    std::atomic<RingSlot*> next{nullptr};
    // What its records become, in the configured format (records, or events built from them): only the
    // consumer holding the ring uses these.
    RecordsWriter records;
    EventBuilder events;
};

namespace {

// The calling thread's slot (tls_ring is its ring).
__thread RingSlot* tls_slot __attribute__((tls_model("initial-exec"))) = nullptr;

constexpr uint32_t kAll = UINT32_MAX;
constexpr uint64_t kEverything = UINT64_MAX;

// The list of rings: appended under g_list_mutex (ring creation, a set-up-like path), walked without it.
// Process-wide because the emitter, exit and signal paths must reach every thread's ring.
std::atomic<RingSlot*> g_rings{nullptr};
std::mutex g_list_mutex;
std::atomic<uint64_t> g_dropped{0};
std::atomic<bool> g_emitter_needed_after_fork{false};
// Runs the thread-exit drain (created by the library constructor's first call, before any thread captures).
pthread_key_t g_exit_key;
std::atomic<bool> g_exit_key_made{false};

pid_t this_tid() noexcept {
    return static_cast<pid_t>(syscall(SYS_gettid));
}

// ------------------------------------------------------------------ the emitter thread

PeriodicThread& emitter() {
    static PeriodicThread* e = new PeriodicThread();  // never destroyed: threads may still capture while the process exits
    return *e;
}

// Drains `slot` (records at or before cutoff) if no other consumer holds it.
uint32_t drain_slot(RingSlot& slot, uint64_t cutoff, uint32_t max_records, Wait wait) noexcept {
    Ring& r = slot.ring;
    if (!r.has_pending()) return 0;
    if (!r.try_lock_consumer()) {
        if (wait == Wait::no) return 0;
        // Another consumer drains this ring now (bounded work); wait up to ~100 ms for it.
        const timespec pause{0, 100000};
        int tries = 0;
        while (!r.try_lock_consumer()) {
            if (++tries > 1000) return 0;
            nanosleep(&pause, nullptr);
        }
    }
    uint32_t n;
    if (defer_records()) {
        RecordsWriter& records = slot.records;
        records.start_run(capture_clock::anchor_now());
        n = r.consume(cutoff, max_records, [&records](const RecordHeader* h) { records.add(h); });
        records.flush();  // the last records go out before another consumer may take the ring
    } else {
        EventBuilder& events = slot.events;
        events.start_run(capture_clock::anchor_now());
        n = r.consume(cutoff, max_records, [&events](const RecordHeader* h) { events.add(h); });
        events.flush();
    }
    if (&slot == tls_slot) r.rewind_if_empty_by_producer();
    r.unlock_consumer();
    return n;
}

void* emitter_main(void*) {
    // Below the application's threads: it only has work when they stop producing, and must not take CPU from
    // a busy-polling program. SCHED_IDLE: its wake-ups never preempt a running thread (nice 19 still does, and
    // two busy-polling processes on two cores lost ~3% of ib_write_bw to it); it runs when a CPU is free or,
    // on a saturated machine, in CFS's smallest share. Else nice 19 (setpriority on a thread id sets that
    // thread's nice value).
    sched_param idle{};
    if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle) != 0)
        (void)setpriority(PRIO_PROCESS, static_cast<id_t>(this_tid()), 19);
    if (LttngInitThread init = lttng_init_thread()) init();
    // Every age bound, records older than two: a thread that stopped calling verbs gets its events out within
    // three bounds while a CPU is free (process_info.defer_us announces that). A thread that keeps calling verbs
    // drains its own ring at one bound (deferred_capture.h) before this thread would, so its events carry its
    // own vtid; this thread usually finds nothing and wakes 1000 times a second at most.
    // The bound is read each time (atomics set by set_config, not config(): tests change it while we run).
    while (emitter().sleep(std::chrono::nanoseconds(defer_max_age_ns()))) {
        const uint64_t stale_ticks = 2 * defer_max_age_ticks();
        const uint64_t now = capture_clock::now_ticks();
        const uint64_t cutoff = now > stale_ticks ? now - stale_ticks : 0;
        for (RingSlot* s = g_rings.load(std::memory_order_acquire); s != nullptr; s = s->next.load(std::memory_order_acquire))
            drain_slot(*s, cutoff, kAll, Wait::no);
    }
    return nullptr;
}

void start_emitter() noexcept {
    emitter().start(&emitter_main);
}

// ------------------------------------------------------------------ rings

uint64_t ring_capacity() noexcept {
    // A power of two (positions wrap with a mask) holding at least 4 records of the largest size.
    const uint64_t want = std::max<uint64_t>(static_cast<uint64_t>(config().defer_ring_kb) * 1024, 4ull * kMaxRecordSize);
    uint64_t cap = 4096;
    while (cap < want) cap <<= 1;
    return cap;
}

// Thread exit: this thread's records become events, then the ring is free for the next thread. Our key was
// created before lttng-ust's (library constructor vs. first RDMA use), and glibc runs key destructors in key
// order, so lttng-ust's per-thread state is still there.
void on_thread_exit(void* p) {
    auto* slot = static_cast<RingSlot*>(p);
    const int saved = errno;
    if (slot->ring.abandon_unfinished()) note_dropped_record();  // it exited inside a provider's wr_complete
    drain_slot(*slot, kEverything, kAll, Wait::yes);
    tls_ring = nullptr;
    tls_slot = nullptr;
    slot->owner.store(0, std::memory_order_release);
    errno = saved;
}

RingSlot* claim_free_slot(pid_t tid) noexcept {
    for (RingSlot* s = g_rings.load(std::memory_order_acquire); s != nullptr; s = s->next.load(std::memory_order_acquire)) {
        pid_t free = 0;
        // A free ring is empty: its thread drained it before letting go.
        if (s->ring.capacity() == ring_capacity() && s->owner.compare_exchange_strong(free, tid, std::memory_order_acq_rel))
            return s;
    }
    return nullptr;
}

RingSlot* new_slot(pid_t tid) noexcept {
    const uint64_t cap = ring_capacity();
    void* mem = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return nullptr;
    auto* slot = new (std::nothrow) RingSlot(static_cast<std::byte*>(mem), cap);
    if (slot == nullptr) {
        munmap(mem, cap);
        return nullptr;
    }
    slot->owner.store(tid, std::memory_order_relaxed);
    // Newest first: publishing is one pointer store; walkers see a complete slot (release).
    slot->next.store(g_rings.load(std::memory_order_relaxed), std::memory_order_relaxed);
    g_rings.store(slot, std::memory_order_release);
    return slot;
}

void make_exit_key() noexcept {
    if (g_exit_key_made.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(g_list_mutex);
    if (g_exit_key_made.load(std::memory_order_relaxed)) return;
    if (pthread_key_create(&g_exit_key, &on_thread_exit) == 0) g_exit_key_made.store(true, std::memory_order_release);
}

}  // namespace

Ring* ring_for_this_thread() noexcept {
    if (tls_ring != nullptr) return tls_ring;
    const int saved = errno;
    const pid_t tid = this_tid();
    make_exit_key();
    RingSlot* slot = nullptr;
    {
        std::lock_guard<std::mutex> lock(g_list_mutex);
        slot = claim_free_slot(tid);
        if (slot == nullptr) slot = new_slot(tid);
    }
    if (slot != nullptr) {
        if (g_exit_key_made.load(std::memory_order_acquire)) pthread_setspecific(g_exit_key, slot);
        // lttng-ust's thread-local state, allocated now: a fatal-signal handler may emit from this thread.
        if (LttngInitThread init = lttng_init_thread()) init();
        tls_slot = slot;
        tls_ring = &slot->ring;
        start_emitter();
    }
    errno = saved;
    return tls_ring;
}

void note_dropped_record() noexcept {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
}

uint32_t drain_own(uint64_t cutoff_ts, uint32_t max_records, Wait wait) noexcept {
    RingSlot* slot = tls_slot;
    if (slot == nullptr) return 0;
    const int saved = errno;
    const uint32_t n = drain_slot(*slot, cutoff_ts, max_records, wait);
    errno = saved;
    return n;
}

void drain_all(Wait wait) noexcept {
    const int saved = errno;
    for (RingSlot* s = g_rings.load(std::memory_order_acquire); s != nullptr; s = s->next.load(std::memory_order_acquire))
        drain_slot(*s, kEverything, kAll, wait);
    errno = saved;
}

void before_fork() noexcept {
    drain_own(kEverything, kAll, Wait::yes);
}

void after_fork_child() noexcept {
    // Only the forking thread exists here. Every inherited record was captured by the parent (which emits
    // it); the other threads' rings are free for this process's future threads; the emitter is gone.
    emitter().reset_after_fork();
    new (&g_list_mutex) std::mutex();
    const pid_t me = this_tid();
    bool mine = false;
    for (RingSlot* s = g_rings.load(std::memory_order_relaxed); s != nullptr; s = s->next.load(std::memory_order_relaxed)) {
        s->ring.drop_all_after_fork();
        s->events.discard();  // a thread of the parent may have been building events from it
        s->records.discard();
        if (s == tls_slot) {
            s->owner.store(me, std::memory_order_relaxed);
            mine = true;
        } else {
            s->owner.store(0, std::memory_order_relaxed);
        }
    }
    g_emitter_needed_after_fork.store(mine, std::memory_order_relaxed);
}

void after_fork_child_resume() noexcept {
    if (g_emitter_needed_after_fork.exchange(false, std::memory_order_relaxed)) start_emitter();
}

void init() noexcept {
    make_exit_key();
}

void shutdown() noexcept {
    emitter().stop();
    drain_all(Wait::yes);
    const uint64_t dropped = g_dropped.load(std::memory_order_relaxed);
    if (dropped != 0) {
        char msg[256];
        const int n = std::snprintf(msg, sizeof msg,
                                    "sigmatrace: %llu data-path records were not traced: no memory or no room for "
                                    "them in a thread's deferred-emission ring (SIGMATRACE_DEFER_RING_KB), or their "
                                    "thread exited inside the provider's call\n",
                                    static_cast<unsigned long long>(dropped));
        if (n > 0) {
            ssize_t ignored = ::write(STDERR_FILENO, msg, static_cast<size_t>(n));
            (void)ignored;
        }
    }
}

RingStats ring_stats() noexcept {
    RingStats st;
    for (RingSlot* s = g_rings.load(std::memory_order_acquire); s != nullptr; s = s->next.load(std::memory_order_acquire)) {
        ++st.rings;
        if (s->owner.load(std::memory_order_relaxed) != 0) ++st.owned;
    }
    {
        st.emitter_running = emitter().running();
    }
    st.dropped_records = g_dropped.load(std::memory_order_relaxed);
    return st;
}

}  // namespace sigmatrace::interpose::deferred
