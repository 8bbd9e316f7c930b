#include "analyzer/decode/trace_reader.h"

#include <babeltrace2/babeltrace.h>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <system_error>

#include "analyzer/decode/bt_message_consumer.h"
#include "analyzer/decode/lttng_stream_reader.h"
#include "analyzer/decode/read_guard.h"

namespace sigmatrace::analyzer {

namespace fs = std::filesystem;

namespace {

// Owning handles for the few Babeltrace2 objects this file creates.
struct GraphRef {
    bt_graph* g = nullptr;
    ~GraphRef() { bt_graph_put_ref(g); }
};
struct ValueRef {
    bt_value* v = nullptr;
    ~ValueRef() { bt_value_put_ref(v); }
};
struct PluginRef {
    const bt_plugin* p = nullptr;
    ~PluginRef() { bt_plugin_put_ref(p); }
};

// A Babeltrace2 error cause without its object addresses ("...: msg-it-addr=0x..., ..."), which mean
// nothing to a user.
std::string tidy_cause(std::string_view msg) {
    const auto addr = msg.find("-addr=");
    if (addr != std::string_view::npos) {
        const auto cut = msg.substr(0, addr).find_last_of(":,");
        msg = msg.substr(0, cut == std::string_view::npos ? addr : cut);
    }
    while (!msg.empty() && (msg.back() == ' ' || msg.back() == '.')) msg.remove_suffix(1);
    return std::string(msg);
}

// The causes of the current thread's Babeltrace2 error, root cause first, on one line; clears the error.
std::string take_error() {
    constexpr uint64_t kMaxCauses = 4;
    const bt_error* err = bt_current_thread_take_error();
    if (err == nullptr) return "no detail";
    std::string out;
    const uint64_t n = bt_error_get_cause_count(err);
    uint64_t kept = 0;
    for (uint64_t i = 0; i < n && kept < kMaxCauses; ++i) {
        const std::string c = tidy_cause(bt_error_cause_get_message(bt_error_borrow_cause_by_index(err, i)));
        if (c.empty()) continue;
        if (!out.empty()) out += " <- ";
        out += c;
        ++kept;
    }
    bt_error_release(err);
    return out.empty() ? "no detail" : out;
}

// The stream file a src.ctf.fs error names ("...stream file '/path/ch_0'..."), if any.
std::optional<fs::path> failing_stream_file(const std::string& why) {
    for (const char* marker : {"stream file '", "stream file `"}) {
        const auto at = why.find(marker);
        if (at == std::string::npos) continue;
        const auto start = at + std::strlen(marker);
        const auto end = why.find_first_of("'`", start);
        if (end != std::string::npos) return fs::path(why.substr(start, end - start));
    }
    return std::nullopt;
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
    if (from.empty() || from == to) return;
    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
        text.replace(at, from.size(), to);
}

// The stream file babeltrace2 named, as the user knows it: a file of a scratch directory (below) is a symbolic
// link to the original.
fs::path original_stream_file(const fs::path& named) {
    std::error_code ec;
    if (fs::is_symlink(named, ec)) {
        fs::path target = fs::read_symlink(named, ec);
        if (!ec) return target;
    }
    return fs::absolute(named, ec);
}

// Temporary trace directories (symbolic links to a trace's metadata and its readable stream files), removed
// when the read ends.
struct ScratchDirs {
    std::vector<fs::path> dirs;
    ~ScratchDirs() {
        std::error_code ec;
        for (const auto& d : dirs) fs::remove_all(d, ec);
    }
    // A copy of `dir` without the stream files in `skip`; empty path on failure.
    fs::path without(const fs::path& dir, const std::set<fs::path>& skip) {
        std::string templ = (fs::temp_directory_path() / "sigmatrace-analyze.XXXXXX").string();
        if (mkdtemp(templ.data()) == nullptr) return {};
        dirs.emplace_back(templ);
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(dir, ec)) {
            if (!e.is_regular_file(ec) || skip.contains(fs::absolute(e.path()))) continue;
            fs::create_symlink(fs::absolute(e.path()), fs::path(templ) / e.path().filename(), ec);
        }
        return templ;
    }
};

const bt_plugin* find_plugin(const char* name) {
    const bt_plugin* p = nullptr;
    if (bt_plugin_find(name, BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, BT_FALSE, &p) != BT_PLUGIN_FIND_STATUS_OK) {
        (void)take_error();
        return nullptr;
    }
    return p;
}

// The support-info `group` of a CTF directory (the trace UUID), "" when none, nullopt when not a CTF trace.
std::optional<std::string> support_group(const bt_component_class_source* cls, const fs::path& dir, std::string& why) {
    ValueRef params{bt_value_map_create()};
    bt_value_map_insert_string_entry(params.v, "input", dir.c_str());
    bt_value_map_insert_string_entry(params.v, "type", "directory");
    bt_query_executor* q =
        bt_query_executor_create(bt_component_class_source_as_component_class_const(cls), "babeltrace.support-info", params.v);
    if (q == nullptr) {
        why = take_error();
        return std::nullopt;
    }
    const bt_value* result = nullptr;
    const auto st = bt_query_executor_query(q, &result);
    bt_query_executor_put_ref(q);
    if (st != BT_QUERY_EXECUTOR_QUERY_STATUS_OK) {
        why = take_error();
        return std::nullopt;
    }
    std::optional<std::string> group;
    const bt_value* weight = bt_value_map_borrow_entry_value_const(result, "weight");
    const double w = weight && bt_value_is_real(weight) ? bt_value_real_get(weight) : 0.0;
    if (w > 0.0) {
        const bt_value* g = bt_value_map_borrow_entry_value_const(result, "group");
        group = g && bt_value_is_string(g) ? std::string(bt_value_string_get(g)) : std::string();
    } else {
        why = "babeltrace2 does not recognize it as a CTF trace (metadata unreadable?)";
    }
    bt_value_put_ref(result);
    return group;
}

bt_value* inputs_param(const std::vector<fs::path>& dirs) {
    bt_value* params = bt_value_map_create();
    bt_value* inputs = nullptr;
    bt_value_map_insert_empty_array_entry(params, "inputs", &inputs);
    for (const auto& d : dirs) bt_value_array_append_string_element(inputs, d.c_str());
    return params;
}

// Whether src.ctf.fs accepts these directories (parses their metadata and indexes their streams), in a
// scratch graph so that a broken trace cannot make the real graph faulty.
bool can_open(const bt_component_class_source* cls, const std::vector<fs::path>& dirs, std::string& why) {
    GraphRef g{bt_graph_create(0)};
    ValueRef params{inputs_param(dirs)};
    const bt_component_source* comp = nullptr;
    if (bt_graph_add_source_component(g.g, cls, "probe", params.v, BT_LOGGING_LEVEL_NONE, &comp) !=
        BT_GRAPH_ADD_COMPONENT_STATUS_OK) {
        why = take_error();
        return false;
    }
    return true;
}

struct SinkState {
    BtMessageConsumer* consumer;   // nullptr: a probe (packets counted only)
    ReadProgress* progress;
    uint64_t packets_ended = 0;    // checked against the packets the precheck handed over
};

bt_graph_simple_sink_component_consume_func_status sink_consume(bt_message_iterator* it, void* data) {
    auto* st = static_cast<SinkState*>(data);
    bt_message_array_const msgs;
    uint64_t count = 0;
    switch (bt_message_iterator_next(it, &msgs, &count)) {
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_OK: break;
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_END: return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_END;
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_AGAIN: return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_AGAIN;
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_MEMORY_ERROR:
        return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_MEMORY_ERROR;
    default: return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_ERROR;
    }
    if (st->progress) st->progress->beat(count);
    for (uint64_t i = 0; i < count; ++i) {
        if (st->consumer) {
            if (bt_message_get_type(msgs[i]) == BT_MESSAGE_TYPE_PACKET_END) ++st->packets_ended;
            st->consumer->consume(msgs[i]);
        } else {
            const bt_message_type t = bt_message_get_type(msgs[i]);
            if (t == BT_MESSAGE_TYPE_PACKET_BEGINNING) st->progress->packets_begun.fetch_add(1, std::memory_order_relaxed);
            if (t == BT_MESSAGE_TYPE_PACKET_END) st->progress->packets_ended.fetch_add(1, std::memory_order_relaxed);
        }
        bt_message_put_ref(msgs[i]);
    }
    return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_OK;
}

}  // namespace

