#include "interpose/deferred_events.h"

#include "interpose/config.h"
#include "interpose/object_state.h"
#include "provider/trace.h"

namespace sigmatrace::interpose::deferred {
namespace {

// Out of line: each expands one tracepoint body.
__attribute__((noinline)) void emit_event(const st_post_send_rec* r) noexcept { ST_TRACE_EMIT(post_send, r); }
__attribute__((noinline)) void emit_event(const st_post_recv_rec* r) noexcept { ST_TRACE_EMIT(post_recv, r); }
__attribute__((noinline)) void emit_event(const st_post_srq_recv_rec* r) noexcept { ST_TRACE_EMIT(post_srq_recv, r); }
__attribute__((noinline)) void emit_event(const st_poll_cq_rec* r) noexcept { ST_TRACE_EMIT(poll_cq, r); }

}  // namespace

bool EventBuilder::joins(const Open& o, const RecordHeader* rec) noexcept {
    return o.kind == rec->kind && o.mergeable && o.n + rec->n <= kBatch && records::handle_of(*rec) == o.handle &&
           records::api_of(*rec) == o.api && records::whole_successful_call(*rec);
}

void EventBuilder::add(const RecordHeader* rec) noexcept {
    switch (rec->kind) {
    case RecordKind::post_send: add_to(sends_, rec); break;
    case RecordKind::post_recv:
    case RecordKind::post_srq_recv: add_to(recvs_, rec); break;
    case RecordKind::poll_cq: add_to(polls_for(rec), rec); break;
    case RecordKind::pad: break;
    }
}

EventBuilder::OpenPolls& EventBuilder::polls_for(const RecordHeader* rec) noexcept {
    const uint64_t cq = records::handle_of(*rec);
    for (OpenPolls& o : polls_)
        if (o.kind != RecordKind::pad && o.handle == cq) return o;
    for (OpenPolls& o : polls_)
        if (o.kind == RecordKind::pad) return o;
    OpenPolls& older = polls_[0].ts[0] <= polls_[1].ts[0] ? polls_[0] : polls_[1];
    emit(older);
    return older;
}

template <typename O> void EventBuilder::add_to(O& o, const RecordHeader* rec) noexcept {
    if (o.kind != RecordKind::pad && !joins(o, rec)) emit(o);
    if (o.kind == RecordKind::pad) start(o, rec);
    const uint32_t n = rec->n <= kBatch - o.n ? rec->n : kBatch - o.n;
    const uint64_t ts = capture_clock::to_ns(anchor_, rec->ts);
    for (uint32_t i = 0; i < n; ++i) o.ts[o.n + i] = ts;
    append(o, rec, n);
    o.n += n;
}

void EventBuilder::start(Open& o, const RecordHeader* rec) noexcept {
    o.kind = rec->kind;
    o.mergeable = records::whole_successful_call(*rec);
    o.handle = records::handle_of(*rec);
    o.api = records::api_of(*rec);
    o.n = 0;
    switch (rec->kind) {
    case RecordKind::post_send: {
        const SendFixed* f = fixed_part<SendFixed>(rec);
        o.qp_num = f->qp_num;
        o.ret = f->ret;
        o.bad_index = f->bad_index;
        o.batch_offset = f->batch_offset;
        break;
    }
    case RecordKind::post_recv:
    case RecordKind::post_srq_recv: {
        const RecvFixed* f = fixed_part<RecvFixed>(rec);
        o.qp_num = f->qp_num;
        o.ret = f->ret;
        o.bad_index = f->bad_index;
        o.batch_offset = f->batch_offset;
        break;
    }
    case RecordKind::poll_cq: o.ret = fixed_part<PollFixed>(rec)->ret; break;
    case RecordKind::pad: break;
    }
}

void EventBuilder::append(OpenSends& o, const RecordHeader* rec, uint32_t n) noexcept {
    records::copy_send_entries(*rec, n, o, o.n);
}

void EventBuilder::append(OpenRecvs& o, const RecordHeader* rec, uint32_t n) noexcept {
    records::copy_recv_entries(*rec, n, o, o.n);
}

void EventBuilder::append(OpenPolls& o, const RecordHeader* rec, uint32_t n) noexcept {
    records::copy_completion_entries(*rec, n, o, o.n);
}

void EventBuilder::flush() noexcept {
    // At most four open events: emit the one whose first element is oldest until none is left.
    for (;;) {
        Open* oldest = nullptr;
        for (Open* o : all_open())
            if (o->kind != RecordKind::pad && (oldest == nullptr || o->ts[0] < oldest->ts[0])) oldest = o;
        if (oldest == nullptr) return;
        if (oldest == &sends_) emit(sends_);
        else if (oldest == &recvs_) emit(recvs_);
        else emit(*static_cast<OpenPolls*>(oldest));
    }
}

void EventBuilder::discard() noexcept {
    for (Open* o : all_open()) {
        o->kind = RecordKind::pad;
        o->n = 0;
    }
}

void EventBuilder::emit(OpenSends& o) noexcept {
    const uint32_t redact = redact_bits();  // not config(): this may run on the emitter thread
    if (redact & kRedactAddresses)
        for (uint32_t i = 0; i < o.n; ++i) o.raddr[i] = 0;
    if (redact & kRedactKeys)
        for (uint32_t i = 0; i < o.n; ++i) o.rkey[i] = 0;
    st_post_send_rec r{};
    r.qp = o.handle;
    r.qp_num = o.qp_num;
    r.ret = o.ret;
    r.bad_index = o.bad_index;
    r.api = o.api;
    r.batch_offset = o.batch_offset;
    r.n = o.n;
    r.wr_id = o.wr_id;
    r.opcode = o.opcode;
    r.send_flags = o.send_flags;
    r.num_sge = o.num_sge;
    r.bytes = o.bytes;
    r.raddr = o.raddr;
    r.rkey = o.rkey;
    r.imm = o.imm;
    r.remote_qpn = o.remote_qpn;
    r.ah = o.ah;
    r.ts = o.ts;
    emit_event(&r);
    o.kind = RecordKind::pad;
    o.n = 0;
}

namespace {
template <typename Rec, typename O> void emit_recv_event(const O& o) noexcept {
    Rec r{};
    if constexpr (requires { r.qp; }) {
        r.qp = o.handle;
        r.qp_num = o.qp_num;
    } else {
        r.srq = o.handle;
    }
    r.ret = o.ret;
    r.bad_index = o.bad_index;
    r.batch_offset = o.batch_offset;
    r.n = o.n;
    r.wr_id = o.wr_id;
    r.num_sge = o.num_sge;
    r.bytes = o.bytes;
    r.ts = o.ts;
    emit_event(&r);
}
}  // namespace

void EventBuilder::emit(OpenRecvs& o) noexcept {
    if (o.kind == RecordKind::post_recv) emit_recv_event<st_post_recv_rec>(o);
    else emit_recv_event<st_post_srq_recv_rec>(o);
    o.kind = RecordKind::pad;
    o.n = 0;
}

void EventBuilder::emit(OpenPolls& o) noexcept {
    st_poll_cq_rec r{};
    r.cq = o.handle;
    // A merged event: what one poll returning all of them would have said.
    r.ret = o.mergeable ? static_cast<int32_t>(o.n) : o.ret;
    r.api = o.api;
    r.n = o.n;
    point_at_completions(r, o);
    r.ts = o.ts;
    emit_event(&r);
    o.kind = RecordKind::pad;
    o.n = 0;
}

}  // namespace sigmatrace::interpose::deferred
