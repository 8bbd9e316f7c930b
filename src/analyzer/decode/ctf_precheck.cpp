#include "analyzer/decode/ctf_precheck.h"

#include <fmt/core.h>

#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <system_error>

#include "analyzer/decode/lttng_tsdl.h"
#include "sigmatrace/lttng_packet_layout.h"

namespace sigmatrace::analyzer {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kMetadataMagic = 0x75D11D57;
constexpr std::size_t kMetadataHeaderBytes = 37;   // magic, uuid[16], checksum, content/packet size, 5 bytes
constexpr uint32_t kPacketMagic = lttng_packet::kMagic;
constexpr uint32_t kIndexMagic = 0xC1F1DCC1;

using lttng_packet::kHeaderBytes;
using lttng_packet::kOffContent;
using lttng_packet::kOffInstance;
using lttng_packet::kOffPacketSize;
using lttng_packet::kOffSeqNum;
using lttng_packet::kOffStreamId;
using lttng_packet::kOffTsBegin;
using lttng_packet::kOffTsEnd;
using lttng_packet::kOffUuid;

uint64_t load(const uint8_t* p, int bytes, bool big_endian) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[big_endian ? i : bytes - 1 - i]) << (8 * (bytes - 1 - i));
    return v;
}

void store(uint8_t* p, int bytes, bool big_endian, uint64_t v) {
    for (int i = 0; i < bytes; ++i) p[big_endian ? bytes - 1 - i : i] = static_cast<uint8_t>(v >> (8 * i));
}

// Whitespace runs become one space, so that declarations compare as text.
std::string normalized(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    bool space = false;
    for (char c : text) {
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            space = true;
            continue;
        }
        if (space && !out.empty()) out += ' ';
        space = false;
        out += c;
    }
    return out;
}

// The declarations lttng-ust 2.x writes for its packet header and context (normalized). A trace whose
// metadata has them all has byte-aligned 84-byte packet headers at the offsets above.
constexpr const char* kLttngLayout[] = {
    "typealias integer { size = 8; align = 8; signed = false; } := uint8_t;",
    "typealias integer { size = 32; align = 8; signed = false; } := uint32_t;",
    "typealias integer { size = 64; align = 8; signed = false; } := uint64_t;",
    "typealias integer { size = 64; align = 8; signed = false; } := unsigned long;",
    "packet.header := struct { uint32_t magic; uint8_t uuid[16]; uint32_t stream_id; uint64_t stream_instance_id; };",
    "typealias integer { size = 64; align = 8; signed = false; map = clock.monotonic.value; } := "
    "uint64_clock_monotonic_t;",
    "struct packet_context { uint64_clock_monotonic_t timestamp_begin; uint64_clock_monotonic_t timestamp_end; "
    "uint64_t content_size; uint64_t packet_size; uint64_t packet_seq_num; unsigned long events_discarded; "
    "uint32_t cpu_id; };",
};

// Text problems that make Babeltrace's TSDL parser fail, or worse; "" when none. A truncated metadata file
// whose last packet happens to end whole still ends inside a declaration, caught by the bracket count.
std::string check_tsdl(std::string_view text) {
    if (text.empty()) return "the metadata text is empty";
    int depth = 0;
    bool in_string = false, line_comment = false, block_comment = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(text[i]);
        if (c == 0) return fmt::format("a NUL byte at text offset {}", i);
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
            return fmt::format("a control byte 0x{:02x} at text offset {}", c, i);
        const char n = i + 1 < text.size() ? text[i + 1] : '\0';
        if (line_comment) {
            line_comment = c != '\n';
        } else if (block_comment) {
            if (c == '*' && n == '/') block_comment = false, ++i;
        } else if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
            else if (c == '\n') return fmt::format("a string not closed on its line at text offset {}", i);
        } else if (c == '"') {
            in_string = true;
        } else if (c == '/' && n == '/') {
            line_comment = true, ++i;
        } else if (c == '/' && n == '*') {
            block_comment = true, ++i;
        } else if (c == '{' || c == '(' || c == '[') {
            ++depth;
        } else if (c == '}' || c == ')' || c == ']') {
            if (--depth < 0) return fmt::format("an unmatched '{}' at text offset {}", static_cast<char>(c), i);
        }
    }
    if (in_string || block_comment || depth != 0)
        return fmt::format("the text ends inside a {} (truncated?)",
                           in_string ? "string" : block_comment ? "comment" : "declaration");
    return {};
}

