#include "record/crash_recovery.h"

#include <fmt/core.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include "sigmatrace/lttng_packet_layout.h"

namespace sigmatrace::record {

namespace fs = std::filesystem;
namespace pkt = lttng_packet;

namespace {

// The buffers were written on this host, in its byte order.
uint64_t load64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
uint32_t load32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

bool is_stream_file(const fs::directory_entry& e) {
    return e.is_regular_file() && e.path().filename() != "metadata" && e.path().parent_path().filename() != "index";
}

}  // namespace

unsigned patch_packet_ends(const std::string& stream_file, uint64_t stop_ns, std::string* error) {
    std::fstream f(stream_file, std::ios::in | std::ios::out | std::ios::binary);
    if (!f) {
        *error = "cannot open " + stream_file;
        return 0;
    }
    std::vector<uint8_t> data{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    struct Packet {
        uint64_t off, begin, end;
    };
    std::vector<Packet> found;
    for (uint64_t off = 0; data.size() - off >= pkt::kHeaderBytes;) {
        const uint8_t* p = data.data() + off;
        const uint64_t bytes = load64(p + pkt::kOffPacketSize) / 8;
        if (load32(p + pkt::kOffMagic) != pkt::kMagic || bytes < pkt::kHeaderBytes || bytes > data.size() - off) break;
        found.push_back({off, load64(p + pkt::kOffTsBegin), load64(p + pkt::kOffTsEnd)});
        off += bytes;
    }
    for (std::size_t i = 0; i < found.size(); ++i) {
        const Packet& k = found[i];
        if (k.end != 0 && k.end >= k.begin) continue;
        uint64_t end = i + 1 < found.size() ? found[i + 1].begin : stop_ns;
        if (end < k.begin) end = k.begin;
        f.seekp(static_cast<std::streamoff>(k.off + pkt::kOffTsEnd));
        f.write(reinterpret_cast<const char*>(&end), sizeof end);
    }
    if (!f) *error = "cannot write " + stream_file;
    return static_cast<unsigned>(found.size());
}

Recovery recover_undelivered(const std::string& buffers_dir, const std::string& output_dir, uint64_t stop_ns,
                             const Environment& env) {
    Recovery r;
    std::error_code ec;
    const fs::path scratch = fs::path(output_dir) / ".recovering";
    fs::remove_all(scratch, ec);
    const Captured c = run_captured({"lttng-crash", "--extract=" + scratch.string(), buffers_dir}, env);
    if (c.status != 0) {
        r.error = fmt::format("lttng-crash failed (status {}): {}", c.status, c.trimmed_output());
        fs::remove_all(scratch, ec);
        return r;
    }
    // lttng-crash writes SCRATCH/<session>-<date>/ust/uid/<uid>/<bits>/{metadata,CHANNEL_CPU}: a stream file for
    // every CPU buffer holding undelivered data, none when all was delivered.
    std::vector<fs::path> streams;
    for (auto it = fs::recursive_directory_iterator(scratch, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
        if (is_stream_file(*it)) streams.push_back(it->path());
    fs::path session_dir;
    for (const fs::path& s : streams) {
        const uint64_t size = fs::file_size(s, ec);
        if (ec || size == 0) {
            fs::remove(s, ec);
            continue;
        }
        r.packets += patch_packet_ends(s.string(), stop_ns, &r.error);
        r.bytes += size;
        // Stream files are named CHANNEL_CPU.
        const std::string name = s.filename().string();
        if (const auto us = name.rfind('_'); us != std::string::npos) {
            int cpu = -1;
            if (std::sscanf(name.c_str() + us + 1, "%d", &cpu) == 1 && cpu >= 0) r.stalled_cpus.push_back(cpu);
        }
        session_dir = *fs::relative(s, scratch).begin();
    }
    if (r.bytes == 0 || session_dir.empty()) {
        fs::remove_all(scratch, ec);
        return r;
    }
    const fs::path where = fs::path(output_dir) / "recovered";
    fs::rename(scratch / session_dir, where, ec);
    if (ec) {
        r.error = fmt::format("cannot move the recovered trace to {}: {}", where.string(), ec.message());
        return r;
    }
    fs::remove_all(scratch, ec);
    r.where = where.string();
    // The main trace's stream file of a CPU whose every packet was undelivered is empty: it goes (with its
    // empty index), its data being in recovered/, so that readers do not report a truncated stream.
    std::vector<fs::path> empty;
    for (auto it = fs::recursive_directory_iterator(output_dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        if (it->path() == where) {
            it.disable_recursion_pending();
            continue;
        }
        if (is_stream_file(*it) && it->file_size(ec) == 0 && !ec && fs::exists(where / fs::relative(it->path(), output_dir), ec))
            empty.push_back(it->path());
    }
    for (const fs::path& e : empty) {
        fs::remove(e, ec);
        fs::remove(e.parent_path() / "index" / (e.filename().string() + ".idx"), ec);
    }
    return r;
}

}  // namespace sigmatrace::record
