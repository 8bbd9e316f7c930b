// Deferred emission: the per-thread ring that data-path wrappers capture their records into.
//
// Why: an LTTng event costs an order of magnitude more than capturing a record (docs/PERFORMANCE.md), and a
// message of a latency-bound program has 3-4 events on its critical path (the poll that returns the receive, the
// repost, the reply's post, its completion). Capturing a record instead — a capture-clock reading and a copy of
// the WR or completion values into this ring — keeps them off it; the events are written later, off the critical path (deferred_rings.h says when; deferred_records_writer.h says how).
//
// One ring per thread that captures, single producer (its thread), consumers serialised by a per-ring flag
// (the thread itself at idle points, the emitter thread, exit and signal paths). The producer takes no lock:
// it writes a record into free space and publishes it with one release store of `head`; a consumer reads
// records up to `head` (acquire) and frees them with a release store of `tail`. Records are variable-sized
// (a header, a fixed part, n entries), 16-byte aligned, never split at the end of the buffer (a pad record fills
// the rest), at most SIGMATRACE_MAX_BATCH entries each (one record = one call, or one part of a long chain;
// consecutive records share a `deferred_records` event, deferred_records_writer.h).
//
// A record may be published before its last value is known: an ibv_wr_* list's record is written before the
// provider's wr_complete (the doorbell), while the list's lines are still in the caches, and only its result is
// written after the call. Such a record is committed unfinished (commit_unfinished: its position is kept on the
// producer's line) and finished by one release store on that line; consumers stop at an unfinished record, so
// none is emitted without its result, and records the same thread captures in between (none do on the fabric or
// mlx5) wait behind it. A ring has at most one unfinished record.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <sigmatrace/deferred_records.h>

namespace sigmatrace::interpose::deferred {

// The records' layout is the `deferred_records` event's payload: declared in the public header.
using records::align_up;
using records::CompletionEntry;
using records::entries;
using records::fixed_part;
using records::kAlign;
using records::kMaxRecordSize;
using records::PollFixed;
using records::RecordHeader;
using records::RecordKind;
using records::record_size;
using records::RecvEntry;
using records::RecvFixed;
using records::SendEntry;
using records::SendFixed;

class Ring {
public:
    // `capacity`: bytes, a power of two >= 4 * kMaxRecordSize; `memory` stays owned by the caller.
    Ring(std::byte* memory, uint64_t capacity) noexcept : data_(memory), capacity_(capacity), mask_(capacity - 1) {
        static_assert(kMaxRecordSize % kAlign == 0);
    }
    Ring(const Ring&) = delete;
    Ring& operator=(const Ring&) = delete;

    // ---- producer (the owning thread only)

    // Room for a record of `size` bytes when it is known free and before the buffer's end (`limit_`: a compare),
    // else nullptr; reserve() then decides. For the data path's fast paths, which hand everything else to their
    // general path.
    RecordHeader* reserve_fast(uint32_t size) noexcept {
        const uint64_t pos = head_.load(std::memory_order_relaxed);
        if (pos + size > limit_) return nullptr;
        reserved_at_ = pos;
        return reinterpret_cast<RecordHeader*>(data_ + (pos & mask_));
    }

