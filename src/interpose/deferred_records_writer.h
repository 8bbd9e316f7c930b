// Deferred emission, the `records` format (SIGMATRACE_DEFER_FORMAT=records): a drain encodes the ring's records
// into `deferred_records` events of up to 8 KiB (<sigmatrace/deferred_records_wire.h>: each record as what differs
// from the one before it) instead of building per-field events from them (deferred_events.h, the `events`
// format). Readers expand each record into the event immediate emission would have written for the same call.
//
// Why: transposing records into per-field sequences and LTTng-UST's one call per field cost ~330 instructions
// per record; encoding costs a few dozen, and the trace is several times smaller (docs/PERFORMANCE.md, "The
// records format").
#pragma once

#include <cstdint>

#include <sigmatrace/deferred_records_wire.h>

#include "interpose/capture_clock.h"
#include "interpose/deferred_ring.h"

namespace sigmatrace::interpose::deferred {

class RecordsWriter {
public:
    // Words per event: 8 KiB, within the analyzer's longest sequence (kMaxSequenceLength) and far below an LTTng
    // sub-buffer; a record never spans two events.
    static constexpr uint32_t kWords = 1024;
    static constexpr uint32_t kBytes = kWords * 8;
    static_assert(records::max_encoded_size(kMaxRecordSize) <= kBytes);

    // The capture-clock anchor of this drain (ticks -> CLOCK_MONOTONIC ns).
    void start_run(const capture_clock::Anchor& anchor) noexcept { anchor_ = anchor; }
    // Appends one record (a pad record is skipped); emits the pending event first when it would not fit, and
    // then returns true (the records added before this one are in the trace).
    bool add(const RecordHeader* rec) noexcept;
    // Emits what is pending.
    void flush() noexcept;
    // Records salvaged from a ring of a process that is gone (ring_file.h): the events carry its pid and tid,
    // and how many of its records could not be saved. 0: the emitting process's own records.
    void set_origin(int32_t pid, int32_t tid, uint32_t lost) noexcept {
        origin_pid_ = pid;
        origin_tid_ = tid;
        lost_ = lost;
    }
    // Emits an event without records (what a salvaged ring could not save, when it saved nothing).
    void emit_empty() noexcept;
    // Forgets what is pending (a forked child's inherited state). Each ring's slot holds one writer: 8 KiB more
    // per capturing thread than the events format's builder alone.
    void discard() noexcept {
        used_ = 0;
        encoder_.reset();
    }

private:
    capture_clock::Anchor anchor_{};
    records::WireEncoder encoder_;  // what the pending event's readers will know
    uint32_t used_ = 0;             // bytes
    int32_t origin_pid_ = 0;
    int32_t origin_tid_ = 0;
    uint32_t lost_ = 0;
    alignas(16) uint64_t words_[kWords];
};

}  // namespace sigmatrace::interpose::deferred
