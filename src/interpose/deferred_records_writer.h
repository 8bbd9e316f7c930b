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
    // Appends one record (a pad record is skipped); emits the pending event first when it would not fit.
    void add(const RecordHeader* rec) noexcept;
    // Emits what is pending.
    void flush() noexcept;
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
    alignas(16) uint64_t words_[kWords];
};

}  // namespace sigmatrace::interpose::deferred
