#include "core/runtime.h"

#include <fmt/core.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "core/clock.h"

namespace softfabric {
namespace {

// The process's runtime. A process is one fabric member with one arena, so this is process-wide state; it is
// created under g_runtime_mutex and never destroyed before exit (pointers into it live in verbs objects).
std::mutex g_runtime_mutex;
Runtime* g_runtime = nullptr;

constexpr uint64_t kMinEngineSleepNs = 20'000;     // the engine never spins: application threads progress
                                                   // their own QPs when they post and poll
constexpr uint64_t kLivenessIntervalNs = 1'000'000;

long futex(std::atomic<uint32_t>* addr, int op, uint32_t value, const timespec* timeout) {
    return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, value, timeout, nullptr, 0);
}

void forget_runtime_in_child() { g_runtime = nullptr; }

}  // namespace

Runtime* Runtime::current() { return g_runtime; }

Runtime& Runtime::attach(const std::string& fabric_name, uint32_t node) {
    std::lock_guard lock(g_runtime_mutex);
    if (g_runtime) {
        if (g_runtime->fabric().name() != fabric_name)
            throw FabricError(fmt::format("This process is already on fabric '{}' and cannot also join '{}': a "
                                          "process belongs to one fabric",
                                          g_runtime->fabric().name(), fabric_name));
        return *g_runtime;
    }
    FabricConfig config;
    const FabricConfig* config_ptr = nullptr;
    if (const char* path = std::getenv("SOFTFABRIC_CONFIG"); path && *path) {
        config = load_config_file(path);
        config_ptr = &config;
    }
    auto fabric = Fabric::open(fabric_name, OpenMode::Join, config_ptr);
    g_runtime = new Runtime(std::move(fabric), node);
    static bool hooks_installed = false;
    if (!hooks_installed) {
        hooks_installed = true;
        pthread_atfork(nullptr, nullptr, forget_runtime_in_child);
        std::atexit(at_exit);
    }
    return *g_runtime;
}