    // Room for a record of `size` bytes, or nullptr when the ring is full. Writes nothing visible: fill the
    // record, then commit(). Reloads the consumer's position only when the cached one says "full".
    RecordHeader* reserve(uint32_t size) noexcept {
        if (RecordHeader* h = reserve_fast(size)) return h;
        uint64_t pos = head_.load(std::memory_order_relaxed);
        const uint64_t off = pos & mask_;
        const uint64_t contiguous = capacity_ - off;
        const uint64_t need = size + (contiguous < size ? contiguous : 0);
        if (capacity_ - (pos - tail_cache_) < need) {
            tail_cache_ = tail_.load(std::memory_order_acquire);
            if (capacity_ - (pos - tail_cache_) < need) return nullptr;
        }
        if (contiguous < size) [[unlikely]] {
            // The record would straddle the end: a pad record takes the rest, the record starts at offset 0.
            auto* pad = reinterpret_cast<RecordHeader*>(data_ + off);
            pad->size = static_cast<uint32_t>(contiguous);
            pad->kind = RecordKind::pad;
            pad->n = 0;
            pad->ts = 0;
            pos += contiguous;
        }
        reserved_at_ = pos;
        update_limit(pos);
        return reinterpret_cast<RecordHeader*>(data_ + (pos & mask_));
    }
    // Publishes the record reserve() returned (its header's size must be set).
    void commit(const RecordHeader* h) noexcept {
        head_.store(reserved_at_ + h->size, std::memory_order_release);
    }
    // Publishes the record reserve() returned as unfinished, when no other is (else false, and nothing is
    // published): consumers stop at it until finish().
    bool commit_unfinished(const RecordHeader* h) noexcept {
        if (unfinished_.load(std::memory_order_relaxed) != kNone) return false;
        // Release: a consumer that reads this position has also seen the finish() of the record before it.
        unfinished_.store(reserved_at_, std::memory_order_release);
        commit(h);
        return true;
    }
    // Finishes the unfinished record: what the producer wrote to it before this is what consumers read. The
    // record's own lines are not touched (after the doorbell they have usually left the L1 cache).
    void finish() noexcept { unfinished_.store(kNone, std::memory_order_release); }
    // The owning thread leaves while its record is unfinished (it exited inside the provider's call): the record,
    // whose result is unknown, becomes a pad record, so that the ring drains and its next thread starts clean.
    // Returns whether there was one.
    bool abandon_unfinished() noexcept {
        const uint64_t at = unfinished_.load(std::memory_order_relaxed);
        if (at == kNone) return false;
        reinterpret_cast<RecordHeader*>(data_ + (at & mask_))->kind = RecordKind::pad;
        finish();
        return true;
    }
    // Whether records wait for their events. Cheap enough for every empty poll: the producer's own head and the
    // consumer's tail (a cache line the consumer writes only when it frees records).
    bool has_pending() const noexcept {
        return head_.load(std::memory_order_relaxed) != tail_.load(std::memory_order_relaxed);
    }
    // Bytes of records waiting (producer side: its own head, the consumer's last published tail).
    uint64_t pending_bytes() const noexcept {
        return head_.load(std::memory_order_relaxed) - tail_.load(std::memory_order_relaxed);
    }
    // Capture time of the oldest record not yet consumed, 0 when none. Producer or consumer: the record at
    // `tail` stays intact until a consumer frees it, and the producer never writes over unfreed space.
    uint64_t oldest_ts() const noexcept {
        uint64_t t = tail_.load(std::memory_order_acquire);
        const uint64_t h = head_.load(std::memory_order_acquire);
        while (t != h) {
            const auto* rec = reinterpret_cast<const RecordHeader*>(data_ + (t & mask_));
            if (rec->kind != RecordKind::pad) return rec->ts;
            t += rec->size;
        }
        return 0;
    }

    // ---- consumers (serialised by try_lock_consumer)

    bool try_lock_consumer() noexcept {
        return !consumer_busy_.load(std::memory_order_relaxed) &&
               !consumer_busy_.exchange(true, std::memory_order_acquire);
    }
    void unlock_consumer() noexcept { consumer_busy_.store(false, std::memory_order_release); }

