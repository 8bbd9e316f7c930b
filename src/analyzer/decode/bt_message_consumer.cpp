#include "analyzer/decode/bt_message_consumer.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <system_error>

#include "analyzer/decode/unread_fields.h"

namespace sigmatrace::analyzer {

namespace {

// The member index of `name` in a structure field class, or -1.
int64_t member_index(const bt_field_class* st, std::string_view name) {
    if (st == nullptr || bt_field_class_get_type(st) != BT_FIELD_CLASS_TYPE_STRUCTURE) return -1;
    const uint64_t n = bt_field_class_structure_get_member_count(st);
    for (uint64_t i = 0; i < n; ++i) {
        const bt_field_class_structure_member* m = bt_field_class_structure_borrow_member_by_index_const(st, i);
        if (name == bt_field_class_structure_member_get_name(m)) return static_cast<int64_t>(i);
    }
    return -1;
}

const bt_field_class* member_class(const bt_field_class* st, int64_t idx) {
    return bt_field_class_structure_member_borrow_field_class_const(
        bt_field_class_structure_borrow_member_by_index_const(st, static_cast<uint64_t>(idx)));
}

bool is_signed_int(const bt_field_class* fc) {
    return bt_field_class_type_is(bt_field_class_get_type(fc), BT_FIELD_CLASS_TYPE_SIGNED_INTEGER);
}
bool is_int(const bt_field_class* fc) {
    return bt_field_class_type_is(bt_field_class_get_type(fc), BT_FIELD_CLASS_TYPE_INTEGER);
}

uint64_t read_int(const bt_field* f, bool is_signed) {
    return is_signed ? static_cast<uint64_t>(bt_field_integer_signed_get_value(f)) : bt_field_integer_unsigned_get_value(f);
}

// src.ctf.fs names a stream after its file's absolute path. Reports show it relative to the working directory
// when it lies below it (as the user typed the trace directory), so outputs do not depend on where a trace sits.
std::string display_path(const std::string& name) {
    std::error_code ec;
    const std::filesystem::path p(name);
    if (!p.is_absolute()) return name;
    const std::filesystem::path rel = p.lexically_relative(std::filesystem::current_path(ec));
    if (ec || rel.empty() || *rel.begin() == "..") return name;
    return rel.string();
}

// Whether stream class `sc` declares set-up events of the schema and no data-path one (DiscardRecord::setup_only).
bool setup_only(const bt_stream_class* sc) {
    bool setup = false;
    for (uint64_t i = 0, n = bt_stream_class_get_event_class_count(sc); i < n; ++i) {
        const char* name = bt_event_class_get_name(bt_stream_class_borrow_event_class_by_index_const(sc, i));
        const EventSchema* schema = name ? find_event_schema(name) : nullptr;
        if (schema == nullptr) continue;
        if (carries_data_path(schema->id)) return false;
        setup = true;
    }
    return setup;
}

}  // namespace

BtMessageConsumer::~BtMessageConsumer() {
    for (auto& [ec, info] : classes_) bt_event_class_put_ref(ec);
    for (auto& [tr, info] : traces_) bt_trace_put_ref(tr);
}

const BtMessageConsumer::ClassInfo& BtMessageConsumer::class_info(const bt_event_class* ec, const TraceInfo& ti) {
    if (ec == last_class_) return *last_info_;
    auto it = classes_.find(ec);
    if (it == classes_.end()) {
        ClassInfo info;
        info.trace = &ti;
        info.member.fill(-1);
        info.kind.fill(Kind::Absent);
        const char* name = bt_event_class_get_name(ec);
        info.schema = name ? find_event_schema(name) : nullptr;
        if (info.schema == nullptr && name != nullptr && std::string_view(name).starts_with("sigmatrace:"))
            analysis_.on_read_problem(fmt::format(
                "Unknown event class: event={}; its events are not analyzed (damaged metadata, or a trace of a newer "
                "SigmaTrace)",
                printable_name(name)));
        else if (info.schema == nullptr && (name == nullptr || damaged_event_name(name)))
            analysis_.on_read_problem(fmt::format(
                "An event class with a damaged name: event=\"{}\"; its events are not analyzed (damaged metadata)",
                printable_name(name ? name : "")));
        const bt_stream_class* sc = bt_event_class_borrow_stream_class_const(ec);
        info.clock = bt_stream_class_borrow_default_clock_class_const(sc);
        info.has_clock = info.clock != nullptr;
        if (info.clock) {
            info.clock_is_ns = bt_clock_class_get_frequency(info.clock) == 1'000'000'000ULL &&
                               bt_clock_class_cycles_to_ns_from_origin(info.clock, 0, &info.clock_origin_ns) ==
                                   BT_CLOCK_CLASS_CYCLES_TO_NS_FROM_ORIGIN_STATUS_OK;
        }
        const bt_field_class* ctx = bt_stream_class_borrow_event_common_context_field_class_const(sc);
        info.vpid = member_index(ctx, "vpid");
        info.vtid = member_index(ctx, "vtid");
        info.procname = member_index(ctx, "procname");
        if (info.vpid >= 0 && !is_int(member_class(ctx, info.vpid))) info.vpid = -1;
        if (info.vtid >= 0 && !is_int(member_class(ctx, info.vtid))) info.vtid = -1;
        if (info.procname >= 0 &&
            bt_field_class_get_type(member_class(ctx, info.procname)) != BT_FIELD_CLASS_TYPE_STRING)
            info.procname = -1;
        if (info.schema) {
            const bt_field_class* payload = bt_event_class_borrow_payload_field_class_const(ec);
            for (std::size_t i = 0; i < info.schema->fields.size(); ++i) {
                const FieldSchema& fs = info.schema->fields[i];
                const int64_t idx = member_index(payload, fs.name);
                if (idx < 0) continue;  // older tracer: the field reads as absent (0)
                const bt_field_class* fc = member_class(payload, idx);
                const bt_field_class_type t = bt_field_class_get_type(fc);
                Kind k = Kind::Mismatch;
                if (fs.kind == FieldKind::Integer && is_int(fc)) {
                    k = is_signed_int(fc) ? Kind::Signed : Kind::Unsigned;
                } else if (fs.kind == FieldKind::String && t == BT_FIELD_CLASS_TYPE_STRING) {
                    k = Kind::String;
                } else if (fs.kind == FieldKind::Sequence && bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_ARRAY)) {
                    const bt_field_class* elem = bt_field_class_array_borrow_element_field_class_const(fc);
                    if (is_int(elem)) k = is_signed_int(elem) ? Kind::SeqSigned : Kind::SeqUnsigned;
                }
                if (k == Kind::Mismatch) {
                    analysis_.on_read_problem(fmt::format(
                        "Field has an unexpected type: event=sigmatrace:{}, field={}; it is read as absent (was the "
                        "trace written by another SigmaTrace version?)",
                        info.schema->name, fs.name));
                    continue;
                }
                const bool sequence = k == Kind::SeqSigned || k == Kind::SeqUnsigned;
                if (sequence && !read_every_field_ && is_unread_sequence(info.schema->id, static_cast<int>(i)))
                    k = Kind::SeqUnread;
                info.member[i] = idx;
                info.kind[i] = k;
                if (capture_fields(info.schema->id).ts == static_cast<int>(i)) info.ts_field = static_cast<int>(i);
            }
        }
        bt_event_class_get_ref(ec);
        it = classes_.emplace(ec, info).first;
    }
    last_class_ = ec;
    last_info_ = &it->second;
    return it->second;
}

