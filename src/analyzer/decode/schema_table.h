// The analyzer's view of the event schema: for each event of <sigmatrace/schema.def>, its fields in trace
// order with kind, width and signedness. The analyzer resolves payload members against these tables once per
// event class, and tests/schema checks them against the LTTng provider's own description.
#pragma once

#include <cstdint>
#include <span>
#include <string>
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
// Whether an event class name that find_event_schema() does not know is a damaged one (damaged metadata): a name
// no tracepoint can have (not one "provider:event" pair of [A-Za-z0-9_] words), or one of ours whose provider
// differs from "sigmatrace" in one or two bytes. Its events are then lost, not another provider's.
bool damaged_event_name(std::string_view full_name);
// `name` for a message: bytes outside printable ASCII as \xNN.
std::string printable_name(std::string_view name);

// Index of a field within an event's schema, or -1.
int field_index(const EventSchema& ev, std::string_view field);

// Compile-time field indexes, generated from schema.def: fields::post_send::wr_id is the position of post_send's
// wr_id in event_schemas()[post_send].fields, so handlers read decoded events by index, never by name.
namespace fields {
#define ST_FI_NUM_(type, name, comment) name,
#define ST_FI_STR_(name, comment) name,
#define ST_FI_EVENT_(event, comment)                                                                           \
    namespace event {                                                                                          \
    enum : int { SIGMATRACE_FIELDS_##event(ST_FI_NUM_, ST_FI_NUM_, ST_FI_STR_, ST_FI_NUM_, ST_FI_NUM_) count_ };  \
    }
SIGMATRACE_EVENTS(ST_FI_EVENT_)
#undef ST_FI_EVENT_
#undef ST_FI_STR_
#undef ST_FI_NUM_
}  // namespace fields

// The most fields any event has (sizes the decoder's fixed arrays).
inline constexpr int kMaxEventFields = [] {
    int m = 0;
#define ST_FI_MAX_(event, comment) m = fields::event::count_ > m ? fields::event::count_ : m;
    SIGMATRACE_EVENTS(ST_FI_MAX_)
#undef ST_FI_MAX_
    return m;
}();

}  // namespace sigmatrace::analyzer
