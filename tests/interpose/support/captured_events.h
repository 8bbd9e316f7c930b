// Every record the shim emits through the callback backend, deep-copied into typed vectors (one per event,
// with the schema's own field names): `events.post_send[0].wr_id[3]`. Generated from schema.def, so a test
// reads exactly the fields the LTTng provider would write.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "provider/trace_callback.h"

namespace sigmatrace::testing {

#define ST_CAP_INT_(type, name, comment) type name{};
#define ST_CAP_STR_(name, comment) std::string name;
#define ST_CAP_SEQ_(type, name, comment) std::vector<type> name;
#define ST_CAP_DECLARE_(event, comment)                                                                        \
    struct cap_##event {                                                                                       \
        SIGMATRACE_FIELDS_##event(ST_CAP_INT_, ST_CAP_INT_, ST_CAP_STR_, ST_CAP_SEQ_, ST_CAP_SEQ_)             \
    };
SIGMATRACE_EVENTS(ST_CAP_DECLARE_)
#undef ST_CAP_DECLARE_
#undef ST_CAP_SEQ_
#undef ST_CAP_STR_
#undef ST_CAP_INT_

struct CapturedEvents {
#define ST_CAP_MEMBER_(event, comment) std::vector<cap_##event> event;
    SIGMATRACE_EVENTS(ST_CAP_MEMBER_)
#undef ST_CAP_MEMBER_
    // Every event's id, in emission order. A `deferred_records` event is kept in `deferred_records` and
    // expanded into the events of its records (one per call, as immediate emission writes them): `order` lists
    // those, not it.
    std::vector<EventId> order;
    uint32_t malformed_records = 0;  // deferred_records events whose records did not all decode
};

// Installs itself as the trace callback for its lifetime (tracing "enabled"); thread-safe.
class EventCapture {
public:
    EventCapture();
    ~EventCapture();
    EventCapture(const EventCapture&) = delete;
    EventCapture& operator=(const EventCapture&) = delete;

    // A copy of what was captured so far.
    CapturedEvents snapshot() const;
    void clear();
    size_t total() const;

private:
    static void on_event(EventId id, const void* rec, void* self);
    mutable std::mutex mutex_;
    CapturedEvents events_;
};

}  // namespace sigmatrace::testing
