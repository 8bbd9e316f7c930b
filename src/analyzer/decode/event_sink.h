// Where decoded events and data elements go: the Analysis, or a stage in front of it (element_decoder.h,
// reorder_stage.h). The Babeltrace2 consumer, unit tests and the fuzzer all push DecodedEvents into one of these;
// the element decoder turns data-path calls into DataElements (data_element.h) for what follows it.
#pragma once

#include <cstdint>
#include <span>

#include "analyzer/decode/data_element.h"
#include "analyzer/decode/decoded_event.h"

namespace sigmatrace::analyzer {

// What the reordering stage saw, for the report's data-quality line (reorder_stage.h).
struct OrderingSummary {
    int64_t window_ns = 0;        // 0: every process emitted inside its calls, events passed straight through
    uint64_t late_events = 0;     // events older than one already released: processed, but out of capture order
    int64_t max_lateness_ns = 0;  // how much older than the newest released event the latest of those was
    uint64_t max_held = 0;        // the most events held at once (memory the window cost)
};

class EventSink {
public:
    virtual ~EventSink() = default;
    // `ev` and everything it points at is valid only during the call.
    virtual void on_event(const DecodedEvent& ev) = 0;
    // One element of a data-path call; `e` and its origin are valid only during the call.
    virtual void on_element(const DataElement& e) = 0;
    // Elements of one carrying event in order, sharing one origin (a reordering stage releases them so): a sink
    // that does per-origin work does it once. Each is handed to on_element() unless overridden.
    virtual void on_elements(std::span<const DataElement> es) {
        for (const DataElement& e : es) on_element(e);
    }
    // End of the stream, after the last on_event, from a stage that reorders.
    virtual void on_ordering(const OrderingSummary&) {}
};

// Hands each event to `tap` (when set) and then to `next`: how a reader watches the stream between two stages
// (event_dump.h). Elements go to `next` only: the tap reads the events that carried them.
class TeeSink final : public EventSink {
public:
    explicit TeeSink(EventSink& next) : next_(next) {}
    void set_tap(EventSink* tap) { tap_ = tap; }
    void on_event(const DecodedEvent& ev) override {
        if (tap_ != nullptr) tap_->on_event(ev);
        next_.on_event(ev);
    }
    void on_element(const DataElement& e) override { next_.on_element(e); }
    void on_elements(std::span<const DataElement> es) override { next_.on_elements(es); }
    void on_ordering(const OrderingSummary& s) override { next_.on_ordering(s); }

private:
    EventSink& next_;
    EventSink* tap_ = nullptr;
};

}  // namespace sigmatrace::analyzer
