#include "expand_filter.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <sigmatrace/deferred_records.h>
#include <sigmatrace/deferred_records_wire.h>

namespace sigmatrace::bt2plugin {
namespace {

constexpr const char* kCarrierName = "sigmatrace:deferred_records";

// The five events a record stands for, in RecordKind order less one.
template <typename Rec> constexpr std::size_t slot_of() {
    if constexpr (std::is_same_v<Rec, st_post_send_rec>) return 0;
    else if constexpr (std::is_same_v<Rec, st_post_recv_rec>) return 1;
    else if constexpr (std::is_same_v<Rec, st_post_srq_recv_rec>) return 2;
    else if constexpr (std::is_same_v<Rec, st_poll_cq_rec>) return 3;
    else return 4;
}
constexpr std::array<const char*, 5> kCallNames = {"sigmatrace:post_send", "sigmatrace:post_recv",
                                                   "sigmatrace:post_srq_recv", "sigmatrace:poll_cq", "sigmatrace:gpu_wqe"};

int64_t member_index(const bt_field_class* st, std::string_view name) {
    if (st == nullptr || bt_field_class_get_type(st) != BT_FIELD_CLASS_TYPE_STRUCTURE) return -1;
    const uint64_t n = bt_field_class_structure_get_member_count(st);
    for (uint64_t i = 0; i < n; ++i)
        if (name == bt_field_class_structure_member_get_name(bt_field_class_structure_borrow_member_by_index_const(st, i)))
            return static_cast<int64_t>(i);
    return -1;
}
const bt_field_class* member_class(const bt_field_class* st, int64_t idx) {
    return bt_field_class_structure_member_borrow_field_class_const(
        bt_field_class_structure_borrow_member_by_index_const(st, static_cast<uint64_t>(idx)));
}
bool is_type(const bt_field_class* fc, bt_field_class_type t) {
    return fc != nullptr && bt_field_class_type_is(bt_field_class_get_type(fc), t);
}

void set_integer(bt_field* f, uint64_t v) {
    if (bt_field_class_type_is(bt_field_get_class_type(f), BT_FIELD_CLASS_TYPE_SIGNED_INTEGER))
        bt_field_integer_signed_set_value(f, static_cast<int64_t>(v));
    else
        bt_field_integer_unsigned_set_value(f, v);
}
uint64_t get_integer(const bt_field* f) {
    if (bt_field_class_type_is(bt_field_get_class_type(f), BT_FIELD_CLASS_TYPE_SIGNED_INTEGER))
        return static_cast<uint64_t>(bt_field_integer_signed_get_value(f));
    return bt_field_integer_unsigned_get_value(f);
}
template <typename T> uint64_t widen(T v) {
    if constexpr (std::is_signed_v<T>) return static_cast<uint64_t>(static_cast<int64_t>(v));
    else return static_cast<uint64_t>(v);
}

// A field's value into a field of the same class. Babeltrace2 has no field copy of its own; contexts are integers
// and strings, payloads integers and arrays, but a foreign stream may hold anything the trace IR has.
bool copy_field(bt_field* dst, const bt_field* src) {
    const bt_field_class_type t = bt_field_get_class_type(src);
    if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_BOOL)) {
        bt_field_bool_set_value(dst, bt_field_bool_get_value(src));
    } else if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_BIT_ARRAY)) {
        bt_field_bit_array_set_value_as_integer(dst, bt_field_bit_array_get_value_as_integer(src));
    } else if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_INTEGER)) {
        set_integer(dst, get_integer(src));
    } else if (t == BT_FIELD_CLASS_TYPE_SINGLE_PRECISION_REAL) {
        bt_field_real_single_precision_set_value(dst, bt_field_real_single_precision_get_value(src));
    } else if (t == BT_FIELD_CLASS_TYPE_DOUBLE_PRECISION_REAL) {
        bt_field_real_double_precision_set_value(dst, bt_field_real_double_precision_get_value(src));
    } else if (t == BT_FIELD_CLASS_TYPE_STRING) {
        if (bt_field_string_set_value(dst, bt_field_string_get_value(src)) != BT_FIELD_STRING_SET_VALUE_STATUS_OK)
            return false;
    } else if (t == BT_FIELD_CLASS_TYPE_STRUCTURE) {
        const uint64_t n = bt_field_class_structure_get_member_count(bt_field_borrow_class_const(src));
        for (uint64_t i = 0; i < n; ++i)
            if (!copy_field(bt_field_structure_borrow_member_field_by_index(dst, i),
                            bt_field_structure_borrow_member_field_by_index_const(src, i)))
                return false;
    } else if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_ARRAY)) {
        const uint64_t n = bt_field_array_get_length(src);
        if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_DYNAMIC_ARRAY) &&
            bt_field_array_dynamic_set_length(dst, n) != BT_FIELD_DYNAMIC_ARRAY_SET_LENGTH_STATUS_OK)
            return false;
        for (uint64_t i = 0; i < n; ++i)
            if (!copy_field(bt_field_array_borrow_element_field_by_index(dst, i),
                            bt_field_array_borrow_element_field_by_index_const(src, i)))
                return false;
    } else if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_OPTION)) {
        const bt_field* inner = bt_field_option_borrow_field_const(src);
        bt_field_option_set_has_field(dst, inner != nullptr);
        if (inner != nullptr && !copy_field(bt_field_option_borrow_field(dst), inner)) return false;
    } else if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_VARIANT)) {
        if (bt_field_variant_select_option_by_index(dst, bt_field_variant_get_selected_option_index(src)) !=
            BT_FIELD_VARIANT_SELECT_OPTION_STATUS_OK)
            return false;
        if (!copy_field(bt_field_variant_borrow_selected_option_field(dst),
                        bt_field_variant_borrow_selected_option_field_const(src)))
            return false;
    }
    return true;
}

