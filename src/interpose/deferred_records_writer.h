// Deferred emission, the `records` format (SIGMATRACE_DEFER_FORMAT=records): a drain writes the ring's records
// as they are, a few KiB per `deferred_records` event, instead of building per-field events from them
// (deferred_events.h, the `events` format, the default). The layout is <sigmatrace/deferred_records.h>; readers expand
// each record into the event immediate emission would have written for the same call.
//
// Why: transposing records into per-field sequences and LTTng-UST's one call per field cost ~330 instructions
// per record; this costs ~20 (a copy, the capture time converted in place, redaction when asked). Not the
// default: its traces are ~1.5x larger and babeltrace2 alone shows them as words (docs/PERFORMANCE.md, "The
// records format").
#pragma once

#include <cstdint>

#include "interpose/capture_clock.h"
#include "interpose/deferred_ring.h"

namespace sigmatrace::interpose::deferred {

class RecordsWriter {
public:
    // Words per event: 8 KiB, within the analyzer's longest sequence (kMaxSequenceLength) and far below an LTTng
    // sub-buffer; a record never spans two events.
    static constexpr uint32_t kWords = 1024;
    static_assert(kMaxRecordSize / 8 <= kWords);

    // The capture-clock anchor of this drain (ticks -> CLOCK_MONOTONIC ns).
    void start_run(const capture_clock::Anchor& anchor) noexcept { anchor_ = anchor; }
    // Appends one record (a pad record is skipped); emits the pending event first when it would not fit.
    void add(const RecordHeader* rec) noexcept;
    // Emits what is pending.
    void flush() noexcept;
    // Forgets what is pending (a forked child's inherited state). Each ring's slot holds one writer: 8 KiB more
    // per capturing thread than the events format's builder alone.
    void discard() noexcept { used_ = 0; }

private:
    capture_clock::Anchor anchor_{};
    uint32_t used_ = 0;  // words
    alignas(16) uint64_t words_[kWords];
};

}  // namespace sigmatrace::interpose::deferred
