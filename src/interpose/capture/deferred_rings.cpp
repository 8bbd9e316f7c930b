#include "interpose/capture/deferred_rings.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <new>

#include "interpose/runtime/activation.h"
#include "interpose/runtime/config.h"
#include "interpose/capture/deferred_records_writer.h"
#include "interpose/capture/periodic_thread.h"
#include "interpose/capture/ring_file.h"
#include "provider/trace.h"

namespace sigmatrace::interpose::deferred {

__thread Ring* tls_ring __attribute__((tls_model("initial-exec"))) = nullptr;

struct RingSlot {
    // The mapping: a RingFileHeader, the Ring at kRingOffset, its bytes from kDataOffset (ring_file.h), in a file
    // of SIGMATRACE_SALVAGE_DIR (`path`) or anonymous memory (`path` empty).
    RingFileHeader* file = nullptr;
    Ring* ring = nullptr;
    uint64_t map_bytes = 0;
    char path[256] = {};
    std::atomic<pid_t> owner{0};       // tid of the thread producing into it, 0 when free
    std::atomic<RingSlot*> next{nullptr};
    // What its records become (`deferred_records` events): only the consumer holding the ring uses it.
    RecordsWriter records;
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
// The process is exiting (our exit handler or destructor ran): from then on records are kept when no event can be
// written (drain_slot).
std::atomic<bool> g_exiting{false};
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

// Whether an event written now reaches the session: false before tracing starts, with no session, and at exit
// once the provider's probe has unregistered (which clears the "enabled" words: see drain_at_exit).
bool tracer_accepts_events() noexcept {
    return ST_TRACE_ENABLED(deferred_records);
}

// Drains `slot` (records at or before cutoff) if no other consumer holds it.
uint32_t drain_slot(RingSlot& slot, uint64_t cutoff, uint32_t max_records, Wait wait) noexcept {
    Ring& r = *slot.ring;
    if (!r.has_pending()) return 0;
    if (slot.owner.load(std::memory_order_relaxed) < 0) return 0;  // a forked child's unusable inherited ring
    // At exit, once the provider's probe has unregistered (drain_at_exit says when), an event written now would
    // vanish without a trace: the records stay in the ring, where record's salvage finds them (ring_file.h), or
    // are reported at exit. Before exit, a ring without a session is drained into nothing as before (its records
    // are not wanted).
    if (g_exiting.load(std::memory_order_relaxed) && !tracer_accepts_events()) return 0;
    if (!r.try_lock_consumer()) {
        if (wait == Wait::no) return 0;
        // Another consumer drains this ring now (bounded work, but see Wait): wait for it.
        const timespec pause{0, 100000};
        const int max_tries = wait == Wait::briefly ? 1000 : 50000;
        int tries = 0;
        while (!r.try_lock_consumer()) {
            if (++tries > max_tries) return 0;
            nanosleep(&pause, nullptr);
        }
    }
    // Records are freed only once the event holding them is written: a process killed in the middle of a drain
    // leaves the rest in its ring, for salvage (ring_file.h), not in a half-built event.
    uint32_t n;
    uint64_t stop = 0;
    const capture_clock::Anchor anchor = capture_clock::anchor_now();
    slot.file->store_anchor(anchor);
    RecordsWriter& records = slot.records;
    records.start_run(anchor);
    uint64_t pending_end = 0;  // the position after the last record added to the event being written
    n = r.consume(cutoff, max_records, &stop, [&](const RecordHeader* h, uint64_t end) {
        if (records.add(h)) r.release_to(pending_end);  // the event before this record was written
        pending_end = end;
    });
    records.flush();  // the last records go out before another consumer may take the ring
    r.release_to(stop);
    if (&slot == tls_slot) r.rewind_if_empty_by_producer();
    r.unlock_consumer();
    return n;
}

// The emitter's scheduling: SCHED_IDLE while it waits and looks, an ordinary nice-19 thread while it drains a
// ring with stale records. Why both: its wake-ups must never preempt a busy-polling application (SCHED_IDLE; at
// nice 19 they did, and two busy-polling processes on two cores lost ~3% of ib_write_bw to it), but a ring it
// holds is a ring its producer cannot drain: at SCHED_IDLE a saturated machine can keep it off the CPU, ring in
// hand, for longer than a producer with a full ring waits (Wait::briefly), and the producer then drops records.
class EmitterScheduling {
public:
    EmitterScheduling() {
        sched_param idle{};
        idle_ = pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle) == 0;
        (void)setpriority(PRIO_PROCESS, static_cast<id_t>(this_tid()), 19);  // a thread id sets that thread's nice value
    }
    // Before draining: runs as an ordinary nice-19 thread until idle().
    void draining() noexcept {
        if (!idle_ || draining_) return;
        sched_param normal{};
        draining_ = pthread_setschedparam(pthread_self(), SCHED_OTHER, &normal) == 0;
    }
    void idle() noexcept {
        if (!draining_) return;
        sched_param idle{};
        (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
        draining_ = false;
    }

private:
    bool idle_ = false;
    bool draining_ = false;
};

// Whether `slot` holds records captured at or before `cutoff` (false when another consumer holds it).
bool has_stale_records(RingSlot& slot, uint64_t cutoff) noexcept {
    Ring& r = *slot.ring;
    if (!r.has_pending() || !r.try_lock_consumer()) return false;
    const uint64_t oldest = r.oldest_ts();  // read as the consumer: the record at the tail stays intact meanwhile
    r.unlock_consumer();
    return oldest != 0 && oldest <= cutoff;
}

void* emitter_main(void*) {
    // Below the application's threads: it only has work when they stop producing, and must not take CPU from
    // a busy-polling program (EmitterScheduling).
    EmitterScheduling scheduling;
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
        for (RingSlot* s = g_rings.load(std::memory_order_acquire); s != nullptr; s = s->next.load(std::memory_order_acquire)) {
            if (!has_stale_records(*s, cutoff)) continue;
            scheduling.draining();
            drain_slot(*s, cutoff, kAll, Wait::no);
        }
        scheduling.idle();
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
    if (slot->ring->abandon_unfinished()) note_dropped_record();  // it exited inside a provider's wr_complete
    drain_slot(*slot, kEverything, kAll, Wait::yes);
    tls_ring = nullptr;
    tls_slot = nullptr;
    slot->file->tid.store(0, std::memory_order_relaxed);
    slot->owner.store(0, std::memory_order_release);
    errno = saved;
}

RingSlot* claim_free_slot(pid_t tid) noexcept {
    for (RingSlot* s = g_rings.load(std::memory_order_acquire); s != nullptr; s = s->next.load(std::memory_order_acquire)) {
        pid_t free = 0;
        // A free ring is empty: its thread drained it before letting go.
        if (s->ring->capacity() == ring_capacity() && s->owner.compare_exchange_strong(free, tid, std::memory_order_acq_rel)) {
            s->file->tid.store(tid, std::memory_order_relaxed);
            return s;
        }
    }
    return nullptr;
}

// A fresh mapping for a ring of `cap` bytes: in a new file of the salvage directory when there is one (and it
// works), else anonymous. `at`: replace the mapping there (a forked child's inherited ring), else anywhere.
// Fills `slot`'s mapping fields and constructs the ring in it; false when no memory could be had.
bool map_ring(RingSlot& slot, uint64_t cap, pid_t tid, void* at) noexcept {
    const uint64_t bytes = kDataOffset + cap;
    const int fixed = at != nullptr ? MAP_FIXED : 0;
    void* mem = MAP_FAILED;
    slot.path[0] = '\0';
    const std::string& dir = config().salvage_dir;
    if (!dir.empty()) {
        // Unique names: pid, tid, a serial within the process, and the time (an exec'd image keeps the pid and
        // starts the serial again).
        static std::atomic<uint32_t> serial{0};
        const int n = std::snprintf(slot.path, sizeof slot.path, "%s/ring-%d-%d-%u-%llu", dir.c_str(),
                                    static_cast<int>(getpid()), static_cast<int>(tid),
                                    serial.fetch_add(1, std::memory_order_relaxed),
                                    static_cast<unsigned long long>(capture_clock::monotonic_ns()));
        const int fd = n > 0 && static_cast<size_t>(n) < sizeof slot.path
                           ? ::open(slot.path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)
                           : -1;
        if (fd >= 0) {
            if (ftruncate(fd, static_cast<off_t>(bytes)) == 0)
                mem = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | fixed, fd, 0);
            ::close(fd);
            if (mem == MAP_FAILED) unlink(slot.path);
        }
        if (mem == MAP_FAILED) slot.path[0] = '\0';
    }
    if (mem == MAP_FAILED) mem = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | fixed, -1, 0);
    if (mem == MAP_FAILED) return false;
    auto* base = static_cast<std::byte*>(mem);
    auto* file = new (base) RingFileHeader{};
    file->magic = kRingFileMagic;
    file->version = kRingFileVersion;
    file->ring_object_size = sizeof(Ring);
    file->capacity = cap;
    file->pid = getpid();
    file->tid.store(tid, std::memory_order_relaxed);
    file->store_anchor(capture_clock::anchor_now());
    slot.file = file;
    slot.ring = new (base + kRingOffset) Ring(base + kDataOffset, cap);
    slot.map_bytes = bytes;
    return true;
}

