#include "analyzer/reorder_stage.h"

#include <algorithm>
#include <limits>

namespace sigmatrace::analyzer {

namespace F = fields;

int64_t order_key(const DecodedEvent& ev) {
    const CaptureFields c = capture_fields(ev.id);
    if (c.ts < 0) return ev.ts_ns;
    const uint64_t n = std::min<uint64_t>(ev.u(c.n), kMaxSequenceLength);
    if (n == 0) return ev.ts_ns;
    return ev.element_ts(c.ts, ev.id == EventId::poll_cq ? static_cast<uint32_t>(n - 1) : 0);
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
    heap_.push_back(Entry{key, arrivals_++, copy_into_slot(ev)});
    std::push_heap(heap_.begin(), heap_.end(), later);
    summary_.max_held = std::max<uint64_t>(summary_.max_held, heap_.size());
    // Released: key + window < watermark, i.e. key < watermark - window (no overflow near INT64_MIN/MAX).
    if (watermark_ > std::numeric_limits<int64_t>::min() + summary_.window_ns)
        release(watermark_ - summary_.window_ns, false);
}

void ReorderStage::finish() {
    if (finished_) return;
    finished_ = true;
    release(0, true);
    out_.on_ordering(summary_);
}

void ReorderStage::release(int64_t upto_key_exclusive, bool all) {
    while (!heap_.empty() && (all || heap_.front().key < upto_key_exclusive)) {
        std::pop_heap(heap_.begin(), heap_.end(), later);
        const Entry e = heap_.back();
        heap_.pop_back();
        released_key_ = std::max(released_key_, e.key);
        out_.on_event(slots_[e.slot].ev);
        free_slots_.push_back(e.slot);
    }
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
