// The Babeltrace2 plugin "sigmatrace": sink.sigmatrace.analyze runs the same analysis as sigmatrace-analyze
// inside any babeltrace2 graph:
//
//   babeltrace2 --plugin-path=PREFIX/lib/sigmatrace/bt2-plugins TRACE_DIR -c sink.sigmatrace.analyze
//       [-p 'json="out.json",html="out.html",perfetto="out.perfetto.json",events="events.txt",text=yes']
//
// filter.sigmatrace.expand (expand_filter.h) turns records into one readable event per call for any sink.
//
// Parameters of sink.sigmatrace.analyze (all optional): json, html, perfetto (output paths; perfetto in Perfetto's
// protobuf format, or its legacy JSON for a name ending in .json), events (a path, or "-" for stdout: every
// SigmaTrace event as read, one line each, deferred records expanded into their calls, as `sigmatrace-analyze
// --events` writes them), text (bool: the text report on stdout at the end; default true, false when events
// go to stdout), skew-threshold (a number, at least 1), error-storm (a positive integer), stall-after-ns (integer
// ns: the stalled_queue finding's threshold, as --stall-after); babeltrace2 writes 5 as a signed integer, +5 as an
// unsigned one, and both are taken; a value of the wrong type or range fails the component.
#include <babeltrace2/babeltrace.h>
#include <fmt/core.h>

#include <dlfcn.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/bt_message_consumer.h"
#include "analyzer/outputs/event_dump.h"
#include "analyzer/outputs/html_report.h"
#include "analyzer/outputs/perfetto_proto_writer.h"
#include "analyzer/outputs/perfetto_writer.h"
#include "analyzer/outputs/text_report.h"
#include "expand_filter.h"
#include "analyzer/outputs/json_text.h"

namespace {

using sigmatrace::analyzer::Analysis;
using sigmatrace::analyzer::AnalysisOptions;
using sigmatrace::analyzer::BtMessageConsumer;
using sigmatrace::analyzer::EventDump;
using sigmatrace::analyzer::PerfettoWriter;
using sigmatrace::analyzer::PerfettoProtoWriter;

struct SinkData {
    std::optional<std::string> json_path, html_path, perfetto_path;
    bool text = true;
    std::optional<std::string> events_path;
    std::unique_ptr<EventDump> dump;  // declared before the consumer, which writes to it
    std::unique_ptr<Analysis> analysis;
    std::unique_ptr<BtMessageConsumer> consumer;
    std::unique_ptr<PerfettoWriter> perfetto;              // a path ending in .json: Perfetto's legacy JSON
    std::unique_ptr<PerfettoProtoWriter> perfetto_proto;   // otherwise its protobuf format
    bt_message_iterator* it = nullptr;
};

std::optional<std::string> string_param(const bt_value* params, const char* name) {
    const bt_value* v = params ? bt_value_map_borrow_entry_value_const(params, name) : nullptr;
    if (v && bt_value_is_string(v)) return std::string(bt_value_string_get(v));
    return std::nullopt;
}

// An integer parameter: babeltrace2's -p reads `5` as a signed integer and `+5` as an unsigned one.
std::optional<int64_t> integer_value(const bt_value* v) {
    if (bt_value_is_signed_integer(v)) return bt_value_integer_signed_get(v);
    if (bt_value_is_unsigned_integer(v) && bt_value_integer_unsigned_get(v) <= static_cast<uint64_t>(INT64_MAX))
        return static_cast<int64_t>(bt_value_integer_unsigned_get(v));
    return std::nullopt;
}

void write_file(const std::string& path, const std::string& content, const char* what) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << content;
    if (!f) fmt::print(stderr, "sink.sigmatrace.analyze: Cannot write the {}: path={}\n", what, path);
}

