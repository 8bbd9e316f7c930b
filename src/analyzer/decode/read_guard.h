// The guarded read: Babeltrace 2.0.4's CTF reader can crash or spin forever on damaged bytes the precheck
// (ctf_precheck.h) cannot see (inside event payloads, or metadata that parses but describes garbage). The
// analysis therefore runs in a forked child under a watchdog; when the child crashes, stalls (no message read
// for SIGMATRACE_ANALYZE_STALL_S seconds of its CPU time) or stops on a Babeltrace error, the parent finds the
// packet at fault (each stream file read alone, its packets counted), leaves it out of the plan, and runs the
// analysis again. What was left out is reported like every other skipped byte range.
//
// A run costs one fork() and the parent's wait: the child does the whole analysis and writes every output, so
// nothing crosses a process boundary but the exit status.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "analyzer/decode/trace_reader.h"

namespace sigmatrace::analyzer {

// Shared between the guard and its child (MAP_SHARED memory): what the read is doing.
struct ReadProgress {
    enum Phase : uint32_t { kStarting = 0, kOpening, kReading, kAnalyzing };
    std::atomic<uint32_t> phase{kStarting};
    std::atomic<int32_t> trace{-1};          // plan index of the trace being opened
    std::atomic<uint64_t> beats{0};          // messages read (and opening steps): the watchdog's progress
    std::atomic<uint64_t> packets_begun{0};  // probe_stream
    std::atomic<uint64_t> packets_ended{0};
    std::atomic<uint32_t> retry_errors{0};   // set by the guard: a Babeltrace error makes the child stop for a retry
    std::atomic<uint32_t> read_error{0};     // set by the child: it stopped on a Babeltrace error
    char error[768] = {};
    void beat(uint64_t n = 1) { beats.store(beats.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
};

// SIGMATRACE_ANALYZE_STALL_S: CPU seconds without progress before a read is declared stalled (default 5);
// 0 turns the guard off (the read runs in-process, as the plugin's does).
double stall_seconds_from_env();

// Runs `body` (read with `planned` and the ReadProgress given, analyze, write outputs; returns the exit status)
// in a forked child, again without the packet at fault after a crash, stall or read error. Returns the status
// of the run that completed. The parent prints nothing: problems the guard adds to the plan are reported by the
// next run. An analysis that crashes after its read ends re-raises the signal here (it is not the trace's doing).
int run_guarded(const std::filesystem::path& root, PlannedRead& planned, double stall_s,
                const std::function<int(ReadProgress*)>& body);

}  // namespace sigmatrace::analyzer
