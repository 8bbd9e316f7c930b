// Expands schema.def into the analyzer's field tables.
#include "analyzer/decode/schema_table.h"

#include <cctype>
#include <type_traits>

#include <fmt/core.h>

namespace sigmatrace::analyzer {
namespace {

template <typename T> constexpr FieldSchema int_field(std::string_view name, bool hex, std::string_view comment) {
    return {name, FieldKind::Integer, static_cast<uint8_t>(sizeof(T) * 8), std::is_signed_v<T>, hex, comment};
}
template <typename T> constexpr FieldSchema seq_field(std::string_view name, bool hex, std::string_view comment) {
    return {name, FieldKind::Sequence, static_cast<uint8_t>(sizeof(T) * 8), std::is_signed_v<T>, hex, comment};
}
constexpr FieldSchema str_field(std::string_view name, std::string_view comment) {
    return {name, FieldKind::String, 0, false, false, comment};
}

#define ST_TAB_INT_(type, name, comment) int_field<type>(#name, false, comment),
#define ST_TAB_HEX_(type, name, comment) int_field<type>(#name, true, comment),
#define ST_TAB_STR_(name, comment) str_field(#name, comment),
#define ST_TAB_SEQ_(type, name, comment) seq_field<type>(#name, false, comment),
#define ST_TAB_SEQHEX_(type, name, comment) seq_field<type>(#name, true, comment),
#define ST_TAB_FIELDS_(event, comment)                                                                         \
    constexpr FieldSchema k_fields_##event[] = {                                                               \
        SIGMATRACE_FIELDS_##event(ST_TAB_INT_, ST_TAB_HEX_, ST_TAB_STR_, ST_TAB_SEQ_, ST_TAB_SEQHEX_)};
SIGMATRACE_EVENTS(ST_TAB_FIELDS_)

#define ST_TAB_EVENT_(event, comment) EventSchema{EventId::event, #event, k_fields_##event, comment},
constexpr EventSchema k_events[] = {SIGMATRACE_EVENTS(ST_TAB_EVENT_)};

static_assert(std::size(k_events) == kEventCount);

}  // namespace

std::span<const EventSchema> event_schemas() {
    return k_events;
}

const EventSchema* find_event_schema(std::string_view full_name) {
    constexpr std::string_view prefix = "sigmatrace:";
    if (!full_name.starts_with(prefix)) return nullptr;
    full_name.remove_prefix(prefix.size());
    for (const auto& ev : k_events)
        if (ev.name == full_name) return &ev;
    return nullptr;
}

bool damaged_event_name(std::string_view full_name) {
    const std::size_t colon = full_name.find(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == full_name.size()) return true;
    const std::string_view provider = full_name.substr(0, colon), event = full_name.substr(colon + 1);
    const auto word = [](std::string_view w) {
        for (const char c : w)
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
        return true;
    };
    if (!word(provider) || !word(event)) return true;
    constexpr std::string_view ours = "sigmatrace";
    if (provider.size() != ours.size()) return false;
    std::size_t differ = 0;
    for (std::size_t i = 0; i < ours.size(); ++i) differ += provider[i] != ours[i];
    if (differ == 0 || differ > 2) return false;
    for (const auto& ev : k_events)
        if (ev.name == event) return true;
    return false;
}

std::string printable_name(std::string_view name) {
    std::string out;
    for (const char c : name) {
        const auto u = static_cast<unsigned char>(c);
        if (u >= 0x20 && u < 0x7f && c != '\\') out += c;
        else out += fmt::format("\\x{:02x}", u);
    }
    return out;
}

int field_index(const EventSchema& ev, std::string_view field) {
    for (std::size_t i = 0; i < ev.fields.size(); ++i)
        if (ev.fields[i].name == field) return static_cast<int>(i);
    return -1;
}

}  // namespace sigmatrace::analyzer