bool read_file(const fs::path& p, std::vector<uint8_t>& out) {
    std::ifstream f(p, std::ios::binary | std::ios::ate);
    if (!f) return false;
    const std::streamoff n = f.tellg();
    if (n < 0) return false;
    out.resize(static_cast<std::size_t>(n));
    f.seekg(0);
    f.read(reinterpret_cast<char*>(out.data()), n);
    return f.gcount() == n;
}

// Why the packet at `off` cannot be handed over, "" when it can. `prev_end` is the previous good packet's
// timestamp_end; `sid`/`instance` the file's stream (set by its first good packet).
std::string packet_problem(const MetadataCheck& m, const uint8_t* d, std::size_t size, uint64_t off,
                           uint64_t prev_end, bool have_stream, uint64_t sid, uint64_t instance,
                           uint64_t file_left = 0) {
    // `file_left`: the bytes left in the file when `d` holds only the header (header_walk), else 0.
    const uint64_t left = file_left ? file_left : size - off;
    if (size - off < kHeaderBytes)
        return fmt::format("{} bytes left, less than a packet header ({} bytes): truncated", left, kHeaderBytes);
    if (left < kHeaderBytes)
        return fmt::format("{} bytes left, less than a packet header ({} bytes): truncated", left, kHeaderBytes);
    const uint8_t* p = d + off;
    const bool be = m.big_endian;
    const uint64_t magic = load(p, 4, be);
    if (magic != kPacketMagic) return fmt::format("packet magic 0x{:08x}, expected 0x{:08x}", magic, kPacketMagic);
    if (m.has_uuid && std::memcmp(p + kOffUuid, m.uuid, 16) != 0) return "packet UUID differs from the metadata's";
    const uint64_t stream_id = load(p + kOffStreamId, 4, be);
    if (std::find(m.stream_ids.begin(), m.stream_ids.end(), stream_id) == m.stream_ids.end())
        return fmt::format("stream_id {} is not declared by the metadata", stream_id);
    const uint64_t inst = load(p + kOffInstance, 8, be);
    if (have_stream && (stream_id != sid || inst != instance))
        return fmt::format("stream {}/{} in a file of stream {}/{}", stream_id, inst, sid, instance);
    const uint64_t psize = load(p + kOffPacketSize, 8, be), csize = load(p + kOffContent, 8, be);
    if (psize % 8 != 0 || psize / 8 < kHeaderBytes || psize / 8 > left)
        return fmt::format("packet_size {} bits with {} bytes left in the file", psize, left);
    if (csize > psize || csize < kHeaderBytes * 8)
        return fmt::format("content_size {} bits for a packet of {} bits", csize, psize);
    const uint64_t tb = load(p + kOffTsBegin, 8, be), te = load(p + kOffTsEnd, 8, be);
    if (tb > te) return fmt::format("timestamp_begin {} after timestamp_end {}", tb, te);
    if (have_stream && tb < prev_end)
        return fmt::format("timestamp_begin {} before the previous packet's end {}", tb, prev_end);
    return {};
}

