#include "analyzer/decode/lttng_tsdl.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <map>

namespace sigmatrace::analyzer {

namespace {

struct Refuse {
    std::string why;
};

[[noreturn]] void refuse(std::string why) { throw Refuse{std::move(why)}; }

struct Tok {
    enum Kind : uint8_t { Ident, Num, Str, Punct } kind;
    std::string_view s;
};

std::vector<Tok> tokenize(std::string_view t) {
    std::vector<Tok> out;
    std::size_t i = 0;
    const auto ident_char = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    };
    while (i < t.size()) {
        const char c = t[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            ++i;
        } else if (c == '/' && i + 1 < t.size() && t[i + 1] == '*') {
            const auto e = t.find("*/", i + 2);
            if (e == std::string_view::npos) refuse("an unclosed comment");
            i = e + 2;
        } else if (c == '/' && i + 1 < t.size() && t[i + 1] == '/') {
            const auto e = t.find('\n', i);
            i = e == std::string_view::npos ? t.size() : e + 1;
        } else if (c == '"') {
            std::size_t j = i + 1;
            while (j < t.size() && t[j] != '"') {
                if (t[j] == '\\') refuse("an escape sequence in a string");
                ++j;
            }
            if (j >= t.size()) refuse("an unclosed string");
            out.push_back({Tok::Str, t.substr(i + 1, j - i - 1)});
            i = j + 1;
        } else if (c >= '0' && c <= '9') {
            std::size_t j = i;
            while (j < t.size() && ident_char(t[j])) ++j;
            out.push_back({Tok::Num, t.substr(i, j - i)});
            i = j;
        } else if (ident_char(c)) {
            std::size_t j = i;
            while (j < t.size() && ident_char(t[j])) ++j;
            out.push_back({Tok::Ident, t.substr(i, j - i)});
            i = j;
        } else if (c == ':' && i + 1 < t.size() && t[i + 1] == '=') {
            out.push_back({Tok::Punct, t.substr(i, 2)});
            i += 2;
        } else if (c == '.' && t.substr(i, 3) == "...") {
            out.push_back({Tok::Punct, t.substr(i, 3)});
            i += 3;
        } else if (std::string_view("{}[]();=:<>,.").find(c) != std::string_view::npos) {
            out.push_back({Tok::Punct, t.substr(i, 1)});
            ++i;
        } else {
            refuse(fmt::format("an unexpected character 0x{:02x}", static_cast<unsigned char>(c)));
        }
    }
    return out;
}

uint64_t to_u64(std::string_view s) {
    uint64_t v = 0;
    int base = 10;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2), base = 16;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v, base);
    if (r.ec != std::errc{} || r.ptr != s.data() + s.size()) refuse(fmt::format("a number it cannot read: {}", s));
    return v;
}

std::string strip(std::string_view ctf_name) {
    if (!ctf_name.empty() && ctf_name[0] == '_') ctf_name.remove_prefix(1);
    return std::string(ctf_name);
}

// The event headers lttng-ust 2.x declares, tokens joined by one space.
constexpr std::string_view kCompactHeader =
    "struct event_header_compact { enum : uint5_t { compact = 0 ... 30 , extended = 31 } id ; variant < id > { "
    "struct { uint27_clock_monotonic_t timestamp ; } compact ; struct { uint32_t id ; uint64_clock_monotonic_t "
    "timestamp ; } extended ; } v ; } align ( 8 ) ;";
constexpr std::string_view kLargeHeader =
    "struct event_header_large { enum : uint16_t { compact = 0 ... 65534 , extended = 65535 } id ; variant < id > { "
    "struct { uint32_clock_monotonic_t timestamp ; } compact ; struct { uint32_t id ; uint64_clock_monotonic_t "
    "timestamp ; } extended ; } v ; } align ( 8 ) ;";

