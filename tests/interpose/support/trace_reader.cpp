#include "support/trace_reader.h"

#include <babeltrace2/babeltrace.h>
#include <sigmatrace/deferred_records.h>
#include <sigmatrace/deferred_records_wire.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace sigmatrace::testing {
namespace {

void expand_records(const TraceEvent& carrier, Trace* trace);  // below: deferred_records events

namespace fs = std::filesystem;

FieldValue read_field(const bt_field* f) {
    const bt_field_class_type t = bt_field_get_class_type(f);
    if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_UNSIGNED_INTEGER))
        return bt_field_integer_unsigned_get_value(f);
    if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_SIGNED_INTEGER))
        return bt_field_integer_signed_get_value(f);
    if (t == BT_FIELD_CLASS_TYPE_STRING) return std::string(bt_field_string_get_value(f));
    if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_ARRAY)) {
        std::vector<uint64_t> v;
        const uint64_t n = bt_field_array_get_length(f);
        v.reserve(n);
        for (uint64_t k = 0; k < n; ++k) {
            const bt_field* e = bt_field_array_borrow_element_field_by_index_const(f, k);
            const bt_field_class_type et = bt_field_get_class_type(e);
            if (bt_field_class_type_is(et, BT_FIELD_CLASS_TYPE_SIGNED_INTEGER))
                v.push_back(static_cast<uint64_t>(bt_field_integer_signed_get_value(e)));
            else
                v.push_back(bt_field_integer_unsigned_get_value(e));
        }
        return v;
    }
    return std::string("<unsupported field>");
}

void read_structure(const bt_field* s, std::map<std::string, FieldValue>* out) {
    if (s == nullptr) return;
    const bt_field_class* cls = bt_field_borrow_class_const(s);
    const uint64_t n = bt_field_class_structure_get_member_count(cls);
    for (uint64_t k = 0; k < n; ++k) {
        const bt_field_class_structure_member* m = bt_field_class_structure_borrow_member_by_index_const(cls, k);
        (*out)[bt_field_class_structure_member_get_name(m)] =
            read_field(bt_field_structure_borrow_member_field_by_index_const(s, k));
    }
}

struct SinkState {
    Trace* trace;
};

bt_graph_simple_sink_component_consume_func_status consume(bt_message_iterator* it, void* data) {
    auto* st = static_cast<SinkState*>(data);
    bt_message_array_const msgs;
    uint64_t count = 0;
    switch (bt_message_iterator_next(it, &msgs, &count)) {
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_END: return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_END;
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_AGAIN: return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_AGAIN;
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_OK: break;
    default: return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_ERROR;
    }
    for (uint64_t k = 0; k < count; ++k) {
        const bt_message* m = msgs[k];
        const bt_message_type type = bt_message_get_type(m);
        if (type == BT_MESSAGE_TYPE_EVENT) {
            const bt_event* ev = bt_message_event_borrow_event_const(m);
            TraceEvent e;
            e.name = bt_event_class_get_name(bt_event_borrow_class_const(ev));
            int64_t ns = 0;
            if (bt_clock_snapshot_get_ns_from_origin(bt_message_event_borrow_default_clock_snapshot_const(m), &ns) ==
                BT_CLOCK_SNAPSHOT_GET_NS_FROM_ORIGIN_STATUS_OK)
                e.ns = ns;
            std::map<std::string, FieldValue> ctx;
            read_structure(bt_event_borrow_common_context_field_const(ev), &ctx);
            if (auto it2 = ctx.find("vpid"); it2 != ctx.end() && std::holds_alternative<int64_t>(it2->second))
                e.vpid = std::get<int64_t>(it2->second);
            if (auto it2 = ctx.find("vtid"); it2 != ctx.end() && std::holds_alternative<int64_t>(it2->second))
                e.vtid = std::get<int64_t>(it2->second);
            if (auto it2 = ctx.find("procname"); it2 != ctx.end() && std::holds_alternative<std::string>(it2->second))
                e.procname = std::get<std::string>(it2->second);
            read_structure(bt_event_borrow_payload_field_const(ev), &e.fields);
            const bool records = e.name == "sigmatrace:deferred_records";
            st->trace->events.push_back(e);
            if (records) expand_records(e, st->trace);
        } else if (type == BT_MESSAGE_TYPE_DISCARDED_EVENTS) {
            uint64_t n = 0;
            if (bt_message_discarded_events_get_count(m, &n) == BT_PROPERTY_AVAILABILITY_AVAILABLE)
                st->trace->discarded += n;
        }
        bt_message_put_ref(m);
    }
    return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_OK;
}