Runtime::Runtime(std::unique_ptr<Fabric> fabric, uint32_t node)
    : fabric_(std::move(fabric)), links_(fabric_->region()), node_(node) {
    pid_ = getpid();
    member_ = fabric_->join(node);
    MemberSlot& m = region().members[member_];
    generation_ = m.generation.load();
    arena_ = std::make_unique<LocalArena>(member_);
    m.arena_size = kArenaSize;
    m.arena_fd.store(arena_->fd(), std::memory_order_release);
    peers_ = std::make_unique<PeerArenas>(region(), member_, *arena_);
    watches_ = std::make_unique<PeerWatch[]>(kMaxMembers);
    // The engine thread must not take the application's signals: block them all while creating it.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    engine_ = std::thread(&Runtime::engine_main, this);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

Runtime::~Runtime() { stop(); }

void Runtime::stop() {
    if (stopping_.exchange(true)) return;
    wake_member(member_);
    if (engine_.joinable()) engine_.join();
}

void Runtime::at_exit() {
    Runtime* rt = g_runtime;
    if (!rt || rt->pid_ != getpid()) return;
    rt->stop();
    rt->fabric_->leave(rt->member_);
}

uint32_t Runtime::claim_qpn(uint64_t shared_offset) {
    FabricRegion& r = region();
    for (int pass = 0; pass < 2; ++pass) {
        for (uint32_t n = 0; n < kQpSlots; ++n) {
            uint32_t slot = r.qp_alloc_hint.fetch_add(1, std::memory_order_relaxed) % kQpSlots;
            if (slot < 2) continue;
            QpDirEntry& e = r.qps[slot];
            uint32_t expected = 0;
            // Claim with a marker first, so that nobody reads the member/offset before they are written.
            if (e.qpn.load(std::memory_order_relaxed) != 0 ||
                !e.qpn.compare_exchange_strong(expected, ~0u, std::memory_order_acquire))
                continue;
            uint32_t gen = (e.reserved + 1u) & 0xffu;
            if (gen == 0) gen = 1;
            e.reserved = static_cast<uint16_t>(gen);
            e.member = static_cast<uint16_t>(member_);
            e.offset = shared_offset;
            uint32_t qpn = gen << kQpSlotBits | slot;
            arena_->at<SharedQp>(shared_offset)->qpn = qpn;
            e.qpn.store(qpn, std::memory_order_release);
            return qpn;
        }
        fabric_->collect_dead_members();
    }
    return 0;
}

void Runtime::release_qpn(uint32_t qpn) {
    if (!qpn) return;
    QpDirEntry& e = region().qps[qpn & (kQpSlots - 1)];
    e.qpn.compare_exchange_strong(qpn, 0, std::memory_order_release);
}

uint64_t Runtime::new_pd_id() {
    // Unique across the fabric: the member slot and generation, and a per-fabric counter.
    return (uint64_t{member_} << 48) | (uint64_t{generation_ & 0xffff} << 32) |
           region().pd_counter.fetch_add(1, std::memory_order_relaxed);
}

bool Runtime::find_qp(uint32_t qpn, PeerQp& out) {
    uint32_t slot = qpn & (kQpSlots - 1);
    if (qpn == 0 || slot < 2 || (qpn >> kQpSlotBits) > 0xff) return false;
    FabricRegion& r = region();
    QpDirEntry& e = r.qps[slot];
    if (e.qpn.load(std::memory_order_acquire) != qpn) return false;
    uint32_t member = e.member;
    uint64_t offset = e.offset;
    if (e.qpn.load(std::memory_order_acquire) != qpn || member >= kMaxMembers) return false;
    MemberSlot& m = r.members[member];
    int pid = m.pid.load(std::memory_order_acquire);
    if (pid == 0) return false;
    unsigned char* base = peers_->base(member, m.generation.load(std::memory_order_acquire));
    if (!base) return false;
    auto* qp = reinterpret_cast<SharedQp*>(base + offset);
    if (qp->qpn != qpn) return false;
    out.qp = qp;
    out.arena = base;
    out.pid = pid;
    out.member = member;
    out.local = member == member_;
    return true;
}

bool Runtime::peer_alive(uint32_t slot) {
    if (slot == member_) return true;
    MemberSlot& m = region().members[slot];
    uint32_t gen = m.generation.load(std::memory_order_acquire);
    PeerWatch& w = watches_[slot];
    uint64_t now = now_ns();
    if (w.generation.load(std::memory_order_acquire) == gen &&
        now - w.checked_ns.load(std::memory_order_relaxed) < kLivenessIntervalNs)
        return !w.dead.load(std::memory_order_relaxed);
    std::lock_guard lock(watch_mutex_);
    int pid = m.pid.load();
    if (w.generation.load() != gen) {
        if (w.pidfd >= 0) close(w.pidfd);
        w.pidfd = pid ? static_cast<int>(syscall(SYS_pidfd_open, pid, 0)) : -1;
        bool same = w.pidfd >= 0 && process_start_time(pid) == m.start_time;
        w.dead.store(!same);
        w.generation.store(gen, std::memory_order_release);
    } else if (!w.dead.load()) {
        pollfd p{w.pidfd, POLLIN, 0};
        // A pidfd becomes readable when the process exits.
        if (pid == 0 || w.pidfd < 0 || poll(&p, 1, 0) != 0) w.dead.store(true);
    }
    w.checked_ns.store(now, std::memory_order_relaxed);
    return !w.dead.load();
}

void Runtime::signal_channel(SharedCq* cq) {
    if (cq->channel_wfd < 0) return;
    uint64_t token = cq->owner_token;
    // The channel is a socket: MSG_NOSIGNAL keeps a closed reader from raising SIGPIPE.
    (void)!send(cq->channel_wfd, &token, sizeof token, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void Runtime::completed_into(SharedCq* cq, bool solicited) {
    uint32_t armed = cq->armed.load(std::memory_order_acquire);
    if (armed == 0 || (armed == 2 && !solicited)) return;
    if (!cq->armed.compare_exchange_strong(armed, 0, std::memory_order_acq_rel)) return;
    if (cq->member == member_) {
        signal_channel(cq);
    } else {
        cq->event_pending.store(1, std::memory_order_release);
        wake_member(cq->member);
    }
}

void Runtime::wake_member(uint32_t slot) {
    MemberSlot& m = region().members[slot];
    m.wake.fetch_add(1, std::memory_order_release);
    futex(&m.wake, FUTEX_WAKE, INT_MAX, nullptr);
}

void Runtime::kick(uint64_t due_ns, uint64_t window_ns) {
    // With a window, the posting thread will progress the QP itself; the engine only has to look once the window
    // ends (engine.h, kAppWindowNs), which it does unless it sleeps longer than that.
    if (due_ns + window_ns < engine_sleep_until_.load(std::memory_order_seq_cst)) wake_member(member_);
}

void Runtime::add_qp(engine::QueuePair* qp) {
    std::lock_guard lock(registry_mutex_);
    qps_.push_back(qp);
}
void Runtime::remove_qp(engine::QueuePair* qp) {
    std::lock_guard lock(registry_mutex_);
    qps_.erase(std::remove(qps_.begin(), qps_.end(), qp), qps_.end());
}
void Runtime::add_event_cq(SharedCq* cq) {
    std::lock_guard lock(registry_mutex_);
    event_cqs_.push_back(cq);
}
void Runtime::remove_event_cq(SharedCq* cq) {
    std::lock_guard lock(registry_mutex_);
    event_cqs_.erase(std::remove(event_cqs_.begin(), event_cqs_.end(), cq), event_cqs_.end());
}

namespace {

// When the engine thread must next look at `qp`. While an application thread progresses the QP (it posted or
// polled within the QP's application window) and nobody waits on its CQs through a channel, the application will
// execute what falls due: the engine leaves it alone until that window ends rather than compete with it for the
// CPU and the send-queue lock. Waking at each operation's due time instead (a few us after every post) woke the
// engine twice per ib_send_lat iteration, and each wake preempted the busy-polling thread pinned to the same CPU:
// 7.8 us instead of 2.2 us per message, in long streaks.
// The engine looks at the window's end also when nothing is due at the moment: had it slept until woken, the
// application's next post, whose work is due within microseconds, would wake it at once (Runtime::kick) — a
// streaming ib_write_bw, whose completions are often all delivered when the engine looks, did so at every other
// look.
uint64_t engine_due(const engine::QueuePair& qp, uint64_t now) {
    const uint64_t due = qp.next_due();
    if (qp.waited_on()) return due;
    const uint64_t app_until = qp.app_progress_ns() + qp.app_window_ns();
    if (app_until <= now) return due;
    return due == kNever ? app_until : std::max(due, app_until);
}

// At each look of the engine thread: a QP whose application is still at work on it (progressed it within its
// window) has its window doubled, up to kAppWindowMaxNs, so that a busy application is looked at less and less
// often; any other QP gets kAppWindowNs back, so that one that fell idle is taken over soon after its next post.
// Whether work is pending at the look does not matter (a streaming ib_write_bw often has none for a moment:
// requiring it reset the window at one look in three). At a fixed 200 us window the looks alone cost a 64 KiB
// ib_write_bw ~12% of its bandwidth.
void adapt_app_window(engine::QueuePair& qp, uint64_t now) {
    const uint64_t window = qp.app_window_ns();
    const bool busy = !qp.waited_on() && qp.app_progress_ns() + window > now;
    qp.set_app_window_ns(busy ? std::min(2 * window, engine::kAppWindowMaxNs) : engine::kAppWindowNs);
}

}  // namespace

void Runtime::engine_pass(uint64_t now, uint64_t& next) {
    std::lock_guard lock(registry_mutex_);
    for (SharedCq* cq : event_cqs_)
        if (cq->event_pending.exchange(0, std::memory_order_acq_rel)) signal_channel(cq);
    for (engine::QueuePair* qp : qps_) {
        if (qp->handle_flush_request()) next = std::min(next, now + kMinEngineSleepNs);
        adapt_app_window(*qp, now);
        uint64_t due = engine_due(*qp, now);
        if (due <= now) {
            std::unique_lock sq(qp->sq_lock(), std::try_to_lock);
            due = sq.owns_lock() ? qp->progress(now) : now + kMinEngineSleepNs;
        }
        next = std::min(next, due);
    }
}

void Runtime::engine_main() {
    pthread_setname_np(pthread_self(), "softfabric");
    prctl(PR_SET_TIMERSLACK, 1000UL);  // wake near the due time (default slack is 50 us)
    std::atomic<uint32_t>& wake = region().members[member_].wake;
    while (!stopping_.load(std::memory_order_acquire)) {
        uint32_t seq = wake.load(std::memory_order_acquire);
        engine_sleep_until_.store(0, std::memory_order_seq_cst);
        engine_passes_.fetch_add(1, std::memory_order_relaxed);
        uint64_t now = now_ns();
        uint64_t next = kNever;
        engine_pass(now, next);
        engine_sleep_until_.store(next, std::memory_order_seq_cst);
        {
            // A post that raced with the pass saw the engine awake and did not wake it: look again.
            std::lock_guard lock(registry_mutex_);
            for (engine::QueuePair* qp : qps_) next = std::min(next, engine_due(*qp, now));
        }
        if (stopping_.load()) break;
        if (next == kNever) {
            futex(&wake, FUTEX_WAIT, seq, nullptr);
            continue;
        }
        uint64_t after = now_ns();
        uint64_t wait = next > after ? next - after : 0;
        wait = std::max(wait, kMinEngineSleepNs);
        timespec ts{static_cast<time_t>(wait / 1'000'000'000ull), static_cast<long>(wait % 1'000'000'000ull)};
        futex(&wake, FUTEX_WAIT, seq, &ts);
    }
}

}  // namespace softfabric