// Building an event class of the schema, for a trace whose metadata does not declare the call events (the
// tracer declares every event of the provider, so this is for traces written by other means).
template <typename T> bool add_integer(bt_trace_class* tc, bt_field_class* st, const std::string& name, bool hex) {
    bt_field_class* fc = std::is_signed_v<T> ? bt_field_class_integer_signed_create(tc) : bt_field_class_integer_unsigned_create(tc);
    if (fc == nullptr) return false;
    bt_field_class_integer_set_field_value_range(fc, sizeof(T) * 8);
    if (hex) bt_field_class_integer_set_preferred_display_base(fc, BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_HEXADECIMAL);
    const bool ok = bt_field_class_structure_append_member(st, name.c_str(), fc) == BT_FIELD_CLASS_STRUCTURE_APPEND_MEMBER_STATUS_OK;
    bt_field_class_put_ref(fc);
    return ok;
}
// A sequence as LTTng-UST declares one: its own length member `_NAME_length` before it.
template <typename T> bool add_sequence(bt_trace_class* tc, bt_field_class* st, const std::string& name, bool hex) {
    if (!add_integer<uint32_t>(tc, st, "_" + name + "_length", false)) return false;
    bt_field_class* len = bt_field_class_structure_member_borrow_field_class(
        bt_field_class_structure_borrow_member_by_index(st, bt_field_class_structure_get_member_count(st) - 1));
    bt_field_class* elem = std::is_signed_v<T> ? bt_field_class_integer_signed_create(tc) : bt_field_class_integer_unsigned_create(tc);
    if (elem == nullptr) return false;
    bt_field_class_integer_set_field_value_range(elem, sizeof(T) * 8);
    if (hex) bt_field_class_integer_set_preferred_display_base(elem, BT_FIELD_CLASS_INTEGER_PREFERRED_DISPLAY_BASE_HEXADECIMAL);
    bt_field_class* arr = bt_field_class_array_dynamic_create(tc, elem, len);
    bt_field_class_put_ref(elem);
    if (arr == nullptr) return false;
    const bool ok = bt_field_class_structure_append_member(st, name.c_str(), arr) == BT_FIELD_CLASS_STRUCTURE_APPEND_MEMBER_STATUS_OK;
    bt_field_class_put_ref(arr);
    return ok;
}
template <typename Rec> bool build_payload(bt_trace_class* tc, bt_field_class* st) {
    bool ok = true;
#define ST_ADD_I_(type, name, comment) ok = ok && add_integer<type>(tc, st, #name, false);
#define ST_ADD_X_(type, name, comment) ok = ok && add_integer<type>(tc, st, #name, true);
#define ST_ADD_S_(name, comment) ok = false;  // the call events have no strings
#define ST_ADD_Q_(type, name, comment) ok = ok && add_sequence<type>(tc, st, #name, false);
#define ST_ADD_QX_(type, name, comment) ok = ok && add_sequence<type>(tc, st, #name, true);
    if constexpr (std::is_same_v<Rec, st_post_send_rec>) {
        SIGMATRACE_FIELDS_post_send(ST_ADD_I_, ST_ADD_X_, ST_ADD_S_, ST_ADD_Q_, ST_ADD_QX_)
    } else if constexpr (std::is_same_v<Rec, st_post_recv_rec>) {
        SIGMATRACE_FIELDS_post_recv(ST_ADD_I_, ST_ADD_X_, ST_ADD_S_, ST_ADD_Q_, ST_ADD_QX_)
    } else if constexpr (std::is_same_v<Rec, st_post_srq_recv_rec>) {
        SIGMATRACE_FIELDS_post_srq_recv(ST_ADD_I_, ST_ADD_X_, ST_ADD_S_, ST_ADD_Q_, ST_ADD_QX_)
    } else {
        SIGMATRACE_FIELDS_poll_cq(ST_ADD_I_, ST_ADD_X_, ST_ADD_S_, ST_ADD_Q_, ST_ADD_QX_)
    }
#undef ST_ADD_QX_
#undef ST_ADD_Q_
#undef ST_ADD_S_
#undef ST_ADD_X_
#undef ST_ADD_I_
    return ok;
}

