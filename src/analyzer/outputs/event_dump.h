// `sigmatrace-analyze DIR --events FILE`: every SigmaTrace event as read, one line each, with each
// `deferred_records` event's records expanded into the calls they stand for — the per-call view that
// `babeltrace2 TRACE` alone gives only for traces in the events format (docs/schema.md, "Deferred records").
//
// It sits in front of the element decoder (bt_message_consumer.h), so it sees events in the order the trace
// holds them (by emission time); it expands a carrier's records itself, one line per call with its capture
// time in `ts`, then the carrier's own line.
#pragma once

#include <sigmatrace/deferred_records.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "analyzer/decode/event_sink.h"

namespace sigmatrace::analyzer {

// One line, without its newline:
//   [2026-12-01 12:00:00.123456789] host procname[vpid/vtid] sigmatrace:post_send { qp = 0x..., n = 2,
//   wr_id = [ 7, 8 ], ... }
// Integers in the base the schema prefers (hex with 0x), sequences in brackets, strings quoted; fields the
// trace's event class lacks are left out; a call expanded from records (from_record) ends in "(record)", a
// carrier's `words` are left out (their length stays in `n`).
std::string format_event_line(const DecodedEvent& ev, bool from_record = false);

// Writes each event's line to `out` (not owned; must outlive this). Write errors are kept for ok().
class EventDump final : public EventSink {
public:
    explicit EventDump(std::FILE* out) : out_(out) {}
    // The lines of `sigmatrace-analyze --events PATH` and the plugin's events=PATH: into a file of its own
    // (created or truncated), or to stdout for "-". nullptr when the file cannot be created, errno saying why.
    static std::unique_ptr<EventDump> open(const std::string& path);
    ~EventDump() override;
    EventDump(const EventDump&) = delete;
    EventDump& operator=(const EventDump&) = delete;

    void on_event(const DecodedEvent& ev) override;
    void on_element(const DataElement&) override {}   // the dump reads the events that carry them
    bool ok() const { return ok_; }
    uint64_t lines() const { return lines_; }
    // Flushes the lines, and closes the file open() created: false when a line, the flush or the close failed
    // (a full disk shows only there). Call once, after the last event.
    bool finish();

private:
    void write_line(const DecodedEvent& ev, bool from_record);
    template <typename Rec> void write_record(const DecodedEvent& carrier, const Rec& rec);

    std::FILE* out_;
    bool owns_out_ = false;
    std::string line_;
    DecodedEvent call_;
    records::Scratch scratch_;
    std::array<std::array<uint64_t, SIGMATRACE_MAX_BATCH>, kMaxEventFields> seqs_{};
    uint64_t lines_ = 0;
    bool ok_ = true;
};

}  // namespace sigmatrace::analyzer
