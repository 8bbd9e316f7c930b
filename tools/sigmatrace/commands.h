// The subcommands of the `sigmatrace` front end. Each takes the arguments after its name and returns the
// process exit status.
#pragma once

#include <span>
#include <string_view>

namespace sigmatrace::cli {

using Args = std::span<char* const>;

int cmd_record(Args args);   // cmd_record.cpp: record a command into a trace directory
int cmd_analyze(Args args);  // tools/analyze: same as sigmatrace-analyze
int cmd_fabric(Args args);   // cmd_fabric.cpp: run a command on the software fabric
int cmd_demo(Args args);
// Not listed: record runs `sigmatrace salvage-rings DIR` (with libsigmatrace.so preloaded) after the recorded
// command, to emit what its processes left in their deferred-emission rings (cmd_record.cpp).
inline constexpr std::string_view kSalvageVerb = "salvage-rings";
int cmd_salvage_rings(Args args);     // cmd_demo.cpp: multi-node workload on the fabric, recorded and analyzed

}  // namespace sigmatrace::cli
