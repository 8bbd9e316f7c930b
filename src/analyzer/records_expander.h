// The stage in front of the reordering (reorder_stage.h) that turns each `deferred_records` event (schema
// minor 4) into the events of its records: one post_send / post_recv / post_srq_recv / poll_cq per captured call,
// with the fields immediate emission would have written and every element's capture time, so that nothing after
// it knows the tracer wrote records. Other events pass through unchanged.
//
// The record layout is <sigmatrace/deferred_records.h>. The records' `ts` must already be ns from origin (the
// Babeltrace2 consumer converts them with the event's clock class, convert_record_times()). A carrier whose
// layout is unknown or whose records stop decoding part-way is passed on marked `inconsistent` after the records
// that did decode (Analysis counts it); nothing past the first bad header is read.
#pragma once

#include <sigmatrace/deferred_records.h>

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

// Converts, in place, each record's capture time in `words` (a deferred_records payload) with `convert` (CLOCK_
// MONOTONIC ns -> ns from origin), walking the records' headers as far as they are consistent.
template <typename Convert> void convert_record_times(uint64_t* words, std::size_t n_words, Convert&& convert) {
    std::size_t at = 0;  // in words
    while (at + sizeof(records::RecordHeader) / 8 <= n_words) {
        records::RecordHeader h;
        std::memcpy(&h, words + at, sizeof h);
        const std::optional<uint32_t> want = records::expected_size(h.kind, h.n);
        if (!want || h.size != *want || h.n > SIGMATRACE_MAX_BATCH || at + h.size / 8 > n_words) return;
        h.ts = convert(h.ts);
        std::memcpy(words + at, &h, sizeof h);
        at += h.size / 8;
    }
}

}  // namespace sigmatrace::analyzer
