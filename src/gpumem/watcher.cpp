#include "gpumem/watcher.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "gpumem/event_batches.h"
#include "mlx5_format/mlx5_layout.h"
#include "mlx5_format/wqe_decoder.h"
#include "provider/trace.h"

namespace sigmatrace::gpumem {
namespace {

using namespace mlx5;

uint64_t monotonic_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// How the WQEBBs after an undecodable one are accounted.
enum class Run : uint8_t { Normal, Lost, AfterMalformed };

template <typename State> bool contains_key(const std::vector<State>& v, uint64_t key) {
    return std::any_of(v.begin(), v.end(), [&](const State& s) { return s.q.key == key; });
}

}  // namespace

Watcher::Watcher(QueueRegistry& registry, MemoryReader& memory, WatcherConfig config)
    : registry_(registry), memory_(memory), config_(config), period_ns_(config.min_period_ns) {}

Watcher::~Watcher() { stop(); }

bool Watcher::start() {
    std::lock_guard lk(wake_mu_);
    if (running_.load(std::memory_order_acquire)) return true;
    stop_requested_ = false;
    // The thread takes no signals: application handlers must never run on it.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    const int rc = pthread_create(&thread_, nullptr, &Watcher::thread_main, this);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (rc != 0) return false;
    running_.store(true, std::memory_order_release);
    return true;
}

void Watcher::stop() {
    {
        std::lock_guard lk(wake_mu_);
        if (!running_.load(std::memory_order_acquire)) return;
        stop_requested_ = true;
    }
    wake_cv_.notify_all();
    pthread_join(thread_, nullptr);
    running_.store(false, std::memory_order_release);
    std::lock_guard lk(sweep_mu_);  // what was posted after the thread's last pass
    sync_locked();
    Backlog ignored = Backlog::None;
    sweep_locked(ignored, /*final=*/true);
}

void* Watcher::thread_main(void* self) {
    pthread_setname_np(pthread_self(), "st-gpu-watch");
    // Default timer slack (50 us) would stretch every short sleep; the period knob means what it says.
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    static_cast<Watcher*>(self)->run();
    return nullptr;
}

void Watcher::run() {
    if (config_.cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(config_.cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort: an invalid CPU leaves it unpinned
    }
    uint64_t period = config_.min_period_ns;
    uint64_t last_start = 0;
    uint64_t last_active = 0;  // start of the last sweep that decoded WQEs
    for (;;) {
        Backlog backlog = Backlog::None;
        size_t decoded = 0;
        {
            std::lock_guard lk(sweep_mu_);
            const uint64_t now = monotonic_ns();
            if (last_start) stats_.max_sweep_gap_ns = std::max(stats_.max_sweep_gap_ns, now - last_start);
            last_start = now;
            sync_locked();
            decoded = sweep_locked(backlog);
        }
        if (decoded > 0) last_active = last_start;
        period = next_sweep_period(config_, period, backlog, decoded > 0, last_start - last_active);
        period_ns_.store(period, std::memory_order_relaxed);

        std::unique_lock lk(wake_mu_);
        wake_cv_.wait_for(lk, std::chrono::nanoseconds(period), [&] { return wake_requested_ || stop_requested_; });
        if (stop_requested_) return;
        if (wake_requested_) period = config_.min_period_ns;
        wake_requested_ = false;
    }
}

void Watcher::wake() {
    if (config_.autostart && config_.enabled && !running_.load(std::memory_order_acquire)) start();
    {
        std::lock_guard lk(wake_mu_);
        wake_requested_ = true;
    }
    wake_cv_.notify_all();
}

void Watcher::sync() {
    std::lock_guard lk(sweep_mu_);
    sync_locked();
}

size_t Watcher::sweep_once() {
    std::lock_guard lk(sweep_mu_);
    sync_locked();
    Backlog backlog = Backlog::None;
    return sweep_locked(backlog);
}

WatcherStats Watcher::stats() const {
    std::lock_guard lk(sweep_mu_);
    return stats_;
}

uint64_t Watcher::thread_cpu_ns() const {
    if (!running_.load(std::memory_order_acquire)) return 0;
    clockid_t clock;
    timespec ts{};
    if (pthread_getcpuclockid(thread_, &clock) != 0 || clock_gettime(clock, &ts) != 0) return 0;
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void Watcher::lock_for_fork() {
    wake_mu_.lock();
    sweep_mu_.lock();
}

void Watcher::unlock_after_fork_in_parent() {
    sweep_mu_.unlock();
    wake_mu_.unlock();
}

void Watcher::reset_in_child() {
    // Only the forking thread exists in the child: the watcher thread is gone and its handle meaningless.
    sqs_.clear();
    cqs_.clear();
    seen_generation_ = ~uint64_t{0};
    running_.store(false, std::memory_order_release);
    stop_requested_ = false;
    wake_requested_ = false;
    sweep_mu_.unlock();
    wake_mu_.unlock();
}

// ------------------------------------------------------------------------------------------ queue list

void Watcher::sync_locked() {
    if (registry_.generation() == seen_generation_) return;
    // Cold path (a queue was created or destroyed): allocation is fine here.
    std::vector<SendQueue> sqs;
    std::vector<CompletionQueue> cqs;
    seen_generation_ = registry_.snapshot(sqs, cqs);

    for (auto it = sqs_.begin(); it != sqs_.end();) {
        if (std::any_of(sqs.begin(), sqs.end(), [&](const SendQueue& q) { return q.key == it->q.key; })) {
            ++it;
            continue;
        }
        Backlog ignored = Backlog::None;
        sweep_send_queue(*it, ignored, /*final=*/true);  // last look before the application frees the ring
        report_stats(*it);
        // Its CQ usually outlives it: the completions already written are traced now, before the QP's destroy,
        // not at the CQ's own destroy, when the trace no longer knows the QP's number.
        link_send_queues();
        for (auto& c : cqs_)
            if (completes(c, it->q)) sweep_completion_queue(c);
        it = sqs_.erase(it);
    }
    link_send_queues();  // the CQs' indices into sqs_ before their final sweeps below use them
    for (auto it = cqs_.begin(); it != cqs_.end();) {
        if (std::any_of(cqs.begin(), cqs.end(), [&](const CompletionQueue& q) { return q.key == it->q.key; })) {
            ++it;
            continue;
        }
        sweep_completion_queue(*it, /*final=*/true);
        it = cqs_.erase(it);
    }
    size_t ring_bytes = scratch_.size();
    for (const auto& q : sqs) {
        auto existing = std::find_if(sqs_.begin(), sqs_.end(), [&](const SqState& s) { return s.q.key == q.key; });
        if (existing != sqs_.end() && existing->q.epoch == q.epoch) {
            existing->q = q;  // same queue learned again (init_obj called twice): keep the cursors
        } else {
            if (existing != sqs_.end()) {  // reset (2RST): the old life's WQEs first, then start over
                Backlog ignored = Backlog::None;
                sweep_send_queue(*existing, ignored, /*final=*/true);
                report_stats(*existing);
                sqs_.erase(existing);
            }
            SqState s;
            s.q = q;
            s.next = s.seen = q.initial_pi & kSendDbrMask;
            s.last16 = static_cast<uint16_t>(q.initial_pi);
            if (q.dbr_less) s.scan.reset(q.wqebbs, q.initial_pi);
            sqs_.push_back(std::move(s));
        }
        ring_bytes = std::max<size_t>(ring_bytes, size_t{q.wqebbs} * kWqeBasicBlock);
    }
    for (const auto& q : cqs) {
        if (contains_key(cqs_, q.key)) continue;
        CqState c;
        c.q = q;
        c.held.reserve(kMaxHeldCqes);
        cqs_.push_back(std::move(c));
    }
    link_send_queues();
    scratch_.resize(ring_bytes);
    cq_scratch_.resize(SIGMATRACE_MAX_BATCH * 128);
}

void Watcher::link_send_queues() {
    for (auto& c : cqs_) {
        c.sqs.clear();
        for (size_t i = 0; i < sqs_.size(); ++i)
            if (completes(c, sqs_[i].q)) c.sqs.push_back(i);
    }
}

uint64_t next_sweep_period(const WatcherConfig& config, uint64_t period, Backlog backlog, bool active,
                           uint64_t quiet_ns) {
    switch (backlog) {
    case Backlog::High: return config.min_period_ns;                         // a ring is half full: hurry
    case Backlog::Rising: return std::max(config.min_period_ns, period / 2);  // filling faster than drained
    case Backlog::None: break;
    }
    // A producer that posts in bursts (UCX fills its send window, then waits for completions) leaves sweeps
    // empty between bursts; relaxing to the idle period there would let the next burst wrap the ring unseen.
    const bool busy = active || quiet_ns < config.linger_ns;
    const uint64_t cap = busy ? config.max_period_ns : std::max(config.idle_period_ns, config.max_period_ns);
    if (period >= cap) return busy ? cap : period;  // busy again after idle: back under the maximum at once
    return std::min(cap, period * 2);
}

size_t Watcher::sweep_locked(Backlog& backlog, bool final) {
    ++stats_.sweeps;
    sweep_start_ns_ = monotonic_ns();
    size_t decoded = 0;
    for (auto& s : sqs_) decoded += sweep_send_queue(s, backlog, final);
    for (auto& c : cqs_) sweep_completion_queue(c);
    return decoded;
}

// ------------------------------------------------------------------------------------------ send queues

bool Watcher::copy_ring(const SqState& s, uint64_t from, uint64_t to) {
    // [from, to) in extended WQEBB indices, at most one ring: at most two contiguous pieces.
    const uint32_t n = s.q.wqebbs;
    uint64_t i = from;
    while (i < to) {
        const uint32_t slot = static_cast<uint32_t>(i & (n - 1));
        const uint64_t count = std::min<uint64_t>(to - i, n - slot);
        const size_t off = size_t{slot} * kWqeBasicBlock;
        if (!memory_.read(scratch_.data() + off, s.q.ring_addr + off, count * kWqeBasicBlock, s.q.ring_mem))
            return false;
        i += count;
    }
    return true;
}

namespace {
void note_backlog(Backlog& backlog, uint64_t pending, uint32_t ring) {
    if (pending * 2 >= ring) backlog = Backlog::High;
    else if (pending * 8 >= ring && backlog == Backlog::None) backlog = Backlog::Rising;
}
}  // namespace

size_t Watcher::sweep_send_queue(SqState& s, Backlog& backlog, bool final) {
    if (s.q.dbr_less) return sweep_scanned_queue(s, backlog, final);
    if (s.q.wqebbs == 0 || s.q.dbr_addr == 0) return 0;  // nothing to follow
    uint32_t raw = 0;
    if (!memory_.read_be32_acquire(s.q.dbr_addr, s.q.dbr_mem, raw)) {
        ++stats_.read_failures;
        return 0;
    }
    const auto d16 = static_cast<uint16_t>(raw);
    const auto delta = static_cast<uint16_t>(d16 - s.last16);
    if (delta >= 0x8000) {
        // The producer index went backwards (a QP reset and reused): follow it; nothing in between exists.
        s.seen = s.next = s.seen - static_cast<uint16_t>(s.last16 - d16);
        s.last16 = d16;
        return 0;
    }
    s.seen += delta;
    s.last16 = d16;
    const uint64_t b = s.seen;
    uint64_t a = s.next;
    if (b <= a) return 0;
    const uint32_t n = s.q.wqebbs;
    note_backlog(backlog, b - a, n);

    if (!records_enabled()) {
        s.next = b;  // nobody records: keep up without reading the ring
        return 0;
    }

    uint64_t start = a;
    if (b - a > n) {  // more than a ring behind: the oldest ones are certainly gone
        start = b - n;
        s.lost_pending += start - a;
        stats_.wqes_lost += start - a;
    }
    if (!copy_ring(s, start, b)) {
        ++stats_.read_failures;
        return 0;  // retry next sweep
    }
    // The producer's position after the copy bounds what it may have been rewriting meanwhile.
    uint64_t c = b;
    if (memory_.read_be32_acquire(s.q.dbr_addr, s.q.dbr_mem, raw)) {
        const auto moved = static_cast<uint16_t>(static_cast<uint16_t>(raw) - d16);
        if (moved < 0x8000) c = b + moved;
    }
    const uint64_t guard = config_.guard_for(n);
    uint64_t safe_from = c + guard > n ? c + guard - n : 0;
    // Slots of WQEs the NIC has not completed cannot have been reused: a producer that filled its ring between
    // two sweeps (a burst) loses nothing it is still waiting on.
    if (uint64_t done = 0; safe_from > start && completion_bound(s, c, start, b, done)) safe_from = std::min(safe_from, std::max(done, start));

    const RingView view{scratch_.data(), n};
    WqeBatch batch(s.q.key, s.q.qpn, s.q.poster, config_.redact_addresses, config_.redact_keys);
    size_t decoded = 0;
    Run run = Run::Normal;
    uint64_t p = start;
    while (p < b) {
        if (p < safe_from) {
            ++s.lost_pending;
            ++stats_.wqes_lost;
            run = Run::Lost;
            ++p;
            continue;
        }
        DecodedWqe w;
        const WqeStatus st = decode_wqe(view, static_cast<uint32_t>(p & (n - 1)), s.q.transport, w);
        if (w.wqe_index != static_cast<uint16_t>(p)) {
            // Not the start of WQE p: overwritten by a later lap, or the tail of a WQE we already skipped.
            if (run != Run::AfterMalformed) {
                ++s.lost_pending;
                ++stats_.wqes_lost;
                run = Run::Lost;
            }
            ++p;
            continue;
        }
        if (st != WqeStatus::Ok) {
            ++s.malformed_pending;
            ++stats_.wqes_malformed;
            run = Run::AfterMalformed;
            p += (st == WqeStatus::BadDs || w.wqebbs == 0) ? 1 : w.wqebbs;
            continue;
        }
        if (p + w.wqebbs > b) break;  // the doorbell record stops inside this WQE: its rest comes later
        batch.add(p, w, b);
        ++decoded;
        run = Run::Normal;
        p += w.wqebbs;
    }
    batch.flush();
    s.next = p;
    stats_.wqes_decoded += decoded;
    report_stats(s);
    return decoded;
}

bool Watcher::completes(const CqState& c, const SendQueue& q) { return c.q.cqn == q.cqn && c.q.ctx == q.ctx; }

bool Watcher::one_slot(const CqState& c) { return c.q.collapsed || c.q.ncqe == 1; }

Watcher::Slot Watcher::read_slot(const CqState& c, mlx5::Cqe64& cqe) {
    const uint32_t cqe_size = c.q.cqe_size == 128 ? 128 : 64;  // a 64-byte CQE is the last 64 bytes of a 128-byte one
    uint8_t raw[128];
    if (!memory_.read(raw, c.q.ring_addr, cqe_size, c.q.ring_mem)) return Slot::unreadable;
    std::memcpy(&cqe, raw + (cqe_size - 64), sizeof cqe);
    static constexpr uint8_t kZero[64] = {};
    // INVALID as the application initialised it, or zero-filled: the NIC has not written it.
    if (cqe.opcode() == cqe_op::INVALID || std::memcmp(&cqe, kZero, sizeof kZero) == 0) return Slot::unwritten;
    return Slot::written;
}

bool Watcher::completion_bound(const SqState& s, uint64_t c, uint64_t start, uint64_t end, uint64_t& done) {
    const CqState* cq = nullptr;
    for (const CqState& x : cqs_)
        if (completes(x, s.q)) cq = &x;
    // A CQ shared by several send queues may show another queue's completion in its one slot; a ring CQ's newest
    // entry needs a walk that may meet entries the application consumed and invalidated. Neither bounds this one.
    if (!cq || !one_slot(*cq) || cq->sqs.size() != 1 || cq->q.compressed || c == 0) return false;
    mlx5::Cqe64 cqe;
    switch (read_slot(*cq, cqe)) {
    case Slot::unreadable: return false;
    case Slot::unwritten:
        // As initialised, and no completion ever seen in it: nothing has completed, no slot was reused (a burst's
        // first sweep). Once one was seen, an invalid slot is one the application wrote back: no bound.
        if (cq->have_last) return false;
        done = start;
        return true;
    case Slot::written: break;
    }
    if (cqe.qpn() != s.q.qpn) return false;
    // The completed WQE's index, extended: the newest index <= c - 1 with these low 16 bits.
    const uint64_t last = c - 1 - static_cast<uint16_t>(static_cast<uint16_t>(c - 1) - cqe.wqe_index());
    // Its own blocks are free too: its size from the snapshot when it is there, else the largest WQE's (16).
    uint64_t blocks = 16;
    if (last >= start && last < end) {
        DecodedWqe w;
        const RingView view{scratch_.data(), s.q.wqebbs};
        decode_wqe(view, static_cast<uint32_t>(last & (s.q.wqebbs - 1)), s.q.transport, w);
        if (w.wqe_index == static_cast<uint16_t>(last) && w.wqebbs > 0) blocks = w.wqebbs;
    }
    done = last + blocks;
    return true;
}

size_t Watcher::sweep_scanned_queue(SqState& s, Backlog& backlog, bool final) {
    if (s.q.wqebbs == 0) return 0;
    WqeBatch batch(s.q.key, s.q.qpn, s.q.poster, config_.redact_addresses, config_.redact_keys);
    ScanParams params;
    params.now_ns = final ? monotonic_ns() : sweep_start_ns_;
    params.settle_ns = final ? 0 : config_.settle_ns;
    params.guard = final ? 0 : config_.guard_for(s.q.wqebbs);  // a queue being destroyed has no producer left
    params.record = records_enabled();
    ScanResult total;
    for (int pass = 0; pass < (final ? 2 : 1); ++pass) {
        params.sweep = ++scan_pass_;
        const ScanResult r = scan_dbr_less_queue(s.q, s.scan, memory_, scratch_.data(), params, batch);
        total.decoded += r.decoded;
        total.lost += r.lost;
        total.malformed += r.malformed;
        total.read_failed |= r.read_failed;
    }
    batch.flush();
    if (total.read_failed) ++stats_.read_failures;
    stats_.wqes_decoded += total.decoded;
    stats_.wqes_lost += total.lost;
    stats_.wqes_malformed += total.malformed;
    s.lost_pending += total.lost;
    s.malformed_pending += total.malformed;
    note_backlog(backlog, s.scan.frontier - s.scan.next, s.q.wqebbs);
    report_stats(s);
    return total.decoded;
}

void Watcher::report_stats(SqState& s) {
    if (s.lost_pending == 0 && s.malformed_pending == 0) return;
    if (ST_TRACE_ENABLED(gpu_watch_stats)) {
        st_gpu_watch_stats_rec rec{s.q.qpn, s.lost_pending, s.malformed_pending, period_ns()};
        ST_TRACE_EMIT(gpu_watch_stats, &rec);
    }
    s.lost_pending = s.malformed_pending = 0;
}

// ------------------------------------------------------------------------------------------ completion queues

namespace {
// WQE `counter` (16 bits) is not behind a queue cursor `next`: not decoded (or counted lost) yet.
bool not_reached(uint16_t counter, uint64_t next) {
    return static_cast<uint16_t>(counter - static_cast<uint16_t>(next)) < 0x8000;
}
}  // namespace

namespace {
// A send queue's completion (a requester's), not a receive's.
bool is_send_completion(const Cqe64& e) { return e.opcode() == cqe_op::REQ || e.opcode() == cqe_op::REQ_ERR; }
}  // namespace

Watcher::SqState* Watcher::completed_queue(const CqState& c, const Cqe64& e) {
    if (!is_send_completion(e)) return nullptr;
    for (size_t i : c.sqs)
        if (sqs_[i].q.qpn == e.qpn()) return &sqs_[i];
    return nullptr;
}

bool Watcher::awaits_decode(const CqState& c, const Cqe64& e) {
    const SqState* s = completed_queue(c, e);
    return s && s->q.dbr_less && not_reached(e.wqe_index(), s->scan.next);
}

void Watcher::order_after_cqe(const CqState& c, uint64_t cqe_addr) {
    // The CQE's copy was made with relaxed loads, which a weakly ordered CPU may satisfy after later reads.
    // Reading its last word again with acquire (the same or a newer value) orders them after it, so they show
    // what the producer published before this completion. (An acquire load rather than a fence: ThreadSanitizer
    // models the former.)
    uint32_t ignored_word = 0;
    memory_.read_be32_acquire(cqe_addr + 60, c.q.ring_mem, ignored_word);
}

void Watcher::catch_up(const CqState& c, uint64_t cqe_addr, SqState& s) {
    order_after_cqe(c, cqe_addr);   // the doorbell record's read: it covers what was rung for this completion
    Backlog ignored = Backlog::None;
    sweep_send_queue(s, ignored);
}

bool Watcher::may_be_unlearned(const CqState& c, const Cqe64& e, uint64_t cqe_addr) {
    if (!is_send_completion(e)) return false;
    // A queue registered after this sweep's sync may have posted and completed since: its WQEs are read by the
    // next sweep, which learns it first. The registration precedes the post, which precedes the completion.
    order_after_cqe(c, cqe_addr);
    return registry_.generation() != seen_generation_;
}

void Watcher::emit_cqe(CqState& c, const Cqe64& e, uint64_t addr, CqeBatch& batch) {
    // A queue with a doorbell record is read again now if the CQE completes a WQE the sweep has not decoded (see
    // watcher.h): its WQEs are emitted before this CQE. A CQE still ahead after that completes nothing the
    // producer published (garbage, or a producer breaking the protocol): emitted as is, the analyzer counts it.
    SqState* s = completed_queue(c, e);
    if (s && !s->q.dbr_less && not_reached(e.wqe_index(), s->next)) catch_up(c, addr, *s);
    const bool waits = s ? s->q.dbr_less && not_reached(e.wqe_index(), s->scan.next) : may_be_unlearned(c, e, addr);
    if (c.held_head == c.held.size() && !waits) {
        batch.add(e);
        return;
    }
    if (c.held.size() == kMaxHeldCqes) release_held(c, batch, /*all=*/true);  // never unbounded, never blocking
    c.held.push_back(e);  // within the reserved capacity: no allocation
}

void Watcher::release_held(CqState& c, CqeBatch& batch, bool all) {
    while (c.held_head < c.held.size() && (all || !awaits_decode(c, c.held[c.held_head]))) batch.add(c.held[c.held_head++]);
    if (c.held_head == c.held.size()) {
        c.held.clear();
        c.held_head = 0;
    }
}

size_t Watcher::sweep_completion_queue(CqState& c, bool final) {
    if (c.q.ncqe == 0 || c.q.compressed || !records_enabled()) return 0;
    const uint32_t cqe_size = c.q.cqe_size == 128 ? 128 : 64;
    const uint32_t tail = cqe_size - 64;  // the 64-byte CQE is the last 64 bytes of a 128-byte one
    CqeBatch batch(c.q.key);
    release_held(c, batch, final);
    size_t seen = 0;

    if (one_slot(c)) {
        // One slot the NIC rewrites in place: a sweep sees only the latest completion. A 1-entry CQ is one too
        // (UCX GDAKI's, overrun ignored): its owner bit flips with each write, consumed or not, so it cannot be
        // followed by owner bit like a ring -- after an even number of writes it would look unwritten.
        Cqe64 cqe;
        Slot slot = read_slot(c, cqe);
        if (slot == Slot::unreadable) ++stats_.read_failures;
        if (slot != Slot::written) return 0;
        // A completion is known by its last 8 bytes (opcode, QPN, wqe_counter, op_own), which the NIC publishes
        // after the rest; the owner bit is left out of it: on a collapsed CQ it flips with every write and means
        // nothing here (NVSHMEM ignores it), and a writer that stores it last is read once with the old bit and
        // once with the new. The rest of the slot is no part of the identity: a read while the next CQE's body is
        // being written shows that body under the old tail, one completion that must not be traced twice. (Two
        // completions with the same tail are 65 536 WQEBBs apart; missing the second loses nothing a later CQE
        // does not retire, as each CQE of such a CQ completes every WQE before it.)
        const auto tail_key = [](const Cqe64& e) {
            uint8_t bytes[8];
            std::memcpy(bytes, reinterpret_cast<const uint8_t*>(&e) + 56, 8);
            bytes[7] &= 0xfe;
            uint64_t key;
            std::memcpy(&key, bytes, 8);
            return key;
        };
        uint64_t key = tail_key(cqe);
        if (c.have_last && key == c.last_tail) return 0;
        // New: read the slot once more, after the tail was seen, so the body is at least as new as the tail (a read
        // that took the body before the NIC wrote it and the tail after would give the old CQE's byte count,
        // timestamp and syndrome). A newer tail in the second read is simply the newer completion.
        order_after_cqe(c, c.q.ring_addr + tail);
        Cqe64 again;
        slot = read_slot(c, again);
        if (slot == Slot::unreadable) ++stats_.read_failures;
        if (slot == Slot::written) {
            cqe = again;
            key = tail_key(cqe);
        }
        c.last_tail = key;
        c.have_last = true;
        emit_cqe(c, cqe, c.q.ring_addr + tail, batch);
        if (final) release_held(c, batch, true);
        batch.flush();
        ++stats_.cqes_seen;
        return 1;
    }

    const uint32_t n = c.q.ncqe;
    bool consumer_known = false;
    uint32_t consumer = 0;  // the application's consumer index (24 bits), read at most once per sweep
    for (uint32_t budget = n; budget > 0;) {
        const uint32_t slot = c.ci & (n - 1);
        const uint32_t count = std::min({budget, n - slot, static_cast<uint32_t>(SIGMATRACE_MAX_BATCH)});
        if (!memory_.read(cq_scratch_.data(), c.q.ring_addr + uint64_t{slot} * cqe_size, size_t{count} * cqe_size,
                          c.q.ring_mem)) {
            ++stats_.read_failures;
            break;
        }
        uint32_t used = 0;
        for (; used < count; ++used) {
            Cqe64 cqe;
            std::memcpy(&cqe, cq_scratch_.data() + used * cqe_size + tail, sizeof cqe);
            const bool expected_owner = (c.ci & n) != 0;
            const bool valid = cqe.opcode() != cqe_op::INVALID && cqe.owner() == expected_owner &&
                               cqe.format() != kCqeFormatCompressed;
            if (valid) {
                emit_cqe(c, cqe, c.q.ring_addr + uint64_t{slot + used} * cqe_size + tail, batch);
                ++c.ci;
                ++seen;
                continue;
            }
            // Not ours to see yet -- or already consumed and invalidated by the GPU (rocSHMEM writes INVALID
            // back), or we were lapped. The consumer's doorbell record tells those apart.
            if (!consumer_known && c.q.dbr_addr) {
                uint32_t raw = 0;
                consumer_known = memory_.read_be32_acquire(c.q.dbr_addr, c.q.dbr_mem, raw);
                consumer = raw & kCqConsumerMask;
            }
            const uint32_t ahead = (consumer - c.ci) & kCqConsumerMask;
            if (consumer_known && ahead != 0 && ahead < (kCqConsumerMask >> 1)) {
                ++c.ci;  // consumed before we saw it
                ++stats_.cqes_missed;
                ++c.missed_pending;
                continue;
            }
            break;
        }
        budget -= used;
        if (used < count) break;
    }
    if (final) release_held(c, batch, true);
    batch.flush();
    stats_.cqes_seen += seen;
    report_cq_stats(c);
    return seen;
}

// The trace must say that completions went by unseen: the analyzer otherwise shows their WQEs as in flight.
void Watcher::report_cq_stats(CqState& c) {
    if (c.missed_pending == 0) return;
    if (ST_TRACE_ENABLED(gpu_cq_stats)) {
        st_gpu_cq_stats_rec rec{c.q.cqn, c.missed_pending, period_ns()};
        ST_TRACE_EMIT(gpu_cq_stats, &rec);
    }
    c.missed_pending = 0;
}

}  // namespace sigmatrace::gpumem