// The range of a packet whose header `h` (at byte `off` of its file) passed packet_problem(); the walk's
// stream identity (taken from its first packet) and time order move past it.
PacketRange accept_packet(const MetadataCheck& m, const uint8_t* h, uint64_t off, bool& have_stream, uint64_t& sid,
                          uint64_t& inst, uint64_t& prev_end) {
    PacketRange r;
    r.begin = off;
    r.end = off + load(h + kOffPacketSize, 8, m.big_endian) / 8;
    r.seq_num = load(h + kOffSeqNum, 8, m.big_endian);
    r.content_bits = load(h + kOffContent, 8, m.big_endian);
    r.ts_begin = load(h + kOffTsBegin, 8, m.big_endian);
    r.ts_end = load(h + kOffTsEnd, 8, m.big_endian);
    if (!have_stream) {
        sid = load(h + kOffStreamId, 4, m.big_endian);
        inst = load(h + kOffInstance, 8, m.big_endian);
        have_stream = true;
    }
    prev_end = r.ts_end;
    return r;
}

// The packets of a stream file read header by header; nullopt as soon as one fails a check (check_stream on
// the whole file then says where and why).
std::optional<std::vector<PacketRange>> header_walk(const MetadataCheck& m, const fs::path& file, uint64_t size) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return std::nullopt;
    std::vector<PacketRange> out;
    uint8_t h[kHeaderBytes];
    bool have_stream = false;
    uint64_t sid = 0, inst = 0, prev_end = 0;
    for (uint64_t off = 0; off < size;) {
        const std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(kHeaderBytes, size - off));
        in.seekg(static_cast<std::streamoff>(off));
        in.read(reinterpret_cast<char*>(h), static_cast<std::streamsize>(n));
        if (static_cast<std::size_t>(in.gcount()) != n) return std::nullopt;
        // packet_problem() bounds the packet by the bytes it is given: here, by what is left of the file.
        if (n < kHeaderBytes) return std::nullopt;
        const uint64_t psize = load(h + kOffPacketSize, 8, m.big_endian);
        if (psize / 8 > size - off) return std::nullopt;
        if (!packet_problem(m, h, kHeaderBytes, 0, prev_end, have_stream, sid, inst, size - off).empty())
            return std::nullopt;
        out.push_back(accept_packet(m, h, off, have_stream, sid, inst, prev_end));
        off = out.back().end;
    }
    return out;
}

}  // namespace