// Where a call event's fields sit in an event class's payload: one member index per field in schema order
// (visit_fields' order), and the LTTng length members of its sequences.
struct CallClass {
    bool tried = false;  // looked up (or made) once per stream class
    const bt_event_class* ec = nullptr;
    std::vector<uint64_t> member;
    std::vector<uint64_t> lengths;
};

// A deferred_records event class's members.
struct CarrierClass {
    bool usable = false;
    int64_t layout = -1, n = -1, words = -1, words_length = -1, origin_pid = -1, origin_tid = -1;
};

class Expander {
public:
    Expander(bt_self_message_iterator* self, bt_message_iterator* upstream) : self_(self), upstream_(upstream) {}
    Expander(const Expander&) = delete;
    Expander& operator=(const Expander&) = delete;
    ~Expander() {
        for (const bt_message* m : in_) bt_message_put_ref(m);
        for (const bt_message* m : out_) bt_message_put_ref(m);
        for (auto& [sc, classes] : call_classes_)
            for (CallClass& c : classes) bt_event_class_put_ref(c.ec);
        bt_message_iterator_put_ref(upstream_);
    }

    bt_message_iterator_class_next_method_status next(bt_message_array_const msgs, uint64_t capacity, uint64_t* count);

private:
    bool take(const bt_message* msg);
    bool expand(const bt_message* msg, const CarrierClass& cc);
    template <typename Rec>
    bool emit_call(const Rec& rec, uint64_t capture, const bt_message* carrier, int32_t origin_pid, int32_t origin_tid);
    bool emit_emptied(const bt_message* carrier, const CarrierClass& cc);
    bt_message* create_event(const bt_event_class* ec, const bt_event* like, uint64_t ts);
    template <typename Rec> const CallClass* call_class(const bt_stream_class* sc);
    template <typename Rec> bool bind(const bt_event_class* ec, CallClass& out);
    const CarrierClass* carrier_class(const bt_event_class* ec);
    void note_time(const bt_stream* s, const bt_clock_snapshot* cs) {
        if (cs != nullptr) last_[s] = bt_clock_snapshot_get_value(cs);
    }

    bt_self_message_iterator* self_;
    bt_message_iterator* upstream_;
    bool upstream_ended_ = false;
    std::deque<const bt_message*> in_;   // upstream's, not yet looked at
    std::deque<const bt_message*> out_;  // ready to go downstream
    // The last clock value of each stream's messages so far: an expanded event's timestamp never goes below it.
    std::unordered_map<const bt_stream*, uint64_t> last_;
    std::unordered_map<const bt_event_class*, CarrierClass> carriers_;
    std::unordered_map<const bt_stream_class*, std::array<CallClass, 5>> call_classes_;
    std::vector<uint64_t> words_;
    records::Scratch scratch_;
};

const CarrierClass* Expander::carrier_class(const bt_event_class* ec) {
    auto it = carriers_.find(ec);
    if (it != carriers_.end()) return it->second.usable ? &it->second : nullptr;
    CarrierClass c;
    const char* name = bt_event_class_get_name(ec);
    if (name != nullptr && std::string_view(name) == kCarrierName) {
        const bt_field_class* p = bt_event_class_borrow_payload_field_class_const(ec);
        c.layout = member_index(p, "layout");
        c.n = member_index(p, "n");
        c.words = member_index(p, "words");
        c.words_length = member_index(p, "_words_length");
        c.origin_pid = member_index(p, "origin_pid");
        c.origin_tid = member_index(p, "origin_tid");
        c.usable = c.layout >= 0 && c.n >= 0 && c.words >= 0 && is_type(member_class(p, c.layout), BT_FIELD_CLASS_TYPE_INTEGER) &&
                   is_type(member_class(p, c.n), BT_FIELD_CLASS_TYPE_INTEGER) &&
                   is_type(member_class(p, c.words), BT_FIELD_CLASS_TYPE_DYNAMIC_ARRAY) &&
                   is_type(bt_field_class_array_borrow_element_field_class_const(member_class(p, c.words)),
                           BT_FIELD_CLASS_TYPE_INTEGER);
        if (!c.usable)
            fmt::print(stderr,
                       "filter.sigmatrace.expand: The {} event class lacks the layout, n or words field; its events "
                       "pass on unexpanded\n",
                       kCarrierName);
    }
    it = carriers_.emplace(ec, c).first;
    return it->second.usable ? &it->second : nullptr;
}

