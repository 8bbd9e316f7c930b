#include "interpose/deferred_events.h"

#include "interpose/config.h"
#include "provider/trace.h"

namespace sigmatrace::interpose::deferred {
namespace {

constexpr uint32_t kBatch = SIGMATRACE_MAX_BATCH;

// Out of line: each expands one tracepoint body.
__attribute__((noinline)) void emit(const st_post_send_rec* r) noexcept { ST_TRACE_EMIT(post_send, r); }
__attribute__((noinline)) void emit(const st_post_recv_rec* r) noexcept { ST_TRACE_EMIT(post_recv, r); }
__attribute__((noinline)) void emit(const st_post_srq_recv_rec* r) noexcept { ST_TRACE_EMIT(post_srq_recv, r); }
__attribute__((noinline)) void emit(const st_poll_cq_rec* r) noexcept { ST_TRACE_EMIT(poll_cq, r); }

// Records hold one entry per WR (what the producer copies fastest); events hold one sequence per field.
void emit_post_send(const RecordHeader* h) noexcept {
    const SendFixed* f = fixed_part<SendFixed>(h);
    const SendEntry* e = entries<SendFixed, SendEntry>(h);
    const uint32_t redact = config().redact;
    const uint32_t n = h->n <= kBatch ? h->n : kBatch;
    uint64_t wr_id[kBatch], raddr[kBatch], ah[kBatch];
    uint8_t opcode[kBatch];
    uint32_t send_flags[kBatch], bytes[kBatch], rkey[kBatch], imm[kBatch], remote_qpn[kBatch];
    uint16_t num_sge[kBatch];
    for (uint32_t i = 0; i < n; ++i) {
        wr_id[i] = e[i].wr_id;
        opcode[i] = e[i].opcode;
        send_flags[i] = e[i].send_flags;
        num_sge[i] = e[i].num_sge;
        bytes[i] = e[i].bytes;
        raddr[i] = (redact & kRedactAddresses) ? 0 : e[i].raddr;
        rkey[i] = (redact & kRedactKeys) ? 0 : e[i].rkey;
        imm[i] = e[i].imm;
        remote_qpn[i] = e[i].remote_qpn;
        ah[i] = e[i].ah;
    }
    st_post_send_rec r{};
    r.qp = f->qp;
    r.qp_num = f->qp_num;
    r.ret = f->ret;
    r.bad_index = f->bad_index;
    r.api = f->api;
    r.batch_offset = f->batch_offset;
    r.n = n;
    r.wr_id = wr_id;
    r.opcode = opcode;
    r.send_flags = send_flags;
    r.num_sge = num_sge;
    r.bytes = bytes;
    r.raddr = raddr;
    r.rkey = rkey;
    r.imm = imm;
    r.remote_qpn = remote_qpn;
    r.ah = ah;
    uint64_t ts[kBatch];
    for (uint32_t i = 0; i < n; ++i) ts[i] = h->ts;
    r.ts = ts;
    emit(&r);
}

template <typename Rec> void emit_recv(const RecordHeader* h) noexcept {
    const RecvFixed* f = fixed_part<RecvFixed>(h);
    const RecvEntry* e = entries<RecvFixed, RecvEntry>(h);
    const uint32_t n = h->n <= kBatch ? h->n : kBatch;
    uint64_t wr_id[kBatch];
    uint16_t num_sge[kBatch];
    uint32_t bytes[kBatch];
    for (uint32_t i = 0; i < n; ++i) {
        wr_id[i] = e[i].wr_id;
        num_sge[i] = e[i].num_sge;
        bytes[i] = e[i].bytes;
    }
    Rec r{};
    if constexpr (requires { r.qp; }) {
        r.qp = f->handle;
        r.qp_num = f->qp_num;
    } else {
        r.srq = f->handle;
    }
    r.ret = f->ret;
    r.bad_index = f->bad_index;
    r.batch_offset = f->batch_offset;
    r.n = n;
    r.wr_id = wr_id;
    r.num_sge = num_sge;
    r.bytes = bytes;
    uint64_t ts[kBatch];
    for (uint32_t i = 0; i < n; ++i) ts[i] = h->ts;
    r.ts = ts;
    emit(&r);
}

void emit_poll(const RecordHeader* h) noexcept {
    const PollFixed* f = fixed_part<PollFixed>(h);
    const CompletionEntry* e = entries<PollFixed, CompletionEntry>(h);
    const uint32_t n = h->n <= kBatch ? h->n : kBatch;
    uint64_t wr_id[kBatch], hw_ts[kBatch];
    uint8_t status[kBatch], opcode[kBatch];
    uint32_t vendor_err[kBatch], byte_len[kBatch], qp_num[kBatch], src_qp[kBatch], wc_flags[kBatch], imm[kBatch];
    for (uint32_t i = 0; i < n; ++i) {
        wr_id[i] = e[i].wr_id;
        status[i] = e[i].status;
        opcode[i] = e[i].opcode;
        vendor_err[i] = e[i].vendor_err;
        byte_len[i] = e[i].byte_len;
        qp_num[i] = e[i].qp_num;
        src_qp[i] = e[i].src_qp;
        wc_flags[i] = e[i].wc_flags;
        imm[i] = e[i].imm;
        hw_ts[i] = e[i].hw_ts;
    }
    st_poll_cq_rec r{};
    r.cq = f->cq;
    r.ret = f->ret;
    r.api = f->api;
    r.n = n;
    r.wr_id = wr_id;
    r.status = status;
    r.opcode = opcode;
    r.vendor_err = vendor_err;
    r.byte_len = byte_len;
    r.qp_num = qp_num;
    r.src_qp = src_qp;
    r.wc_flags = wc_flags;
    r.imm = imm;
    r.hw_ts = hw_ts;
    uint64_t ts[kBatch];
    for (uint32_t i = 0; i < n; ++i) ts[i] = h->ts;
    r.ts = ts;
    emit(&r);
}

}  // namespace

void emit_record(const RecordHeader* rec) noexcept {
    switch (rec->kind) {
    case RecordKind::post_send: emit_post_send(rec); break;
    case RecordKind::post_recv: emit_recv<st_post_recv_rec>(rec); break;
    case RecordKind::post_srq_recv: emit_recv<st_post_srq_recv_rec>(rec); break;
    case RecordKind::poll_cq: emit_poll(rec); break;
    case RecordKind::pad: break;
    }
}

}  // namespace sigmatrace::interpose::deferred