const BtMessageConsumer::TraceInfo& BtMessageConsumer::trace_info(const bt_trace* trace) {
    if (trace == last_trace_) return *last_trace_info_;
    auto it = traces_.find(trace);
    if (it == traces_.end()) {
        TraceInfo info;
        info.index = static_cast<uint32_t>(traces_.size());
        const bt_value* host = bt_trace_borrow_environment_entry_value_by_name_const(trace, "hostname");
        if (host && bt_value_is_string(host)) info.hostname = bt_value_string_get(host);
        const char* name = bt_trace_get_name(trace);
        info.name = name ? name : info.hostname;
        if (const ClockCorrection* c = analysis_.clock_correction()) info.shift = c->find(info.hostname);
        if (const auto off = source_offsets_.find(info.hostname); off != source_offsets_.end() && info.shift)
            info.source_offset_ns = off->second;
        bt_trace_get_ref(trace);
        analysis_.owns(info.index, info.hostname);   // a share learns the trace's host (its discards count by it)
        it = traces_.emplace(trace, std::move(info)).first;
    }
    last_trace_ = trace;
    last_trace_info_ = &it->second;
    return it->second;
}

void BtMessageConsumer::on_event(const bt_message* msg) {
    ++events_read_;
    const bt_event* event = bt_message_event_borrow_event_const(msg);
    const TraceInfo& ti = trace_info(bt_stream_borrow_trace_const(bt_event_borrow_stream_const(event)));
    const ClassInfo& ci = class_info(bt_event_borrow_class_const(event), ti);
    if (ci.schema == nullptr) {
        ++foreign_events_;
        return;
    }

    // A share of the trace (analysis.h, set_share) reads only its own traces' data events.
    if (carries_data_path(ci.schema->id) && !analysis_.owns(ti.index, ti.hostname)) return;
    DecodedEvent& ev = ev_;
    ev.id = ci.schema->id;
    ev.trace_index = ti.index;
    ev.trace_hostname = ti.hostname;
    ev.ts_ns = 0;
    if (ci.has_clock) {
        int64_t ns = 0;
        if (bt_clock_snapshot_get_ns_from_origin(bt_message_event_borrow_default_clock_snapshot_const(msg), &ns) ==
            BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK)
            ev.ts_ns = ti.to_analysis(ns);
    }
    last_ts_ = std::max(last_ts_, ev.ts_ns);
    ev.vpid = ev.vtid = -1;
    ev.procname = {};
    if (ci.vpid >= 0 || ci.procname >= 0) {
        const bt_field* ctx = bt_event_borrow_common_context_field_const(event);
        if (ctx) {
            if (ci.vpid >= 0) {
                const bt_field* f = bt_field_structure_borrow_member_field_by_index_const(ctx, static_cast<uint64_t>(ci.vpid));
                ev.vpid = static_cast<int64_t>(read_int(f, is_signed_int(bt_field_borrow_class_const(f))));
            }
            if (ci.vtid >= 0) {
                const bt_field* f = bt_field_structure_borrow_member_field_by_index_const(ctx, static_cast<uint64_t>(ci.vtid));
                ev.vtid = static_cast<int64_t>(read_int(f, is_signed_int(bt_field_borrow_class_const(f))));
            }
            if (ci.procname >= 0) {
                const bt_field* f =
                    bt_field_structure_borrow_member_field_by_index_const(ctx, static_cast<uint64_t>(ci.procname));
                ev.procname = std::string_view(bt_field_string_get_value(f), bt_field_string_get_length(f));
            }
        }
    }

    const bt_field* payload = bt_event_borrow_payload_field_const(event);
    const std::size_t nfields = ci.schema->fields.size();
    for (std::size_t i = 0; i < nfields; ++i) {
        FieldValue& v = ev.f[i];
        v = FieldValue{};
        v.is_sequence = ci.schema->fields[i].kind == FieldKind::Sequence;
        if (ci.kind[i] == Kind::Absent || ci.kind[i] == Kind::Mismatch || payload == nullptr) {
            if (v.is_sequence) v.seq = seq_storage_[i].data();
            continue;
        }
        const bt_field* f = bt_field_structure_borrow_member_field_by_index_const(payload, static_cast<uint64_t>(ci.member[i]));
        v.present = true;
        switch (ci.kind[i]) {
        case Kind::Unsigned: v.u = bt_field_integer_unsigned_get_value(f); break;
        case Kind::Signed: v.u = static_cast<uint64_t>(bt_field_integer_signed_get_value(f)); break;
        case Kind::String: v.s = std::string_view(bt_field_string_get_value(f), bt_field_string_get_length(f)); break;
        case Kind::SeqUnsigned:
        case Kind::SeqSigned: {
            const uint64_t len = std::min<uint64_t>(bt_field_array_get_length(f), kMaxSequenceLength);
            auto& buf = seq_storage_[i];
            if (buf.size() < len) buf.resize(len);
            const bool s = ci.kind[i] == Kind::SeqSigned;
            for (uint64_t k = 0; k < len; ++k) buf[k] = read_int(bt_field_array_borrow_element_field_by_index_const(f, k), s);
            if (static_cast<int>(i) == ci.ts_field) convert_capture_times(ci, buf, len);
            v.seq = buf.data();
            v.seq_len = static_cast<uint32_t>(len);
            break;
        }
        case Kind::SeqUnread:
            v.seq = kUnreadValues.data();
            v.seq_len = static_cast<uint32_t>(std::min<uint64_t>(bt_field_array_get_length(f), kMaxSequenceLength));
            break;
        default: break;
        }
    }
    for (std::size_t i = nfields; i < ev.f.size(); ++i) ev.f[i] = FieldValue{};
    // A deferred_records event's capture times are in its words; the element decoder converts them through this.
    if (ci.schema->id == EventId::deferred_records) {
        adopt_salvaged_origin(ev);
        ev.capture = CaptureClock::through(
            [](const void* ctx, uint64_t t) { return capture_time_ns(*static_cast<const ClassInfo*>(ctx), t); }, &ci);
    } else {
        ev.capture = {};
    }
    tee_.on_event(ev);
}