// Binds `ec` when its payload has every field of the schema's event with a matching type.
template <typename Rec> bool Expander::bind(const bt_event_class* ec, CallClass& out) {
    const bt_field_class* p = bt_event_class_borrow_payload_field_class_const(ec);
    bool ok = p != nullptr;
    out.member.clear();
    out.lengths.clear();
    records::visit_fields(
        Rec{},
        [&](const char* name, auto) {
            const int64_t idx = member_index(p, name);
            ok = ok && idx >= 0 && is_type(member_class(p, idx), BT_FIELD_CLASS_TYPE_INTEGER);
            out.member.push_back(static_cast<uint64_t>(std::max<int64_t>(idx, 0)));
        },
        [&](const char* name, const auto*) {
            const int64_t idx = member_index(p, name);
            ok = ok && idx >= 0 && is_type(member_class(p, idx), BT_FIELD_CLASS_TYPE_DYNAMIC_ARRAY) &&
                 is_type(bt_field_class_array_borrow_element_field_class_const(member_class(p, idx)), BT_FIELD_CLASS_TYPE_INTEGER);
            out.member.push_back(static_cast<uint64_t>(std::max<int64_t>(idx, 0)));
            if (const int64_t len = member_index(p, fmt::format("_{}_length", name));
                len >= 0 && is_type(member_class(p, len), BT_FIELD_CLASS_TYPE_INTEGER))
                out.lengths.push_back(static_cast<uint64_t>(len));
        });
    if (!ok) return false;
    bt_event_class_get_ref(ec);
    out.ec = ec;
    return true;
}

// The event class of the call events of Rec's kind in stream class `sc`: the one the trace declares (the
// tracer's metadata declares every event of the provider), else one made here. Null when neither works.
template <typename Rec> const CallClass* Expander::call_class(const bt_stream_class* sc) {
    constexpr std::size_t slot = slot_of<Rec>();
    auto& classes = call_classes_[sc];
    if (classes[slot].tried) return classes[slot].ec != nullptr ? &classes[slot] : nullptr;
    classes[slot].tried = true;
    uint64_t next_id = 0;
    for (uint64_t i = 0, n = bt_stream_class_get_event_class_count(sc); i < n; ++i) {
        const bt_event_class* ec = bt_stream_class_borrow_event_class_by_index_const(sc, i);
        next_id = std::max(next_id, bt_event_class_get_id(ec) + 1);
        const char* name = bt_event_class_get_name(ec);
        if (name != nullptr && std::string_view(name) == kCallNames[slot] && bind<Rec>(ec, classes[slot])) return &classes[slot];
    }
    // Babeltrace2 has no way for a filter to add an event class to a trace it did not create short of copying
    // the whole trace IR (every class, stream, packet and field) into a trace of its own. The stream class is
    // the upstream's, so everything else passes through as the very messages that came; only this class is
    // added, with an id the stream class does not use.
    auto* wsc = const_cast<bt_stream_class*>(sc);
    bt_trace_class* tc = bt_stream_class_borrow_trace_class(wsc);
    bt_event_class* ec = bt_stream_class_assigns_automatic_event_class_id(sc) ? bt_event_class_create(wsc)
                                                                              : bt_event_class_create_with_id(wsc, next_id);
    bt_field_class* st = ec != nullptr ? bt_field_class_structure_create(tc) : nullptr;
    bool ok = st != nullptr && bt_event_class_set_name(ec, kCallNames[slot]) == BT_EVENT_CLASS_SET_NAME_STATUS_OK &&
              build_payload<Rec>(tc, st) &&
              bt_event_class_set_payload_field_class(ec, st) == BT_EVENT_CLASS_SET_FIELD_CLASS_STATUS_OK;
    bt_field_class_put_ref(st);
    ok = ok && bind<Rec>(ec, classes[slot]);
    bt_event_class_put_ref(ec);  // the stream class holds it; bind() took the reference this keeps
    if (!ok) {
        fmt::print(stderr, "filter.sigmatrace.expand: Cannot make the {} event class; those calls pass on in their carrier\n",
                   kCallNames[slot]);
        return nullptr;
    }
    return &classes[slot];
}