// The events of a deferred_records event's records, appended after it: what immediate emission would have
// written for each call (<sigmatrace/deferred_records.h>), with the carrier's timestamp and contexts. A record
// that does not decode ends the expansion and is counted in Trace::malformed_records.
template <typename Rec> void append_record_event(const TraceEvent& carrier, const char* name, const Rec& rec,
                                                 Trace* trace) {
    TraceEvent e;
    e.name = std::string("sigmatrace:") + name;
    e.ns = carrier.ns;
    e.vpid = carrier.vpid;
    e.vtid = carrier.vtid;
    e.procname = carrier.procname;
    records::visit_fields(
        rec,
        [&e](const char* field, auto value) {
            if constexpr (std::is_signed_v<decltype(value)>) e.fields[field] = static_cast<int64_t>(value);
            else e.fields[field] = static_cast<uint64_t>(value);
        },
        [&e, &rec](const char* field, const auto* values) { e.fields[field] = std::vector<uint64_t>(values, values + rec.n); });
    trace->events.push_back(std::move(e));
}

void expand_records(const TraceEvent& carrier, Trace* trace) {
    const auto* words = std::get_if<std::vector<uint64_t>>(&carrier.fields.at("words"));
    const auto* layout = std::get_if<uint64_t>(&carrier.fields.at("layout"));
    if (words == nullptr || layout == nullptr || !records::layout_readable(*layout)) {
        ++trace->malformed_records;
        return;
    }
    records::Scratch scratch;
    const records::WalkResult r = records::walk_records(words->data(), words->size(), [&](const records::RecordHeader& h) {
        records::expand_record(h, scratch, [&](const auto& rec) {
            using R = std::decay_t<decltype(rec)>;
            const char* name = std::is_same_v<R, st_post_send_rec>        ? "post_send"
                               : std::is_same_v<R, st_post_recv_rec>      ? "post_recv"
                               : std::is_same_v<R, st_post_srq_recv_rec>  ? "post_srq_recv"
                               : std::is_same_v<R, st_gpu_wqe_rec>        ? "gpu_wqe"
                                                                          : "poll_cq";
            append_record_event(carrier, name, rec, trace);
        });
    });
    if (r.status != records::WalkStatus::ok) ++trace->malformed_records;
}

std::string take_error(const char* what) {
    std::string msg = what;
    if (const bt_error* err = bt_current_thread_take_error()) {
        const uint64_t n = bt_error_get_cause_count(err);
        for (uint64_t k = 0; k < n; ++k)
            msg += std::string(": ") + bt_error_cause_get_message(bt_error_borrow_cause_by_index(err, k));
        bt_error_release(err);
    }
    return msg;
}

}  // namespace

uint64_t TraceEvent::u(const std::string& field) const {
    const FieldValue& v = fields.at(field);
    if (const auto* p = std::get_if<uint64_t>(&v)) return *p;
    if (const auto* p = std::get_if<int64_t>(&v); p != nullptr && *p >= 0) return static_cast<uint64_t>(*p);
    throw std::out_of_range("field " + field + " of " + name + " is not an unsigned integer");
}

int64_t TraceEvent::i(const std::string& field) const {
    const FieldValue& v = fields.at(field);
    if (const auto* p = std::get_if<int64_t>(&v)) return *p;
    if (const auto* p = std::get_if<uint64_t>(&v)) return static_cast<int64_t>(*p);
    throw std::out_of_range("field " + field + " of " + name + " is not an integer");
}