struct Parser {
    std::vector<Tok> toks;
    std::size_t pos = 0;
    std::map<std::string, CtfInt, std::less<>> aliases;
    std::map<std::string, std::string, std::less<>> named_structs;   // name -> text
    std::vector<CtfField> packet_header, packet_context;
    bool have_trace = false, have_uuid = false, have_clock = false, have_packet_context = false;
    uint64_t major = 0, minor = 0;
    std::map<std::string, std::string, std::less<>> env_str;
    std::map<std::string, uint64_t, std::less<>> env_num;
    uint64_t freq = 0, offset = 0, offset_s = 0;
    CtfTraceLayout out;

    bool eof() const { return pos >= toks.size(); }
    const Tok& peek(std::size_t ahead = 0) const {
        if (pos + ahead >= toks.size()) refuse("the text ends inside a declaration");
        return toks[pos + ahead];
    }
    bool is(std::string_view s, std::size_t ahead = 0) const {
        return pos + ahead < toks.size() && toks[pos + ahead].kind != Tok::Str && toks[pos + ahead].s == s;
    }
    void expect(std::string_view s) {
        if (!is(s)) refuse(fmt::format("'{}' where '{}' was expected", eof() ? "end of text" : peek().s, s));
        ++pos;
    }
    std::string_view take(Tok::Kind k, const char* what) {
        if (eof() || peek().kind != k) refuse(fmt::format("'{}' where {} was expected", eof() ? "end of text" : peek().s, what));
        return toks[pos++].s;
    }
    // key = value; where key may be dotted (packet.header): returns the key, leaves the position on the value.
    std::string key() {
        std::string k(take(Tok::Ident, "a name"));
        while (is(".")) {
            ++pos;
            k += '.';
            k += take(Tok::Ident, "a name");
        }
        return k;
    }

    CtfInt integer() {
        CtfInt t;
        bool have_size = false;
        expect("{");
        while (!is("}")) {
            const std::string k(take(Tok::Ident, "an integer attribute"));
            expect("=");
            if (k == "size") {
                const uint64_t v = to_u64(take(Tok::Num, "a size"));
                if (v == 0 || v > 64) refuse(fmt::format("an integer of {} bits", v));
                t.bits = static_cast<uint8_t>(v);
                have_size = true;
            } else if (k == "align") {
                const uint64_t v = to_u64(take(Tok::Num, "an alignment"));
                if (v == 0 || v > 64 || (v & (v - 1)) != 0) refuse(fmt::format("an alignment of {} bits", v));
                t.align = static_cast<uint8_t>(v);
            } else if (k == "signed") {
                const std::string_view v = peek().s;
                ++pos;
                if (v == "1" || v == "true") t.is_signed = true;
                else if (v == "0" || v == "false") t.is_signed = false;
                else refuse(fmt::format("signed = {}", v));
            } else if (k == "encoding") {
                const std::string_view v = take(Tok::Ident, "an encoding");
                if (v == "UTF8" || v == "ASCII" || v == "utf8" || v == "ascii") t.text = true;
                else if (v != "none") refuse(fmt::format("encoding = {}", v));
            } else if (k == "base") {
                ++pos;  // display base only
            } else if (k == "byte_order") {
                const std::string_view v = take(Tok::Ident, "a byte order");
                if (v != "native" && v != "le" && v != "little") refuse(fmt::format("byte_order = {}", v));
            } else if (k == "map") {
                if (!is("clock") || !is(".", 1) || !is("monotonic", 2) || !is(".", 3) || !is("value", 4))
                    refuse("an integer mapped to a clock other than clock.monotonic.value");
                pos += 5;
                t.clock = true;
            } else {
                refuse(fmt::format("the integer attribute '{}'", k));
            }
            expect(";");
        }
        expect("}");
        if (!have_size) refuse("an integer without a size");
        return t;
    }

