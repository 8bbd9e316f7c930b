#include "analyzer/records_expander.h"

#include <type_traits>

namespace sigmatrace::analyzer {
namespace {

// The st_<event>_rec of each record kind: its event id and its slot among the open events.
template <typename Rec> constexpr EventId id_of() {
    if constexpr (std::is_same_v<Rec, st_post_send_rec>) return EventId::post_send;
    else if constexpr (std::is_same_v<Rec, st_post_recv_rec>) return EventId::post_recv;
    else if constexpr (std::is_same_v<Rec, st_post_srq_recv_rec>) return EventId::post_srq_recv;
    else return EventId::poll_cq;
}
template <typename Rec> constexpr std::size_t slot_of() {
    if constexpr (std::is_same_v<Rec, st_post_send_rec>) return 0;
    else if constexpr (std::is_same_v<Rec, st_post_recv_rec>) return 1;
    else if constexpr (std::is_same_v<Rec, st_post_srq_recv_rec>) return 2;
    else return 3;
}
}  // namespace

template <typename Rec>
void RecordsExpander::add(const DecodedEvent& carrier, const records::RecordHeader& h, const Rec& rec) {
    Open& o = open_[slot_of<Rec>()];
    // The same rule as the tracer's events format (<sigmatrace/deferred_records.h>).
    const bool mergeable = records::whole_successful_call(h);
    const uint64_t handle = records::handle_of(h);
    const uint32_t api = records::api_of(h);
    if (o.active && !(o.mergeable && mergeable && o.handle == handle && o.api == api && o.n + rec.n <= SIGMATRACE_MAX_BATCH))
        flush(o);
    DecodedEvent& e = o.ev;
    const bool first = !o.active;
    if (first) {
        e.id = id_of<Rec>();
        e.ts_ns = carrier.ts_ns;
        e.trace_index = carrier.trace_index;
        e.vpid = carrier.vpid;
        e.vtid = carrier.vtid;
        e.procname = carrier.procname;
        e.trace_hostname = carrier.trace_hostname;
        e.continued = false;
        e.expanded = true;
        e.inconsistent = false;
        for (FieldValue& v : e.f) v = FieldValue{};
        o.active = true;
        o.mergeable = mergeable;
        o.handle = handle;
        o.api = api;
        o.n = 0;
    }
    // Field by field in schema order, as the consumer decodes an event of this kind from a trace: the integers of
    // the first call, every call's elements appended.
    int i = 0;
    records::visit_fields(
        rec,
        [&](const char*, auto value) {
            FieldValue& v = e.f[static_cast<std::size_t>(i++)];
            if (!first) return;
            v.present = true;
            if constexpr (std::is_signed_v<decltype(value)>) v.u = static_cast<uint64_t>(static_cast<int64_t>(value));
            else v.u = static_cast<uint64_t>(value);
        },
        [&](const char*, const auto* values) {
            const std::size_t idx = static_cast<std::size_t>(i++);
            for (uint32_t k = 0; k < rec.n; ++k) o.seq[idx][o.n + k] = static_cast<uint64_t>(values[k]);
            FieldValue& v = e.f[idx];
            v.present = true;
            v.is_sequence = true;
            v.seq = o.seq[idx].data();
        });
    o.n += rec.n;
    if (!mergeable) flush(o);  // a failed or partial call stays an event of its own
}

void RecordsExpander::flush(Open& o) {
    if (!o.active) return;
    DecodedEvent& e = o.ev;
    const CaptureFields c = capture_fields(e.id);
    e.f[static_cast<std::size_t>(c.n)].u = o.n;
    for (FieldValue& v : e.f)
        if (v.is_sequence) v.seq_len = o.n;
    // A merged poll: what one poll returning all of them would have said.
    if (e.id == EventId::poll_cq && o.mergeable) e.f[fields::poll_cq::ret].u = o.n;
    o.active = false;
    out_.on_event(e);
}

void RecordsExpander::on_event(const DecodedEvent& ev) {
    if (ev.id != EventId::deferred_records) {
        out_.on_event(ev);
        return;
    }
    namespace F = fields::deferred_records;
    const FieldValue& words = ev.f[F::words];
    bool malformed = ev.u(F::layout) != records::kLayout || words.seq_len != ev.u(F::n);
    if (ev.u(F::layout) == records::kLayout) {
        const records::WalkResult r = records::walk_records(
            words.seq, words.seq_len,
            [&](const records::RecordHeader& h) { records::expand_record(h, scratch_, [&](const auto& rec) { add(ev, h, rec); }); },
            [&ev](uint64_t t) { return ev.capture_to_ns != nullptr ? ev.capture_to_ns(ev.capture_ctx, t) : t; });
        malformed = malformed || r.status != records::WalkStatus::ok;
    }
    // Events do not outlive their carrier: the next carrier may come from another process or thread.
    for (Open& o : open_) flush(o);
    if (!malformed) {
        out_.on_event(ev);
        return;
    }
    DecodedEvent marked = ev;
    marked.inconsistent = true;
    out_.on_event(marked);
}

}  // namespace sigmatrace::analyzer
