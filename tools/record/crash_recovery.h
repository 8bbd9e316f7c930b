// Recovering what LTTng could not deliver.
//
// A process killed between reserving room for an event and committing it (SIGKILL, the OOM killer, a crash
// inside a tracepoint) leaves its sub-buffer of the per-uid ring forever incomplete: the consumer daemon never
// reads that sub-buffer, nor any after it on that CPU, and `lttng destroy` waits for them. The session's ring
// buffers live as files of a private tmpfs directory (`lttng create --shm-path`), so after `lttng stop`
// lttng-crash (lttng-tools) can read what is still in them: each undelivered sub-buffer's committed prefix
// (every event before the one the process was writing) and the complete sub-buffers after it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "record/subprocess.h"

namespace sigmatrace::record {

struct Recovery {
    uint64_t bytes = 0;    // bytes of packets written to `where`
    unsigned packets = 0;  // packets recovered (each a sub-buffer, or the committed prefix of one)
    std::string where;     // the recovered trace's directory, "" when nothing was left undelivered
    std::vector<int> stalled_cpus;  // the CPUs whose buffers held undelivered data: they take no more events
    std::string error;     // why recovery failed, "" when it ran
};

// Extracts what the buffers under `buffers_dir` still hold into OUTPUT_DIR/recovered (a CTF trace with the
// session's metadata, read with the rest of OUTPUT_DIR), or nothing when every sub-buffer was delivered. Run
// after `lttng stop`, before `lttng destroy`. A packet whose writer died never got its timestamp_end: it is
// set to the next packet's timestamp_begin, or to `stop_ns` (CLOCK_MONOTONIC, the trace clock, read after
// the stop) for the stream's last packet: an upper bound of every event in it.
Recovery recover_undelivered(const std::string& buffers_dir, const std::string& output_dir, uint64_t stop_ns,
                             const Environment& env);

// Gives packets with no end time (timestamp_end 0, or before timestamp_begin) one, as above. Returns how many
// packets the file holds; the walk stops at the first bytes that are not a whole packet (left for the reader to
// report).
unsigned patch_packet_ends(const std::string& stream_file, uint64_t stop_ns, std::string* error);

}  // namespace sigmatrace::record
