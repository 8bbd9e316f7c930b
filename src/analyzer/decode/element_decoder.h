// The stage in front of the reordering (reorder_stage.h) that turns data-path calls into their elements
// (data_element.h): each record of a `deferred_records` event (schema minor 4 on) becomes its posted WRs or its
// completions, read straight off the wire's record view (records::RecordView: no ring record is laid out; the
// watcher's ring_post records and ring completions, minor 6 on, included); the data events of older traces
// (post_send, post_recv, post_srq_recv, poll_cq: schema minors 1-3, the events format; gpu_wqe and gpu_cqe
// before minor 6) go through the adapter
// for_each_element. Every other event passes through unchanged, and so does a carrier after its elements
// (Analysis counts it and its salvage and loss fields).
//
// The records and their encoding are <sigmatrace/deferred_records.h> and <sigmatrace/deferred_records_wire.h>.
// Their capture times (CLOCK_MONOTONIC ns) become ns from origin through the carrier's `capture` clock (the
// Babeltrace2 consumer sets it from the event's clock class; none: they already are). A carrier whose
// layout is unknown or whose records stop decoding part-way is passed on marked `inconsistent` after the
// elements that did decode (Analysis counts it); nothing past the first bad header is read.
#pragma once

#include <sigmatrace/deferred_records_wire.h>

#include <array>

#include "analyzer/decode/data_element.h"
#include "analyzer/decode/event_sink.h"

namespace sigmatrace::analyzer {

struct ElementTarget;

class ElementDecoder final : public EventSink {
public:
    explicit ElementDecoder(EventSink& out) : out_(out) {
        for (DataElement& e : by_kind_) e.origin = &origin_;
    }
    ElementDecoder(const ElementDecoder&) = delete;   // its elements point at its origin_
    ElementDecoder& operator=(const ElementDecoder&) = delete;

    void on_event(const DecodedEvent& ev) override;
    void on_element(const DataElement& e) override { out_.on_element(e); }
    void on_ordering(const OrderingSummary& s) override { out_.on_ordering(s); }

private:
    // Hands the elements of record `v` (checked by the walk) on.
    [[gnu::always_inline]] inline void emit_record(const records::RecordView& v, int64_t event_ns, ElementTarget& to);

    EventSink& out_;
    ElementOrigin origin_;
    ElementExtras extras_;   // the current event's (origin_.extras)
    uint64_t serial_ = 0;
    // One element per record kind, kept between records: a record sets every field its kind carries, and the
    // fields it does not carry stay as constructed (zero; the origin: origin_), so that no element is built
    // from nothing per record.
    std::array<DataElement, records::wire_detail::kKinds> by_kind_{};
};

}  // namespace sigmatrace::analyzer