const std::string& TraceEvent::s(const std::string& field) const {
    const FieldValue& v = fields.at(field);
    if (const auto* p = std::get_if<std::string>(&v)) return *p;
    throw std::out_of_range("field " + field + " of " + name + " is not a string");
}

const std::vector<uint64_t>& TraceEvent::seq(const std::string& field) const {
    const FieldValue& v = fields.at(field);
    if (const auto* p = std::get_if<std::vector<uint64_t>>(&v)) return *p;
    throw std::out_of_range("field " + field + " of " + name + " is not a sequence");
}

Trace read_trace(const std::string& dir) {
    Trace trace;
    std::vector<std::string> inputs;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->path().filename() == "metadata") inputs.push_back(it->path().parent_path().string());
    if (inputs.empty()) {
        trace.error = "Cannot read trace: path=" + dir + ", reason=no CTF metadata file under it";
        return trace;
    }
    const bt_plugin* ctf = nullptr;
    const bt_plugin* utils = nullptr;
    if (bt_plugin_find("ctf", BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, &ctf) != BT_PLUGIN_FIND_STATUS_OK ||
        bt_plugin_find("utils", BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, &utils) != BT_PLUGIN_FIND_STATUS_OK) {
        trace.error = take_error("Cannot load the babeltrace2 ctf/utils plugins");
        return trace;
    }
    bt_graph* graph = bt_graph_create(0);
    SinkState state{&trace};
    const bt_component_filter* mux = nullptr;
    const bt_component_sink* sink = nullptr;
    bool ok = bt_graph_add_filter_component(graph, bt_plugin_borrow_filter_component_class_by_name_const(utils, "muxer"),
                                            "mux", nullptr, BT_LOGGING_LEVEL_WARNING, &mux) == BT_GRAPH_ADD_COMPONENT_STATUS_OK;
    uint64_t next_in = 0;
    for (size_t k = 0; ok && k < inputs.size(); ++k) {
        bt_value* params = bt_value_map_create();
        bt_value* list = nullptr;
        bt_value_map_insert_empty_array_entry(params, "inputs", &list);
        bt_value_array_append_string_element(list, inputs[k].c_str());
        const bt_component_source* src = nullptr;
        ok = bt_graph_add_source_component(graph, bt_plugin_borrow_source_component_class_by_name_const(ctf, "fs"),
                                           ("src" + std::to_string(k)).c_str(), params, BT_LOGGING_LEVEL_WARNING,
                                           &src) == BT_GRAPH_ADD_COMPONENT_STATUS_OK;
        bt_value_put_ref(params);
        for (uint64_t p = 0; ok && p < bt_component_source_get_output_port_count(src); ++p) {
            const std::string in = "in" + std::to_string(next_in++);
            ok = bt_graph_connect_ports(graph, bt_component_source_borrow_output_port_by_index_const(src, p),
                                        bt_component_filter_borrow_input_port_by_name_const(mux, in.c_str()),
                                        nullptr) == BT_GRAPH_CONNECT_PORTS_STATUS_OK;
        }
    }
    ok = ok && bt_graph_add_simple_sink_component(graph, "reader", nullptr, &consume, nullptr, &state, &sink) ==
                   BT_GRAPH_ADD_COMPONENT_STATUS_OK;
    ok = ok && bt_graph_connect_ports(graph, bt_component_filter_borrow_output_port_by_name_const(mux, "out"),
                                      bt_component_sink_borrow_input_port_by_index_const(sink, 0),
                                      nullptr) == BT_GRAPH_CONNECT_PORTS_STATUS_OK;
    if (!ok) {
        trace.error = take_error(("Cannot build the reading graph for " + dir).c_str());
    } else {
        bt_graph_run_status s;
        do s = bt_graph_run(graph);
        while (s == BT_GRAPH_RUN_STATUS_AGAIN);
        if (s != BT_GRAPH_RUN_STATUS_OK) trace.error = take_error(("Cannot read trace " + dir).c_str());
    }
    bt_graph_put_ref(graph);
    bt_plugin_put_ref(ctf);
    bt_plugin_put_ref(utils);
    return trace;
}

}  // namespace sigmatrace::testing