bt_message* Expander::create_event(const bt_event_class* ec, const bt_event* like, uint64_t ts) {
    const bt_stream* stream = bt_event_borrow_stream_const(like);
    const bt_stream_class* sc = bt_stream_borrow_class_const(stream);
    const bool clock = bt_stream_class_borrow_default_clock_class_const(sc) != nullptr;
    if (bt_stream_class_supports_packets(sc)) {
        const bt_packet* packet = bt_event_borrow_packet_const(like);
        return clock ? bt_message_event_create_with_packet_and_default_clock_snapshot(self_, ec, packet, ts)
                     : bt_message_event_create_with_packet(self_, ec, packet);
    }
    return clock ? bt_message_event_create_with_default_clock_snapshot(self_, ec, stream, ts)
                 : bt_message_event_create(self_, ec, stream);
}

template <typename Rec>
bool Expander::emit_call(const Rec& rec, uint64_t capture, const bt_message* carrier, int32_t origin_pid, int32_t origin_tid) {
    const bt_event* cev = bt_message_event_borrow_event_const(carrier);
    const bt_stream* stream = bt_event_borrow_stream_const(cev);
    const CallClass* cc = call_class<Rec>(bt_stream_borrow_class_const(stream));
    if (cc == nullptr) return false;
    // The capture time is a value of the trace's clock (CLOCK_MONOTONIC ns, as the tracer reads it). A stream's
    // timestamps may not go back, and deferred emission writes a call after later events of its thread: the
    // event goes no lower than the stream's last message nor higher than its carrier; `ts` keeps the exact time.
    uint64_t ts = 0;
    if (bt_stream_class_borrow_default_clock_class_const(bt_stream_borrow_class_const(stream)) != nullptr) {
        const uint64_t carrier_ts = bt_clock_snapshot_get_value(bt_message_event_borrow_default_clock_snapshot_const(carrier));
        const auto last = last_.find(stream);
        const uint64_t floor = last != last_.end() ? std::min(last->second, carrier_ts) : 0;
        ts = capture == 0 ? carrier_ts : std::clamp(capture, floor, carrier_ts);
        last_[stream] = ts;
    }
    bt_message* msg = create_event(cc->ec, cev, ts);
    if (msg == nullptr) return false;
    bt_event* ev = bt_message_event_borrow_event(msg);
    if (bt_field* ctx = bt_event_borrow_common_context_field(ev); ctx != nullptr) {
        const bt_field* from = bt_event_borrow_common_context_field_const(cev);
        bool ok = from != nullptr && copy_field(ctx, from);
        // Salvaged records (origin_pid) belong to the process and thread that captured them, as the analyzer
        // reads their carrier; the salvaging process's name is not theirs.
        if (ok && origin_pid > 0) {
            const bt_field_class* fc = bt_field_borrow_class_const(ctx);
            if (const int64_t i = member_index(fc, "vpid"); i >= 0 && is_type(member_class(fc, i), BT_FIELD_CLASS_TYPE_INTEGER))
                set_integer(bt_field_structure_borrow_member_field_by_index(ctx, static_cast<uint64_t>(i)), widen(origin_pid));
            if (const int64_t i = member_index(fc, "vtid"); i >= 0 && is_type(member_class(fc, i), BT_FIELD_CLASS_TYPE_INTEGER))
                set_integer(bt_field_structure_borrow_member_field_by_index(ctx, static_cast<uint64_t>(i)), widen(origin_tid));
            if (const int64_t i = member_index(fc, "procname"); i >= 0 && is_type(member_class(fc, i), BT_FIELD_CLASS_TYPE_STRING))
                ok = bt_field_string_set_value(bt_field_structure_borrow_member_field_by_index(ctx, static_cast<uint64_t>(i)), "") ==
                     BT_FIELD_STRING_SET_VALUE_STATUS_OK;
        }
        if (!ok) {
            bt_message_put_ref(msg);
            return false;
        }
    }
    bt_field* payload = bt_event_borrow_payload_field(ev);
    std::size_t i = 0;
    bool ok = true;
    records::visit_fields(
        rec,
        [&](const char*, auto value) {
            set_integer(bt_field_structure_borrow_member_field_by_index(payload, cc->member[i++]), widen(value));
        },
        [&](const char*, const auto* values) {
            bt_field* f = bt_field_structure_borrow_member_field_by_index(payload, cc->member[i++]);
            if (bt_field_array_dynamic_set_length(f, rec.n) != BT_FIELD_DYNAMIC_ARRAY_SET_LENGTH_STATUS_OK) {
                ok = false;
                return;
            }
            for (uint32_t k = 0; k < rec.n; ++k) set_integer(bt_field_array_borrow_element_field_by_index(f, k), widen(values[k]));
        });
    for (const uint64_t len : cc->lengths) set_integer(bt_field_structure_borrow_member_field_by_index(payload, len), rec.n);
    if (!ok) {
        bt_message_put_ref(msg);
        return false;
    }
    out_.push_back(msg);
    return true;
}

