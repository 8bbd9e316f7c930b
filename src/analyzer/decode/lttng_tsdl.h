// The layout of a trace LTTng-UST 2.13 wrote, read from its TSDL metadata text: what the direct CTF reader
// (lttng_stream_reader.h) needs to decode its streams without Babeltrace2. The parser accepts exactly the
// grammar lttng-ust 2.13 writes (its typealiases, trace/env/clock/stream/event blocks, its packet header, packet
// context and event headers, integer/string/array/sequence fields) and refuses anything else with a reason: the
// caller then reads the trace through Babeltrace2, which understands all of CTF 1.8.
//
// Names are Babeltrace2's: a field's CTF identifier with one leading underscore removed (`_vpid` is `vpid`,
// `__words_length` is `_words_length`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sigmatrace::analyzer {

struct CtfInt {
    uint8_t bits = 0;        // 1..64
    uint8_t align = 8;       // bits, a power of two
    bool is_signed = false;
    bool text = false;       // encoding UTF8/ASCII: an array or sequence of 8-bit ones is a string
    bool clock = false;      // mapped to the trace's clock (map = clock.monotonic.value)
};

enum class CtfFieldKind : uint8_t { Int, String, Array, Sequence };

struct CtfField {
    std::string name;
    CtfFieldKind kind = CtfFieldKind::Int;
    CtfInt type;             // the integer, or the element of an array or sequence
    uint32_t length = 0;     // Array: element count
    int length_field = -1;   // Sequence: index (in the same structure) of the unsigned integer holding its length
    // An array or sequence of 8-bit text integers: Babeltrace2 reads it as a string (up to its first NUL).
    bool is_text() const { return kind != CtfFieldKind::Int && kind != CtfFieldKind::String && type.text && type.bits == 8; }
};

struct CtfEventClass {
    uint64_t id = 0;
    uint64_t stream_id = 0;
    std::string name;
    std::vector<CtfField> fields;
};

struct CtfStreamClass {
    uint64_t id = 0;
    bool large_header = true;        // event_header_large, else event_header_compact
    std::vector<CtfField> context;   // the stream's event.context
};

struct CtfTraceLayout {
    uint8_t uuid[16] = {};
    std::string hostname;                // env.hostname ("" when absent)
    bool has_hostname = false;
    int64_t clock_origin_ns = 0;         // ns from origin of clock value 0 (offset_s * 1e9 + offset; 1 GHz only)
    std::vector<CtfStreamClass> streams;
    std::vector<CtfEventClass> events;   // sorted by (stream_id, id)
    const CtfStreamClass* stream(uint64_t id) const;
    const CtfEventClass* event(uint64_t stream_id, uint64_t id) const;
};

// A UUID in its text form (36 characters, 8-4-4-4-12 hexadecimal digits) as its 16 bytes; false when `s` is not one.
bool parse_uuid(std::string_view s, uint8_t out[16]);

// The layout of `tsdl` (the metadata text, packets already unwrapped), or nullopt with `why` set.
std::optional<CtfTraceLayout> parse_lttng_tsdl(std::string_view tsdl, std::string& why);

}  // namespace sigmatrace::analyzer
