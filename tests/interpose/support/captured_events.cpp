#include "support/captured_events.h"

#include <sigmatrace/deferred_records.h>
#include <sigmatrace/deferred_records_wire.h>

#include <type_traits>

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
    if (id == EventId::deferred_records) {
        // Kept as written, and expanded as a reader would: one event per call, in `order` like immediate ones.
        const auto& r = *static_cast<const st_deferred_records_rec*>(rec);
        me->events_.deferred_records.push_back(copy(r));
        records::Scratch scratch;
        CapturedEvents& ev = me->events_;
        const records::WalkResult walked = records::walk_records(r.words, r.n, [&](const records::RecordHeader& h) {
            records::expand_record(h, scratch, [&ev](const auto& e) {
                using E = std::decay_t<decltype(e)>;
                if constexpr (std::is_same_v<E, st_post_send_rec>) ev.post_send.push_back(copy(e)), ev.order.push_back(EventId::post_send);
                else if constexpr (std::is_same_v<E, st_post_recv_rec>) ev.post_recv.push_back(copy(e)), ev.order.push_back(EventId::post_recv);
                else if constexpr (std::is_same_v<E, st_post_srq_recv_rec>) ev.post_srq_recv.push_back(copy(e)), ev.order.push_back(EventId::post_srq_recv);
                else if constexpr (std::is_same_v<E, st_poll_cq_rec>) ev.poll_cq.push_back(copy(e)), ev.order.push_back(EventId::poll_cq);
                // (a ring_post stands for a gpu_wqe: the watcher's, which the interposer's tests do not capture)
            });
        });
        if (walked.status != records::WalkStatus::ok) ++ev.malformed_records;
        return;
    }
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
