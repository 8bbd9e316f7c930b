// The Babeltrace2 side of the analysis: takes the messages a sink receives (events, discarded events and
// packets) and hands decoded events to an Analysis. Shared by the in-process sink of sigmatrace-analyze
// (trace_reader.h) and the plugin's sink.sigmatrace.analyze, so both compute exactly the same thing.
//
// Decoding resolves, once per event class, which payload member holds each schema field (by name: lttng-ust
// also writes `_<seq>_length` members, which are skipped) and checks its kind and signedness; events then read
// members by index. Classes and traces are kept referenced while cached: babeltrace2 frees a class when its
// trace ends, and a new class could reuse the address.
//
// Data events' per-element capture times (`ts`, CLOCK_MONOTONIC ns = the LTTng clock's cycles) are converted to
// ns from origin (DecodedEvent::ts_ns's base) with the event's clock class, the offset computed once per class;
// 0 stays 0 ("the event's timestamp"). Events then go through an ElementDecoder (data-path calls become their
// elements) and a ReorderStage (capture order for deferred emission, pass-through otherwise): call finish()
// once the stream has ended.
#pragma once

#include <babeltrace2/babeltrace.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/decoded_event.h"
#include "analyzer/decode/element_decoder.h"
#include "analyzer/decode/reorder_stage.h"

namespace sigmatrace::analyzer {

class BtMessageConsumer {
public:
    // `tap`, when set, sees every event as read, before the element decoder (event_dump.h), with every field read.
    explicit BtMessageConsumer(Analysis& analysis, EventSink* tap = nullptr)
        : analysis_(analysis), reorder_(analysis), read_every_field_(tap != nullptr) {
        tee_.set_tap(tap);
    }
    ~BtMessageConsumer();
    // What the sources added to each host's clock classes (clock-class-offset-ns; trace_reader.cpp), by hostname:
    // taken back out before that host's clock correction is applied.
    void set_source_offsets(std::map<std::string, int64_t> offsets) { source_offsets_ = std::move(offsets); }
    BtMessageConsumer(const BtMessageConsumer&) = delete;
    BtMessageConsumer& operator=(const BtMessageConsumer&) = delete;

    void consume(const bt_message* msg);
    // End of the stream (or of what could be read): releases the events the reordering stage still holds.
    void finish() { reorder_.finish(); }

    uint64_t events_read() const { return events_read_; }
    uint64_t foreign_events() const { return foreign_events_; }
    int64_t last_ts() const { return last_ts_; }

private:
    // SeqUnread: a sequence no analysis reads (unread_fields.h): its length only, its elements zeros.
    enum class Kind : uint8_t { Absent, Unsigned, Signed, String, SeqUnsigned, SeqSigned, SeqUnread, Mismatch };
    struct TraceInfo {
        uint32_t index = 0;
        std::string hostname;
        std::string name;
        // Its host's times moved onto the reference host's clock (Analysis::clock_correction); null: as
        // recorded. The muxer ordered events by times its source had already moved by the constant part.
        const ClockShift* shift = nullptr;
        int64_t source_offset_ns = 0;   // what its source added to its times (set_source_offsets)
        int64_t to_analysis(int64_t ns) const { return shift ? shift->to_reference(ns - source_offset_ns) : ns; }
    };
    struct ClassInfo {
        const EventSchema* schema = nullptr;   // nullptr: not a sigmatrace event
        std::array<int64_t, kMaxEventFields> member{};
        std::array<Kind, kMaxEventFields> kind{};
        int64_t vpid = -1, vtid = -1, procname = -1;   // common context member indexes
        bool has_clock = false;
        int ts_field = -1;                     // schema index of the capture-time sequence, -1 if none
        const bt_clock_class* clock = nullptr; // borrowed: the class is kept referenced
        int64_t clock_origin_ns = 0;           // ns from origin of cycle 0
        bool clock_is_ns = false;              // 1 GHz: ns from origin = clock_origin_ns + cycles
        const TraceInfo* trace = nullptr;      // its trace (classes are per trace): its clock correction
    };

    // `ti`: the trace of the class's events (src.ctf.fs gives every trace its own classes).
    const ClassInfo& class_info(const bt_event_class* ec, const TraceInfo& ti);
    const TraceInfo& trace_info(const bt_trace* trace);
    void on_event(const bt_message* msg);
    void on_discarded(const bt_message* msg, bool packets);
    static void convert_capture_times(const ClassInfo& ci, std::vector<uint64_t>& buf, uint64_t len);
    static uint64_t capture_time_ns(const ClassInfo& ci, uint64_t cycles);

    Analysis& analysis_;
    ReorderStage reorder_;
    ElementDecoder decoder_{reorder_};  // in front of reorder_: data-path calls become their elements
    TeeSink tee_{decoder_};
    bool read_every_field_;           // a tap reads the sequences no analysis does (unread_fields.h)
    DecodedEvent ev_;
    std::array<std::vector<uint64_t>, kMaxEventFields> seq_storage_;
    std::unordered_map<const bt_event_class*, ClassInfo> classes_;
    std::unordered_map<const bt_trace*, TraceInfo> traces_;
    const bt_event_class* last_class_ = nullptr;
    const ClassInfo* last_info_ = nullptr;
    const bt_trace* last_trace_ = nullptr;
    const TraceInfo* last_trace_info_ = nullptr;
    uint64_t events_read_ = 0;
    uint64_t foreign_events_ = 0;
    int64_t last_ts_ = 0;
    std::vector<std::string> mismatches_reported_;
    std::map<std::string, int64_t> source_offsets_;
};

}  // namespace sigmatrace::analyzer
