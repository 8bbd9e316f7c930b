#include "interpose/deferred_events.h"

#include "interpose/config.h"
#include "provider/trace.h"

namespace sigmatrace::interpose::deferred {
namespace {

// Out of line: each expands one tracepoint body.
__attribute__((noinline)) void emit(const st_post_send_rec* r) noexcept { ST_TRACE_EMIT(post_send, r); }
__attribute__((noinline)) void emit(const st_post_recv_rec* r) noexcept { ST_TRACE_EMIT(post_recv, r); }
__attribute__((noinline)) void emit(const st_post_srq_recv_rec* r) noexcept { ST_TRACE_EMIT(post_srq_recv, r); }
__attribute__((noinline)) void emit(const st_poll_cq_rec* r) noexcept { ST_TRACE_EMIT(poll_cq, r); }

// A record that may share an event with its neighbours: one whole call that succeeded.
bool whole_successful_call(const RecordHeader* rec) noexcept {
    if (rec->n == 0) return false;
    switch (rec->kind) {
    case RecordKind::post_send: {
        const SendFixed* f = fixed_part<SendFixed>(rec);
        return f->ret == 0 && f->bad_index < 0 && f->batch_offset == 0;
    }
    case RecordKind::post_recv:
    case RecordKind::post_srq_recv: {
        const RecvFixed* f = fixed_part<RecvFixed>(rec);
        return f->ret == 0 && f->bad_index < 0 && f->batch_offset == 0;
    }
    case RecordKind::poll_cq: return fixed_part<PollFixed>(rec)->ret == static_cast<int32_t>(rec->n);
    case RecordKind::pad: return false;
    }
    return false;
}

uint64_t handle_of(const RecordHeader* rec) noexcept {
    switch (rec->kind) {
    case RecordKind::post_send: return fixed_part<SendFixed>(rec)->qp;
    case RecordKind::post_recv:
    case RecordKind::post_srq_recv: return fixed_part<RecvFixed>(rec)->handle;
    case RecordKind::poll_cq: return fixed_part<PollFixed>(rec)->cq;
    case RecordKind::pad: return 0;
    }
    return 0;
}

uint32_t api_of(const RecordHeader* rec) noexcept {
    if (rec->kind == RecordKind::post_send) return fixed_part<SendFixed>(rec)->api;
    if (rec->kind == RecordKind::poll_cq) return fixed_part<PollFixed>(rec)->api;
    return 0;
}

}  // namespace

bool EventBuilder::joins(const RecordHeader* rec) const noexcept {
    return kind_ == rec->kind && mergeable_ && n_ + rec->n <= kBatch && handle_of(rec) == handle_ &&
           api_of(rec) == api_ && whole_successful_call(rec);
}

void EventBuilder::add(const RecordHeader* rec) noexcept {
    if (rec->kind == RecordKind::pad) return;
    if (kind_ != RecordKind::pad && !joins(rec)) flush();
    if (kind_ == RecordKind::pad) start(rec);
    append(rec);
}

void EventBuilder::start(const RecordHeader* rec) noexcept {
    kind_ = rec->kind;
    mergeable_ = whole_successful_call(rec);
    handle_ = handle_of(rec);
    api_ = api_of(rec);
    n_ = 0;
    switch (rec->kind) {
    case RecordKind::post_send: {
        const SendFixed* f = fixed_part<SendFixed>(rec);
        qp_num_ = f->qp_num;
        ret_ = f->ret;
        bad_index_ = f->bad_index;
        batch_offset_ = f->batch_offset;
        break;
    }
    case RecordKind::post_recv:
    case RecordKind::post_srq_recv: {
        const RecvFixed* f = fixed_part<RecvFixed>(rec);
        qp_num_ = f->qp_num;
        ret_ = f->ret;
        bad_index_ = f->bad_index;
        batch_offset_ = f->batch_offset;
        break;
    }
    case RecordKind::poll_cq: ret_ = fixed_part<PollFixed>(rec)->ret; break;
    case RecordKind::pad: break;
    }
}

void EventBuilder::append(const RecordHeader* rec) noexcept {
    const uint64_t ts = capture_clock::to_ns(anchor_, rec->ts);
    const uint32_t n = rec->n <= kBatch - n_ ? rec->n : kBatch - n_;
    switch (rec->kind) {
    case RecordKind::post_send: {
        const SendEntry* e = entries<SendFixed, SendEntry>(rec);
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t k = n_ + i;
            ts_[k] = ts;
            wr_id_[k] = e[i].wr_id;
            raddr_[k] = e[i].raddr;
            ah_[k] = e[i].ah;
            flags_[k] = e[i].send_flags;
            bytes_[k] = e[i].bytes;
            rkey_[k] = e[i].rkey;
            imm_[k] = e[i].imm;
            qpn_[k] = e[i].remote_qpn;
            num_sge_[k] = e[i].num_sge;
            opcode_[k] = e[i].opcode;
        }
        break;
    }
    case RecordKind::post_recv:
    case RecordKind::post_srq_recv: {
        const RecvEntry* e = entries<RecvFixed, RecvEntry>(rec);
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t k = n_ + i;
            ts_[k] = ts;
            wr_id_[k] = e[i].wr_id;
            bytes_[k] = e[i].bytes;
            num_sge_[k] = e[i].num_sge;
        }
        break;
    }
    case RecordKind::poll_cq: {
        const CompletionEntry* e = entries<PollFixed, CompletionEntry>(rec);
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t k = n_ + i;
            ts_[k] = ts;
            wr_id_[k] = e[i].wr_id;
            raddr_[k] = e[i].hw_ts;
            rkey_[k] = e[i].vendor_err;
            bytes_[k] = e[i].byte_len;
            qpn_[k] = e[i].qp_num;
            src_qp_[k] = e[i].src_qp;
            flags_[k] = e[i].wc_flags;
            imm_[k] = e[i].imm;
            status_[k] = e[i].status;
            opcode_[k] = e[i].opcode;
        }
        break;
    }
    case RecordKind::pad: break;
    }
    n_ += n;
}

