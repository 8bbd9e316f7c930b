// The analyzer's view of the event schema: for each event of <sigmatrace/schema.def>, its fields in trace
// order with kind, width and signedness. The analyzer resolves payload members against these tables once per
// event class, and tests/schema checks them against the LTTng provider's own description.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include <sigmatrace/schema.h>

namespace sigmatrace::analyzer {

enum class FieldKind : uint8_t { Integer, String, Sequence };

struct FieldSchema {
    std::string_view name;
    FieldKind kind;
    uint8_t bits;        // integer width (element width for sequences); 0 for strings
    bool is_signed;      // integer signedness (of the elements for sequences)
    bool hex;            // preferred display base is 16
    std::string_view comment;
};

struct EventSchema {
    EventId id;
    std::string_view name;  // without the "sigmatrace:" prefix
    std::span<const FieldSchema> fields;
    std::string_view comment;
};

// All events, indexed by EventId.
std::span<const EventSchema> event_schemas();

// Lookup by the name babeltrace2 gives an event class ("sigmatrace:post_send"); nullptr if not ours.
const EventSchema* find_event_schema(std::string_view full_name);

// Index of a field within an event's schema, or -1.
int field_index(const EventSchema& ev, std::string_view field);

}  // namespace sigmatrace::analyzer
