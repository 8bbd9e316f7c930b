// Reads an LTTng trace directory (as `sigmatrace record` leaves it) into memory with libbabeltrace2, for
// tests: every event with its timestamp, its vpid/vtid/procname contexts and its payload fields by name.
// Deliberately small and independent of the analyzer (src/analyzer), which it helps test rather than uses.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace sigmatrace::testing {

using FieldValue = std::variant<uint64_t, int64_t, std::string, std::vector<uint64_t>>;

struct TraceEvent {
    std::string name;  // "sigmatrace:post_send"
    int64_t ns = 0;    // nanoseconds from origin
    int64_t vpid = -1;
    int64_t vtid = -1;
    std::string procname;
    std::map<std::string, FieldValue> fields;

    // Typed accessors; they throw std::out_of_range when the field is absent or of another kind.
    uint64_t u(const std::string& field) const;
    int64_t i(const std::string& field) const;  // signed fields (and unsigned ones that fit)
    const std::string& s(const std::string& field) const;
    const std::vector<uint64_t>& seq(const std::string& field) const;
};

struct Trace {
    std::vector<TraceEvent> events;  // in timestamp order (muxed)
    uint64_t discarded = 0;          // from discarded-events messages
    std::string error;               // non-empty when the trace could not be read
    // deferred_records events (schema minor 4) are kept and followed by the events of their records, named and
    // filled as immediate emission writes them; this counts those whose records did not all decode.
    uint64_t malformed_records = 0;
};

Trace read_trace(const std::string& dir);

}  // namespace sigmatrace::testing
