#include "analyzer/decode/reorder_stage.h"

#include <algorithm>
#include <limits>
#include <memory>

namespace sigmatrace::analyzer {

namespace F = fields;

void ReorderStage::count_late(int64_t key, uint64_t serial) {
    // Emitted later than its process promised: something of its time was already released. An event's
    // elements come late together: the event is counted once.
    if (serial == 0 || serial != last_late_serial_) ++summary_.late_events;
    last_late_serial_ = serial;
    // Saturating: keys of a corrupt trace may lie anywhere in int64.
    const int64_t lateness = key < released_key_ - std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max()
                                                                                        : released_key_ - key;
    summary_.max_lateness_ns = std::max(summary_.max_lateness_ns, lateness);
}

void ReorderStage::on_element(const DataElement& e) {
    // The common case, kept lean: the next element of the event whose run is open, in order. The event's time
    // is already in the watermark; the rest is what on_element_slow() would do for it.
    const int64_t key = e.ts_ns;
    const int64_t event_ns = e.origin->event_ns;
    if (open_ != kNone && key >= open_last_key_ && key >= released_key_ && event_ns <= watermark_ &&
        !(key < event_ns && event_ns - key > longest_delay_)) [[likely]] {
        Run& r = *runs_[open_];
        if (r.in_heap && r.origin.serial == e.origin->serial) [[likely]] {
            hold(r, e, key);
            // Nothing became due: the watermark did not move (the event's time is in it), and an element added
            // to a run in the heap does not change the run's key. Only the memory bound may be passed.
            if (held_ > max_held_) [[unlikely]]
                release_beyond_memory_bound();
            return;
        }
    }
    on_element_slow(e);
}

void ReorderStage::on_element_slow(const DataElement& e) {
    const ElementOrigin& o = *e.origin;
    // Immediate mode captures nothing (the element carries its event's time): a capture time of its own means
    // a deferring process whose process_info is not in the trace (recording started after it).
    if (summary_.window_ns == 0 && e.ts_ns != o.event_ns) summary_.window_ns = 2 * kAssumedDeferNs + margin_ns_;
    if (summary_.window_ns == 0) {
        watermark_ = std::max(watermark_, o.event_ns);
        released_key_ = watermark_;
        out_.on_element(e);
        return;
    }
    if (open_ != kNone && (runs_[open_]->origin.serial != o.serial || e.ts_ns < open_last_key_)) close_run();
    watermark_ = std::max(watermark_, o.event_ns);
    const int64_t key = e.ts_ns;
    // The announced bound is a promise the emitter may not keep (descheduled on a busy machine): an element that
    // came later than it widens the window for what follows, up to kMaxReorderWindowNs (memory: what one window
    // holds, at most max_held_). Widened before the element is held or released, so that it and the rest of its
    // drain are ordered in the wider window. A delay past the cap still widens to the cap.
    // The window a delay asks for grows with it: only a delay longer than any before can widen it.
    if (key < o.event_ns && o.event_ns - key > longest_delay_) {
        const int64_t delay = o.event_ns - key;   // > 0; no overflow: key > 0 here
        longest_delay_ = delay;
        const int64_t wanted = delay >= kMaxReorderWindowNs / 2 ? kMaxReorderWindowNs
                                                                : std::min(kMaxReorderWindowNs, 2 * delay + margin_ns_);
        summary_.window_ns = std::max(summary_.window_ns, wanted);
    }
    if (!in_order(key, o.serial)) {
        out_.on_element(e);
        return;
    }
    if (open_ == kNone) open_ = open_run(o);
    Run& r = *runs_[open_];
    // The run is in the heap while it holds an element not yet released, keyed by that element.
    if (!r.in_heap) {
        heap_.push_back(Entry{key, arrivals_++, open_, true});
        std::push_heap(heap_.begin(), heap_.end(), Later{});
        r.in_heap = true;
    }
    hold(r, e, key);
    release_due();
}

void ReorderStage::on_event(const DecodedEvent& ev) {
    close_run();
    if (ev.id == EventId::process_info && ev.f[F::process_info::defer_us].present) {
        const auto defer_ns = static_cast<int64_t>(static_cast<uint32_t>(ev.u(F::process_info::defer_us))) * 1000;
        if (defer_ns > 0) summary_.window_ns = std::max(summary_.window_ns, 2 * defer_ns + margin_ns_);
    }
    watermark_ = std::max(watermark_, ev.ts_ns);
    if (summary_.window_ns == 0) {
        // Immediate trace (so far): the muxer's order is capture order. The first deferring process_info
        // switches to holding; what passed before it stays released, at the watermark.
        released_key_ = watermark_;
        out_.on_event(ev);
        return;
    }
    if (!in_order(ev.ts_ns, 0)) {
        out_.on_event(ev);
        return;
    }
    push(ev.ts_ns, copy_event(ev), false, 1);
    release_due();
}

void ReorderStage::push(int64_t key, uint32_t slot, bool run, std::size_t items) {
    heap_.push_back(Entry{key, arrivals_++, slot, run});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
    held_ += items;   // summary_.max_held follows at the next release
}

void ReorderStage::close_run() {
    if (open_ == kNone) return;
    const uint32_t slot = open_;
    open_ = kNone;
    if (!runs_[slot]->in_heap) free_runs_.push_back(slot);   // every element already went out
}

void ReorderStage::release_beyond_memory_bound() {
    // Every round releases the oldest key (at least one element); a run's remainder goes back in, so rounds
    // repeat until enough has gone out.
    while (held_ > max_held_ && !heap_.empty()) {
        const int64_t oldest = heap_.front().key;
        release(oldest == std::numeric_limits<int64_t>::max() ? oldest : oldest + 1, oldest == std::numeric_limits<int64_t>::max());
    }
}

void ReorderStage::finish() {
    if (finished_) return;
    finished_ = true;
    close_run();
    release(0, true);
    out_.on_ordering(summary_);
}

void ReorderStage::release(int64_t upto_key_exclusive, bool all) {
    summary_.max_held = std::max<uint64_t>(summary_.max_held, held_);   // held_ only goes down from here
    while (!heap_.empty() && (all || heap_.front().key < upto_key_exclusive)) {
        std::pop_heap(heap_.begin(), heap_.end(), Later{});
        const Entry e = heap_.back();
        heap_.pop_back();
        released_key_ = std::max(released_key_, e.key);
        if (!e.run) {
            --held_;
            out_.on_event(events_[e.slot].ev);
            free_events_.push_back(e.slot);
            continue;
        }
        // The run's elements that nothing held comes between (captured before the next held key, and due) go
        // out now: one heap round per stretch, not per element, when drains do not interleave.
        Run& r = *runs_[e.slot];
        int64_t limit = all ? std::numeric_limits<int64_t>::max() : upto_key_exclusive;
        if (!heap_.empty()) limit = std::min(limit, heap_.front().key);
        const std::size_t n = r.elements.size();
        std::size_t k = r.next + 1;
        while (k < n && r.elements[k].ts_ns < limit) ++k;
        out_.on_elements(std::span<const DataElement>(r.elements.data() + r.next, k - r.next));
        released_key_ = std::max(released_key_, r.elements[k - 1].ts_ns);
        held_ -= k - r.next;
        r.next = k;
        if (k < n) {
            // The run's next element waits for its own time.
            heap_.push_back(Entry{r.elements[k].ts_ns, e.arrival, e.slot, true});
            std::push_heap(heap_.begin(), heap_.end(), Later{});
            continue;
        }
        r.in_heap = false;
        if (e.slot != open_) free_runs_.push_back(e.slot);   // an open run may still grow
    }
}

uint32_t ReorderStage::open_run(const ElementOrigin& origin) {
    uint32_t idx;
    if (!free_runs_.empty()) {
        idx = free_runs_.back();
        free_runs_.pop_back();
    } else {
        idx = static_cast<uint32_t>(runs_.size());
        runs_.push_back(std::make_unique<Run>());
    }
    Run& r = *runs_[idx];
    r.elements.clear();
    r.extras.clear();
    r.next = 0;
    r.in_heap = false;
    r.origin = origin;
    r.origin.extras = nullptr;   // the run's own, as its elements with extra fields come
    // Sized first: views into strs are taken after both strings are in.
    r.strs.assign(origin.procname);
    r.strs.append(origin.trace_hostname);
    r.origin.procname = std::string_view(r.strs.data(), origin.procname.size());
    r.origin.trace_hostname = std::string_view(r.strs.data() + origin.procname.size(), origin.trace_hostname.size());
    return idx;
}

uint32_t ReorderStage::copy_event(const DecodedEvent& ev) {
    uint32_t idx;
    if (!free_events_.empty()) {
        idx = free_events_.back();
        free_events_.pop_back();
    } else {
        idx = static_cast<uint32_t>(events_.size());
        events_.emplace_back();
    }
    EventSlot& s = events_[idx];
    s.ev = ev;
    // A records carrier comes after its elements (element_decoder.h): what follows reads none of its words, so
    // the held copy keeps none (a carrier holds thousands).
    if (ev.id == EventId::deferred_records) s.ev.f[F::deferred_records::words].seq_len = 0;
    std::size_t nseq = 0, nstr = ev.procname.size() + ev.trace_hostname.size();
    for (const FieldValue& v : s.ev.f) {
        nseq += v.seq_len;
        nstr += v.s.size();
    }
    // Sized before any view is taken: the buffers keep their capacity between uses (no allocation in steady
    // state) and must not reallocate while views into them are made.
    s.seqs.resize(nseq);
    s.strs.clear();
    s.strs.reserve(nstr);
    auto copy_str = [&s](std::string_view& v) {
        if (v.empty()) return;
        const std::size_t at = s.strs.size();
        s.strs.append(v);
        v = std::string_view(s.strs.data() + at, v.size());
    };
    copy_str(s.ev.procname);
    copy_str(s.ev.trace_hostname);
    std::size_t at = 0;
    for (FieldValue& v : s.ev.f) {
        copy_str(v.s);
        if (v.seq_len == 0) continue;
        std::copy_n(v.seq, v.seq_len, s.seqs.data() + at);
        v.seq = s.seqs.data() + at;
        at += v.seq_len;
    }
    return idx;
}

}  // namespace sigmatrace::analyzer