MetadataCheck check_metadata(const uint8_t* data, std::size_t size) {
    MetadataCheck m;
    if (size >= 4 && (load(data, 4, false) == kMetadataMagic || load(data, 4, true) == kMetadataMagic)) {
        const bool be = load(data, 4, true) == kMetadataMagic;
        uint8_t first_uuid[16] = {};
        for (std::size_t off = 0; off < size;) {
            const std::size_t left = size - off;
            if (left < kMetadataHeaderBytes) {
                m.problem = fmt::format("metadata ends inside a packet header at byte {} ({} bytes): truncated", off, left);
                return m;
            }
            const uint8_t* p = data + off;
            if (load(p, 4, be) != kMetadataMagic) {
                m.problem = fmt::format("metadata packet at byte {}: magic 0x{:08x}, expected 0x{:08x}", off,
                                        load(p, 4, be), kMetadataMagic);
                return m;
            }
            if (off == 0) std::memcpy(first_uuid, p + 4, 16);
            else if (std::memcmp(first_uuid, p + 4, 16) != 0) {
                m.problem = fmt::format("metadata packet at byte {}: UUID differs from the first packet's", off);
                return m;
            }
            const uint64_t csize = load(p + 24, 4, be), psize = load(p + 28, 4, be);
            if (psize % 8 != 0 || csize % 8 != 0 || csize < kMetadataHeaderBytes * 8 || csize > psize) {
                m.problem = fmt::format("metadata packet at byte {}: content_size {} / packet_size {} bits", off, csize, psize);
                return m;
            }
            if (psize / 8 > left) {
                m.problem = fmt::format("metadata packet at byte {} is {} bytes, the file has {} left: truncated", off,
                                        psize / 8, left);
                return m;
            }
            if (p[32] != 0 || p[33] != 0 || p[34] != 0 || p[35] != 1 || p[36] != 8) {
                m.problem = fmt::format(
                    "metadata packet at byte {}: compression/encryption/checksum {}/{}/{}, version {}.{} (expected "
                    "0/0/0, 1.8)",
                    off, p[32], p[33], p[34], p[35], p[36]);
                return m;
            }
            m.text.append(reinterpret_cast<const char*>(p + kMetadataHeaderBytes), csize / 8 - kMetadataHeaderBytes);
            off += psize / 8;
        }
        std::memcpy(m.uuid, first_uuid, 16);
        m.has_uuid = true;
    } else {
        m.text.assign(reinterpret_cast<const char*>(data), size);
        if (!m.text.starts_with("/* CTF")) {
            m.problem = "metadata is neither packetized nor TSDL text starting with \"/* CTF\"";
            return m;
        }
    }
    if (const std::string p = check_tsdl(m.text); !p.empty()) {
        m.problem = "metadata text: " + p;
        return m;
    }
    const std::string norm = normalized(m.text);
    uint8_t text_uuid[16];
    const auto uuid_at = norm.find("uuid = \"");
    if (uuid_at != std::string::npos && parse_uuid(std::string_view(norm).substr(uuid_at + 8, 36), text_uuid)) {
        if (m.has_uuid && std::memcmp(text_uuid, m.uuid, 16) != 0) {
            m.problem = "metadata text's trace UUID differs from its packets'";
            return m;
        }
        std::memcpy(m.uuid, text_uuid, 16);
        m.has_uuid = true;
    }
    // env { ... hostname = "NAME"; ... }: the analyzer counts hosts before reading (clock alignment).
    if (const auto env = norm.find("env { "); env != std::string::npos) {
        const auto at = norm.find(" hostname = \"", env);
        const auto close = norm.find('}', env);
        if (at != std::string::npos && at < close) {
            const auto begin = at + 13;
            if (const auto end = norm.find('"', begin); end != std::string::npos) m.hostname = norm.substr(begin, end - begin);
        }
    }
    m.big_endian = norm.find("byte_order = be;") != std::string::npos;
    m.lttng_layout = norm.find("byte_order = le;") != std::string::npos || m.big_endian;
    for (const char* decl : kLttngLayout) m.lttng_layout = m.lttng_layout && norm.find(decl) != std::string::npos;
    // Every stream must use that context, and declare its id first (as lttng-ust writes it).
    for (std::size_t at = norm.find("stream { "); at != std::string::npos; at = norm.find("stream { ", at + 1)) {
        if (at > 0 && norm[at - 1] != ' ' && norm[at - 1] != ';' && norm[at - 1] != '}') continue;
        const char* p = norm.c_str() + at + 9;
        char* end = nullptr;
        if (std::strncmp(p, "id = ", 5) != 0) {
            m.lttng_layout = false;
            continue;
        }
        const unsigned long long id = std::strtoull(p + 5, &end, 10);
        if (end == p + 5 || *end != ';') {
            m.lttng_layout = false;
            continue;
        }
        m.stream_ids.push_back(id);
    }
    std::size_t contexts = 0;
    for (std::size_t at = norm.find("packet.context :="); at != std::string::npos; at = norm.find("packet.context :=", at + 1)) {
        ++contexts;
        if (norm.compare(at, 40, "packet.context := struct packet_context;") != 0) m.lttng_layout = false;
    }
    if (m.stream_ids.empty() || contexts != m.stream_ids.size()) m.lttng_layout = false;
    m.ok = true;
    return m;
}

