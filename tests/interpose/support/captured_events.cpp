#include "support/captured_events.h"

namespace sigmatrace::testing {
namespace {

#define ST_COPY_INT_(type, name, comment) out.name = in.name;
#define ST_COPY_STR_(name, comment) out.name = in.name != nullptr ? in.name : "";
#define ST_COPY_SEQ_(type, name, comment) out.name.assign(in.name, in.name + in.n);
#define ST_COPY_DEFINE_(event, comment)                                                                        \
    [[maybe_unused]] cap_##event copy(const st_##event##_rec& in) {                                            \
        cap_##event out;                                                                                       \
        SIGMATRACE_FIELDS_##event(ST_COPY_INT_, ST_COPY_INT_, ST_COPY_STR_, ST_COPY_SEQ_, ST_COPY_SEQ_)        \
        return out;                                                                                            \
    }
SIGMATRACE_EVENTS(ST_COPY_DEFINE_)
#undef ST_COPY_DEFINE_
#undef ST_COPY_SEQ_
#undef ST_COPY_STR_
#undef ST_COPY_INT_

}  // namespace

EventCapture::EventCapture() {
    set_trace_callback(&EventCapture::on_event, this);
}

EventCapture::~EventCapture() {
    set_trace_callback(nullptr, nullptr);
}

void EventCapture::on_event(EventId id, const void* rec, void* self) {
    auto* me = static_cast<EventCapture*>(self);
    std::lock_guard<std::mutex> lock(me->mutex_);
    me->events_.order.push_back(id);
    switch (id) {
#define ST_CASE_(event, comment)                                                                               \
    case EventId::event:                                                                                       \
        me->events_.event.push_back(copy(*static_cast<const st_##event##_rec*>(rec)));                        \
        break;
        SIGMATRACE_EVENTS(ST_CASE_)
#undef ST_CASE_
    case EventId::count_:
        break;
    }
}

CapturedEvents EventCapture::snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return events_;
}

void EventCapture::clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    events_ = CapturedEvents{};
}

size_t EventCapture::total() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return events_.order.size();
}

}  // namespace sigmatrace::testing