// The carrier without its words, after its calls: it still says where the tracer emitted them, how many
// records its ring lost, and whose calls salvage recovered, for readers that count those.
bool Expander::emit_emptied(const bt_message* carrier, const CarrierClass& cc) {
    const bt_event* cev = bt_message_event_borrow_event_const(carrier);
    const bt_event_class* ec = bt_event_borrow_class_const(cev);
    const bool clock = bt_stream_class_borrow_default_clock_class_const(bt_event_class_borrow_stream_class_const(ec)) != nullptr;
    bt_message* msg =
        create_event(ec, cev, clock ? bt_clock_snapshot_get_value(bt_message_event_borrow_default_clock_snapshot_const(carrier)) : 0);
    if (msg == nullptr) return false;
    bt_event* ev = bt_message_event_borrow_event(msg);
    bool ok = true;
    if (bt_field* ctx = bt_event_borrow_common_context_field(ev); ctx != nullptr)
        ok = copy_field(ctx, bt_event_borrow_common_context_field_const(cev));
    if (bt_field* sctx = bt_event_borrow_specific_context_field(ev); ok && sctx != nullptr)
        ok = copy_field(sctx, bt_event_borrow_specific_context_field_const(cev));
    bt_field* payload = bt_event_borrow_payload_field(ev);
    const bt_field* from = bt_event_borrow_payload_field_const(cev);
    const uint64_t members = bt_field_class_structure_get_member_count(bt_field_borrow_class_const(from));
    for (uint64_t i = 0; ok && i < members; ++i) {
        bt_field* f = bt_field_structure_borrow_member_field_by_index(payload, i);
        if (static_cast<int64_t>(i) == cc.words) ok = bt_field_array_dynamic_set_length(f, 0) == BT_FIELD_DYNAMIC_ARRAY_SET_LENGTH_STATUS_OK;
        else if (static_cast<int64_t>(i) == cc.n || static_cast<int64_t>(i) == cc.words_length) set_integer(f, 0);
        else ok = copy_field(f, bt_field_structure_borrow_member_field_by_index_const(from, i));
    }
    if (!ok) {
        bt_message_put_ref(msg);
        return false;
    }
    if (clock) note_time(bt_event_borrow_stream_const(cev), bt_message_event_borrow_default_clock_snapshot_const(carrier));
    out_.push_back(msg);
    return true;
}

