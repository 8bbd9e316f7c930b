// One element of a data-path call as reordering and reconstruction consume it: one posted send WR, one posted
// receive (QP or SRQ), or one work completion, with its own capture time, who captured it and the fields
// reconstruction reads. A send WR is a verbs post or a WQE the watcher decoded out of a watched send ring (`ring`,
// with who wrote it: `poster`); a completion a verbs poll's or a CQE the watcher read (`ring`). The element
// decoder (element_decoder.h) makes them from a `deferred_records` event's records, and from the data events of
// older traces (schema minors 1-3, the events format; gpu_wqe and gpu_cqe before minor 6) through
// for_each_element below; everything after it handles one element at a time, never a call or a batch.
#pragma once

#include <sigmatrace/deferred_records.h>
#include <sigmatrace/opcodes.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "analyzer/decode/decoded_event.h"

namespace sigmatrace::analyzer {

enum class ElementKind : uint8_t { send, recv, srq_recv, completion };

// The fields few elements carry, kept beside them (ElementExtras) so that an element is one cache line: the
// reordering window holds tens of thousands of elements, and each byte of them is written and read back from
// beyond the first-level cache. A UD send's address handle and destination QPN; a ring WQE's address vector
// (UD and DC: destination QPN or DCT number, dlid, dgid); an error completion's vendor error (ibv_wc.vendor_err
// of a verbs poll; for a CQE the watcher read, its mlx5 syndrome | vendor syndrome << 8, deferred_records.h).
struct ElementExtra {
    uint64_t ah = 0;
    uint64_t dgid_prefix = 0, dgid_iid = 0;
    uint32_t remote_qpn = 0;
    uint32_t vendor_err = 0;
    uint16_t dlid = 0;
    bool any() const { return (ah | dgid_prefix | dgid_iid | remote_qpn | vendor_err | dlid) != 0; }
    bool operator==(const ElementExtra&) const = default;
};

// The event that carried an element: shared by all of that event's elements, so that an element stays small
// and a held run of them (reorder_stage.h) keeps one copy of the strings.
struct ElementOrigin {
    uint32_t trace_index = 0;
    int64_t vpid = -1;
    int64_t vtid = -1;
    std::string_view procname;
    std::string_view trace_hostname;
    int64_t event_ns = 0;   // the carrying event's timestamp (its emission; the watermark of reordering)
    uint64_t serial = 0;    // which event of the stream carried it: tells one event's elements from the next's
    const ElementExtra* extras = nullptr;   // its elements' extra fields (DataElement::extra_index)
};

struct DataElement {
    // An element whose extra fields are all zero (most of them) has none: extra() gives zeros.
    static constexpr uint16_t kNoExtra = UINT16_MAX;

    const ElementOrigin* origin = nullptr;
    int64_t ts_ns = 0;          // capture time, ns from origin (the carrying event's time when none was captured)
    ElementKind kind = ElementKind::send;
    uint8_t opcode = 0;         // sends: ibv_wr_opcode; completions: ibv_wc_opcode
    uint8_t status = 0;         // completions: ibv_wc_status
    // Ring elements: who wrote the WQE.
    records::Poster poster = records::Poster::verbs;
    // A post the call refused (ret != 0, at or after bad_index): not posted, counted as a post error.
    bool rejected = false;
    // The first element of an events-format data event: that trace event is counted with it (a
    // `deferred_records` carrier is counted as itself). `malformed`: that event's sequences disagreed.
    bool counts_event : 1 = false;
    bool malformed : 1 = false;
    // Ring elements: a WQE (wr_id its unwrapped producer index, whose low 16 bits a CQE names; opcode
    // records::kNoWrOpcode when it moves no data) or a CQE (wr_id its wqe_counter).
    bool ring : 1 = false;
    uint16_t extra_index = kNoExtra;   // in origin->extras
    uint32_t bytes = 0;         // posts: bytes of the WR; completions: byte_len
    uint32_t qp_num = 0;        // posts: the QP's number (0 for an SRQ); completions: the completing QP's
    uint64_t handle = 0;        // the QP (send, recv), the SRQ (srq_recv) or the CQ (completion)
    uint64_t wr_id = 0;
    uint32_t send_flags = 0;
    uint32_t rkey = 0;
    uint64_t raddr = 0;

