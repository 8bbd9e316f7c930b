// Reads every CTF trace under a directory into an Analysis, building the Babeltrace2 graph in-process (no CLI,
// no environment): one source.ctf.fs per logical trace (directories containing `metadata`, grouped by the
// "babeltrace.support-info" query's `group`, as the babeltrace2 CLI does), filter.utils.muxer, and a simple
// sink that feeds BtMessageConsumer.
//
// Bad input never aborts the whole read: a trace whose metadata cannot be opened is reported and left out;
// an error in the middle of the data stops the read there and keeps what was read (the report says so).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "analyzer/analysis.h"

namespace sigmatrace::analyzer {

struct ReadSummary {
    std::vector<std::string> trace_dirs;   // every directory with a `metadata` file found
    std::size_t traces_opened = 0;         // logical traces (src.ctf.fs components) that were read
    uint64_t events = 0;                   // messages of type event read (all providers)
    uint64_t foreign_events = 0;           // events of other providers (ignored)
    std::vector<std::string> problems;     // what could not be read, where, and why
    bool fatal = false;                    // nothing could be read (exit status 2)
};

// The trace directories under `root` (root itself included), sorted.
std::vector<std::filesystem::path> find_trace_dirs(const std::filesystem::path& root);

// `tap`, when set, also sees every event as read (records expanded; event_dump.h).
ReadSummary read_traces(const std::filesystem::path& root, Analysis& analysis, EventSink* tap = nullptr);

}  // namespace sigmatrace::analyzer