StreamCheck check_stream(const MetadataCheck& m, const uint8_t* d, std::size_t size) {
    StreamCheck out;
    bool have_stream = false;
    uint64_t sid = 0, inst = 0, prev_end = 0;
    uint64_t off = 0;
    while (off < size) {
        std::string why = packet_problem(m, d, size, off, prev_end, have_stream, sid, inst);
        if (why.empty()) {
            out.packets.push_back(accept_packet(m, d + off, off, have_stream, sid, inst, prev_end));
            off = out.packets.back().end;
            continue;
        }
        // Resynchronize on the next offset where a packet passes every check.
        uint64_t next = off + 1;
        for (; next < size; ++next) {
            if (size - next < kHeaderBytes) {
                next = size;
                break;
            }
            if (load(d + next, 4, m.big_endian) == kPacketMagic &&
                packet_problem(m, d, size, next, prev_end, have_stream, sid, inst).empty())
                break;
        }
        out.bad.push_back({off, next, std::move(why)});
        off = next;
    }
    return out;
}

bool write_packets(const fs::path& from, const std::vector<PacketRange>& packets, const fs::path& to) {
    std::vector<uint8_t> bytes;
    if (!read_file(from, bytes)) return false;
    std::ofstream out(to, std::ios::binary);
    const bool be = bytes.size() >= 4 && load(bytes.data(), 4, true) == kPacketMagic;
    // Renumbered, so that a skipped packet does not read as one lttng discarded (its loss is reported with its
    // bytes); a gap that was in the file stays.
    uint64_t seq = 0;
    for (std::size_t i = 0; i < packets.size(); ++i) {
        const PacketRange& r = packets[i];
        if (r.end > bytes.size() || r.end - r.begin < kHeaderBytes) return false;
        std::vector<uint8_t> pkt(bytes.begin() + static_cast<std::ptrdiff_t>(r.begin),
                                 bytes.begin() + static_cast<std::ptrdiff_t>(r.end));
        const bool adjacent = i > 0 && packets[i - 1].end == r.begin;
        seq = i == 0 ? r.seq_num : adjacent ? seq + (r.seq_num - packets[i - 1].seq_num) : seq + 1;
        store(pkt.data() + kOffSeqNum, 8, be, seq);
        out.write(reinterpret_cast<const char*>(pkt.data()), static_cast<std::streamsize>(pkt.size()));
    }
    return static_cast<bool>(out);
}

bool TracePlan::needs_copy() const {
    if (drop_index) return true;
    return std::any_of(streams.begin(), streams.end(), [](const StreamPlan& s) { return s.skipped_any || s.excluded; });
}

ReadPlan::~ReadPlan() {
    std::error_code ec;
    for (const auto& d : scratch) fs::remove_all(d, ec);
}

void ReadPlan::skip_packet(TracePlan& trace, StreamPlan& stream, std::size_t index, const std::string& reason) {
    trace.drop_index = true;
    if (!stream.layout_known || index >= stream.packets.size()) {
        stream.excluded = true;
        problems.push_back(fmt::format("Skipped stream file: path={}, reason={}", stream.file.string(), reason));
        return;
    }
    const PacketRange r = stream.packets[index];
    stream.packets.erase(stream.packets.begin() + static_cast<std::ptrdiff_t>(index));
    stream.skipped_any = true;
    stream.excluded = stream.packets.empty();
    problems.push_back(fmt::format("Skipped damaged bytes: path={}, bytes={}-{} (packet {} of {}), reason={}",
                                   stream.file.string(), r.begin, r.end, index, stream.packets.size() + 1, reason));
}

void ReadPlan::skip_trace(TracePlan& trace, const std::string& reason) {
    trace.readable = false;
    problems.push_back(fmt::format("Cannot open trace: path={}, reason={}", trace.dir.string(), reason));
}