    // One member declaration of a structure (lttng-ust's forms only), appended to `fields`.
    void member(std::vector<CtfField>& fields, bool allow_clock) {
        CtfField f;
        if (is("integer")) {
            ++pos;
            f.type = integer();
        } else if (is("string")) {
            ++pos;
            if (is("{")) refuse("a string with attributes");
            f.kind = CtfFieldKind::String;
        } else if (peek().kind == Tok::Ident && !is("struct") && !is("enum") && !is("variant") && !is("floating_point")) {
            // An alias: identifiers up to the member name (the last one before ';' or '[').
            std::string alias(take(Tok::Ident, "a type"));
            while (peek().kind == Tok::Ident && peek(1).kind == Tok::Ident) {
                alias += ' ';
                alias += take(Tok::Ident, "a type");
            }
            const auto it = aliases.find(alias);
            if (it == aliases.end()) refuse(fmt::format("the unknown type '{}'", alias));
            f.type = it->second;
        } else {
            refuse(fmt::format("a member of type '{}'", peek().s));
        }
        f.name = strip(take(Tok::Ident, "a member name"));
        if (is("[")) {
            ++pos;
            if (f.kind == CtfFieldKind::String) refuse("an array of strings");
            if (peek().kind == Tok::Num) {
                const uint64_t n = to_u64(take(Tok::Num, "a length"));
                if (n > (1u << 20)) refuse(fmt::format("an array of {} elements", n));
                f.kind = CtfFieldKind::Array;
                f.length = static_cast<uint32_t>(n);
            } else {
                const std::string len = strip(take(Tok::Ident, "a length field"));
                f.kind = CtfFieldKind::Sequence;
                for (std::size_t i = 0; i < fields.size(); ++i)
                    if (fields[i].name == len) f.length_field = static_cast<int>(i);
                if (f.length_field < 0 || fields[static_cast<std::size_t>(f.length_field)].kind != CtfFieldKind::Int ||
                    fields[static_cast<std::size_t>(f.length_field)].type.is_signed)
                    refuse(fmt::format("a sequence whose length is not an unsigned member before it: {}", f.name));
            }
            expect("]");
        }
        expect(";");
        if (f.kind != CtfFieldKind::String) {
            // Everything lttng-ust writes is whole, byte-aligned bytes; bit fields stay Babeltrace's.
            if (f.type.bits % 8 != 0 || f.type.align % 8 != 0)
                refuse(fmt::format("the member '{}' of {} bits aligned on {} bits", f.name, f.type.bits, f.type.align));
            if (f.type.clock && !allow_clock) refuse(fmt::format("the clock-mapped member '{}'", f.name));
        }
        for (const CtfField& o : fields)
            if (o.name == f.name) refuse(fmt::format("two members named '{}'", f.name));
        fields.push_back(std::move(f));
    }

    // A structure's members; a member mapped to the clock only where `allow_clock` (the packet context: a
    // clock-mapped member elsewhere would update the clock, which the reader does not do).
    std::vector<CtfField> struct_body(bool allow_clock = false) {
        std::vector<CtfField> fields;
        expect("{");
        while (!is("}")) member(fields, allow_clock);
        expect("}");
        if (is("align")) refuse("an aligned structure");
        return fields;
    }

    void typealias() {
        if (!is("integer")) refuse(fmt::format("a typealias of '{}'", peek().s));
        ++pos;
        CtfInt t = integer();
        expect(":=");
        std::string name(take(Tok::Ident, "an alias name"));
        while (!is(";")) {
            name += ' ';
            name += take(Tok::Ident, "an alias name");
        }
        expect(";");
        if (aliases.contains(name)) refuse(fmt::format("the type '{}' declared twice", name));
        aliases.emplace(std::move(name), t);
    }

    void named_struct() {
        const std::size_t begin = pos;
        ++pos;
        const std::string name(take(Tok::Ident, "a structure name"));
        if (named_structs.contains(name)) refuse(fmt::format("the structure '{}' declared twice", name));
        if (name == "packet_context") {
            packet_context = struct_body(true);
            have_packet_context = true;
            expect(";");
        } else if (name == "event_header_compact" || name == "event_header_large") {
            int depth = 0;
            while (!(depth == 0 && is(";"))) {
                if (is("{")) ++depth;
                if (is("}")) --depth;
                ++pos;
                if (eof()) refuse("the text ends inside a declaration");
            }
            ++pos;
        } else {
            refuse(fmt::format("the structure '{}'", name));
        }
        std::string text;
        for (std::size_t i = begin; i < pos; ++i) {
            if (!text.empty()) text += ' ';
            text += toks[i].s;
        }
        named_structs.emplace(name, std::move(text));
    }

