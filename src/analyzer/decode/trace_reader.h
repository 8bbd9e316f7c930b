// Reads every CTF trace under a directory into an Analysis, building the Babeltrace2 graph in-process (no CLI,
// no environment): one source.ctf.fs per logical trace (directories containing `metadata`, grouped by the
// "babeltrace.support-info" query's `group`, as the babeltrace2 CLI does), filter.utils.muxer, and a simple
// sink that feeds BtMessageConsumer.
//
// Bad input never aborts the whole read: the bytes are checked first (ctf_precheck.h: damaged metadata leaves its
// trace out, damaged packets are skipped); a trace whose metadata Babeltrace cannot open is reported and left
// out; an error in the middle of the data stops the read there and keeps what was read (the report says so),
// unless the read is guarded (read_guard.h), which retries it without the packet at fault.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/ctf_precheck.h"

namespace sigmatrace::analyzer {

struct ReadSummary {
    std::vector<std::string> trace_dirs;   // every directory with a `metadata` file found
    std::size_t traces_opened = 0;         // logical traces (src.ctf.fs components) that were read
    uint64_t events = 0;                   // messages of type event read (all providers)
    uint64_t foreign_events = 0;           // events of other providers (ignored)
    std::vector<std::string> problems;     // what could not be read, where, and why
    std::vector<std::string> notes;        // damage that lost nothing (ReadPlan::notes)
    bool fatal = false;                    // nothing could be read (exit status 2)
    bool retry = false;                    // guarded: stopped on an error the guard retries without its packet
};

struct ReadProgress;  // read_guard.h

// The plan of a read: the trace directories under `root` and the precheck of their bytes. `problems` and
// `fatal` are set when there is nothing to read.
struct PlannedRead {
    ReadPlan plan;
    std::vector<std::string> trace_dirs;
    std::vector<std::string> problems;
    bool fatal = false;
};
PlannedRead plan_read(const std::filesystem::path& root);
// The hostnames of the readable traces of a plan, sorted and distinct ("" for a trace whose metadata has none).
std::vector<std::string> planned_hostnames(const PlannedRead& planned);

// The trace directories under `root` (root itself included), sorted.
std::vector<std::filesystem::path> find_trace_dirs(const std::filesystem::path& root);

// `tap`, when set, also sees every event as read (records expanded; event_dump.h).
ReadSummary read_traces(const std::filesystem::path& root, Analysis& analysis, EventSink* tap = nullptr);

// The read of a plan (the plan's problems come first in the summary). `progress`, when set, is the guard's
// shared state (read_guard.h): the read reports its phase and progress there.
// `direct_only`: the direct reader or nothing (a fatal problem when it refuses the trace), never Babeltrace2.
ReadSummary read_planned(const std::filesystem::path& root, PlannedRead& planned, Analysis& analysis, EventSink* tap,
                         ReadProgress* progress, bool direct_only = false);

// A live read (sigmatrace-analyze --live): a session's streams as lttng-relayd receives them, through
// Babeltrace2's source.ctf.lttng-live, while the session records.
struct LiveRead {
    // Each net://RELAYD[:PORT]/host/HOST/SESSION, or net://RELAYD[:PORT]/host/HOST: the first session of HOST that
    // the relay has (waited for). Several: one analysis of their sessions together (a job's hosts).
    std::vector<std::string> urls;
    // Called between batches of events, and every kLiveTickMs at most while no event comes: where the caller
    // reports what the analysis found so far. Returns false to stop reading (an interrupt).
    std::function<bool()> tick;
};
inline constexpr int kLiveTickMs = 100;
// Reads until every session ends (one is destroyed once its recording ends) or `tick` says stop.
// `session_urls` gets the full URLs read. Fatal (with a problem) when a relay cannot be reached or a URL is
// malformed.
ReadSummary read_live(const LiveRead& live, Analysis& analysis, std::vector<std::string>& session_urls);

// Reads a trace directory (the guard's: metadata and one stream file) into no analysis, counting its packets in
// `progress`: how the guard finds the packet Babeltrace fails on. False when the read stopped on an error.
bool probe_stream(const std::filesystem::path& dir, ReadProgress& progress);

// Loads the Babeltrace2 plugins the readers use, once per process (the readers do it on first use): called before
// forking, so that children share them instead of loading them again.
void load_babeltrace_plugins();

}  // namespace sigmatrace::analyzer