bt_component_class_initialize_method_status analyze_init(bt_self_component_sink* self,
                                                         bt_self_component_sink_configuration*, const bt_value* params,
                                                         void*) {
    auto data = std::make_unique<SinkData>();
    data->json_path = string_param(params, "json");
    data->html_path = string_param(params, "html");
    data->perfetto_path = string_param(params, "perfetto");
    data->events_path = string_param(params, "events");
    const bool events_to_stdout = data->events_path && *data->events_path == "-";
    data->text = !events_to_stdout;  // the lines replace the report on stdout, as with sigmatrace-analyze --events -
    AnalysisOptions opts;
    if (params) {
        if (const bt_value* v = bt_value_map_borrow_entry_value_const(params, "text"); v && bt_value_is_bool(v)) {
            data->text = bt_value_bool_get(v);
            if (data->text && events_to_stdout) {
                fmt::print(stderr, "sink.sigmatrace.analyze: events=\"-\" and text=yes cannot both write to stdout\n");
                return BT_COMPONENT_CLASS_INITIALIZE_METHOD_STATUS_ERROR;
            }
        }
        if (const bt_value* v = bt_value_map_borrow_entry_value_const(params, "skew-threshold")) {
            const std::optional<int64_t> n = integer_value(v);
            const double x = bt_value_is_real(v) ? bt_value_real_get(v) : n ? static_cast<double>(*n) : 0.0;
            if (!(x >= 1.0)) {
                fmt::print(stderr, "sink.sigmatrace.analyze: skew-threshold must be a number of at least 1 (1.5)\n");
                return BT_COMPONENT_CLASS_INITIALIZE_METHOD_STATUS_ERROR;
            }
            opts.skew_threshold = x;
        }
        if (const bt_value* v = bt_value_map_borrow_entry_value_const(params, "error-storm")) {
            const std::optional<int64_t> n = integer_value(v);
            if (!n || *n < 1) {
                fmt::print(stderr, "sink.sigmatrace.analyze: error-storm must be a positive integer\n");
                return BT_COMPONENT_CLASS_INITIALIZE_METHOD_STATUS_ERROR;
            }
            opts.error_storm_threshold = static_cast<uint64_t>(*n);
        }
        if (const bt_value* v = bt_value_map_borrow_entry_value_const(params, "stall-after-ns")) {
            // As sigmatrace-analyze --stall-after: 1 us to 1 h.
            constexpr int64_t kMin = 1000, kMax = 3'600'000'000'000;
            const std::optional<int64_t> ns = integer_value(v);
            if (!ns || *ns < kMin || *ns > kMax) {
                fmt::print(stderr, "sink.sigmatrace.analyze: stall-after-ns must be an integer of nanoseconds from {} to {} "
                                   "(1 us to 1 h)\n", kMin, kMax);
                return BT_COMPONENT_CLASS_INITIALIZE_METHOD_STATUS_ERROR;
            }
            opts.stall_after_ns = *ns;
        }
    }
    if (data->events_path) {
        data->dump = EventDump::open(*data->events_path);
        if (!data->dump) {
            fmt::print(stderr, "sink.sigmatrace.analyze: Cannot write the events: path={}: {}\n", *data->events_path,
                       std::strerror(errno));
            return BT_COMPONENT_CLASS_INITIALIZE_METHOD_STATUS_ERROR;
        }
    }
    data->analysis = std::make_unique<Analysis>(opts);
    data->consumer = std::make_unique<BtMessageConsumer>(*data->analysis, data->dump.get());
    if (data->perfetto_path) {
        constexpr uint64_t kMaxOps = sigmatrace::analyzer::kDefaultTimelineBudget;
        bool opened = false;
        if (data->perfetto_path->ends_with(".json")) {
            data->perfetto = std::make_unique<PerfettoWriter>(data->analysis->topology(), kMaxOps);
            opened = data->perfetto->open(*data->perfetto_path);
            if (opened) data->analysis->add_listener(data->perfetto.get());
        } else {
            data->perfetto_proto = std::make_unique<PerfettoProtoWriter>(data->analysis->topology(), kMaxOps);
            opened = data->perfetto_proto->open(*data->perfetto_path);
            if (opened) data->analysis->add_listener(data->perfetto_proto.get());
        }
        if (!opened) {
            fmt::print(stderr, "sink.sigmatrace.analyze: Cannot write the timeline: path={}\n", *data->perfetto_path);
            return BT_COMPONENT_CLASS_INITIALIZE_METHOD_STATUS_ERROR;
        }
    }
    if (bt_self_component_sink_add_input_port(self, "in", nullptr, nullptr) != BT_SELF_COMPONENT_ADD_PORT_STATUS_OK)
        return BT_COMPONENT_CLASS_INITIALIZE_METHOD_STATUS_MEMORY_ERROR;
    bt_self_component_set_data(bt_self_component_sink_as_self_component(self), data.release());
    return BT_COMPONENT_CLASS_INITIALIZE_METHOD_STATUS_OK;
}

// The install tree's share/sigmatrace, found from this plugin's own file (PREFIX/lib/sigmatrace/bt2-plugins/),
// since the process is babeltrace2's and /proc/self/exe says nothing about where SigmaTrace lives.
std::filesystem::path own_data_dir() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&own_data_dir), &info) == 0 || info.dli_fname == nullptr) return {};
    return std::filesystem::path(info.dli_fname).parent_path().parent_path().parent_path().parent_path() / "share" /
           "sigmatrace";
}