bool Expander::expand(const bt_message* msg, const CarrierClass& cc) {
    const bt_event* ev = bt_message_event_borrow_event_const(msg);
    const bt_field* payload = bt_event_borrow_payload_field_const(ev);
    auto member = [&](int64_t idx) { return bt_field_structure_borrow_member_field_by_index_const(payload, static_cast<uint64_t>(idx)); };
    const uint64_t layout = get_integer(member(cc.layout));
    const uint64_t n = get_integer(member(cc.n));
    const bt_field* words = member(cc.words);
    const uint64_t len = bt_field_array_get_length(words);
    const auto origin_pid = static_cast<int32_t>(cc.origin_pid >= 0 ? get_integer(member(cc.origin_pid)) : 0);
    const auto origin_tid = static_cast<int32_t>(cc.origin_tid >= 0 ? get_integer(member(cc.origin_tid)) : 0);
    const bt_stream* stream = bt_event_borrow_stream_const(ev);
    const bt_stream_class* sc = bt_stream_borrow_class_const(stream);
    const uint64_t at = bt_stream_class_borrow_default_clock_class_const(sc) != nullptr
                            ? bt_clock_snapshot_get_value(bt_message_event_borrow_default_clock_snapshot_const(msg))
                            : 0;
    // What decoded has gone out already; the carrier follows unchanged, so nothing it held is lost.
    auto pass_on = [&](const std::string& why) {
        const char* sname = bt_stream_get_name(stream);
        fmt::print(stderr, "filter.sigmatrace.expand: {}; the {} event passes on unchanged: stream={}, clock={}\n", why,
                   kCarrierName, sname != nullptr ? sname : fmt::format("{}", bt_stream_get_id(stream)), at);
        if (bt_stream_class_borrow_default_clock_class_const(sc) != nullptr)
            note_time(stream, bt_message_event_borrow_default_clock_snapshot_const(msg));
        out_.push_back(msg);
        return true;
    };
    if (!records::layout_readable(static_cast<uint64_t>(layout)))
        return pass_on(fmt::format("Records of layout {} (this plugin reads layout {}): no call expanded", layout, records::kLayout));
    if (len != n) return pass_on(fmt::format("The event says {} words and holds {}: no call expanded", n, len));
    words_.resize(len);
    for (uint64_t k = 0; k < len; ++k) words_[k] = get_integer(bt_field_array_borrow_element_field_by_index_const(words, k));
    bool emitted = true;
    uint32_t calls = 0;
    const records::WalkResult r = records::walk_records(words_.data(), words_.size(), [&](const records::RecordHeader& h) {
        if (!emitted) return;
        records::expand_record(h, scratch_, [&](const auto& rec) { emitted = emit_call(rec, h.ts, msg, origin_pid, origin_tid); });
        calls += emitted ? 1 : 0;
    });
    if (!emitted)
        return pass_on(fmt::format("Cannot make the event of call {} of {}: the calls before it came out", calls + 1,
                                   r.records));
    if (r.status != records::WalkStatus::ok)
        return pass_on(fmt::format("The records stop decoding after {} calls ({}): those came out", r.records,
                                   records::to_string(r.status)));
    const bool ok = emit_emptied(msg, cc);
    bt_message_put_ref(msg);
    return ok;
}

bool Expander::take(const bt_message* msg) {
    switch (bt_message_get_type(msg)) {
    case BT_MESSAGE_TYPE_EVENT: {
        const bt_event* ev = bt_message_event_borrow_event_const(msg);
        if (const CarrierClass* cc = carrier_class(bt_event_borrow_class_const(ev)); cc != nullptr) return expand(msg, *cc);
        const bt_stream* s = bt_event_borrow_stream_const(ev);
        if (bt_stream_class_borrow_default_clock_class_const(bt_stream_borrow_class_const(s)) != nullptr)
            note_time(s, bt_message_event_borrow_default_clock_snapshot_const(msg));
        break;
    }
    case BT_MESSAGE_TYPE_PACKET_BEGINNING: {
        const bt_stream* s = bt_packet_borrow_stream_const(bt_message_packet_beginning_borrow_packet_const(msg));
        if (bt_stream_class_packets_have_beginning_default_clock_snapshot(bt_stream_borrow_class_const(s)))
            note_time(s, bt_message_packet_beginning_borrow_default_clock_snapshot_const(msg));
        break;
    }
    case BT_MESSAGE_TYPE_PACKET_END: {
        const bt_stream* s = bt_packet_borrow_stream_const(bt_message_packet_end_borrow_packet_const(msg));
        if (bt_stream_class_packets_have_end_default_clock_snapshot(bt_stream_borrow_class_const(s)))
            note_time(s, bt_message_packet_end_borrow_default_clock_snapshot_const(msg));
        break;
    }
    case BT_MESSAGE_TYPE_DISCARDED_EVENTS: {
        const bt_stream* s = bt_message_discarded_events_borrow_stream_const(msg);
        if (bt_stream_class_discarded_events_have_default_clock_snapshots(bt_stream_borrow_class_const(s)))
            note_time(s, bt_message_discarded_events_borrow_end_default_clock_snapshot_const(msg));
        break;
    }
    case BT_MESSAGE_TYPE_DISCARDED_PACKETS: {
        const bt_stream* s = bt_message_discarded_packets_borrow_stream_const(msg);
        if (bt_stream_class_discarded_packets_have_default_clock_snapshots(bt_stream_borrow_class_const(s)))
            note_time(s, bt_message_discarded_packets_borrow_end_default_clock_snapshot_const(msg));
        break;
    }
    case BT_MESSAGE_TYPE_STREAM_END: last_.erase(bt_message_stream_end_borrow_stream_const(msg)); break;
    default: break;
    }
    out_.push_back(msg);
    return true;
}

