#include "analyzer/decode/element_decoder.h"

#include <sigmatrace/deferred_records_wire.h>

namespace sigmatrace::analyzer {

void ElementDecoder::emit_record(const records::RecordHeader& h, int64_t event_ns) {
    namespace R = records;
    DataElement e;
    e.origin = &origin_;
    e.ts_ns = DecodedEvent::capture_or(h.ts, event_ns);
    const uint32_t n = h.n;
    switch (h.kind) {
    case R::RecordKind::post_send: {
        const R::SendFixed* f = R::fixed_part<R::SendFixed>(&h);
        const R::SendEntry* en = R::entries<R::SendFixed, R::SendEntry>(&h);
        e.kind = ElementKind::send;
        e.handle = f->qp;
        e.qp_num = f->qp_num;
        for (uint32_t k = 0; k < n; ++k) {
            e.rejected = post_rejected(f->ret, f->bad_index, uint64_t{f->batch_offset} + k);
            e.wr_id = en[k].wr_id;
            e.opcode = en[k].opcode;
            e.send_flags = en[k].send_flags;
            e.bytes = en[k].bytes;
            e.raddr = en[k].raddr;
            e.rkey = en[k].rkey;
            e.remote_qpn = en[k].remote_qpn;
            e.ah = en[k].ah;
            out_.on_element(e);
        }
        return;
    }
    case R::RecordKind::post_recv:
    case R::RecordKind::post_srq_recv: {
        const R::RecvFixed* f = R::fixed_part<R::RecvFixed>(&h);
        const R::RecvEntry* en = R::entries<R::RecvFixed, R::RecvEntry>(&h);
        const bool srq = h.kind == R::RecordKind::post_srq_recv;
        e.kind = srq ? ElementKind::srq_recv : ElementKind::recv;
        e.handle = f->handle;
        e.qp_num = srq ? 0 : f->qp_num;
        for (uint32_t k = 0; k < n; ++k) {
            e.rejected = post_rejected(f->ret, f->bad_index, uint64_t{f->batch_offset} + k);
            e.wr_id = en[k].wr_id;
            e.bytes = en[k].bytes;
            out_.on_element(e);
        }
        return;
    }
    case R::RecordKind::poll_cq: {
        const R::PollFixed* f = R::fixed_part<R::PollFixed>(&h);
        const R::CompletionEntry* en = R::entries<R::PollFixed, R::CompletionEntry>(&h);
        e.kind = ElementKind::completion;
        e.handle = f->cq;
        e.ring = f->api == R::kApiRingCompletion;
        for (uint32_t k = 0; k < n; ++k) {
            e.qp_num = en[k].qp_num;
            e.wr_id = en[k].wr_id;
            e.status = en[k].status;
            e.vendor_err = en[k].status != 0 ? en[k].vendor_err : 0;
            e.opcode = en[k].opcode;
            e.bytes = en[k].byte_len;
            out_.on_element(e);
        }
        return;
    }
    case R::RecordKind::ring_post: {
        const R::RingPostFixed* f = R::fixed_part<R::RingPostFixed>(&h);
        const R::RingWqeEntry* en = R::entries<R::RingPostFixed, R::RingWqeEntry>(&h);
        e.kind = ElementKind::send;
        e.ring = true;
        e.handle = f->queue;
        e.qp_num = f->qp_num;
        e.poster = static_cast<R::Poster>(f->poster);
        for (uint32_t k = 0; k < n; ++k) {
            e.wr_id = en[k].pi;
            e.opcode = en[k].opcode;
            e.send_flags = en[k].send_flags;
            e.bytes = en[k].bytes;
            e.raddr = en[k].raddr;
            e.rkey = en[k].rkey;
            e.remote_qpn = en[k].dest_qpn;
            e.dlid = en[k].dlid;
            e.dgid_prefix = en[k].dgid_prefix;
            e.dgid_iid = en[k].dgid_iid;
            out_.on_element(e);
        }
        return;
    }
    case R::RecordKind::pad: return;
    }
}

void ElementDecoder::on_event(const DecodedEvent& ev) {
    if (ev.id != EventId::deferred_records && !is_data_event(ev.id)) {
        out_.on_event(ev);
        return;
    }
    origin_ = ElementOrigin{ev.trace_index, ev.vpid, ev.vtid, ev.procname, ev.trace_hostname, ev.ts_ns, ++serial_};
    if (ev.id != EventId::deferred_records) {
        bool malformed = false;
        const uint32_t n = for_each_element(ev, origin_, malformed, [this](const DataElement& e) { out_.on_element(e); });
        // An event without elements (a failed call) is still an event of the trace: Analysis counts it.
        if (n == 0) out_.on_event(ev);
        return;
    }
    namespace F = fields::deferred_records;
    const FieldValue& words = ev.f[F::words];
    bool malformed = !records::layout_readable(ev.u(F::layout)) || words.seq_len != ev.u(F::n);
    if (records::layout_readable(ev.u(F::layout))) {
        const records::WalkResult r = records::walk_records(
            words.seq, words.seq_len, [&](const records::RecordHeader& h) { emit_record(h, ev.ts_ns); },
            [&ev](uint64_t t) { return ev.capture_to_ns != nullptr ? ev.capture_to_ns(ev.capture_ctx, t) : t; });
        malformed = malformed || r.status != records::WalkStatus::ok;
    }
    if (!malformed) {
        out_.on_event(ev);
        return;
    }
    DecodedEvent marked = ev;
    marked.inconsistent = true;
    out_.on_event(marked);
}

}  // namespace sigmatrace::analyzer