    void trace_block() {
        if (have_trace) refuse("two trace blocks");
        have_trace = true;
        expect("{");
        while (!is("}")) {
            const std::string k = key();
            if (k == "packet.header") {
                expect(":=");
                expect("struct");
                packet_header = struct_body();
            } else {
                expect("=");
                if (k == "major") major = to_u64(take(Tok::Num, "a number"));
                else if (k == "minor") minor = to_u64(take(Tok::Num, "a number"));
                else if (k == "uuid") {
                    if (!parse_uuid(take(Tok::Str, "a UUID"), out.uuid)) refuse("a malformed trace UUID");
                    have_uuid = true;
                } else if (k == "byte_order") {
                    if (take(Tok::Ident, "a byte order") != "le") refuse("a trace that is not little-endian");
                } else {
                    refuse(fmt::format("the trace attribute '{}'", k));
                }
            }
            expect(";");
        }
        expect("}");
        expect(";");
    }

    void env_block() {
        expect("{");
        while (!is("}")) {
            const std::string k = key();
            expect("=");
            if (peek().kind == Tok::Str) env_str[k] = std::string(take(Tok::Str, "a string"));
            else env_num[k] = to_u64(take(Tok::Num, "a number"));
            expect(";");
        }
        expect("}");
        expect(";");
    }

