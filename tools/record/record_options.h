// Command line of `sigmatrace record` (a contract: docs/architecture.md, "Commands"):
//   sigmatrace record [-o DIR] [--relay URL] [--channel-size SIZE] [--mode ops|counters] [--blocking] [--] CMD...
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sigmatrace::record {

// Per-CPU ring buffer of the channel, split into this many sub-buffers. Sized so that a busy verbs program on
// the 2-core development machine loses nothing (measured: docs/PERFORMANCE.md, "Trace size and channel size").
inline constexpr uint64_t kDefaultChannelSize = 64ull << 20;
inline constexpr uint32_t kSubBuffers = 8;

struct RecordOptions {
    std::string output;          // trace directory; empty: ./sigmatrace-YYYYMMDD-HHMMSS
    std::string relay_url;       // lttng-relayd URL (net://host[:ports]); the trace then lives on the relay
    uint64_t channel_size = kDefaultChannelSize;
    std::string mode;            // --mode: SIGMATRACE_MODE for the traced processes ("" keeps the caller's)
    bool blocking = false;       // never discard: tracing blocks the application when buffers are full
    bool help = false;
    std::vector<std::string> command;
};

// Parses the arguments after `record`. Returns an error message ("" on success).
std::string parse_record_args(const std::vector<std::string_view>& args, RecordOptions* out);

// "64M", "512K", "1G", "1048576" -> bytes; nullopt when malformed.
std::optional<uint64_t> parse_size(std::string_view text);

// Sub-buffer size for a channel of `total` bytes per CPU: total / kSubBuffers rounded up to a power of two,
// at least 4 KiB (what lttng accepts).
uint64_t subbuffer_size(uint64_t total);

extern const char* const kRecordUsage;

}  // namespace sigmatrace::record