    const ElementExtra& extra() const {
        static constexpr ElementExtra kNone{};
        return extra_index == kNoExtra ? kNone : origin->extras[extra_index];
    }
};
static_assert(sizeof(DataElement) == 64, "an element is one cache line (ElementExtra says why)");

// The extra fields of one carrying event's elements, which their origin points at: the element decoder keeps
// the current event's, a reordering stage a held run's.
class ElementExtras {
public:
    void clear() { v_.clear(); }
    // Gives `e` (of `origin`) the extra fields `x`, none when they are all zero. False when the event already
    // has as many as an element can index (a damaged trace: the element keeps none).
    [[gnu::always_inline]] bool set(DataElement& e, const ElementExtra& x, ElementOrigin& origin) {
        if (!x.any()) [[likely]] {
            e.extra_index = DataElement::kNoExtra;
            return true;
        }
        return add(e, x, origin);
    }

private:
    [[gnu::noinline]] bool add(DataElement& e, const ElementExtra& x, ElementOrigin& origin) {
        if (v_.size() >= DataElement::kNoExtra) {
            e.extra_index = DataElement::kNoExtra;
            return false;
        }
        e.extra_index = static_cast<uint16_t>(v_.size());
        v_.push_back(x);
        origin.extras = v_.data();   // it may have moved
        return true;
    }
    std::vector<ElementExtra> v_;
};

// The event an events-format element stands for (the one its counts_event counts).
inline EventId event_of(ElementKind k, bool ring = false) {
    if (ring) return k == ElementKind::completion ? EventId::gpu_cqe : EventId::gpu_wqe;
    switch (k) {
    case ElementKind::send: return EventId::post_send;
    case ElementKind::recv: return EventId::post_recv;
    case ElementKind::srq_recv: return EventId::post_srq_recv;
    case ElementKind::completion: return EventId::poll_cq;
    }
    return EventId::count_;
}

inline bool is_data_event(EventId id) {
    return id == EventId::post_send || id == EventId::post_recv || id == EventId::post_srq_recv || id == EventId::poll_cq ||
           id == EventId::gpu_wqe || id == EventId::gpu_cqe;
}

// Whether WR `index` of a post call (counted across a long chain's parts) was refused: the call failed
// (`ret` != 0) and the WR is at or after `bad_index` (every WR when bad_index is unknown, < 0).
inline bool post_rejected(int64_t ret, int64_t bad_index, uint64_t index) {
    return ret != 0 && (bad_index < 0 || static_cast<int64_t>(index) >= bad_index);
}

// The adapter for the events format: hands each element of data event `ev` (post_send, post_recv,
// post_srq_recv or poll_cq, as schema minors 1-3 and SIGMATRACE_DEFER_FORMAT=events wrote them; gpu_wqe and
// gpu_cqe, as the watcher wrote them before minor 6: WQEs posted by a GPU, the only poster those traces knew) to
// `emit(const DataElement&)`, in order, the first one with counts_event. Returns how many; 0 for an event
// without elements (the caller counts that event itself) or of another id. `malformed` is set when the
// sequences disagree with `n` (those elements still go out, bounded by the shortest reading as zeros).
template <typename Emit>
uint32_t for_each_element(const DecodedEvent& ev, ElementOrigin& origin, ElementExtras& extras, bool& malformed, Emit&& emit) {
    namespace F = fields;
    DataElement e;
    e.origin = &origin;
    uint32_t n = 0;
    switch (ev.id) {
    case EventId::post_send: {
        n = ev.batch_size(F::post_send::n, malformed, F::post_send::ts);
        e.kind = ElementKind::send;
        e.handle = ev.u(F::post_send::qp);
        e.qp_num = static_cast<uint32_t>(ev.u(F::post_send::qp_num));
        const int64_t ret = ev.i64(F::post_send::ret), bad = ev.i64(F::post_send::bad_index);
        const uint64_t offset = ev.u(F::post_send::batch_offset);
        for (uint32_t k = 0; k < n; ++k) {
            e.counts_event = k == 0;
            e.malformed = k == 0 && malformed;
            e.ts_ns = ev.element_ts(F::post_send::ts, k);
            e.rejected = post_rejected(ret, bad, offset + k);
            e.wr_id = ev.at(F::post_send::wr_id, k);
            e.opcode = static_cast<uint8_t>(ev.at(F::post_send::opcode, k));
            e.send_flags = static_cast<uint32_t>(ev.at(F::post_send::send_flags, k));
            e.bytes = static_cast<uint32_t>(ev.at(F::post_send::bytes, k));
            e.raddr = ev.at(F::post_send::raddr, k);
            e.rkey = static_cast<uint32_t>(ev.at(F::post_send::rkey, k));
            ElementExtra x;
            x.remote_qpn = static_cast<uint32_t>(ev.at(F::post_send::remote_qpn, k));
            x.ah = ev.at(F::post_send::ah, k);
            malformed = !extras.set(e, x, origin) || malformed;
            emit(static_cast<const DataElement&>(e));
        }
        break;
    }
    case EventId::post_recv:
    case EventId::post_srq_recv: {
        const bool srq = ev.id == EventId::post_srq_recv;
        // post_recv and post_srq_recv share their field order but not their indexes' names.
        const int n_f = srq ? int{F::post_srq_recv::n} : int{F::post_recv::n}, ts_f = srq ? int{F::post_srq_recv::ts} : int{F::post_recv::ts};
        n = ev.batch_size(n_f, malformed, ts_f);
        e.kind = srq ? ElementKind::srq_recv : ElementKind::recv;
        e.handle = srq ? ev.u(F::post_srq_recv::srq) : ev.u(F::post_recv::qp);
        e.qp_num = srq ? 0 : static_cast<uint32_t>(ev.u(F::post_recv::qp_num));
        const int64_t ret = ev.i64(srq ? int{F::post_srq_recv::ret} : int{F::post_recv::ret});
        const int64_t bad = ev.i64(srq ? int{F::post_srq_recv::bad_index} : int{F::post_recv::bad_index});
        const uint64_t offset = ev.u(srq ? int{F::post_srq_recv::batch_offset} : int{F::post_recv::batch_offset});
        const int wr_f = srq ? int{F::post_srq_recv::wr_id} : int{F::post_recv::wr_id};
        const int bytes_f = srq ? int{F::post_srq_recv::bytes} : int{F::post_recv::bytes};
        for (uint32_t k = 0; k < n; ++k) {
            e.counts_event = k == 0;
            e.malformed = k == 0 && malformed;
            e.ts_ns = ev.element_ts(ts_f, k);
            e.rejected = post_rejected(ret, bad, offset + k);
            e.wr_id = ev.at(wr_f, k);
            e.bytes = static_cast<uint32_t>(ev.at(bytes_f, k));
            emit(static_cast<const DataElement&>(e));
        }
        break;
    }
    case EventId::poll_cq: {
        n = ev.batch_size(F::poll_cq::n, malformed, F::poll_cq::ts);
        e.kind = ElementKind::completion;
        e.handle = ev.u(F::poll_cq::cq);
        for (uint32_t k = 0; k < n; ++k) {
            e.counts_event = k == 0;
            e.malformed = k == 0 && malformed;
            e.ts_ns = ev.element_ts(F::poll_cq::ts, k);
            e.qp_num = static_cast<uint32_t>(ev.at(F::poll_cq::qp_num, k));
            e.wr_id = ev.at(F::poll_cq::wr_id, k);
            e.status = static_cast<uint8_t>(ev.at(F::poll_cq::status, k));
            ElementExtra x;
            x.vendor_err = e.status != 0 ? static_cast<uint32_t>(ev.at(F::poll_cq::vendor_err, k)) : 0;
            malformed = !extras.set(e, x, origin) || malformed;
            e.opcode = static_cast<uint8_t>(ev.at(F::poll_cq::opcode, k));
            e.bytes = static_cast<uint32_t>(ev.at(F::poll_cq::byte_len, k));
            emit(static_cast<const DataElement&>(e));
        }
        break;
    }
    case EventId::gpu_wqe: {
        n = ev.batch_size(F::gpu_wqe::n, malformed);
        e.kind = ElementKind::send;
        e.ring = true;
        e.poster = records::Poster::gpu;
        e.qp_num = static_cast<uint32_t>(ev.u(F::gpu_wqe::qpn));
        e.ts_ns = ev.ts_ns;
        for (uint32_t k = 0; k < n; ++k) {
            e.counts_event = k == 0;
            e.malformed = k == 0 && malformed;
            // Only the index's low 16 bits were recorded: all a CQE names.
            e.wr_id = ev.at(F::gpu_wqe::wqe_index, k);
            const int op = wr_opcode_from_mlx5(static_cast<uint8_t>(ev.at(F::gpu_wqe::opcode, k)));
            e.opcode = op < 0 ? records::kNoWrOpcode : static_cast<uint8_t>(op);
            e.send_flags = (ev.at(F::gpu_wqe::fm_ce_se, k) & 0x08) != 0 ? records::kRingSignaled : 0;
            e.bytes = static_cast<uint32_t>(ev.at(F::gpu_wqe::bytes, k));
            e.raddr = ev.at(F::gpu_wqe::raddr, k);
            e.rkey = static_cast<uint32_t>(ev.at(F::gpu_wqe::rkey, k));
            emit(static_cast<const DataElement&>(e));
        }
        break;
    }
    case EventId::gpu_cqe: {
        constexpr uint8_t kReq = 0, kRespWrImm = 1, kReqErr = 13, kRespErr = 14;  // mlx5 CQE opcodes
        n = ev.batch_size(F::gpu_cqe::n, malformed);
        e.kind = ElementKind::completion;
        e.ring = true;
        e.ts_ns = ev.ts_ns;
        for (uint32_t k = 0; k < n; ++k) {
            e.counts_event = k == 0;
            e.malformed = k == 0 && malformed;
            const auto op = static_cast<uint8_t>(ev.at(F::gpu_cqe::opcode, k));
            e.qp_num = static_cast<uint32_t>(ev.at(F::gpu_cqe::qpn, k));
            e.wr_id = ev.at(F::gpu_cqe::wqe_counter, k);
            const bool error = op == kReqErr || op == kRespErr;
            e.status = error ? wc_status_from_mlx5_syndrome(static_cast<uint8_t>(ev.at(F::gpu_cqe::syndrome, k))) : 0;
            ElementExtra x;
            x.vendor_err = error ? static_cast<uint8_t>(ev.at(F::gpu_cqe::syndrome, k)) : 0;
            malformed = !extras.set(e, x, origin) || malformed;
            // A requester's (0: its WQE's kind is not recorded) or a responder's.
            e.opcode = op == kReq || op == kReqErr ? 0 : op == kRespWrImm ? 129 : 128;
            e.bytes = static_cast<uint32_t>(ev.at(F::gpu_cqe::byte_cnt, k));
            emit(static_cast<const DataElement&>(e));
        }
        break;
    }
    default: break;
    }
    return n;
}

}  // namespace sigmatrace::analyzer