void analyze_finalize(bt_self_component_sink* self) {
    std::unique_ptr<SinkData> data(
        static_cast<SinkData*>(bt_self_component_get_data(bt_self_component_sink_as_self_component(self))));
    if (!data) return;
    bt_message_iterator_put_ref(data->it);
    if (data->consumer) data->consumer->finish();  // the events still held for reordering
    data->consumer.reset();                        // releases the classes and traces it held
    if (data->dump && !data->dump->finish())
        fmt::print(stderr, "sink.sigmatrace.analyze: Cannot write the events: path={}\n", *data->events_path);
    nlohmann::json doc = data->analysis->finish();
    if ((data->perfetto && !data->perfetto->close()) || (data->perfetto_proto && !data->perfetto_proto->close(&doc)))
        fmt::print(stderr, "sink.sigmatrace.analyze: Cannot write the timeline: path={}\n", *data->perfetto_path);
    if (data->json_path) write_file(*data->json_path, sigmatrace::analyzer::json_text(doc, 2) + "\n", "JSON document");
    if (data->html_path) write_file(*data->html_path, sigmatrace::analyzer::render_html_report(doc, sigmatrace::analyzer::load_charting_library(own_data_dir())), "HTML report");
    if (data->text) fmt::print("{}", sigmatrace::analyzer::render_text_report(doc));
    std::fflush(stdout);
}

bt_component_class_sink_graph_is_configured_method_status analyze_graph_is_configured(bt_self_component_sink* self) {
    auto* data = static_cast<SinkData*>(bt_self_component_get_data(bt_self_component_sink_as_self_component(self)));
    if (bt_message_iterator_create_from_sink_component(self, bt_self_component_sink_borrow_input_port_by_index(self, 0),
                                                       &data->it) != BT_MESSAGE_ITERATOR_CREATE_FROM_SINK_COMPONENT_STATUS_OK)
        return BT_COMPONENT_CLASS_SINK_GRAPH_IS_CONFIGURED_METHOD_STATUS_ERROR;
    return BT_COMPONENT_CLASS_SINK_GRAPH_IS_CONFIGURED_METHOD_STATUS_OK;
}

bt_component_class_sink_consume_method_status analyze_consume(bt_self_component_sink* self) {
    auto* data = static_cast<SinkData*>(bt_self_component_get_data(bt_self_component_sink_as_self_component(self)));
    bt_message_array_const msgs;
    uint64_t count = 0;
    switch (bt_message_iterator_next(data->it, &msgs, &count)) {
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_OK: break;
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_END:
        bt_message_iterator_put_ref(data->it);
        data->it = nullptr;
        return BT_COMPONENT_CLASS_SINK_CONSUME_METHOD_STATUS_END;
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_AGAIN: return BT_COMPONENT_CLASS_SINK_CONSUME_METHOD_STATUS_AGAIN;
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_MEMORY_ERROR: return BT_COMPONENT_CLASS_SINK_CONSUME_METHOD_STATUS_MEMORY_ERROR;
    default: return BT_COMPONENT_CLASS_SINK_CONSUME_METHOD_STATUS_ERROR;
    }
    for (uint64_t i = 0; i < count; ++i) {
        data->consumer->consume(msgs[i]);
        bt_message_put_ref(msgs[i]);
    }
    return BT_COMPONENT_CLASS_SINK_CONSUME_METHOD_STATUS_OK;
}

}  // namespace

extern "C" {
BT_PLUGIN_MODULE();
BT_PLUGIN(sigmatrace);
BT_PLUGIN_DESCRIPTION("SigmaTrace: per-operation RDMA analysis (latency, traffic matrix, barriers, findings) and readable "
                      "data-path events");
BT_PLUGIN_LICENSE("See the SigmaTrace LICENSE file");
BT_PLUGIN_SINK_COMPONENT_CLASS(analyze, analyze_consume);
BT_PLUGIN_SINK_COMPONENT_CLASS_DESCRIPTION(analyze, "Rebuild RDMA operations from SigmaTrace events and report them");
BT_PLUGIN_SINK_COMPONENT_CLASS_INITIALIZE_METHOD(analyze, analyze_init);
BT_PLUGIN_SINK_COMPONENT_CLASS_FINALIZE_METHOD(analyze, analyze_finalize);
BT_PLUGIN_SINK_COMPONENT_CLASS_GRAPH_IS_CONFIGURED_METHOD(analyze, analyze_graph_is_configured);
BT_PLUGIN_FILTER_COMPONENT_CLASS(expand, sigmatrace::bt2plugin::expand_iterator_next);
BT_PLUGIN_FILTER_COMPONENT_CLASS_DESCRIPTION(expand, "Turn each deferred_records event into one event per captured call");
BT_PLUGIN_FILTER_COMPONENT_CLASS_INITIALIZE_METHOD(expand, sigmatrace::bt2plugin::expand_init);
BT_PLUGIN_FILTER_COMPONENT_CLASS_MESSAGE_ITERATOR_CLASS_INITIALIZE_METHOD(expand, sigmatrace::bt2plugin::expand_iterator_init);
BT_PLUGIN_FILTER_COMPONENT_CLASS_MESSAGE_ITERATOR_CLASS_FINALIZE_METHOD(expand, sigmatrace::bt2plugin::expand_iterator_finalize);
}