RingSlot* new_slot(pid_t tid) noexcept {
    const uint64_t cap = ring_capacity();
    auto* slot = new (std::nothrow) RingSlot();
    if (slot == nullptr) return nullptr;
    if (!map_ring(*slot, cap, tid, nullptr)) {
        delete slot;
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
        tls_ring = slot->ring;
        start_emitter();
    }
    errno = saved;
    return tls_ring;
}

void note_dropped_record() noexcept {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    if (RingSlot* slot = tls_slot) slot->file->dropped.fetch_add(1, std::memory_order_relaxed);
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
        // A ring in a file is the parent's, shared: this process gets a fresh one in its place (same address, so
        // tls_ring stays valid) before anything here writes to it. If not even anonymous memory can be had there,
        // the mapping stays the parent's: this process never touches it again (owner -1 is never free; this
        // thread gets a new ring at its next capture).
        if (s->path[0] != '\0' && !map_ring(*s, s->ring->capacity(), s == tls_slot ? me : 0, s->file)) {
            s->owner.store(-1, std::memory_order_relaxed);
            if (s == tls_slot) {
                tls_slot = nullptr;
                tls_ring = nullptr;
                if (g_exit_key_made.load(std::memory_order_relaxed)) pthread_setspecific(g_exit_key, nullptr);
            }
            continue;
        }
        s->ring->drop_all_after_fork();
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

namespace {

// exit() and quick_exit(), registered when tracing starts, after the provider's load. Why then: the probe
// (libsigmatrace-lttng.so, C++) registers with lttng-ust from a static object whose destructor — the probe's
// unregistration, which disables every sigmatrace tracepoint — was registered with __cxa_atexit during that
// load. exit() runs such handlers in reverse order of registration, all before any library destructor, so a
// drain in our library destructor found every event disabled and its records vanished (a program returning from
// main lost them all). This handler, registered after the load, runs before the probe's. Handlers the
// application registers later run before it; records captured after it (earlier handlers, libraries'
// destructors) are left in their rings for record's salvage.
void drain_at_exit() {
    g_exiting.store(true, std::memory_order_relaxed);
    drain_all(Wait::yes);
}

// "sigmatrace: COUNT WHAT\n" on stderr, written with write(2): the process is exiting, stdio may be gone.
void say_count(uint64_t count, const char* what) noexcept {
    char msg[512];
    const int n = std::snprintf(msg, sizeof msg, "sigmatrace: %llu %s\n", static_cast<unsigned long long>(count), what);
    if (n > 0) {
        ssize_t ignored = ::write(STDERR_FILENO, msg, std::min(static_cast<size_t>(n), sizeof msg - 1));
        (void)ignored;
    }
}

}  // namespace

void tracing_started() noexcept {
    static std::atomic<bool> registered{false};
    if (registered.exchange(true)) return;
    std::atexit(&drain_at_exit);
    std::at_quick_exit(&drain_at_exit);
}

void shutdown() noexcept {
    const bool had_session = tracer_accepts_events() || g_exiting.load(std::memory_order_relaxed);
    g_exiting.store(true, std::memory_order_relaxed);
    emitter().stop();
    drain_all(Wait::yes);
    // What is still there could not be written (lttng-ust already shut down, or no session). In files of the
    // salvage directory it waits for record; otherwise it is lost, and said so.
    uint64_t left = 0;
    bool files = true;
    for (RingSlot* s = g_rings.load(std::memory_order_acquire); s != nullptr; s = s->next.load(std::memory_order_acquire)) {
        const Ring::Positions p = s->ring->positions();
        if (p.head != p.tail) {
            if (s->path[0] == '\0') files = false;
            ++left;
        } else if (s->path[0] != '\0' && s->file->dropped.load(std::memory_order_relaxed) == 0) {
            unlink(s->path);  // nothing to salvage: the file need not wait for record
        }
    }
    const uint64_t dropped = g_dropped.load(std::memory_order_relaxed);
    if (left != 0 && !files && had_session)
        say_count(left, "thread rings still hold data-path records at exit that could not be traced (captured "
                        "after the tracer shut down, or no recording session); run under `sigmatrace record`, which "
                        "salvages them");
    if (dropped != 0)
        say_count(dropped, "data-path records were not traced: no memory or no room for them in a thread's "
                           "deferred-emission ring (SIGMATRACE_DEFER_RING_KB), or their thread exited inside the "
                           "provider's call");
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
