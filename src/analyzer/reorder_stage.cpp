#include "analyzer/reorder_stage.h"

#include <algorithm>
#include <limits>

namespace sigmatrace::analyzer {

namespace F = fields;

namespace {

// Whether a data event's elements were captured at different times (merged calls), so that it must be released
// element by element. Only well-formed events are split (every sequence exactly `n` long): a malformed one moves
// whole and is counted once as malformed.
bool spans_capture_times(const DecodedEvent& ev) {
    const CaptureFields c = capture_fields(ev.id);
    if (c.ts < 0) return false;
    const uint64_t n = ev.u(c.n);
    if (n < 2 || n > kMaxSequenceLength) return false;
    for (const FieldValue& v : ev.f)
        if (v.is_sequence && v.seq_len != n) return false;
    const int64_t first = ev.element_ts(c.ts, 0);
    for (uint32_t k = 1; k < n; ++k)
        if (ev.element_ts(c.ts, k) != first) return true;
    return false;
}

}  // namespace

int ReorderStage::batch_offset_field(EventId id) {
    switch (id) {
    case EventId::post_send: return F::post_send::batch_offset;
    case EventId::post_recv: return F::post_recv::batch_offset;
    case EventId::post_srq_recv: return F::post_srq_recv::batch_offset;
    default: return -1;
    }
}

int64_t order_key(const DecodedEvent& ev) {
    const CaptureFields c = capture_fields(ev.id);
    if (c.ts < 0 || ev.u(c.n) == 0) return ev.ts_ns;
    return ev.element_ts(c.ts, 0);
}

void ReorderStage::on_event(const DecodedEvent& ev) {
    if (ev.id == EventId::process_info && ev.f[F::process_info::defer_us].present) {
        const auto defer_ns = static_cast<int64_t>(static_cast<uint32_t>(ev.u(F::process_info::defer_us))) * 1000;
        if (defer_ns > 0) summary_.window_ns = std::max(summary_.window_ns, 2 * defer_ns + margin_ns_);
    }
    if (summary_.window_ns == 0) {
        // Immediate mode writes zero capture times: a nonzero one means a deferring process whose process_info
        // is not in the trace (recording started after it).
        const int ts_field = capture_fields(ev.id).ts;
        if (ts_field >= 0 && ev.at(ts_field, 0) != 0) summary_.window_ns = 2 * kAssumedDeferNs + margin_ns_;
    }
    if (summary_.window_ns == 0) {
        // Immediate trace (so far): the muxer's order is capture order. The first deferring process_info
        // switches to holding; what passed before it stays released, at the watermark.
        watermark_ = std::max(watermark_, ev.ts_ns);
        released_key_ = watermark_;
        out_.on_event(ev);
        return;
    }
    watermark_ = std::max(watermark_, ev.ts_ns);
    const int64_t key = order_key(ev);
    // The announced bound is a promise the emitter may not keep (descheduled on a busy machine): an event that
    // came later than it widens the window for what follows, up to kMaxReorderWindowNs (memory: the events of
    // one window are held, at most max_held_). Widened before this event is held or released, so that it and the
    // rest of its drain are ordered in the wider window. A delay past the cap still widens to the cap.
    if (capture_fields(ev.id).ts >= 0 && key < ev.ts_ns) {
        const int64_t delay = ev.ts_ns - key;   // > 0; no overflow: key > 0 here, or key == ev.ts_ns
        const int64_t wanted = delay >= kMaxReorderWindowNs / 2 ? kMaxReorderWindowNs
                                                                : std::min(kMaxReorderWindowNs, 2 * delay + margin_ns_);
        summary_.window_ns = std::max(summary_.window_ns, wanted);
    }
    if (key < released_key_) {
        // Emitted later than its process promised: an event of its time was already released.
        ++summary_.late_events;
        // Saturating: keys of a corrupt trace may lie anywhere in int64.
        const int64_t lateness = key < released_key_ - std::numeric_limits<int64_t>::max()
                                     ? std::numeric_limits<int64_t>::max()
                                     : released_key_ - key;
        summary_.max_lateness_ns = std::max(summary_.max_lateness_ns, lateness);
        out_.on_event(ev);
        return;
    }
    const uint32_t element = spans_capture_times(ev) ? 0 : kWhole;
    heap_.push_back(Entry{key, arrivals_++, copy_into_slot(ev), element});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
    summary_.max_held = std::max<uint64_t>(summary_.max_held, heap_.size());
    // Released: key + window < watermark, i.e. key < watermark - window (no overflow near INT64_MIN/MAX).
    if (watermark_ > std::numeric_limits<int64_t>::min() + summary_.window_ns)
        release(watermark_ - summary_.window_ns, false);
    if (heap_.size() > max_held_) release_beyond_memory_bound();
}

void ReorderStage::release_beyond_memory_bound() {
    // Each held event has one heap entry. Every round releases the oldest key (at least one element); a split
    // event's remainder goes back in, so rounds repeat until a whole event has gone out.
    while (heap_.size() > max_held_) {
        const int64_t oldest = heap_.front().key;
        release(oldest == std::numeric_limits<int64_t>::max() ? oldest : oldest + 1, oldest == std::numeric_limits<int64_t>::max());
    }
}

void ReorderStage::finish() {
    if (finished_) return;
    finished_ = true;
    release(0, true);
    out_.on_ordering(summary_);
}

void ReorderStage::release(int64_t upto_key_exclusive, bool all) {
    while (!heap_.empty() && (all || heap_.front().key < upto_key_exclusive)) {
        std::pop_heap(heap_.begin(), heap_.end(), Later{});
        const Entry e = heap_.back();
        heap_.pop_back();
        released_key_ = std::max(released_key_, e.key);
        Slot& s = slots_[e.slot];
        if (e.element == kWhole) {
            out_.on_event(s.ev);
        } else {
            // The run of this event's elements that nothing held comes between (captured before the next held
            // key, and due) goes out as one view: one call per run, not per element, when calls do not interleave.
            int64_t limit = all ? std::numeric_limits<int64_t>::max() : upto_key_exclusive;
            if (!heap_.empty()) limit = std::min(limit, heap_.front().key);
            const auto [next_element, next_key] = release_run(s, e.element, limit);
            if (next_key != kNoNext) {
                // The event's next element waits for its own time (its storage stays held until then).
                heap_.push_back(Entry{next_key, e.arrival, e.slot, next_element});
                std::push_heap(heap_.begin(), heap_.end(), Later{});
                continue;
            }
        }
        free_slots_.push_back(e.slot);
    }
}

int64_t ReorderStage::element_key(const Slot& s, uint32_t j) const {
    const CaptureFields c = capture_fields(s.ev.id);
    const uint64_t t = s.ev.f[static_cast<std::size_t>(c.ts)].seq[j];
    return t != 0 && t <= DecodedEvent::kMaxCaptureNs ? static_cast<int64_t>(t) : s.ev.ts_ns;
}

std::pair<uint32_t, int64_t> ReorderStage::release_run(Slot& s, uint32_t k, int64_t limit_exclusive) {
    // The slot's event becomes the view of elements [k, k + m) in place (no copy): every sequence starts at
    // element k (the view advances them after each run) and is cut to m; `n` reads m.
    DecodedEvent& v = s.ev;
    const CaptureFields c = capture_fields(v.id);
    if (k == 0) {
        s.elements = static_cast<uint32_t>(v.u(c.n));
        s.first_batch_offset = batch_offset_field(v.id) >= 0 ? v.u(batch_offset_field(v.id)) : 0;
    }
    // Element k is due (its entry was popped); the next ones join while they precede the limit.
    uint32_t m = 1;
    while (k + m < s.elements && element_key(s, m) < limit_exclusive) ++m;
    v.continued = k > 0;
    v.f[static_cast<std::size_t>(c.n)].u = m;
    for (FieldValue& f : v.f)
        if (f.is_sequence) f.seq_len = m;
    if (v.id == EventId::poll_cq) v.f[F::poll_cq::ret].u = m;   // the view stands for one poll of m completions
    // A post's element k is WR batch_offset + k of its chain.
    if (const int b = batch_offset_field(v.id); b >= 0) v.f[static_cast<std::size_t>(b)].u = s.first_batch_offset + k;
    out_.on_event(v);
    if (k + m >= s.elements) return {k + m, kNoNext};
    const int64_t next = element_key(s, m);
    for (FieldValue& f : v.f)
        if (f.is_sequence) f.seq += m;
    return {k + m, next};
}

uint32_t ReorderStage::copy_into_slot(const DecodedEvent& ev) {
    uint32_t idx;
    if (!free_slots_.empty()) {
        idx = free_slots_.back();
        free_slots_.pop_back();
    } else {
        idx = static_cast<uint32_t>(slots_.size());
        slots_.emplace_back();
    }
    Slot& s = slots_[idx];
    s.ev = ev;
    s.elements = 0;
    std::size_t nseq = 0, nstr = ev.procname.size() + ev.trace_hostname.size();
    for (const FieldValue& v : ev.f) {
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
