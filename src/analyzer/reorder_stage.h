// Restores capture order for traces written with deferred emission (SIGMATRACE_DEFER=1).
//
// A deferring process captures each data-path call (with its CLOCK_MONOTONIC time, the event's `ts` sequence)
// and emits the event later, up to process_info.defer_us afterwards, and its threads' events come out in any
// order. The muxer delivers events by event timestamp, so a completion can arrive before the post it completes.
// This stage sits between the consumer and the Analysis: it holds events in a min-heap keyed by capture time
// (order_key) and releases one once the watermark (the newest event timestamp seen) is past key + window,
// window = 2 x the largest defer_us any process announced + kReorderMarginNs. Any event captured before a
// released one had to be emitted within defer_us of its capture, i.e. before the watermark got that far.
//
// A deferred event may merge several calls of one thread, its elements captured at different times. Such an
// event is released element by element, each when its own capture time is due, as a view: every sequence
// advanced to the element, batch_offset + k for posts, `continued` set after the first view (the event is
// counted once). Consecutive elements that no other held event comes between go out as one view of n > 1
// (ret = n for polls), so an event that interleaves with nothing costs one call. Event-level keys cannot order
// it: thread B's poll [c0@1, c1@3] and thread A's post [p1@2], c1 completing p1, need c0, p1, c1. Events whose
// elements share one capture time (one call, immediate mode) move whole.
// An event that still comes older than what was released ("late": the tracer missed its bound) is processed
// at once, never dropped, and counted: the report says ordering was not guaranteed. A data event emitted later
// after its capture than the window allows (late or not) widens the window to twice that delay for what
// follows, up to kMaxReorderWindowNs: on a busy machine an emitter is descheduled for milliseconds, or longer.
//
// Immediate traces (every defer_us 0) pass straight through: no key, no copy, no heap.
// Held events are deep copies (DecodedEvent points at the producer's storage, valid for one call) in pooled
// slots that keep their buffers: no allocation per event once the pool covers the window.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "analyzer/event_sink.h"

namespace sigmatrace::analyzer {

// Beyond twice the announced bound: on a loaded machine a process is descheduled for milliseconds between a
// capture and its emission (the demo on the 2-core VM: up to ~9 ms, and with a 1 ms margin 30 events came in
// late before the window had widened to them). Costs only memory: the events of 20 ms more are held.
inline constexpr int64_t kReorderMarginNs = 20'000'000;
// The bound assumed for a process whose process_info was not recorded (tracing started after it) but whose data
// events carry capture times: the tracer's default SIGMATRACE_DEFER_MAX_AGE_US. A larger setting shows up as
// late events.
inline constexpr int64_t kAssumedDeferNs = 1'000'000;
// The most the window grows to when events come later than their process announced (see on_event). The emitter
// thread runs at SCHED_IDLE: on a saturated machine it waits for a free CPU, and the last records of a thread
// that stopped calling verbs come out when a CPU comes free or at its exit. In the ASan stage of CI (both cores of
// the 2-core VM busy) ib_write_bw's last drain came out 108 to 580 ms after its captures; the 100 ms cap
// this replaced let such a drain's merged poll pass the posts it completes. Memory is bounded by kMaxHeldEvents,
// not by the window.
inline constexpr int64_t kMaxReorderWindowNs = 10'000'000'000;
// The most events held at once (about 1 KB each for a one-WR call, plus 8 bytes per element of its sequences).
// Past it the oldest held event is released before its time: a dense trace with a wide window costs at most
// this, and an event that then comes older than one released that way is processed as late (counted).
inline constexpr std::size_t kMaxHeldEvents = std::size_t{1} << 20;

// The time an event is ordered by: its first element's capture time for a data event (elements' times are
// non-decreasing), ev.ts_ns for every other event and for data events without elements or capture times.
int64_t order_key(const DecodedEvent& ev);

class ReorderStage final : public EventSink {
public:
    explicit ReorderStage(EventSink& out, int64_t margin_ns = kReorderMarginNs, std::size_t max_held = kMaxHeldEvents)
        : out_(out), margin_ns_(margin_ns), max_held_(max_held < 1 ? 1 : max_held) {}
    ReorderStage(const ReorderStage&) = delete;
    ReorderStage& operator=(const ReorderStage&) = delete;

    void on_event(const DecodedEvent& ev) override;
    // End of stream: releases every held event in key order, then tells `out` the ordering summary.
    void finish();

    std::size_t held() const { return heap_.size(); }
    const OrderingSummary& summary() const { return summary_; }

private:
    struct Slot {
        DecodedEvent ev;
        std::vector<uint64_t> seqs;   // every sequence of ev, back to back
        std::string strs;             // every string of ev, back to back
        uint32_t elements = 0;        // a split event's element count (its `n` field then reads a run's length)
        uint64_t first_batch_offset = 0;
    };
    static constexpr uint32_t kWhole = UINT32_MAX;
    struct Entry {
        int64_t key;
        uint64_t arrival;   // ties keep arrival order (every element of an event shares its event's)
        uint32_t slot;
        uint32_t element;   // the next element to release, or kWhole
    };
    // std::push_heap builds a max-heap: "less" is "released later". A functor, so that it is inlined.
    struct Later {
        bool operator()(const Entry& a, const Entry& b) const {
            return a.key != b.key ? a.key > b.key : a.arrival > b.arrival;
        }
    };
    static constexpr int64_t kNoNext = INT64_MIN;

    uint32_t copy_into_slot(const DecodedEvent& ev);
    void release(int64_t upto_key_exclusive, bool all);
    // Releases the oldest held elements until at most max_held_ events are held (see kMaxHeldEvents).
    void release_beyond_memory_bound();
    // Releases elements k.. of a held split event that are captured before `limit_exclusive` (element k at least)
    // as one view; returns the next element and its capture time, kNoNext after the last.
    std::pair<uint32_t, int64_t> release_run(Slot& s, uint32_t k, int64_t limit_exclusive);
    // Capture time of element j counted from the view's current start.
    int64_t element_key(const Slot& s, uint32_t j) const;
    static int batch_offset_field(EventId id);

    EventSink& out_;
    int64_t margin_ns_;
    std::size_t max_held_;
    int64_t watermark_ = INT64_MIN;   // newest event timestamp seen
    int64_t released_key_ = INT64_MIN;
    uint64_t arrivals_ = 0;
    std::vector<Entry> heap_;
    std::deque<Slot> slots_;          // a deque: slots never move, so views into SSO strings stay valid
    std::vector<uint32_t> free_slots_;
    OrderingSummary summary_;
    bool finished_ = false;
};

}  // namespace sigmatrace::analyzer