    void clock_block() {
        if (have_clock) refuse("two clocks");
        have_clock = true;
        bool have_freq = false;
        expect("{");
        while (!is("}")) {
            const std::string k = key();
            expect("=");
            if (k == "name") {
                if (eof() || peek().s != "monotonic" || peek().kind == Tok::Punct) refuse("a clock not named monotonic");
                ++pos;
            } else if (k == "uuid" || k == "description") {
                take(Tok::Str, "a string");
            } else if (k == "freq") {
                freq = to_u64(take(Tok::Num, "a frequency"));
                have_freq = true;
            } else if (k == "offset") {
                offset = to_u64(take(Tok::Num, "an offset"));
            } else if (k == "offset_s") {
                offset_s = to_u64(take(Tok::Num, "an offset"));
            } else if (k == "precision") {
                take(Tok::Num, "a precision");
            } else {
                refuse(fmt::format("the clock attribute '{}'", k));
            }
            expect(";");
        }
        expect("}");
        expect(";");
        if (!have_freq || freq != 1'000'000'000) refuse("a clock whose frequency is not 1 GHz");
    }

    void stream_block() {
        CtfStreamClass sc;
        bool have_id = false, have_header = false, have_ctx = false;
        expect("{");
        while (!is("}")) {
            const std::string k = key();
            if (k == "id") {
                expect("=");
                sc.id = to_u64(take(Tok::Num, "a stream id"));
                have_id = true;
            } else if (k == "event.header") {
                expect(":=");
                expect("struct");
                const std::string_view n = take(Tok::Ident, "a structure name");
                if (n == "event_header_large") sc.large_header = true;
                else if (n == "event_header_compact") sc.large_header = false;
                else refuse(fmt::format("the event header '{}'", n));
                if (!named_structs.contains(n)) refuse(fmt::format("the undeclared event header '{}'", n));
                have_header = true;
            } else if (k == "packet.context") {
                expect(":=");
                expect("struct");
                if (take(Tok::Ident, "a structure name") != "packet_context" || !have_packet_context)
                    refuse("a packet context other than lttng-ust's");
                have_ctx = true;
            } else if (k == "event.context") {
                expect(":=");
                expect("struct");
                sc.context = struct_body();
            } else {
                refuse(fmt::format("the stream attribute '{}'", k));
            }
            expect(";");
        }
        expect("}");
        expect(";");
        if (!have_id || !have_header || !have_ctx) refuse("a stream without id, event header or packet context");
        if (out.stream(sc.id)) refuse(fmt::format("two streams with id {}", sc.id));
        out.streams.push_back(std::move(sc));
    }

    void event_block() {
        CtfEventClass ec;
        bool have_name = false, have_id = false, have_stream = false, have_fields = false;
        expect("{");
        while (!is("}")) {
            const std::string k = key();
            if (k == "fields") {
                expect(":=");
                expect("struct");
                ec.fields = struct_body();
                have_fields = true;
            } else {
                expect("=");
                if (k == "name") {
                    ec.name = std::string(take(Tok::Str, "an event name"));
                    have_name = true;
                } else if (k == "id") {
                    ec.id = to_u64(take(Tok::Num, "an event id"));
                    have_id = true;
                } else if (k == "stream_id") {
                    ec.stream_id = to_u64(take(Tok::Num, "a stream id"));
                    have_stream = true;
                } else if (k == "loglevel") {
                    take(Tok::Num, "a log level");
                } else if (k == "model.emf.uri") {
                    take(Tok::Str, "a URI");
                } else {
                    refuse(fmt::format("the event attribute '{}'", k));
                }
            }
            expect(";");
        }
        expect("}");
        expect(";");
        if (!have_name || !have_id || !have_stream || !have_fields) refuse("an event without name, id, stream_id or fields");
        if (!out.stream(ec.stream_id)) refuse(fmt::format("an event of the undeclared stream {}", ec.stream_id));
        if (out.event(ec.stream_id, ec.id)) refuse(fmt::format("two events with id {}", ec.id));
        out.events.push_back(std::move(ec));
        std::sort(out.events.begin(), out.events.end(), [](const CtfEventClass& a, const CtfEventClass& b) {
            return std::pair(a.stream_id, a.id) < std::pair(b.stream_id, b.id);
        });
    }

    void check_alias(std::string_view name, uint8_t bits, uint8_t align, bool clock) {
        const auto it = aliases.find(name);
        if (it == aliases.end() || it->second.bits != bits || it->second.align != align || it->second.is_signed ||
            it->second.clock != clock || it->second.text)
            refuse(fmt::format("the type '{}' is not lttng-ust's", name));
    }

    static bool is_uint(const CtfField& f, std::string_view name, uint8_t bits, bool clock = false) {
        return f.name == name && f.kind == CtfFieldKind::Int && f.type.bits == bits && f.type.align == 8 &&
               !f.type.is_signed && f.type.clock == clock;
    }

    void run() {
        while (!eof()) {
            if (is("typealias")) {
                ++pos;
                typealias();
            } else if (is("trace")) {
                ++pos;
                trace_block();
            } else if (is("env")) {
                ++pos;
                env_block();
            } else if (is("clock")) {
                ++pos;
                clock_block();
            } else if (is("struct")) {
                named_struct();
            } else if (is("stream")) {
                ++pos;
                stream_block();
            } else if (is("event")) {
                ++pos;
                event_block();
            } else {
                refuse(fmt::format("the declaration '{}'", peek().s));
            }
        }
        if (!have_trace || major != 1 || minor != 8) refuse("no CTF 1.8 trace block");
        if (!have_uuid) refuse("a trace without UUID");
        if (!have_clock) refuse("no clock");
        const auto s = [&](const char* k) {
            const auto it = env_str.find(k);
            return it == env_str.end() ? std::string() : it->second;
        };
        const auto n = [&](const char* k) {
            const auto it = env_num.find(k);
            return it == env_num.end() ? ~uint64_t{0} : it->second;
        };
        if (s("domain") != "ust" || s("tracer_name") != "lttng-ust" || n("tracer_major") != 2 || n("tracer_minor") != 13)
            refuse("a trace not written by lttng-ust 2.13");
        if (const auto it = env_str.find("hostname"); it != env_str.end()) {
            out.hostname = it->second;
            out.has_hostname = true;
        }
        const auto& h = packet_header;
        if (h.size() != 4 || !is_uint(h[0], "magic", 32) || h[1].name != "uuid" || h[1].kind != CtfFieldKind::Array ||
            h[1].length != 16 || h[1].type.bits != 8 || h[1].type.align != 8 || h[1].type.text ||
            !is_uint(h[2], "stream_id", 32) || !is_uint(h[3], "stream_instance_id", 64))
            refuse("a packet header other than lttng-ust's");
        const auto& c = packet_context;
        if (c.size() != 7 || !is_uint(c[0], "timestamp_begin", 64, true) || !is_uint(c[1], "timestamp_end", 64, true) ||
            !is_uint(c[2], "content_size", 64) || !is_uint(c[3], "packet_size", 64) || !is_uint(c[4], "packet_seq_num", 64) ||
            !is_uint(c[5], "events_discarded", 64) || !is_uint(c[6], "cpu_id", 32))
            refuse("a packet context other than lttng-ust's");
        for (const CtfStreamClass& sc : out.streams) {
            const char* name = sc.large_header ? "event_header_large" : "event_header_compact";
            if (named_structs.at(name) != (sc.large_header ? kLargeHeader : kCompactHeader))
                refuse(fmt::format("an event header '{}' other than lttng-ust's", name));
            if (sc.large_header) {
                check_alias("uint16_t", 16, 8, false);
                check_alias("uint32_clock_monotonic_t", 32, 8, true);
            } else {
                check_alias("uint5_t", 5, 1, false);
                check_alias("uint27_clock_monotonic_t", 27, 1, true);
            }
            check_alias("uint32_t", 32, 8, false);
            check_alias("uint64_clock_monotonic_t", 64, 8, true);
        }
        for (const CtfEventClass& ec : out.events)
            if (ec.id > 0xFFFFFFFFu)  // both headers' extended form holds a 32-bit id
                refuse(fmt::format("an event id {} beyond the header's", ec.id));
        // Babeltrace2's ns from origin of value 0: offset_s * 1e9 + offset (1 GHz), which must fit int64.
        const __int128 origin = static_cast<__int128>(offset_s) * 1'000'000'000 + offset;
        if (origin > INT64_MAX) refuse("a clock offset beyond int64 ns");
        out.clock_origin_ns = static_cast<int64_t>(origin);
    }
};

}  // namespace