void EventBuilder::flush() noexcept {
    switch (kind_) {
    case RecordKind::post_send: emit_post_send(); break;
    case RecordKind::post_recv: emit_recv<st_post_recv_rec>(); break;
    case RecordKind::post_srq_recv: emit_recv<st_post_srq_recv_rec>(); break;
    case RecordKind::poll_cq: emit_poll(); break;
    case RecordKind::pad: return;
    }
    kind_ = RecordKind::pad;
    n_ = 0;
}

void EventBuilder::emit_post_send() noexcept {
    const uint32_t redact = redact_bits();  // not config(): this may run on the emitter thread
    if (redact & kRedactAddresses)
        for (uint32_t i = 0; i < n_; ++i) raddr_[i] = 0;
    if (redact & kRedactKeys)
        for (uint32_t i = 0; i < n_; ++i) rkey_[i] = 0;
    st_post_send_rec r{};
    r.qp = handle_;
    r.qp_num = qp_num_;
    r.ret = ret_;
    r.bad_index = bad_index_;
    r.api = api_;
    r.batch_offset = batch_offset_;
    r.n = n_;
    r.wr_id = wr_id_;
    r.opcode = opcode_;
    r.send_flags = flags_;
    r.num_sge = num_sge_;
    r.bytes = bytes_;
    r.raddr = raddr_;
    r.rkey = rkey_;
    r.imm = imm_;
    r.remote_qpn = qpn_;
    r.ah = ah_;
    r.ts = ts_;
    emit(&r);
}

template <typename Rec> void EventBuilder::emit_recv() noexcept {
    Rec r{};
    if constexpr (requires { r.qp; }) {
        r.qp = handle_;
        r.qp_num = qp_num_;
    } else {
        r.srq = handle_;
    }
    r.ret = ret_;
    r.bad_index = bad_index_;
    r.batch_offset = batch_offset_;
    r.n = n_;
    r.wr_id = wr_id_;
    r.num_sge = num_sge_;
    r.bytes = bytes_;
    r.ts = ts_;
    emit(&r);
}

void EventBuilder::emit_poll() noexcept {
    st_poll_cq_rec r{};
    r.cq = handle_;
    // A merged event: what one poll returning all of them would have said.
    r.ret = mergeable_ ? static_cast<int32_t>(n_) : ret_;
    r.api = api_;
    r.n = n_;
    r.wr_id = wr_id_;
    r.status = status_;
    r.opcode = opcode_;
    r.vendor_err = rkey_;
    r.byte_len = bytes_;
    r.qp_num = qpn_;
    r.src_qp = src_qp_;
    r.wc_flags = flags_;
    r.imm = imm_;
    r.hw_ts = raddr_;
    r.ts = ts_;
    emit(&r);
}

}  // namespace sigmatrace::interpose::deferred