// Capture times are cycles of the trace's clock (lttng-ust's monotonic clock); nonzero ones become ns from
// origin like the event timestamp. The common 1 GHz case is one addition per element (origin computed once per
// class); other frequencies go through babeltrace2's conversion. A value it cannot convert (no clock,
// overflow) becomes 0: the element is then timed by its event.
void BtMessageConsumer::convert_capture_times(const ClassInfo& ci, std::vector<uint64_t>& buf, uint64_t len) {
    for (uint64_t k = 0; k < len; ++k) buf[k] = capture_time_ns(ci, buf[k]);
}

uint64_t BtMessageConsumer::capture_time_ns(const ClassInfo& ci, uint64_t cycles) {
    if (cycles == 0) return 0;
    int64_t ns = 0;
    if (ci.clock_is_ns && cycles <= static_cast<uint64_t>(INT64_MAX - std::max<int64_t>(ci.clock_origin_ns, 0)))
        ns = ci.clock_origin_ns + static_cast<int64_t>(cycles);
    else if (ci.clock == nullptr || bt_clock_class_cycles_to_ns_from_origin(ci.clock, cycles, &ns) !=
                                        BT_CLOCK_CLASS_CYCLES_TO_NS_FROM_ORIGIN_STATUS_OK)
        ns = 0;
    if (ns > 0) ns = ci.trace->to_analysis(ns);
    // ns 0 or before the origin cannot be told from "no capture time": the event's timestamp is as good.
    return ns > 0 ? static_cast<uint64_t>(ns) : 0;
}

