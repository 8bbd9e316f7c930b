// `sigmatrace`: the front end. It hides session management and fabric set-up behind four verbs.
#include <fmt/core.h>

#include <cstring>
#include <string_view>

#include "sigmatrace/commands.h"

namespace {

struct Command {
    std::string_view name;
    int (*run)(sigmatrace::cli::Args);
    std::string_view summary;
};

constexpr Command kCommands[] = {
    {"record", sigmatrace::cli::cmd_record, "record CMD (and every process it starts) into a trace directory"},
    {"analyze", sigmatrace::cli::cmd_analyze, "analyze a trace directory (same as sigmatrace-analyze)"},
    {"fabric", sigmatrace::cli::cmd_fabric, "run CMD with the software RDMA fabric as its devices"},
    {"demo", sigmatrace::cli::cmd_demo, "run a multi-node workload on the fabric, record and analyze it"},
};

void usage(std::FILE* out) {
    fmt::print(out, "usage: sigmatrace COMMAND [ARGS...]\n\ncommands:\n");
    for (const auto& c : kCommands) fmt::print(out, "  {:<9}{}\n", c.name, c.summary);
    fmt::print(out, "\n'sigmatrace COMMAND --help' describes a command.\n");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    std::string_view verb = argv[1];
    if (verb == "-h" || verb == "--help" || verb == "help") {
        usage(stdout);
        return 0;
    }
    if (verb == "--version") {
        fmt::print("sigmatrace {}\n", SIGMATRACE_VERSION_STRING);
        return 0;
    }
    // Internal: `sigmatrace record`'s salvage step (cmd_record.cpp), run with libsigmatrace.so preloaded.
    if (verb == sigmatrace::cli::kSalvageVerb)
        return sigmatrace::cli::cmd_salvage_rings(sigmatrace::cli::Args(argv + 2, static_cast<std::size_t>(argc - 2)));
    for (const auto& c : kCommands)
        if (c.name == verb) return c.run(sigmatrace::cli::Args(argv + 2, static_cast<std::size_t>(argc - 2)));
    fmt::print(stderr, "sigmatrace: unknown command '{}'\n\n", verb);
    usage(stderr);
    return 2;
}
