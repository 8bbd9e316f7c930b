#include "analyzer/decode/element_decoder.h"

#include <cstddef>

namespace sigmatrace::analyzer {

namespace {
namespace R = records;
constexpr int kSend = static_cast<int>(R::RecordKind::post_send);
constexpr int kRecv = static_cast<int>(R::RecordKind::post_recv);
constexpr int kPoll = static_cast<int>(R::RecordKind::poll_cq);
constexpr int kRing = static_cast<int>(R::RecordKind::ring_post);
// post_srq_recv records are read through post_recv's fields: the two kinds must have the same ones.
constexpr bool same_fields(const R::KindSpec& a, const R::KindSpec& b) {
    if (a.n_fixed != b.n_fixed || a.n_entry != b.n_entry) return false;
    for (int i = 0; i < a.n_fixed; ++i)
        if (a.fixed[i].offset != b.fixed[i].offset || a.fixed[i].width != b.fixed[i].width) return false;
    for (int i = 0; i < a.n_entry; ++i)
        if (a.entry[i].offset != b.entry[i].offset || a.entry[i].width != b.entry[i].width) return false;
    return true;
}
static_assert(same_fields(R::wire_detail::kSpecs[kRecv], R::wire_detail::kSpecs[static_cast<int>(R::RecordKind::post_srq_recv)]));

// Each field by its struct member: the wire's column order is the format's business.
template <int K> consteval std::size_t F(std::size_t offset) { return R::fixed_field_at<K>(offset); }
template <int K> consteval std::size_t C(std::size_t offset) { return R::entry_column_at<K>(offset); }
}  // namespace

void ElementDecoder::emit_record(const records::RecordView& v, int64_t event_ns) {
    DataElement e;
    e.origin = &origin_;
    e.ts_ns = DecodedEvent::capture_or(v.ts, event_ns);
    const uint32_t n = v.n;
    switch (v.kind) {
    case R::RecordKind::post_send: {
        e.kind = ElementKind::send;
        e.handle = v.fixed[F<kSend>(offsetof(R::SendFixed, qp))];
        e.qp_num = static_cast<uint32_t>(v.fixed[F<kSend>(offsetof(R::SendFixed, qp_num))]);
        const auto ret = static_cast<int32_t>(v.fixed[F<kSend>(offsetof(R::SendFixed, ret))]);
        const auto bad = static_cast<int32_t>(v.fixed[F<kSend>(offsetof(R::SendFixed, bad_index))]);
        const uint64_t offset = static_cast<uint32_t>(v.fixed[F<kSend>(offsetof(R::SendFixed, batch_offset))]);
        for (uint32_t k = 0; k < n; ++k) {
            e.rejected = post_rejected(ret, bad, offset + k);
            e.wr_id = v.entry<kSend, C<kSend>(offsetof(R::SendEntry, wr_id))>(k);
            e.opcode = static_cast<uint8_t>(v.entry<kSend, C<kSend>(offsetof(R::SendEntry, opcode))>(k));
            e.send_flags = static_cast<uint32_t>(v.entry<kSend, C<kSend>(offsetof(R::SendEntry, send_flags))>(k));
            e.bytes = static_cast<uint32_t>(v.entry<kSend, C<kSend>(offsetof(R::SendEntry, bytes))>(k));
            e.raddr = v.entry<kSend, C<kSend>(offsetof(R::SendEntry, raddr))>(k);
            e.rkey = static_cast<uint32_t>(v.entry<kSend, C<kSend>(offsetof(R::SendEntry, rkey))>(k));
            e.remote_qpn = static_cast<uint32_t>(v.entry<kSend, C<kSend>(offsetof(R::SendEntry, remote_qpn))>(k));
            e.ah = v.entry<kSend, C<kSend>(offsetof(R::SendEntry, ah))>(k);
            out_.on_element(e);
        }
        return;
    }
    case R::RecordKind::post_recv:
    case R::RecordKind::post_srq_recv: {
        const bool srq = v.kind == R::RecordKind::post_srq_recv;
        e.kind = srq ? ElementKind::srq_recv : ElementKind::recv;
        e.handle = v.fixed[F<kRecv>(offsetof(R::RecvFixed, handle))];
        e.qp_num = srq ? 0 : static_cast<uint32_t>(v.fixed[F<kRecv>(offsetof(R::RecvFixed, qp_num))]);
        const auto ret = static_cast<int32_t>(v.fixed[F<kRecv>(offsetof(R::RecvFixed, ret))]);
        const auto bad = static_cast<int32_t>(v.fixed[F<kRecv>(offsetof(R::RecvFixed, bad_index))]);
        const uint64_t offset = static_cast<uint32_t>(v.fixed[F<kRecv>(offsetof(R::RecvFixed, batch_offset))]);
        for (uint32_t k = 0; k < n; ++k) {
            e.rejected = post_rejected(ret, bad, offset + k);
            e.wr_id = v.entry<kRecv, C<kRecv>(offsetof(R::RecvEntry, wr_id))>(k);
            e.bytes = static_cast<uint32_t>(v.entry<kRecv, C<kRecv>(offsetof(R::RecvEntry, bytes))>(k));
            out_.on_element(e);
        }
        return;
    }
    case R::RecordKind::poll_cq: {
        e.kind = ElementKind::completion;
        e.handle = v.fixed[F<kPoll>(offsetof(R::PollFixed, cq))];
        e.ring = static_cast<uint32_t>(v.fixed[F<kPoll>(offsetof(R::PollFixed, api))]) == R::kApiRingCompletion;
        for (uint32_t k = 0; k < n; ++k) {
            e.qp_num = static_cast<uint32_t>(v.entry<kPoll, C<kPoll>(offsetof(R::CompletionEntry, qp_num))>(k));
            e.wr_id = v.entry<kPoll, C<kPoll>(offsetof(R::CompletionEntry, wr_id))>(k);
            e.status = static_cast<uint8_t>(v.entry<kPoll, C<kPoll>(offsetof(R::CompletionEntry, status))>(k));
            e.vendor_err = e.status != 0
                               ? static_cast<uint32_t>(v.entry<kPoll, C<kPoll>(offsetof(R::CompletionEntry, vendor_err))>(k))
                               : 0;
            e.opcode = static_cast<uint8_t>(v.entry<kPoll, C<kPoll>(offsetof(R::CompletionEntry, opcode))>(k));
            e.bytes = static_cast<uint32_t>(v.entry<kPoll, C<kPoll>(offsetof(R::CompletionEntry, byte_len))>(k));
            out_.on_element(e);
        }
        return;
    }
    case R::RecordKind::ring_post: {
        e.kind = ElementKind::send;
        e.ring = true;
        e.handle = v.fixed[F<kRing>(offsetof(R::RingPostFixed, queue))];
        e.qp_num = static_cast<uint32_t>(v.fixed[F<kRing>(offsetof(R::RingPostFixed, qp_num))]);
        e.poster = static_cast<R::Poster>(v.fixed[F<kRing>(offsetof(R::RingPostFixed, poster))]);
        for (uint32_t k = 0; k < n; ++k) {
            e.wr_id = v.entry<kRing, C<kRing>(offsetof(R::RingWqeEntry, pi))>(k);
            e.opcode = static_cast<uint8_t>(v.entry<kRing, C<kRing>(offsetof(R::RingWqeEntry, opcode))>(k));
            e.send_flags = static_cast<uint32_t>(v.entry<kRing, C<kRing>(offsetof(R::RingWqeEntry, send_flags))>(k));
            e.bytes = static_cast<uint32_t>(v.entry<kRing, C<kRing>(offsetof(R::RingWqeEntry, bytes))>(k));
            e.raddr = v.entry<kRing, C<kRing>(offsetof(R::RingWqeEntry, raddr))>(k);
            e.rkey = static_cast<uint32_t>(v.entry<kRing, C<kRing>(offsetof(R::RingWqeEntry, rkey))>(k));
            e.remote_qpn = static_cast<uint32_t>(v.entry<kRing, C<kRing>(offsetof(R::RingWqeEntry, dest_qpn))>(k));
            e.dlid = static_cast<uint16_t>(v.entry<kRing, C<kRing>(offsetof(R::RingWqeEntry, dlid))>(k));
            e.dgid_prefix = v.entry<kRing, C<kRing>(offsetof(R::RingWqeEntry, dgid_prefix))>(k);
            e.dgid_iid = v.entry<kRing, C<kRing>(offsetof(R::RingWqeEntry, dgid_iid))>(k);
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
        const records::WalkResult r = records::walk_views(
            words.seq, words.seq_len, [&](const records::RecordView& v) { emit_record(v, ev.ts_ns); },
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