    // Hands each committed record captured at or before `cutoff_ts` (all of them: UINT64_MAX) to `emit(rec, end)`
    // (`end`: the position after the record), oldest first, at most `max_records`, stopping at an unfinished one.
    // Frees nothing: the consumer calls release_to() once the records are really in the trace (an event written),
    // so that a process killed meanwhile leaves them in the ring for salvage (ring_file.h) instead of losing
    // them. `*stop` gets the position consume stopped at (release_to(*stop) frees everything it handed over, and
    // the pad records among them). Returns how many were handed over. Call with the consumer lock held.
    template <typename Emit>
    uint32_t consume(uint64_t cutoff_ts, uint32_t max_records, uint64_t* stop, Emit&& emit) noexcept {
        uint64_t t = tail_.load(std::memory_order_relaxed);
        const uint64_t h = head_.load(std::memory_order_acquire);
        // Loaded after head_: a record committed unfinished up to h has its position here until finish(), whose
        // release this acquire pairs with (a later record's position, or none, lets this one through).
        const uint64_t unfinished = unfinished_.load(std::memory_order_acquire);
        uint32_t done = 0;
        while (t != h && done < max_records && t != unfinished) {
            const auto* rec = reinterpret_cast<const RecordHeader*>(data_ + (t & mask_));
            if (rec->kind != RecordKind::pad) {
                if (rec->ts > cutoff_ts) break;
                emit(rec, t + rec->size);
                ++done;
            }
            t += rec->size;
        }
        *stop = t;
        return done;
    }
    // consume() and free each record as soon as `emit(rec)` returns (tests, and consumers that emit inside emit).
    template <typename Emit> uint32_t consume(uint64_t cutoff_ts, uint32_t max_records, Emit&& emit) noexcept {
        uint64_t stop = 0;
        const uint32_t n = consume(cutoff_ts, max_records, &stop, [&emit](const RecordHeader* rec, uint64_t) { emit(rec); });
        release_to(stop);
        return n;
    }
    // Frees the records before `pos` (a position consume handed out). Consumer lock held.
    void release_to(uint64_t pos) noexcept {
        if (pos > tail_.load(std::memory_order_relaxed)) tail_.store(pos, std::memory_order_release);
    }

    // What a reader of a ring left behind by a process that is gone needs (ring_file.h): the producer's and the
    // consumer's positions, and the unfinished record's (kNone: none).
    struct Positions {
        uint64_t head, tail, unfinished;
    };
    Positions positions() const noexcept {
        return {head_.load(std::memory_order_acquire), tail_.load(std::memory_order_acquire),
                unfinished_.load(std::memory_order_acquire)};
    }
    static constexpr uint64_t kNoUnfinished = ~0ull;

    // The producer itself, holding the consumer lock, after it emptied the ring: the next record starts at
    // offset 0 again. A thread that drains at its idle points then writes the same few KiB over and over, which
    // stay in its L1 cache, instead of streaming through the whole ring (a cache miss per record).
    void rewind_if_empty_by_producer() noexcept {
        const uint64_t h = head_.load(std::memory_order_relaxed);
        if ((h & mask_) == 0 || tail_.load(std::memory_order_relaxed) != h) return;
        const uint64_t start = (h | mask_) + 1;
        tail_.store(start, std::memory_order_release);
        head_.store(start, std::memory_order_release);
        tail_cache_ = start;
        update_limit(start);
    }

    // In a forked child: the parent's records are the parent's to emit. Only the forking thread exists, so
    // no producer or consumer runs concurrently.
    void drop_all_after_fork() noexcept {
        const uint64_t h = head_.load(std::memory_order_relaxed);
        tail_.store(h, std::memory_order_relaxed);
        tail_cache_ = h;
        update_limit(h);
        unfinished_.store(kNone, std::memory_order_relaxed);
        consumer_busy_.store(false, std::memory_order_relaxed);
    }

    uint64_t capacity() const noexcept { return capacity_; }

private:
    // The end of what reserve_fast may hand out from `pos`: free as far as the producer knows (tail_cache_),
    // and not past the end of the buffer (a record there needs a pad record first).
    void update_limit(uint64_t pos) noexcept {
        const uint64_t free_end = tail_cache_ + capacity_;
        const uint64_t buffer_end = (pos & ~mask_) + capacity_;
        limit_ = free_end < buffer_end ? free_end : buffer_end;
    }

    static constexpr uint64_t kNone = ~0ull;

    // Producer-side line.
    alignas(64) std::atomic<uint64_t> head_{0};
    std::atomic<uint64_t> unfinished_{kNone};  // the unfinished record's position, kNone when there is none
    uint64_t limit_ = 0;  // 0: the first reserve takes reserve()'s full path, which sets it
    uint64_t tail_cache_ = 0;
    uint64_t reserved_at_ = 0;
    std::byte* const data_;
    const uint64_t capacity_;
    const uint64_t mask_;
    // Consumer-side line.
    alignas(64) std::atomic<uint64_t> tail_{0};
    std::atomic<bool> consumer_busy_{false};
};

}  // namespace sigmatrace::interpose::deferred