bool ReadPlan::materialize() {
    for (TracePlan& t : traces) {
        if (!t.readable) continue;
        if (!t.needs_copy()) {
            t.materialized = t.dir;
            continue;
        }
        std::string templ = (fs::temp_directory_path() / "sigmatrace-analyze.XXXXXX").string();
        if (mkdtemp(templ.data()) == nullptr) {
            problems.push_back(fmt::format("Cannot create a scratch directory for a damaged trace: path={}, reason={}",
                                           templ, std::strerror(errno)));
            return false;
        }
        const fs::path dir(templ);
        scratch.push_back(dir);
        std::error_code ec;
        fs::create_symlink(fs::absolute(t.dir / "metadata"), dir / "metadata", ec);
        for (const StreamPlan& s : t.streams) {
            if (s.excluded) continue;
            const fs::path to = dir / s.file.filename();
            if (!s.skipped_any) {
                fs::create_symlink(fs::absolute(s.file), to, ec);
                if (ec) break;
                continue;
            }
            if (!write_packets(s.file, s.packets, to)) {
                ec = std::make_error_code(std::errc::io_error);
                break;
            }
        }
        if (ec) {
            problems.push_back(fmt::format("Cannot write a scratch copy of a damaged trace: path={}, reason={}",
                                           dir.string(), ec.message()));
            return false;
        }
        t.materialized = dir;
    }
    return true;
}