std::vector<fs::path> find_trace_dirs(const fs::path& root) {
    std::vector<fs::path> out;
    std::error_code ec;
    if (fs::is_regular_file(root / "metadata", ec)) out.push_back(root);
    for (fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
        if (it->is_directory(ec) && fs::is_regular_file(it->path() / "metadata", ec)) out.push_back(it->path());
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

namespace {

struct Plugins {
    PluginRef ctf{find_plugin("ctf")}, utils{find_plugin("utils")};
    const bt_component_class_source* fs_cls = nullptr;
    const bt_component_class_filter* mux_cls = nullptr;
    const bt_component_class_source* live_cls = nullptr;   // source.ctf.lttng-live, for read_live
    std::string error;   // "" when both classes were found
    Plugins() {
        if (!ctf.p || !utils.p) {
            error = "Cannot load the Babeltrace2 'ctf' and 'utils' plugins: install the babeltrace2 package";
            return;
        }
        fs_cls = bt_plugin_borrow_source_component_class_by_name_const(ctf.p, "fs");
        mux_cls = bt_plugin_borrow_filter_component_class_by_name_const(utils.p, "muxer");
        live_cls = bt_plugin_borrow_source_component_class_by_name_const(ctf.p, "lttng-live");
        if (!fs_cls || !mux_cls) error = "The Babeltrace2 plugins lack source.ctf.fs or filter.utils.muxer";
    }
    Plugins(const Plugins&) = delete;
    Plugins& operator=(const Plugins&) = delete;
};

// Found once per process, on first use, and immutable after (thread-safe initialization): bt_plugin_find loads
// every plugin of Babeltrace's directories, a dlopen of each and of their libraries, and the guarded read
// (read_guard.h) forks a child for each run and each probe of a damaged file; children inherit what the parent
// loaded (load_babeltrace_plugins) instead of loading it again.
const Plugins& plugins() {
    static const Plugins kPlugins;
    return kPlugins;
}

// Adds the muxer and the sink of `state` to `graph`, and connects every output port of `sources` to the muxer and
// the muxer to the sink. "" or what failed.
std::string mux_into_sink(bt_graph* graph, const bt_component_class_filter* mux_cls,
                          const std::vector<const bt_component_source*>& sources, SinkState& state, bt_logging_level log) {
    const bt_component_filter* mux = nullptr;
    const bt_component_sink* sink = nullptr;
    if (bt_graph_add_filter_component(graph, mux_cls, "mux", nullptr, log, &mux) != BT_GRAPH_ADD_COMPONENT_STATUS_OK ||
        bt_graph_add_simple_sink_component(graph, "sigmatrace", nullptr, sink_consume, nullptr, &state, &sink) !=
            BT_GRAPH_ADD_COMPONENT_STATUS_OK)
        return fmt::format("Cannot build the trace graph: reason={}", take_error());
    // The muxer starts with input port in0 and adds the next one each time one gets connected.
    uint64_t mux_port = 0;
    for (const bt_component_source* src : sources) {
        const uint64_t nports = bt_component_source_get_output_port_count(src);
        for (uint64_t i = 0; i < nports; ++i) {
            const bt_port_output* o = bt_component_source_borrow_output_port_by_index_const(src, i);
            const std::string in_name = fmt::format("in{}", mux_port++);
            const bt_port_input* in = bt_component_filter_borrow_input_port_by_name_const(mux, in_name.c_str());
            if (!in || bt_graph_connect_ports(graph, o, in, nullptr) != BT_GRAPH_CONNECT_PORTS_STATUS_OK)
                return fmt::format("Cannot connect a trace stream to the muxer: reason={}", take_error());
        }
    }
    if (bt_graph_connect_ports(graph, bt_component_filter_borrow_output_port_by_name_const(mux, "out"),
                               bt_component_sink_borrow_input_port_by_index_const(sink, 0),
                               nullptr) != BT_GRAPH_CONNECT_PORTS_STATUS_OK)
        return fmt::format("Cannot connect the muxer to the analysis: reason={}", take_error());
    return {};
}

// One logical trace: the directories Babeltrace opens, and the user's directories they stand for.
struct Group {
    std::vector<fs::path> dirs, original;
    // Added to its clock classes by src.ctf.fs (clock-class-offset-ns): the constant part of its host's clock
    // correction, so that the muxer orders events by aligned times (BtMessageConsumer applies the rest).
    int64_t clock_offset_ns = 0;
};

struct GraphRead {
    std::size_t sources = 0;
    bool fatal = false;         // the graph could not be built
    bool error = false;         // the run stopped on an error
    std::string error_text;
};

void set_phase(ReadProgress* p, ReadProgress::Phase ph, int32_t trace = -1) {
    if (!p) return;
    p->trace.store(trace, std::memory_order_relaxed);
    p->phase.store(ph, std::memory_order_relaxed);
    p->beat();
}

// Builds src.ctf.fs per group -> muxer -> the sink of `state`, and runs it.
// `log`: Babeltrace's own logging on stderr (the guard's probes are quiet: the read they repeat already spoke).
GraphRead run_graph(const Plugins& pl, std::vector<Group>& groups, const std::vector<int32_t>& group_trace,
                    SinkState& state, std::vector<std::string>& problems,
                    bt_logging_level log = BT_LOGGING_LEVEL_WARNING) {
    GraphRead out;
    GraphRef graph{bt_graph_create(0)};
    std::vector<const bt_component_source*> sources;
    ScratchDirs scratch;
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
        const auto& original = groups[gi].original;
        set_phase(state.progress, ReadProgress::kOpening, group_trace[gi]);
        // A stream file that cannot be indexed (truncated, overwritten) makes src.ctf.fs refuse the whole
        // trace: leave that file out and read the rest, saying so.
        std::vector<fs::path> members = groups[gi].dirs;
        const std::vector<fs::path> opened = members;
        std::set<fs::path> skipped;
        std::string why;
        const auto try_open = [&] {
            const bool ok = can_open(pl.fs_cls, members, why);
            // babeltrace2 names the files of the scratch copies being tried: say the user's directories instead.
            for (std::size_t i = 0; i < members.size(); ++i) replace_all(why, members[i].string(), original[i].string());
            for (std::size_t i = 0; i < opened.size(); ++i) replace_all(why, opened[i].string(), original[i].string());
            return ok;
        };
        bool ok = try_open();
        while (!ok && skipped.size() < 64) {
            const auto named = failing_stream_file(why);
            if (!named) break;
            const fs::path bad = original_stream_file(*named);
            if (skipped.contains(bad)) break;
            problems.push_back(fmt::format(
                "Cannot read stream file: path={}, reason={}; the rest of its trace is read without it", bad.string(), why));
            skipped.insert(bad);
            for (std::size_t i = 0; i < members.size(); ++i) {
                std::set<fs::path> skip_here;
                for (const auto& b : skipped) skip_here.insert(fs::absolute(opened[i] / b.filename()));
                members[i] = scratch.without(opened[i], skip_here);
            }
            ok = try_open();
        }
        if (!ok) {
            problems.push_back(fmt::format("Cannot open trace: path={}, reason={}", original.front().string(), why));
            continue;
        }
        ValueRef params{inputs_param(members)};
        if (groups[gi].clock_offset_ns != 0)
            bt_value_map_insert_signed_integer_entry(params.v, "clock-class-offset-ns", groups[gi].clock_offset_ns);
        const bt_component_source* comp = nullptr;
        const std::string name = fmt::format("src{}", sources.size());
        if (bt_graph_add_source_component(graph.g, pl.fs_cls, name.c_str(), params.v, log, &comp) !=
            BT_GRAPH_ADD_COMPONENT_STATUS_OK) {
            problems.push_back(fmt::format("Cannot open trace: path={}, reason={}", original.front().string(), take_error()));
            out.fatal = true;  // the graph is now faulty
            return out;
        }
        sources.push_back(comp);
    }
    out.sources = sources.size();
    if (sources.empty()) {
        out.fatal = true;
        return out;
    }

    if (std::string e = mux_into_sink(graph.g, pl.mux_cls, sources, state, log); !e.empty()) {
        problems.push_back(std::move(e));
        out.fatal = true;
        return out;
    }

    set_phase(state.progress, ReadProgress::kReading);
    for (;;) {
        const bt_graph_run_status st = bt_graph_run(graph.g);
        if (st == BT_GRAPH_RUN_STATUS_OK) break;
        if (st == BT_GRAPH_RUN_STATUS_AGAIN) continue;
        out.error = true;
        out.error_text = take_error();
        for (const Group& g : groups)
            for (std::size_t i = 0; i < g.dirs.size(); ++i) replace_all(out.error_text, g.dirs[i].string(), g.original[i].string());
        break;
    }
    return out;
}

}  // namespace

PlannedRead plan_read(const fs::path& root) {
    PlannedRead pr;
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
        pr.problems.push_back(fmt::format("Cannot open trace: path={}, reason={}", root.string(),
                                          fs::exists(root, ec) ? "not a directory" : "no such directory"));
        pr.fatal = true;
        return pr;
    }
    const auto dirs = find_trace_dirs(root);
    for (const auto& d : dirs) pr.trace_dirs.push_back(d.string());
    if (dirs.empty()) {
        pr.problems.push_back(fmt::format(
            "No trace found: path={}, reason=no directory under it contains a CTF 'metadata' file; record one with "
            "`sigmatrace record -o DIR -- CMD`",
            root.string()));
        pr.fatal = true;
        return pr;
    }
    pr.plan = precheck_traces(dirs);
    return pr;
}

