// The watcher: one background thread per process that reads every learned send queue's doorbell record, copies
// the WQEs between the last one it decoded and the producer index into a private snapshot, decodes them and
// emits them as ring_post records; reads CQEs where it can (poll_cq records of api kApiRingCompletion), both in
// `deferred_records` events (event_batches.h); reports WQEs overwritten before it could read them and malformed
// ones (gpu_watch_stats). It only ever reads queue memory.
//
// DBR-less queues (send_dbr_mode = NO_DBR) have no doorbell record: they are read by index scanning instead
// (index_scanner.h), with a commit rule of their own.
//
// Why a WQE is never decoded wrong: WQE i is decoded only if (1) its control segment in the snapshot carries
// index i (mod 2^16), and (2) after the copy the producer index c satisfies i + ring >= c + guard, i.e. no
// producer that writes at most `guard` WQEBBs ahead of its doorbell record can have started rewriting slot i
// while it was being copied. Everything else in the copied range is counted as lost (per WQEBB, which is per WQE
// for the one-block WQEs GPU libraries post).
//
// Why a CQE never precedes the WQEs it completes in the trace: a sweep reads the send queues before the CQs, so
// the producer may post more and the NIC complete them in between (a watcher preempted mid-sweep on a loaded
// machine sees exactly that). A CQE whose WQE the send queue's cursor has not reached yet makes the watcher read
// that queue again before the CQE is emitted: its producer published the doorbell record before ringing, so the
// record now covers every WQE the NIC completed. (DBR-less queues hold such CQEs back instead: see CqState; so
// does a send completion of a queue registered after the sweep's sync: may_be_unlearned.)
//
// Cost: steady state allocates nothing; one uncontended mutex per sweep (shared only with set-up/tear-down calls
// that change the queue list); per queue one 4-byte doorbell read, and per new WQE a 64-byte copy plus decode;
// per CQE a look over the send queues completing on its CQ (one, for the GPU libraries' per-QP CQs).
#pragma once

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "gpumem/index_scanner.h"
#include "gpumem/memory_reader.h"
#include "mlx5_format/mlx5_layout.h"
#include "gpumem/queue_registry.h"
#include "gpumem/watcher_config.h"

namespace sigmatrace::gpumem {

class CqeBatch;

struct WatcherStats {
    uint64_t sweeps = 0;
    uint64_t wqes_decoded = 0;
    uint64_t wqes_lost = 0;       // in WQEBBs
    uint64_t wqes_malformed = 0;
    uint64_t cqes_seen = 0;
    uint64_t cqes_missed = 0;     // consumed (and invalidated) by the GPU before the watcher saw them
    uint64_t read_failures = 0;
    uint64_t max_sweep_gap_ns = 0;  // longest time between two sweeps of the thread (scheduling delays show here)
};

// The fullest ring a sweep found: under 1/8 of its size, 1/8 or more, half or more.
enum class Backlog : uint8_t { None, Rising, High };

// The adaptive period: to the minimum when a ring is half full, halved while rings fill faster than they drain,
// otherwise doubled up to the maximum (sweeps that found WQEs, or found nothing but within the linger time of
// one that did: `quiet_ns` is the time since then) or the idle period (quiet for longer); a busy sweep after
// idling returns to the maximum at once.
uint64_t next_sweep_period(const WatcherConfig& config, uint64_t period, Backlog backlog, bool active,
                           uint64_t quiet_ns);

class Watcher {
public:
    Watcher(QueueRegistry& registry, MemoryReader& memory, WatcherConfig config);
    ~Watcher();
    Watcher(const Watcher&) = delete;
    Watcher& operator=(const Watcher&) = delete;

    // Starts the background thread (idempotent). Returns false, with errno-style `error`, if it cannot.
    bool start();
    // Stops the thread and sweeps one last time (a final sweep: see sync()).
    void stop();
    bool running() const { return running_.load(std::memory_order_acquire); }

    // Applies registry changes now: removed queues get a final sweep and are dropped before this returns, so the
    // caller may then free their memory. Called by the tear-down hooks. A final sweep of a DBR-less queue reads
    // its ring twice back to back and commits what did not change, without waiting out the settle time: the
    // producer is done with a queue that is being destroyed.
    void sync();
    // Wakes the thread for an immediate sweep (new queue, or a test that just wrote).
    void wake();
    // One full pass over every queue, in the calling thread (tests and benchmarks drive the watcher this way).
    // Returns the number of WQEs decoded.
    size_t sweep_once();

    WatcherStats stats() const;
    uint64_t period_ns() const { return period_ns_.load(std::memory_order_relaxed); }
    // CPU time the watcher thread has used (0 when not running).
    uint64_t thread_cpu_ns() const;
    const WatcherConfig& config() const { return config_; }

