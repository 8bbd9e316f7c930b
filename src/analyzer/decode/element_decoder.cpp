#include "analyzer/decode/element_decoder.h"

#include <cstddef>

namespace sigmatrace::analyzer {

// Where a record's elements go, with the extra fields of the event's elements (`full`: one found no room).
struct ElementTarget {
    EventSink& sink;
    ElementExtras& extras;
    ElementOrigin& origin;
    bool full = false;
    // Gives `e` the extra fields `x` (not all zero).
    void extra(DataElement& e, const ElementExtra& x) { full = !extras.set(e, x, origin) || full; }
};

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

// Field C (an entry column of kind K) of entry k. A record of one entry (most of them: a one-WR post) holds it in
// RecordView::known, where the walk left it: no present bit to test.
template <int K, std::size_t Col, bool kOne> uint64_t field(const R::RecordView& v, uint32_t k) {
    if constexpr (kOne) return v.known[Col];
    else return v.entry<K, Col>(k);
}

// Each hands on the elements of a record of its kind, the fixed fields already in `e`.
template <bool kOne> void emit_sends(const R::RecordView& v, DataElement& e, ElementTarget& to) {
    const auto ret = static_cast<int32_t>(v.fixed[F<kSend>(offsetof(R::SendFixed, ret))]);
    const auto bad = static_cast<int32_t>(v.fixed[F<kSend>(offsetof(R::SendFixed, bad_index))]);
    const uint64_t offset = static_cast<uint32_t>(v.fixed[F<kSend>(offsetof(R::SendFixed, batch_offset))]);
    for (uint32_t k = 0; k < v.n; ++k) {
        e.rejected = post_rejected(ret, bad, offset + k);
        e.wr_id = field<kSend, C<kSend>(offsetof(R::SendEntry, wr_id)), kOne>(v, k);
        e.opcode = static_cast<uint8_t>(field<kSend, C<kSend>(offsetof(R::SendEntry, opcode)), kOne>(v, k));
        e.send_flags = static_cast<uint32_t>(field<kSend, C<kSend>(offsetof(R::SendEntry, send_flags)), kOne>(v, k));
        e.bytes = static_cast<uint32_t>(field<kSend, C<kSend>(offsetof(R::SendEntry, bytes)), kOne>(v, k));
        e.raddr = field<kSend, C<kSend>(offsetof(R::SendEntry, raddr)), kOne>(v, k);
        e.rkey = static_cast<uint32_t>(field<kSend, C<kSend>(offsetof(R::SendEntry, rkey)), kOne>(v, k));
        // UD sends only: the test is all most elements pay.
        const auto remote_qpn = static_cast<uint32_t>(field<kSend, C<kSend>(offsetof(R::SendEntry, remote_qpn)), kOne>(v, k));
        const uint64_t ah = field<kSend, C<kSend>(offsetof(R::SendEntry, ah)), kOne>(v, k);
        e.extra_index = DataElement::kNoExtra;
        if ((ah | remote_qpn) != 0) [[unlikely]]
            to.extra(e, ElementExtra{.ah = ah, .remote_qpn = remote_qpn});
        to.sink.on_element(e);
    }
}

template <bool kOne> void emit_recvs(const R::RecordView& v, DataElement& e, ElementTarget& to) {
    const auto ret = static_cast<int32_t>(v.fixed[F<kRecv>(offsetof(R::RecvFixed, ret))]);
    const auto bad = static_cast<int32_t>(v.fixed[F<kRecv>(offsetof(R::RecvFixed, bad_index))]);
    const uint64_t offset = static_cast<uint32_t>(v.fixed[F<kRecv>(offsetof(R::RecvFixed, batch_offset))]);
    for (uint32_t k = 0; k < v.n; ++k) {
        e.rejected = post_rejected(ret, bad, offset + k);
        e.wr_id = field<kRecv, C<kRecv>(offsetof(R::RecvEntry, wr_id)), kOne>(v, k);
        e.bytes = static_cast<uint32_t>(field<kRecv, C<kRecv>(offsetof(R::RecvEntry, bytes)), kOne>(v, k));
        to.sink.on_element(e);
    }
}

template <bool kOne> void emit_completions(const R::RecordView& v, DataElement& e, ElementTarget& to) {
    for (uint32_t k = 0; k < v.n; ++k) {
        e.qp_num = static_cast<uint32_t>(field<kPoll, C<kPoll>(offsetof(R::CompletionEntry, qp_num)), kOne>(v, k));
        e.wr_id = field<kPoll, C<kPoll>(offsetof(R::CompletionEntry, wr_id)), kOne>(v, k);
        e.status = static_cast<uint8_t>(field<kPoll, C<kPoll>(offsetof(R::CompletionEntry, status)), kOne>(v, k));
        e.extra_index = DataElement::kNoExtra;
        if (e.status != 0) [[unlikely]] {
            const auto vendor_err = static_cast<uint32_t>(field<kPoll, C<kPoll>(offsetof(R::CompletionEntry, vendor_err)), kOne>(v, k));
            if (vendor_err != 0) to.extra(e, ElementExtra{.vendor_err = vendor_err});
        }
        e.opcode = static_cast<uint8_t>(field<kPoll, C<kPoll>(offsetof(R::CompletionEntry, opcode)), kOne>(v, k));
        e.bytes = static_cast<uint32_t>(field<kPoll, C<kPoll>(offsetof(R::CompletionEntry, byte_len)), kOne>(v, k));
        to.sink.on_element(e);
    }
}

template <bool kOne> void emit_ring_posts(const R::RecordView& v, DataElement& e, ElementTarget& to) {
    for (uint32_t k = 0; k < v.n; ++k) {
        e.wr_id = field<kRing, C<kRing>(offsetof(R::RingWqeEntry, pi)), kOne>(v, k);
        e.opcode = static_cast<uint8_t>(field<kRing, C<kRing>(offsetof(R::RingWqeEntry, opcode)), kOne>(v, k));
        e.send_flags = static_cast<uint32_t>(field<kRing, C<kRing>(offsetof(R::RingWqeEntry, send_flags)), kOne>(v, k));
        e.bytes = static_cast<uint32_t>(field<kRing, C<kRing>(offsetof(R::RingWqeEntry, bytes)), kOne>(v, k));
        e.raddr = field<kRing, C<kRing>(offsetof(R::RingWqeEntry, raddr)), kOne>(v, k);
        e.rkey = static_cast<uint32_t>(field<kRing, C<kRing>(offsetof(R::RingWqeEntry, rkey)), kOne>(v, k));
        ElementExtra x;
        x.remote_qpn = static_cast<uint32_t>(field<kRing, C<kRing>(offsetof(R::RingWqeEntry, dest_qpn)), kOne>(v, k));
        x.dlid = static_cast<uint16_t>(field<kRing, C<kRing>(offsetof(R::RingWqeEntry, dlid)), kOne>(v, k));
        x.dgid_prefix = field<kRing, C<kRing>(offsetof(R::RingWqeEntry, dgid_prefix)), kOne>(v, k);
        x.dgid_iid = field<kRing, C<kRing>(offsetof(R::RingWqeEntry, dgid_iid)), kOne>(v, k);
        e.extra_index = DataElement::kNoExtra;
        if (x.any()) to.extra(e, x);
        to.sink.on_element(e);
    }
}

template <void (*One)(const R::RecordView&, DataElement&, ElementTarget&), void (*Many)(const R::RecordView&, DataElement&, ElementTarget&)>
void emit(const R::RecordView& v, DataElement& e, ElementTarget& to) {
    if (v.n == 1) One(v, e, to);
    else Many(v, e, to);
}
}  // namespace