std::vector<std::string> planned_hostnames(const PlannedRead& planned) {
    std::set<std::string> hosts;
    for (const TracePlan& t : planned.plan.traces)
        if (t.readable) hosts.insert(t.hostname);
    return {hosts.begin(), hosts.end()};
}

ReadSummary read_traces(const fs::path& root, Analysis& analysis, EventSink* tap) {
    PlannedRead planned = plan_read(root);
    return read_planned(root, planned, analysis, tap, nullptr);
}

ReadSummary read_planned(const fs::path& root, PlannedRead& planned, Analysis& analysis, EventSink* tap,
                         ReadProgress* progress, bool direct_only) {
    ReadSummary sum;
    sum.trace_dirs = planned.trace_dirs;
    sum.problems = planned.problems;
    if (planned.fatal) {
        sum.fatal = true;
        return sum;
    }
    ReadPlan& plan = planned.plan;
    // Guarded, the guard materializes the plan before each run (the child leaves no scratch directory behind).
    if (!progress && !plan.materialize()) {
        sum.problems.insert(sum.problems.end(), plan.problems.begin(), plan.problems.end());
        sum.fatal = true;
        return sum;
    }
    sum.problems.insert(sum.problems.end(), plan.problems.begin(), plan.problems.end());
    sum.notes = plan.notes;

    const ReaderChoice choice = direct_only ? ReaderChoice::Direct : reader_choice_from_env();
    if (choice != ReaderChoice::Babeltrace) {
        std::string why = plan_is_pristine(plan) ? std::string() : "the precheck left bytes of it out (damaged trace)";
        if (why.empty()) {
            set_phase(progress, ReadProgress::kReading);
            if (std::optional<ReadSummary> direct = read_direct(plan, root.string(), analysis, tap, progress, why)) {
                set_phase(progress, ReadProgress::kAnalyzing);
                sum.problems.insert(sum.problems.end(), direct->problems.begin(), direct->problems.end());
                sum.traces_opened = direct->traces_opened;
                sum.events = direct->events;
                sum.foreign_events = direct->foreign_events;
                return sum;
            }
        }
        if (choice == ReaderChoice::Direct) {
            sum.problems.push_back(fmt::format(
                "The direct CTF reader refused the trace: path={}, reason={}; unset SIGMATRACE_ANALYZE_READER to read it "
                "through Babeltrace2",
                root.string(), why));
            sum.fatal = true;
            return sum;
        }
    }

    const Plugins& pl = plugins();
    if (std::string why = pl.error; !why.empty()) {
        sum.problems.push_back(std::move(why));
        sum.fatal = true;
        return sum;
    }

    // Group directories into logical traces (same UUID: e.g. rotation chunks) like the babeltrace2 CLI.
    std::map<std::string, Group> by_key;
    std::map<std::string, int32_t> key_trace;
    for (std::size_t i = 0; i < plan.traces.size(); ++i) {
        const TracePlan& t = plan.traces[i];
        if (!t.readable) continue;
        set_phase(progress, ReadProgress::kOpening, static_cast<int32_t>(i));
        std::string why;
        auto group = support_group(pl.fs_cls, t.materialized, why);
        if (!group) {
            replace_all(why, t.materialized.string(), t.dir.string());
            sum.problems.push_back(fmt::format("Cannot open trace: path={}, reason={}", t.dir.string(), why));
            continue;
        }
        const std::string key = group->empty() ? t.dir.string() : *group;
        by_key[key].dirs.push_back(t.materialized);
        by_key[key].original.push_back(t.dir);
        key_trace.emplace(key, static_cast<int32_t>(i));
    }
    std::vector<Group> groups;
    std::vector<int32_t> group_trace;
    std::map<std::string, int64_t> source_offsets;   // by hostname
    for (auto& [key, g] : by_key) {
        const std::string& host = plan.traces[static_cast<std::size_t>(key_trace[key])].hostname;
        if (const ClockCorrection* c = analysis.clock_correction(); c && !host.empty())
            if (const ClockShift* shift = c->find(host)) g.clock_offset_ns = -std::llround(shift->offset_ns);
        if (g.clock_offset_ns != 0) source_offsets[host] = g.clock_offset_ns;
        groups.push_back(std::move(g));
        group_trace.push_back(key_trace[key]);
    }

    BtMessageConsumer consumer(analysis, tap);
    consumer.set_source_offsets(std::move(source_offsets));
    SinkState state{&consumer, progress};
    const GraphRead g = run_graph(pl, groups, group_trace, state, sum.problems);
    sum.traces_opened = g.sources;
    if (g.fatal) {
        if (g.sources == 0)
            sum.problems.push_back(fmt::format("No readable trace: path={}; nothing to analyze", root.string()));
        sum.fatal = true;
        return sum;
    }
    if (g.error) {
        if (progress && progress->retry_errors.load(std::memory_order_relaxed)) {
            // The guard reads again without the packet at fault: nothing of this run is reported.
            fmt::format_to_n(progress->error, sizeof progress->error - 1, "{}", g.error_text);
            progress->read_error.store(1, std::memory_order_relaxed);
            sum.retry = true;
            return sum;
        }
        // A corrupt or truncated stream: what was read so far stays valid (events come in time order, so the
        // analysis covers the traces up to this point).
        sum.problems.push_back(fmt::format(
            "Trace read stopped early: path={}, last event at {} ns, reason={}; results cover the trace up to there",
            root.string(), consumer.last_ts(), g.error_text));
    }
    // Babeltrace 2.0.4 can end a stream whose event data is damaged without an error (it logs one): every packet
    // the precheck handed over must have been read to its end.
    uint64_t expected = 0;
    bool all_known = true;
    for (const TracePlan& t : plan.traces)
        for (const StreamPlan& st : t.streams)
            if (t.readable && !st.excluded) {
                all_known = all_known && st.layout_known;
                expected += st.packets.size();
            }
    if (!g.error && all_known && state.packets_ended < expected)
        sum.problems.push_back(fmt::format(
            "Trace read stopped early: path={}, reason=Babeltrace's CTF reader ended after {} of the {} packets handed to "
            "it without an error (damaged event data?); results cover what was read",
            root.string(), state.packets_ended, expected));
    set_phase(progress, ReadProgress::kAnalyzing);
    // Events held for reordering were read fine: they count even when the read stopped early.
    consumer.finish();
    sum.events = consumer.events_read();
    sum.foreign_events = consumer.foreign_events();
    if (sum.events == 0 && !sum.problems.empty()) {
        sum.problems.push_back(fmt::format("No event could be read: path={}; nothing to analyze", root.string()));
        sum.fatal = true;
    }
    return sum;
}