ReadPlan precheck_traces(const std::vector<fs::path>& dirs) {
    ReadPlan plan;
    for (const fs::path& dir : dirs) {
        TracePlan t;
        t.dir = dir;
        std::vector<uint8_t> bytes;
        if (!read_file(dir / "metadata", bytes)) {
            plan.skip_trace(t, "cannot read its metadata file");
            plan.traces.push_back(std::move(t));
            continue;
        }
        const MetadataCheck meta = check_metadata(bytes.data(), bytes.size());
        if (!meta.ok) {
            plan.skip_trace(t, meta.problem + "; the trace is not handed to Babeltrace");
            plan.traces.push_back(std::move(t));
            continue;
        }
        t.hostname = meta.hostname;
        std::error_code ec;
        std::vector<fs::path> files;
        for (const auto& e : fs::directory_iterator(dir, ec))
            if (e.is_regular_file(ec) && e.path().filename() != "metadata" && !e.path().filename().string().starts_with("."))
                files.push_back(e.path());
        std::sort(files.begin(), files.end());
        for (const fs::path& f : files) {
            StreamPlan s;
            s.file = f;
            s.size = fs::file_size(f, ec);
            if (ec) {
                s.excluded = true;
                plan.problems.push_back(fmt::format("Cannot read stream file: path={}, reason={}", f.string(), ec.message()));
                t.streams.push_back(std::move(s));
                continue;
            }
            // A good stream is checked from its packet headers alone (a few reads for a file of big packets);
            // the whole file is read only when one fails, to find where the damage ends.
            if (meta.lttng_layout && s.size > 0) {
                if (auto packets = header_walk(meta, f, s.size)) {
                    s.layout_known = true;
                    s.packets = std::move(*packets);
                    t.streams.push_back(std::move(s));
                    continue;
                }
            }
            if (!read_file(f, bytes)) {
                s.excluded = true;
                plan.problems.push_back(fmt::format("Cannot read stream file: path={}, reason=read error", f.string()));
                t.streams.push_back(std::move(s));
                continue;
            }
            if (bytes.empty()) {
                s.excluded = true;
                plan.problems.push_back(fmt::format(
                    "Stream file is empty: path={}, reason=no packet (truncated?); the rest of its trace is read without it",
                    f.string()));
                t.streams.push_back(std::move(s));
                continue;
            }
            if (!meta.lttng_layout) {
                t.streams.push_back(std::move(s));
                continue;
            }
            s.layout_known = true;
            StreamCheck c = check_stream(meta, bytes.data(), bytes.size());
            s.packets = std::move(c.packets);
            for (const auto& b : c.bad)
                plan.problems.push_back(fmt::format("Skipped damaged bytes: path={}, bytes={}-{}, reason={}", f.string(),
                                                    b.begin, b.end, b.reason));
            s.skipped_any = !c.bad.empty();
            s.excluded = s.packets.empty();
            if (s.excluded && !c.bad.empty())
                plan.problems.push_back(fmt::format(
                    "Stream file has no readable packet: path={}; the rest of its trace is read without it", f.string()));
            t.streams.push_back(std::move(s));
        }
        // Index files: Babeltrace trusts their offsets, so each must describe its stream's packets exactly.
        const fs::path idx_dir = dir / "index";
        if (fs::is_directory(idx_dir, ec)) {
            for (const auto& e : fs::directory_iterator(idx_dir, ec)) {
                const std::string name = e.path().filename().string();
                if (!name.ends_with(".idx")) continue;
                const std::string stream_name = name.substr(0, name.size() - 4);
                auto s = std::find_if(t.streams.begin(), t.streams.end(),
                                      [&](const StreamPlan& sp) { return sp.file.filename() == stream_name; });
                if (s == t.streams.end()) {
                    plan.problems.push_back(fmt::format(
                        "Stream file missing: path={}, reason=its index {} exists; the rest of its trace is read without it",
                        (dir / stream_name).string(), e.path().string()));
                    continue;
                }
                if (!s->layout_known || s->skipped_any || s->excluded) continue;
                std::string why;
                if (!read_file(e.path(), bytes) || bytes.size() < 16) {
                    why = "shorter than its header";
                } else if (load(bytes.data(), 4, true) != kIndexMagic) {
                    why = "bad magic";
                } else {
                    const uint64_t len = load(bytes.data() + 12, 4, true);
                    if (len < 56 || (bytes.size() - 16) % len != 0 || (bytes.size() - 16) / len != s->packets.size()) {
                        why = fmt::format("{} bytes of entries of {} bytes for {} packets", bytes.size() - 16, len,
                                          s->packets.size());
                    } else {
                        for (std::size_t i = 0; i < s->packets.size() && why.empty(); ++i) {
                            const uint8_t* p = bytes.data() + 16 + i * len;
                            const PacketRange& r = s->packets[i];
                            if (load(p, 8, true) != r.begin || load(p + 8, 8, true) != (r.end - r.begin) * 8 ||
                                load(p + 16, 8, true) != r.content_bits || load(p + 24, 8, true) != r.ts_begin ||
                                load(p + 32, 8, true) != r.ts_end)
                                why = fmt::format("entry {} disagrees with the packet at byte {}", i, r.begin);
                        }
                    }
                }
                // An index that names packets past the end of its stream says the stream lost them (truncated):
                // that is data lost, not just an index not used.
                uint64_t indexed_end = 0;
                std::size_t entries = 0;
                if (!why.empty() && bytes.size() >= 16 && load(bytes.data(), 4, true) == kIndexMagic) {
                    const uint64_t len = load(bytes.data() + 12, 4, true);
                    for (std::size_t off = 16; len >= 16 && off + len <= bytes.size(); off += len, ++entries)
                        indexed_end = std::max(indexed_end, load(bytes.data() + off, 8, true) + load(bytes.data() + off + 8, 8, true) / 8);
                }
                if (!why.empty() && indexed_end > s->size && entries > s->packets.size()) {
                    t.drop_index = true;
                    plan.problems.push_back(fmt::format(
                        "Stream file truncated: path={}, reason=its index {} names {} packets up to byte {}, the file has "
                        "{} bytes ({} packets); the packets it holds are read",
                        s->file.string(), e.path().string(), entries, indexed_end, s->size, s->packets.size()));
                } else if (!why.empty()) {
                    t.drop_index = true;
                    plan.notes.push_back(fmt::format(
                        "Index file damaged: path={}, reason={}; it is not used (the stream is indexed from its packets, "
                        "no event is lost)",
                        e.path().string(), why));
                }
            }
        }
        // A stream left out or trimmed changes what index/ describes: the scratch copy has none.
        if (t.needs_copy()) t.drop_index = true;
        if (std::all_of(t.streams.begin(), t.streams.end(), [](const StreamPlan& s) { return s.excluded; }) &&
            !t.streams.empty() && t.needs_copy())
            plan.skip_trace(t, "none of its stream files has a readable packet");
        plan.traces.push_back(std::move(t));
    }
    return plan;
}

}  // namespace sigmatrace::analyzer