void BtMessageConsumer::on_discarded(const bt_message* msg, bool packets) {
    const bt_stream* stream =
        packets ? bt_message_discarded_packets_borrow_stream_const(msg) : bt_message_discarded_events_borrow_stream_const(msg);
    const TraceInfo& ti = trace_info(bt_stream_borrow_trace_const(stream));
    DiscardRecord d;
    d.trace_index = ti.index;
    d.trace = ti.name;
    d.packets = packets;
    d.setup_only = setup_only(bt_stream_borrow_class_const(stream));
    const char* sname = bt_stream_get_name(stream);
    d.stream = sname ? display_path(sname) : fmt::format("stream {}", bt_stream_get_id(stream));
    uint64_t count = 0;
    const bt_property_availability avail = packets ? bt_message_discarded_packets_get_count(msg, &count)
                                                   : bt_message_discarded_events_get_count(msg, &count);
    d.count = avail == BT_PROPERTY_AVAILABILITY_AVAILABLE ? count : 0;
    const bt_stream_class* sc = bt_stream_borrow_class_const(stream);
    const bool has_times = packets ? bt_stream_class_discarded_packets_have_default_clock_snapshots(sc)
                                   : bt_stream_class_discarded_events_have_default_clock_snapshots(sc);
    if (has_times) {
        const bt_clock_snapshot* b = packets ? bt_message_discarded_packets_borrow_beginning_default_clock_snapshot_const(msg)
                                             : bt_message_discarded_events_borrow_beginning_default_clock_snapshot_const(msg);
        const bt_clock_snapshot* e = packets ? bt_message_discarded_packets_borrow_end_default_clock_snapshot_const(msg)
                                             : bt_message_discarded_events_borrow_end_default_clock_snapshot_const(msg);
        (void)bt_clock_snapshot_get_ns_from_origin(b, &d.begin_ns);
        (void)bt_clock_snapshot_get_ns_from_origin(e, &d.end_ns);
        d.begin_ns = ti.to_analysis(d.begin_ns);
        d.end_ns = ti.to_analysis(d.end_ns);
    }
    analysis_.on_discarded(d);
}

void BtMessageConsumer::consume(const bt_message* msg) {
    switch (bt_message_get_type(msg)) {
    case BT_MESSAGE_TYPE_EVENT: on_event(msg); break;
    case BT_MESSAGE_TYPE_DISCARDED_EVENTS: on_discarded(msg, false); break;
    case BT_MESSAGE_TYPE_DISCARDED_PACKETS: on_discarded(msg, true); break;
    case BT_MESSAGE_TYPE_PACKET_END: {
        // When the stream was recorded until, even if its process was silent (a stall is measured to it).
        const bt_packet* pkt = bt_message_packet_end_borrow_packet_const(msg);
        const bt_stream_class* sc = bt_stream_borrow_class_const(bt_packet_borrow_stream_const(pkt));
        int64_t ns = 0;
        if (bt_stream_class_packets_have_end_default_clock_snapshot(sc) &&
            bt_clock_snapshot_get_ns_from_origin(bt_message_packet_end_borrow_default_clock_snapshot_const(msg), &ns) ==
                BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK)
            analysis_.on_recorded_until(trace_info(bt_stream_borrow_trace_const(bt_packet_borrow_stream_const(pkt))).to_analysis(ns));
        break;
    }
    default: break;
    }
}

}  // namespace sigmatrace::analyzer