bool parse_uuid(std::string_view s, uint8_t out[16]) {
    if (s.size() != 36) return false;
    int k = 0;
    for (std::size_t i = 0; i < s.size();) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-') return false;
            ++i;
            continue;
        }
        unsigned v = 0;
        if (std::from_chars(s.data() + i, s.data() + i + 2, v, 16).ptr != s.data() + i + 2) return false;
        out[k++] = static_cast<uint8_t>(v);
        i += 2;
    }
    return k == 16;
}

const CtfStreamClass* CtfTraceLayout::stream(uint64_t id) const {
    for (const CtfStreamClass& s : streams)
        if (s.id == id) return &s;
    return nullptr;
}

const CtfEventClass* CtfTraceLayout::event(uint64_t stream_id, uint64_t id) const {
    const auto it = std::lower_bound(events.begin(), events.end(), std::pair(stream_id, id),
                                     [](const CtfEventClass& e, const std::pair<uint64_t, uint64_t>& k) {
                                         return std::pair(e.stream_id, e.id) < k;
                                     });
    return it != events.end() && it->stream_id == stream_id && it->id == id ? &*it : nullptr;
}

std::optional<CtfTraceLayout> parse_lttng_tsdl(std::string_view tsdl, std::string& why) {
    try {
        Parser p;
        p.toks = tokenize(tsdl);
        p.run();
        return std::move(p.out);
    } catch (const Refuse& r) {
        why = r.why;
        return std::nullopt;
    }
}

}  // namespace sigmatrace::analyzer
