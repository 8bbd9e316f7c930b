// SigmaTrace event schema: record structs and event ids generated from schema.def.
//
// A call site fills one `st_<event>_rec` and hands a pointer to ST_TRACE (src/provider/trace.h); the LTTng
// provider serializes exactly the fields listed in schema.def, in that order. Sequence fields are pointers to
// arrays of `n` elements owned by the caller (stack arrays of at most SIGMATRACE_MAX_BATCH entries: the hot path
// never allocates).
#pragma once

#include <cstddef>
#include <cstdint>

#include <sigmatrace/schema.def>

// The most WRs or completions one event carries. Longer chains and polls are split into several events
// (post_* events say where each part starts with batch_offset). 32 keeps an event under ~2 KiB.
#define SIGMATRACE_MAX_BATCH 32

// Record structs: the tracepoint argument of each event.
#define ST_REC_INT_(type, name, comment) type name;
#define ST_REC_STR_(name, comment) const char* name;
#define ST_REC_SEQ_(type, name, comment) const type* name;
#define ST_DECLARE_RECORD_(event, comment)                                                                     \
    struct st_##event##_rec {                                                                                  \
        SIGMATRACE_FIELDS_##event(ST_REC_INT_, ST_REC_INT_, ST_REC_STR_, ST_REC_SEQ_, ST_REC_SEQ_)             \
    };
SIGMATRACE_EVENTS(ST_DECLARE_RECORD_)
#undef ST_DECLARE_RECORD_
#undef ST_REC_SEQ_
#undef ST_REC_STR_
#undef ST_REC_INT_

namespace sigmatrace {

// Dense ids, in schema.def order. Used by the callback backend and by tables.
enum class EventId : uint16_t {
#define ST_EVENT_ID_(event, comment) event,
    SIGMATRACE_EVENTS(ST_EVENT_ID_)
#undef ST_EVENT_ID_
        count_
};

inline constexpr std::size_t kEventCount = static_cast<std::size_t>(EventId::count_);
inline constexpr uint32_t kSchemaVersion = SIGMATRACE_SCHEMA_VERSION;
inline constexpr uint32_t kSchemaMinor = SIGMATRACE_SCHEMA_MINOR;
inline constexpr const char* kProviderName = "sigmatrace";

// Maps a record type to its event id (used by the callback backend to type-check call sites).
template <typename Rec> struct EventIdOf;
#define ST_EVENT_ID_OF_(event, comment)                                                                        \
    template <> struct EventIdOf<st_##event##_rec> {                                                           \
        static constexpr EventId value = EventId::event;                                                       \
    };
SIGMATRACE_EVENTS(ST_EVENT_ID_OF_)
#undef ST_EVENT_ID_OF_

// Event names without the provider prefix, indexed by EventId.
inline constexpr const char* kEventNames[] = {
#define ST_EVENT_NAME_(event, comment) #event,
    SIGMATRACE_EVENTS(ST_EVENT_NAME_)
#undef ST_EVENT_NAME_
};

// Whether event `id` carries data-path calls: posts, polls, the watcher's WQEs and CQEs, and the records a process
// deferred for its calls. `sigmatrace record` puts these in its data channel and every other event (processes,
// devices, objects' set-up and teardown, the watcher's reports) in its set-up channel; an analysis in shares reads
// the data-path events of its own hosts only.
inline constexpr bool carries_data_path(EventId id) {
    return id == EventId::post_send || id == EventId::post_recv || id == EventId::post_srq_recv ||
           id == EventId::poll_cq || id == EventId::gpu_wqe || id == EventId::gpu_cqe || id == EventId::deferred_records;
}

}  // namespace sigmatrace