void load_babeltrace_plugins() { (void)plugins(); }

bool probe_stream(const fs::path& dir, ReadProgress& progress) {
    const Plugins& pl = plugins();
    if (!pl.error.empty()) return false;
    std::vector<Group> groups{Group{{dir}, {dir}}};
    SinkState state{nullptr, &progress};
    std::vector<std::string> problems;
    const GraphRead g = run_graph(pl, groups, {0}, state, problems, BT_LOGGING_LEVEL_NONE);
    if (g.error) fmt::format_to_n(progress.error, sizeof progress.error - 1, "{}", g.error_text);
    return !g.error && !g.fatal;
}

}  // namespace sigmatrace::analyzer

namespace sigmatrace::analyzer {
namespace {

// "net://RELAYD[:PORT]/host/HOST[/SESSION]" split: relay URL, host, session ("" when absent).
bool split_live_url(const std::string& url, std::string& relay, std::string& host, std::string& session) {
    const auto scheme = url.find("://");
    if (scheme == std::string::npos || (url.compare(0, scheme, "net") != 0 && url.compare(0, scheme, "net6") != 0))
        return false;
    const auto path = url.find("/host/", scheme + 3);
    if (path == std::string::npos || path == scheme + 3) return false;
    relay = url.substr(0, path);
    const std::string rest = url.substr(path + 6);
    const auto slash = rest.find('/');
    host = rest.substr(0, slash);
    session = slash == std::string::npos ? std::string() : rest.substr(slash + 1);
    return !host.empty() && session.find('/') == std::string::npos;
}

// The sessions the relay at `relay` has for `host` (the lttng-live `sessions` query); for every host, as live
// URLs, when `host` is empty. Empty with `why` set when the relay cannot be asked.
std::vector<std::string> relay_sessions(const bt_component_class_source* cls, const std::string& relay,
                                        const std::string& host, std::string& why) {
    std::vector<std::string> out;
    ValueRef params{bt_value_map_create()};
    bt_value_map_insert_string_entry(params.v, "url", relay.c_str());
    bt_query_executor* q =
        bt_query_executor_create(bt_component_class_source_as_component_class_const(cls), "sessions", params.v);
    if (q == nullptr) {
        why = take_error();
        return out;
    }
    const bt_value* result = nullptr;
    const auto st = bt_query_executor_query(q, &result);
    bt_query_executor_put_ref(q);
    if (st != BT_QUERY_EXECUTOR_QUERY_STATUS_OK) {
        why = take_error();
        return out;
    }
    for (uint64_t i = 0; bt_value_is_array(result) && i < bt_value_array_get_length(result); ++i) {
        const bt_value* e = bt_value_array_borrow_element_by_index_const(result, i);
        const bt_value* h = bt_value_map_borrow_entry_value_const(e, "target-hostname");
        const bt_value* n = bt_value_map_borrow_entry_value_const(e, "session-name");
        if (!h || !n || !bt_value_is_string(h) || !bt_value_is_string(n)) continue;
        if (host.empty())
            out.push_back(relay + "/host/" + bt_value_string_get(h) + "/" + bt_value_string_get(n));
        else if (host == bt_value_string_get(h))
            out.emplace_back(bt_value_string_get(n));
    }
    bt_value_put_ref(result);
    std::sort(out.begin(), out.end());
    return out;
}

void sleep_tick() {
    const timespec ts{0, kLiveTickMs * 1'000'000L};
    nanosleep(&ts, nullptr);
}

}  // namespace

ReadSummary read_live(const LiveRead& live, Analysis& analysis, std::vector<std::string>& session_urls) {
    ReadSummary sum;
    const auto fatal = [&](std::string why) {
        sum.problems.push_back(std::move(why));
        sum.fatal = true;
        return sum;
    };
    const Plugins& pl = plugins();
    if (!pl.error.empty()) return fatal(pl.error);
    if (!pl.live_cls) return fatal("The Babeltrace2 'ctf' plugin lacks source.ctf.lttng-live");
    const bt_component_class_source* live_cls = pl.live_cls;
    struct Target {
        std::string relay, host, session;
    };
    std::vector<Target> targets;
    for (const std::string& url : live.urls) {
        Target t;
        if (!split_live_url(url, t.relay, t.host, t.session)) {
            // A relay's URL alone (net://RELAYD): the sessions it has, to pick from.
            std::string why, listed;
            if (url.starts_with("net://") || url.starts_with("net6://"))
                for (const std::string& u : relay_sessions(live_cls, url, "", why)) listed += "\n  " + u;
            return fatal(fmt::format("Malformed live URL: {}; expected net://RELAYD[:PORT]/host/HOST[/SESSION]{}", url,
                                     listed.empty() ? std::string() : "; the relay has:" + listed));
        }
        targets.push_back(std::move(t));
    }

    // Each session: given, or the host's first one (waited for: the analysis may start before the job).
    for (Target& t : targets) {
        for (;;) {
            std::string why;
            const std::vector<std::string> found = relay_sessions(live_cls, t.relay, t.host, why);
            if (!why.empty())
                return fatal(fmt::format("Cannot reach lttng-relayd at {}: {}; is it running, and listening for live "
                                         "viewers beyond its own host (lttng-relayd --daemonize "
                                         "--live-port=tcp://0.0.0.0:5344: by default only on localhost)?",
                                         t.relay, why));
            if (t.session.empty() && !found.empty()) t.session = found.front();
            if (!t.session.empty() && std::find(found.begin(), found.end(), t.session) != found.end()) break;
            if (live.tick && !live.tick()) return sum;
            sleep_tick();
        }
        session_urls.push_back(t.relay + "/host/" + t.host + "/" + t.session);
    }

    // One source per session, all into the muxer (one analysis of the sessions together).
    GraphRef graph{bt_graph_create(0)};
    std::vector<const bt_component_source*> sources;
    for (std::size_t i = 0; i < session_urls.size(); ++i) {
        ValueRef params{bt_value_map_create()};
        bt_value* inputs = nullptr;
        bt_value_map_insert_empty_array_entry(params.v, "inputs", &inputs);
        bt_value_array_append_string_element(inputs, session_urls[i].c_str());
        // The session is on the relay now: once it is gone (destroyed when its recording ended), its part ends.
        bt_value_map_insert_string_entry(params.v, "session-not-found-action", "end");
        const bt_component_source* src = nullptr;
        const std::string name = fmt::format("live{}", i);
        if (bt_graph_add_source_component(graph.g, live_cls, name.c_str(), params.v, BT_LOGGING_LEVEL_WARNING, &src) !=
            BT_GRAPH_ADD_COMPONENT_STATUS_OK)
            return fatal(fmt::format("Cannot build the live graph for {}: reason={}", session_urls[i], take_error()));
        sources.push_back(src);
    }
    BtMessageConsumer consumer(analysis);
    SinkState state{&consumer, nullptr};
    if (std::string e = mux_into_sink(graph.g, pl.mux_cls, sources, state, BT_LOGGING_LEVEL_WARNING); !e.empty())
        return fatal(std::move(e));

    // One batch at a time, so that what the analysis found is reported between batches; lttng-live answers
    // AGAIN while the relay has nothing new.
    sum.traces_opened = session_urls.size();
    for (;;) {
        const bt_graph_run_once_status st = bt_graph_run_once(graph.g);
        if (st == BT_GRAPH_RUN_ONCE_STATUS_END) break;
        if (st != BT_GRAPH_RUN_ONCE_STATUS_OK && st != BT_GRAPH_RUN_ONCE_STATUS_AGAIN) {
            sum.problems.push_back(fmt::format("Live read stopped: urls={}, last event at {} ns, reason={}; results cover "
                                               "the trace up to there",
                                               fmt::join(session_urls, " "), consumer.last_ts(), take_error()));
            break;
        }
        if (live.tick && !live.tick()) break;
        if (st == BT_GRAPH_RUN_ONCE_STATUS_AGAIN) sleep_tick();
    }
    consumer.finish();
    sum.events = consumer.events_read();
    sum.foreign_events = consumer.foreign_events();
    return sum;
}

}  // namespace sigmatrace::analyzer