inline void ElementDecoder::emit_record(const records::RecordView& v, int64_t event_ns, ElementTarget& to) {
    DataElement& e = by_kind_[static_cast<std::size_t>(v.kind)];
    e.ts_ns = DecodedEvent::capture_or(v.ts, event_ns);
    switch (v.kind) {
    case R::RecordKind::post_send:
        e.kind = ElementKind::send;
        e.handle = v.fixed[F<kSend>(offsetof(R::SendFixed, qp))];
        e.qp_num = static_cast<uint32_t>(v.fixed[F<kSend>(offsetof(R::SendFixed, qp_num))]);
        emit<emit_sends<true>, emit_sends<false>>(v, e, to);
        return;
    case R::RecordKind::post_recv:
    case R::RecordKind::post_srq_recv: {
        const bool srq = v.kind == R::RecordKind::post_srq_recv;
        e.kind = srq ? ElementKind::srq_recv : ElementKind::recv;
        e.handle = v.fixed[F<kRecv>(offsetof(R::RecvFixed, handle))];
        e.qp_num = srq ? 0 : static_cast<uint32_t>(v.fixed[F<kRecv>(offsetof(R::RecvFixed, qp_num))]);
        emit<emit_recvs<true>, emit_recvs<false>>(v, e, to);
        return;
    }
    case R::RecordKind::poll_cq:
        e.kind = ElementKind::completion;
        e.handle = v.fixed[F<kPoll>(offsetof(R::PollFixed, cq))];
        e.ring = static_cast<uint32_t>(v.fixed[F<kPoll>(offsetof(R::PollFixed, api))]) == R::kApiRingCompletion;
        emit<emit_completions<true>, emit_completions<false>>(v, e, to);
        return;
    case R::RecordKind::ring_post:
        e.kind = ElementKind::send;
        e.ring = true;
        e.handle = v.fixed[F<kRing>(offsetof(R::RingPostFixed, queue))];
        e.qp_num = static_cast<uint32_t>(v.fixed[F<kRing>(offsetof(R::RingPostFixed, qp_num))]);
        e.poster = static_cast<R::Poster>(v.fixed[F<kRing>(offsetof(R::RingPostFixed, poster))]);
        emit<emit_ring_posts<true>, emit_ring_posts<false>>(v, e, to);
        return;
    case R::RecordKind::pad: return;
    }
}

void ElementDecoder::on_event(const DecodedEvent& ev) {
    if (ev.id != EventId::deferred_records && !is_data_event(ev.id)) {
        out_.on_event(ev);
        return;
    }
    origin_ = ElementOrigin{ev.trace_index, ev.vpid, ev.vtid, ev.procname, ev.trace_hostname, ev.ts_ns, ++serial_};
    extras_.clear();
    if (ev.id != EventId::deferred_records) {
        bool malformed = false;
        const uint32_t n = for_each_element(ev, origin_, extras_, malformed, [this](const DataElement& e) { out_.on_element(e); });
        // An event without elements (a failed call) is still an event of the trace: Analysis counts it.
        if (n == 0) out_.on_event(ev);
        return;
    }
    namespace F = fields::deferred_records;
    const FieldValue& words = ev.f[F::words];
    bool malformed = !records::layout_readable(ev.u(F::layout)) || words.seq_len != ev.u(F::n);
    if (records::layout_readable(ev.u(F::layout))) {
        ElementTarget to{out_, extras_, origin_};
        const records::WalkResult r = records::walk_views(
            words.seq, words.seq_len, [&](const records::RecordView& v) { emit_record(v, ev.ts_ns, to); },
            [&ev](uint64_t t) { return ev.capture_time(t); });
        malformed = malformed || r.status != records::WalkStatus::ok || to.full;
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
