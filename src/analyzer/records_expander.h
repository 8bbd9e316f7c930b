// The stage in front of the reordering (reorder_stage.h) that turns each `deferred_records` event (schema
// minor 4) into the events of its records: one post_send / post_recv / post_srq_recv / poll_cq per captured call,
// with the fields immediate emission would have written and every element's capture time, so that nothing after
// it knows the tracer wrote records. Other events pass through unchanged.
//
// The records and their encoding are <sigmatrace/deferred_records.h> and <sigmatrace/deferred_records_wire.h>.
// Their capture times (CLOCK_MONOTONIC ns) become ns from origin through the carrier's `capture_to_ns` (the
// Babeltrace2 consumer sets it from the event's clock class; none: they already are). A carrier whose
// layout is unknown or whose records stop decoding part-way is passed on marked `inconsistent` after the records
// that did decode (Analysis counts it); nothing past the first bad header is read.
#pragma once

#include <sigmatrace/deferred_records.h>
#include <sigmatrace/deferred_records_wire.h>

#include <array>
#include <vector>

#include "analyzer/event_sink.h"

namespace sigmatrace::analyzer {

class RecordsExpander final : public EventSink {
public:
    explicit RecordsExpander(EventSink& out) : out_(out) {}

    void on_event(const DecodedEvent& ev) override;
    void on_ordering(const OrderingSummary& s) override { out_.on_ordering(s); }

private:
    // One event being built per record kind. Consecutive whole successful calls of a kind on one object join
    // it, up to SIGMATRACE_MAX_BATCH elements, as the tracer's events format merges them: one event of 32 calls
    // costs the reordering stage and the analysis one event, not 32 (ib_write_bw's records read 1.5x faster).
    struct Open {
        DecodedEvent ev;
        std::array<std::array<uint64_t, SIGMATRACE_MAX_BATCH>, kMaxEventFields> seq{};
        bool active = false;
        bool mergeable = false;
        uint64_t handle = 0;
        uint32_t api = 0;
        uint32_t n = 0;
    };
    template <typename Rec> void add(const DecodedEvent& carrier, const records::RecordHeader& h, const Rec& rec);
    void flush(Open& o);

    EventSink& out_;
    records::Scratch scratch_;
    std::array<Open, 4> open_;  // post_send, post_recv, post_srq_recv, poll_cq
};

}  // namespace sigmatrace::analyzer