bt_message_iterator_class_next_method_status Expander::next(bt_message_array_const msgs, uint64_t capacity, uint64_t* count) {
    while (out_.empty()) {
        if (in_.empty()) {
            if (upstream_ended_) return BT_MESSAGE_ITERATOR_CLASS_NEXT_METHOD_STATUS_END;
            bt_message_array_const got = nullptr;
            uint64_t n = 0;
            switch (bt_message_iterator_next(upstream_, &got, &n)) {
            case BT_MESSAGE_ITERATOR_NEXT_STATUS_OK: break;
            case BT_MESSAGE_ITERATOR_NEXT_STATUS_END: upstream_ended_ = true; continue;
            case BT_MESSAGE_ITERATOR_NEXT_STATUS_AGAIN: return BT_MESSAGE_ITERATOR_CLASS_NEXT_METHOD_STATUS_AGAIN;
            case BT_MESSAGE_ITERATOR_NEXT_STATUS_MEMORY_ERROR: return BT_MESSAGE_ITERATOR_CLASS_NEXT_METHOD_STATUS_MEMORY_ERROR;
            default: return BT_MESSAGE_ITERATOR_CLASS_NEXT_METHOD_STATUS_ERROR;
            }
            in_.insert(in_.end(), got, got + n);
        }
        // One upstream message at a time until a batch is ready: what waits downstream is then at most one
        // carrier's calls (about a thousand), whatever the trace's length.
        while (!in_.empty() && out_.size() < capacity) {
            const bt_message* m = in_.front();
            in_.pop_front();
            if (!take(m)) return BT_MESSAGE_ITERATOR_CLASS_NEXT_METHOD_STATUS_MEMORY_ERROR;
        }
    }
    uint64_t k = 0;
    for (; k < capacity && !out_.empty(); ++k) {
        msgs[k] = out_.front();
        out_.pop_front();
    }
    *count = k;
    return BT_MESSAGE_ITERATOR_CLASS_NEXT_METHOD_STATUS_OK;
}

}  // namespace

bt_component_class_initialize_method_status expand_init(bt_self_component_filter* self, bt_self_component_filter_configuration*,
                                                        const bt_value*, void*) {
    if (bt_self_component_filter_add_input_port(self, "in", nullptr, nullptr) != BT_SELF_COMPONENT_ADD_PORT_STATUS_OK ||
        bt_self_component_filter_add_output_port(self, "out", nullptr, nullptr) != BT_SELF_COMPONENT_ADD_PORT_STATUS_OK)
        return BT_COMPONENT_CLASS_INITIALIZE_METHOD_STATUS_MEMORY_ERROR;
    return BT_COMPONENT_CLASS_INITIALIZE_METHOD_STATUS_OK;
}

bt_message_iterator_class_initialize_method_status expand_iterator_init(bt_self_message_iterator* self,
                                                                        bt_self_message_iterator_configuration*,
                                                                        bt_self_component_port_output*) {
    // The iterator's component is this filter: the C API's self-component types are views of one object (its
    // bt_self_component_filter_as_self_component() is this cast the other way).
    auto* comp = reinterpret_cast<bt_self_component_filter*>(bt_self_message_iterator_borrow_component(self));
    bt_message_iterator* upstream = nullptr;
    switch (bt_message_iterator_create_from_message_iterator(self, bt_self_component_filter_borrow_input_port_by_name(comp, "in"),
                                                             &upstream)) {
    case BT_MESSAGE_ITERATOR_CREATE_FROM_MESSAGE_ITERATOR_STATUS_OK: break;
    case BT_MESSAGE_ITERATOR_CREATE_FROM_MESSAGE_ITERATOR_STATUS_MEMORY_ERROR:
        return BT_MESSAGE_ITERATOR_CLASS_INITIALIZE_METHOD_STATUS_MEMORY_ERROR;
    default: return BT_MESSAGE_ITERATOR_CLASS_INITIALIZE_METHOD_STATUS_ERROR;
    }
    bt_self_message_iterator_set_data(self, new Expander(self, upstream));
    return BT_MESSAGE_ITERATOR_CLASS_INITIALIZE_METHOD_STATUS_OK;
}

void expand_iterator_finalize(bt_self_message_iterator* self) {
    delete static_cast<Expander*>(bt_self_message_iterator_get_data(self));
}

bt_message_iterator_class_next_method_status expand_iterator_next(bt_self_message_iterator* self, bt_message_array_const msgs,
                                                                  uint64_t capacity, uint64_t* count) {
    return static_cast<Expander*>(bt_self_message_iterator_get_data(self))->next(msgs, capacity, count);
}

}  // namespace sigmatrace::bt2plugin
