// Restores capture order for traces written with deferred emission (SIGMATRACE_DEFER=1).
//
// A deferring process captures each data-path call (with its CLOCK_MONOTONIC time, the event's `ts` sequence)
// and emits the event later, up to process_info.defer_us afterwards, and its threads' events come out in any
// order. The muxer delivers events by event timestamp, so a completion can arrive before the post it completes.
// This stage sits between the element decoder and the Analysis: it holds events and elements in a min-heap
// keyed by capture time (an element's own, an event's timestamp) and releases one once the watermark (the
// newest event timestamp seen) is past key + window, window = 2 x the largest defer_us any process announced
// + kReorderMarginNs. Any event captured before a
// released one had to be emitted within defer_us of its capture, i.e. before the watermark got that far.
//
// Data-path calls arrive as elements (data_element.h, one WR or one completion each, with its own capture
// time), so a call that interleaves with another thread's is ordered element by element: thread B's poll
// [c0@1, c1@3] and thread A's post [p1@2], c1 completing p1, go out c0, p1, c1. The consecutive elements of one
// event (a thread's drain, in capture order) are held together as a run, one heap entry for the run: the run's
// first element is due first, and the run goes out up to the next held key, so a drain that interleaves with
// nothing costs one heap push and pop, not one per element.
// An element or event that still comes older than what was released ("late": the tracer missed its bound) is
// processed at once, never dropped, and counted (once per event that carried it): the report says ordering was
// not guaranteed. A data element emitted later after its capture than the window allows (late or not) widens
// the window to twice that delay for what follows, up to kMaxReorderWindowNs: on a busy machine an emitter is
// descheduled for milliseconds, or longer.
//
// Immediate traces (every defer_us 0) pass straight through: no key, no copy, no heap.
// Held events are deep copies (DecodedEvent points at the producer's storage, valid for one call; a records
// carrier's without its words, which only the element decoder in front reads) and held runs
// copies of their elements, in pooled slots that keep their buffers: no allocation per event or element once
// the pool covers the window.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "analyzer/decode/event_sink.h"

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
// The most events and elements held at once (an element 64 bytes, an event about 1 KB plus its strings and
// sequences). Past it the oldest held ones are released before their time: a dense trace with a wide window
// costs at most this, and what then comes older than one released that way is processed as late (counted).
inline constexpr std::size_t kMaxHeldEvents = std::size_t{1} << 20;

class ReorderStage final : public EventSink {
public:
    explicit ReorderStage(EventSink& out, int64_t margin_ns = kReorderMarginNs, std::size_t max_held = kMaxHeldEvents)
        : out_(out), margin_ns_(margin_ns), max_held_(max_held < 1 ? 1 : max_held) {}
    ReorderStage(const ReorderStage&) = delete;
    ReorderStage& operator=(const ReorderStage&) = delete;

    void on_event(const DecodedEvent& ev) override;
    void on_element(const DataElement& e) override;
    // End of stream: releases everything held in key order, then tells `out` the ordering summary.
    void finish();

    // Events and elements held.
    std::size_t held() const { return held_; }
    const OrderingSummary& summary() const { return summary_; }

private:
    struct EventSlot {
        DecodedEvent ev;
        std::vector<uint64_t> seqs;   // every sequence of ev, back to back
        std::string strs;             // every string of ev, back to back
    };
    // Consecutive elements of one event, in capture order; `origin` is the copy they point at once released,
    // with their extra fields (origin.extras).
    struct Run {
        ElementOrigin origin;
        std::string strs;
        std::vector<DataElement> elements;
        ElementExtras extras;
        std::size_t next = 0;         // the first element not yet released
        bool in_heap = false;         // it has an entry: an element not yet released
    };
    struct Entry {
        int64_t key;
        uint64_t arrival;   // ties keep arrival order
        uint32_t slot;
        bool run;           // slot indexes runs_, else events_
    };
    // std::push_heap builds a max-heap: "less" is "released later". A functor, so that it is inlined.
    struct Later {
        bool operator()(const Entry& a, const Entry& b) const {
            return a.key != b.key ? a.key > b.key : a.arrival > b.arrival;
        }
    };
    static constexpr uint32_t kNone = UINT32_MAX;

    // The order key of an event or element arriving now: counts it late (and returns false) when something of
    // a later key was already released. Inline: every element asks.
    bool in_order(int64_t key, uint64_t serial) {
        if (key >= released_key_) return true;
        count_late(key, serial);
        return false;
    }
    void on_element_slow(const DataElement& e);
    // Appends `e` (key `key`) to the open run `r`, which is in the heap (what became due is the caller's).
    [[gnu::always_inline]] void hold(Run& r, const DataElement& e, int64_t key) {
        DataElement& held = r.elements.emplace_back(e);
        held.origin = &r.origin;
        if (e.extra_index != DataElement::kNoExtra) [[unlikely]]
            keep_extra(r, held, e);
        open_last_key_ = key;
        ++held_;   // summary_.max_held follows at the next release, which is where held_ goes down
    }
    // The run's copy of held element `e`'s extra fields (never full: a run has no more than e's event).
    [[gnu::noinline]] static void keep_extra(Run& r, DataElement& held, const DataElement& e) {
        r.extras.set(held, e.extra(), r.origin);
    }
    void count_late(int64_t key, uint64_t serial);
    void push(int64_t key, uint32_t slot, bool run, std::size_t items);
    // The current event's run takes no more elements.
    void close_run();
    uint32_t copy_event(const DecodedEvent& ev);
    uint32_t open_run(const ElementOrigin& origin);
    void release(int64_t upto_key_exclusive, bool all);
    // Releases what is due: key + window < watermark, i.e. key < watermark - window (no overflow near
    // INT64_MIN/MAX). Inline: every element asks, and mostly nothing is due.
    void release_due() {
        if (!heap_.empty() && watermark_ > std::numeric_limits<int64_t>::min() + summary_.window_ns &&
            heap_.front().key < watermark_ - summary_.window_ns)
            release(watermark_ - summary_.window_ns, false);
        if (held_ > max_held_) release_beyond_memory_bound();
    }
    // Releases the oldest held items until at most max_held_ are held (see kMaxHeldEvents).
    void release_beyond_memory_bound();

    EventSink& out_;
    int64_t margin_ns_;
    std::size_t max_held_;
    int64_t watermark_ = INT64_MIN;   // newest event timestamp seen
    int64_t released_key_ = INT64_MIN;
    int64_t longest_delay_ = 0;       // the longest capture -> emission delay seen (it widened the window)
    uint64_t arrivals_ = 0;
    uint64_t last_late_serial_ = 0;
    std::size_t held_ = 0;            // events and elements in the heap's entries
    std::vector<Entry> heap_;
    std::deque<EventSlot> events_;    // a deque: slots never move, so views into their strings stay valid
    std::vector<uint32_t> free_events_;
    std::vector<std::unique_ptr<Run>> runs_;   // a run never moves: views into its strings stay valid
    std::vector<uint32_t> free_runs_;
    uint32_t open_ = kNone;           // the run the current event's elements go into
    int64_t open_last_key_ = 0;
    OrderingSummary summary_;
    bool finished_ = false;
};

}  // namespace sigmatrace::analyzer