    // fork(): hold the locks across it; the child has no watcher thread and no queues of its own.
    void lock_for_fork();
    void unlock_after_fork_in_parent();
    void reset_in_child();

private:
    struct SqState {
        SendQueue q;
        uint64_t next = 0;         // extended index of the next WQEBB to decode
        uint64_t seen = 0;         // extended producer index read last
        uint16_t last16 = 0;       // its low 16 bits, as the doorbell record holds them
        uint64_t lost_pending = 0; // not yet reported in gpu_watch_stats
        uint64_t malformed_pending = 0;
        ScanCursor scan;           // DBR-less queues only
    };
    struct CqState {
        CompletionQueue q;
        uint32_t ci = 0;           // the watcher's own consumer index (never written anywhere)
        uint64_t last_tail = 0;    // one-slot CQs: the last 8 bytes of the last CQE emitted, owner bit cleared
        bool have_last = false;
        // Completions of DBR-less send queues whose WQEs the scanner has not decoded yet (it needs two sweeps) are
        // held back, in order, so that the trace shows every WQE before its completion as it does for queues with
        // a doorbell record; so are those of a queue learned after the sweep began (may_be_unlearned), for one
        // sweep. Capacity kMaxHeldCqes, reserved when the CQ is learned.
        std::vector<mlx5::Cqe64> held;
        size_t held_head = 0;
        std::vector<size_t> sqs;   // indices into sqs_ of the send queues completing here (link_send_queues)
        uint64_t missed_pending = 0;  // CQEs consumed before we read them, not yet reported in gpu_cq_stats
    };
    static constexpr size_t kMaxHeldCqes = 256;

    static void* thread_main(void* self);
    void run();
    void sync_locked();
    size_t sweep_locked(Backlog& backlog, bool final = false);
    size_t sweep_send_queue(SqState& s, Backlog& backlog, bool final = false);
    size_t sweep_scanned_queue(SqState& s, Backlog& backlog, bool final);
    size_t sweep_completion_queue(CqState& c, bool final = false);
    void report_cq_stats(CqState& c);
    void link_send_queues();
    SqState* completed_queue(const CqState& c, const mlx5::Cqe64& e);
    bool awaits_decode(const CqState& c, const mlx5::Cqe64& e);
    // Orders the reads that follow after the read of the CQE at `cqe_addr`.
    void order_after_cqe(const CqState& c, uint64_t cqe_addr);
    void catch_up(const CqState& c, uint64_t cqe_addr, SqState& s);
    // A send completion of no queue linked to `c` while the registry has changed since this sweep's sync: held
    // for one sweep, in which the queue it may complete is learned and read first.
    bool may_be_unlearned(const CqState& c, const mlx5::Cqe64& e, uint64_t cqe_addr);
    // `addr`: where the 64-byte CQE `e` was read from.
    void emit_cqe(CqState& c, const mlx5::Cqe64& e, uint64_t addr, CqeBatch& batch);
    void release_held(CqState& c, CqeBatch& batch, bool all);
    bool copy_ring(const SqState& s, uint64_t from, uint64_t to);
    // The CQ that completes send queue `q`.
    static bool completes(const CqState& c, const SendQueue& q);
    // A collapsed or 1-entry CQ: one slot the NIC rewrites in place.
    static bool one_slot(const CqState& c);
    enum class Slot { unreadable, unwritten, written };
    // Reads the one slot of such a CQ into `cqe` (its 64-byte CQE).
    Slot read_slot(const CqState& c, mlx5::Cqe64& cqe);
    // One past the newest WQE of `s` its CQ shows completed now (extended, at most `c`), read after the ring copy:
    // a WQE not completed cannot have had its slot reused. False when the CQ cannot bound it (not watched, not a
    // collapsed or 1-entry CQ of this queue alone, its slot invalidated after a completion was seen).
    bool completion_bound(const SqState& s, uint64_t c, uint64_t start, uint64_t end, uint64_t& done);
    void report_stats(SqState& s);

    QueueRegistry& registry_;
    MemoryReader& memory_;
    const WatcherConfig config_;

    // Held for a whole sweep and by sync(); the thread never sleeps while holding it.
    mutable std::mutex sweep_mu_;
    std::vector<SqState> sqs_;
    std::vector<CqState> cqs_;
    std::vector<uint8_t> scratch_;     // ring-shaped snapshot, as large as the largest ring
    std::vector<uint8_t> cq_scratch_;
    uint64_t seen_generation_ = ~uint64_t{0};
    WatcherStats stats_;
    uint64_t sweep_start_ns_ = 0;      // when the current sweep started (the scanner's clock)
    uint64_t scan_pass_ = 0;           // numbers the scanner's passes (a WQE must look the same in two)

    std::mutex wake_mu_;
    std::condition_variable wake_cv_;
    bool wake_requested_ = false;
    bool stop_requested_ = false;
    std::atomic<bool> running_{false};
    pthread_t thread_{};
    std::atomic<uint64_t> period_ns_;
};

}  // namespace sigmatrace::gpumem
