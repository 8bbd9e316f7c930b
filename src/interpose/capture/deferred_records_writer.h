// Deferred emission's drains: a drain encodes the ring's records into `deferred_records` events of up to 8 KiB
// (<sigmatrace/deferred_records_wire.h>: each record as what differs from the one before it). Readers expand
// each record into the call it stands for (<sigmatrace/deferred_records.h>).
//
// Why records and not per-field events: LTTng-UST writes each field with a call of its own, so transposing a
// record into per-field sequences cost several times what encoding it does, and the trace is several times
// smaller (docs/PERFORMANCE.md, "Trace size and channel size").
#pragma once

#include <cstdint>

#include <sigmatrace/deferred_records_wire.h>

#include "interpose/capture/capture_clock.h"
#include "interpose/capture/deferred_ring.h"

namespace sigmatrace::interpose::deferred {

// Writes one `deferred_records` event of `n` words (records::EventWords). origin_pid/tid and lost: see
// RecordsWriter::set_origin.
void emit_records(const uint64_t* words, uint32_t n, int32_t origin_pid, int32_t origin_tid, uint32_t lost) noexcept;
// What the encoder clears (SIGMATRACE_REDACT).
records::EncodeOptions encode_options() noexcept;

class RecordsWriter {
public:
    // Words per event: 8 KiB, within the analyzer's longest sequence (kMaxSequenceLength) and far below an LTTng
    // sub-buffer; a record never spans two events.
    static constexpr uint32_t kBytes = 8192;

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
    // Forgets what is pending (a forked child's inherited state). Each ring's slot holds one writer.
    void discard() noexcept { words_.reset(); }

private:
    capture_clock::Anchor anchor_{};
    int32_t origin_pid_ = 0;
    int32_t origin_tid_ = 0;
    uint32_t lost_ = 0;
    records::EventWords<kBytes> words_;  // the pending event
};

}  // namespace sigmatrace::interpose::deferred
