#include "record/record_options.h"

#include <charconv>

namespace sigmatrace::record {

const char* const kRecordUsage =
    "usage: sigmatrace record [-o DIR] [--relay URL] [--channel-size SIZE] [--mode ops|counters]\n"
    "                         [--blocking] [--] CMD [ARGS...]\n"
    "\n"
    "Runs CMD, and every process it starts (mpirun ranks included), with libsigmatrace.so preloaded, and\n"
    "records their RDMA operations into an LTTng trace. Uses the running lttng-sessiond if one answers, else\n"
    "starts a private one and stops it afterwards. Exits with CMD's exit status. SIGUSR1 to this process\n"
    "rotates the session: what was recorded so far becomes a readable trace chunk (for a job that hangs).\n"
    "\n"
    "  -o, --output DIR       trace directory (default: ./sigmatrace-YYYYMMDD-HHMMSS); must not exist or be empty\n"
    "  --relay URL            send the trace to lttng-relayd at URL (net://HOST[:CTRL[:DATA]]) instead of DIR\n"
    "  --channel-size SIZE    ring buffer per CPU, e.g. 64M (default 64M): larger loses fewer events\n"
    "  --mode ops|counters    per-operation events (the default) or per-QP counters (sets SIGMATRACE_MODE)\n"
    "  --blocking             never discard events: the application waits when the buffers are full\n"
    "  -h, --help             this help\n";

std::optional<uint64_t> parse_size(std::string_view text) {
    if (text.empty()) return std::nullopt;
    uint64_t scale = 1;
    const char last = text.back();
    if (last == 'K' || last == 'k') scale = 1ull << 10;
    else if (last == 'M' || last == 'm') scale = 1ull << 20;
    else if (last == 'G' || last == 'g') scale = 1ull << 30;
    if (scale != 1) text.remove_suffix(1);
    uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || ptr != text.data() + text.size() || value == 0) return std::nullopt;
    if (value > (uint64_t{1} << 40) / scale) return std::nullopt;
    return value * scale;
}

uint64_t subbuffer_size(uint64_t total) {
    uint64_t want = total / kSubBuffers;
    uint64_t size = 4096;
    while (size < want) size <<= 1;
    return size;
}

std::string parse_record_args(const std::vector<std::string_view>& args, RecordOptions* out) {
    RecordOptions o;
    size_t i = 0;
    auto value = [&](std::string_view name, std::string* dst) -> std::string {
        if (i + 1 >= args.size()) return "option " + std::string(name) + " needs a value";
        *dst = std::string(args[++i]);
        return "";
    };
    for (; i < args.size(); ++i) {
        const std::string_view a = args[i];
        std::string err;
        if (a == "--") {
            ++i;
            break;
        } else if (a == "-h" || a == "--help") {
            o.help = true;
        } else if (a == "-o" || a == "--output") {
            err = value(a, &o.output);
        } else if (a == "--relay") {
            err = value(a, &o.relay_url);
        } else if (a == "--channel-size") {
            std::string v;
            err = value(a, &v);
            if (err.empty()) {
                const auto size = parse_size(v);
                if (!size || *size < 4096 * kSubBuffers)
                    err = "--channel-size " + v + ": expected a size of at least 32K such as 64M";
                else
                    o.channel_size = *size;
            }
        } else if (a == "--mode") {
            err = value(a, &o.mode);
            if (err.empty() && o.mode != "ops" && o.mode != "counters")
                err = "--mode " + o.mode + ": expected ops or counters";
        } else if (a == "--blocking") {
            o.blocking = true;
        } else if (!a.empty() && a[0] == '-') {
            err = "unknown option " + std::string(a);
        } else {
            break;  // the command starts here
        }
        if (!err.empty()) return err;
    }
    for (; i < args.size(); ++i) o.command.emplace_back(args[i]);
    if (!o.output.empty() && !o.relay_url.empty()) return "-o and --relay are exclusive: the trace goes to one place";
    if (o.command.empty() && !o.help) return "no command to record";
    *out = std::move(o);
    return "";
}

}  // namespace sigmatrace::record
