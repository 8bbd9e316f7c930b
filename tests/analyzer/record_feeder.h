// Feeds st_<event>_rec records (the tracer's own record structs) to an Analysis (or any EventSink, such as the
// reordering stage in front of one) as decoded events, the way the Babeltrace2 decoder would after LTTng
// serialized them: unit tests write events exactly as call sites do. Sequences live in the feeder's buffers,
// overwritten by the next event, as the decoder's are; `ts` elements are written as given (already ns from
// origin, what the decoder hands over after converting them).
#pragma once

#include <sigmatrace/deferred_records_wire.h>
#include <sigmatrace/schema.h>

#include <array>
#include <type_traits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/decoded_event.h"
#include "analyzer/decode/event_sink.h"
#include "analyzer/decode/unread_fields.h"

namespace sigmatrace::analyzer::test {

class RecordFeeder {
public:
    explicit RecordFeeder(EventSink& a) : a_(a) {}

    // Emits `rec` as process `vpid` of trace `trace` at time `ts` (ns).
    template <typename Rec> void emit(int64_t ts, int64_t vpid, const Rec& rec, uint32_t trace = 0) {
        emit_with(ts, vpid, rec, [](DecodedEvent&) {}, trace);
    }
    // A `deferred_records` carrier of `words` (records encoded as testing::encode_words does) as process `vpid`
    // at time `ts`.
    void emit_words(int64_t ts, int64_t vpid, const std::vector<uint64_t>& words) {
        st_deferred_records_rec r{};
        r.layout = records::kLayout;
        r.n = static_cast<uint32_t>(words.size());
        r.words = words.data();
        emit(ts, vpid, r);
    }
    // The same, letting `mutate` corrupt the decoded event first (malformed-input tests).
    template <typename Rec, typename F>
    void emit_with(int64_t ts, int64_t vpid, const Rec& rec, F mutate, uint32_t trace = 0) {
        DecodedEvent ev;
        ev.ts_ns = ts;
        ev.vpid = vpid;
        ev.trace_index = trace;
        ev.trace_hostname = trace < hostnames_.size() ? std::string_view(hostnames_[trace]) : "testhost";
        fill(ev, rec);
        if (scramble_unread_) scramble_unread(ev);
        mutate(ev);
        a_.on_event(ev);
    }

    // The hostname of each trace's environment, by trace index (else "testhost"): the hosts of a multi-host trace.
    void set_trace_hostnames(std::vector<std::string> names) { hostnames_ = std::move(names); }

    // From now on, fills the sequences no analysis reads (unread_fields.h) with garbage instead of the record's
    // values, as a check that the analysis indeed never reads them.
    void scramble_unread_sequences() { scramble_unread_ = true; }
    uint64_t scrambled_elements() const { return scrambled_; }

private:
    void scramble_unread(DecodedEvent& ev) {
        for (const UnreadField& u : kUnreadSequences) {
            if (u.event != ev.id) continue;
            FieldValue& f = ev.f[static_cast<std::size_t>(u.field)];
            auto& buf = storage_[static_cast<std::size_t>(u.field)];
            for (uint32_t k = 0; k < f.seq_len; ++k) buf[k] = 0x5a5a5a5a00000000ull + 977 * ++scrambled_;
        }
    }
    template <typename T> void set_int(DecodedEvent& ev, int& i, T v) {
        FieldValue& f = ev.f[static_cast<std::size_t>(i++)];
        f.present = true;
        if constexpr (std::is_signed_v<T>)
            f.u = static_cast<uint64_t>(static_cast<int64_t>(v));
        else
            f.u = static_cast<uint64_t>(v);
    }
    void set_str(DecodedEvent& ev, int& i, const char* s) {
        FieldValue& f = ev.f[static_cast<std::size_t>(i++)];
        f.present = true;
        f.s = s ? s : "";
    }
    template <typename T> void set_seq(DecodedEvent& ev, int& i, const T* p, uint32_t n) {
        auto& buf = storage_[static_cast<std::size_t>(i)];
        buf.assign(n, 0);
        for (uint32_t k = 0; k < n && p; ++k) buf[k] = static_cast<uint64_t>(p[k]);
        FieldValue& f = ev.f[static_cast<std::size_t>(i++)];
        f.present = true;
        f.is_sequence = true;
        f.seq = buf.data();
        f.seq_len = p ? n : 0;
    }

#define RF_INT_(type, name, comment) set_int(ev, i, r.name);
#define RF_STR_(name, comment) set_str(ev, i, r.name);
#define RF_SEQ_(type, name, comment) set_seq(ev, i, r.name, r.n);
#define RF_EVENT_(event, comment)                                                                              \
    void fill(DecodedEvent& ev, const st_##event##_rec& r) {                                                   \
        ev.id = EventId::event;                                                                                \
        int i = 0;                                                                                             \
        SIGMATRACE_FIELDS_##event(RF_INT_, RF_INT_, RF_STR_, RF_SEQ_, RF_SEQ_)                                 \
    }
    SIGMATRACE_EVENTS(RF_EVENT_)
#undef RF_EVENT_
#undef RF_SEQ_
#undef RF_STR_
#undef RF_INT_

    EventSink& a_;
    std::array<std::vector<uint64_t>, kMaxEventFields> storage_;
    std::vector<std::string> hostnames_;
    bool scramble_unread_ = false;
    uint64_t scrambled_ = 0;
};

// A post_send record of one-SGE WRs (ids given; RDMA WRITE, signaled, `bytes` each unless changed through
// the vectors), owning its sequences: tests set what differs on `rec` or the vectors, then emit `rec`.
// Capture times are 0 (immediate) unless `ts` is filled.
struct PostSendBatch {
    explicit PostSendBatch(std::vector<uint64_t> ids, uint32_t bytes = 4096)
        : wr_id(std::move(ids)), n(static_cast<uint32_t>(wr_id.size())), opcode(n, 0), send_flags(n, 2), num_sge(n, 1),
          len(n, bytes), raddr(n, 0), rkey(n, 0), zero32(n, 0), zero64(n, 0), ts(n, 0) {
        rec.bad_index = -1;
        rec.n = n;
        point();
    }
    PostSendBatch(const PostSendBatch&) = delete;
    PostSendBatch& operator=(const PostSendBatch&) = delete;
    // Re-points rec's sequences at the vectors (after a vector was replaced).
    void point() {
        rec.wr_id = wr_id.data();
        rec.opcode = opcode.data();
        rec.send_flags = send_flags.data();
        rec.num_sge = num_sge.data();
        rec.bytes = len.data();
        rec.raddr = raddr.data();
        rec.rkey = rkey.data();
        rec.imm = zero32.data();
        rec.remote_qpn = zero32.data();
        rec.ah = zero64.data();
        rec.ts = ts.data();
    }
    std::vector<uint64_t> wr_id;
    uint32_t n;
    std::vector<uint8_t> opcode;
    std::vector<uint32_t> send_flags;
    std::vector<uint16_t> num_sge;
    std::vector<uint32_t> len;
    std::vector<uint64_t> raddr;
    std::vector<uint32_t> rkey, zero32;
    std::vector<uint64_t> zero64, ts;
    st_post_send_rec rec{};
};

// A post_recv or post_srq_recv record (`Rec`) of one-SGE receives (ids given, `bytes` each), owning its
// sequences: tests name the queue on `rec` (qp and qp_num, or srq), then emit `rec`.
template <typename Rec> struct RecvBatch {
    RecvBatch(std::vector<uint64_t> ids, uint32_t bytes)
        : wr_id(std::move(ids)), num_sge(wr_id.size(), 1), len(wr_id.size(), bytes), ts(wr_id.size(), 0) {
        rec.bad_index = -1;
        rec.n = static_cast<uint32_t>(wr_id.size());
        rec.wr_id = wr_id.data();
        rec.num_sge = num_sge.data();
        rec.bytes = len.data();
        rec.ts = ts.data();
    }
    RecvBatch(const RecvBatch&) = delete;
    RecvBatch& operator=(const RecvBatch&) = delete;
    std::vector<uint64_t> wr_id;
    std::vector<uint16_t> num_sge;
    std::vector<uint32_t> len;
    std::vector<uint64_t> ts;
    Rec rec{};
};

// A poll_cq record of successful completions (ids given; wc opcode RDMA WRITE unless changed), ret = n,
// owning its sequences; capture times 0 unless `ts` is filled.
struct PollBatch {
    explicit PollBatch(std::vector<uint64_t> ids, uint32_t qp_num = 0)
        : wr_id(std::move(ids)), n(static_cast<uint32_t>(wr_id.size())), status(n, 0), opcode(n, 1), byte_len(n, 0),
          qpn(n, qp_num), vendor_err(n, 0), zero32(n, 0), zero64(n, 0), ts(n, 0) {
        rec.cq = 0xcc;
        rec.ret = static_cast<int32_t>(n);
        rec.n = n;
        point();
    }
    PollBatch(const PollBatch&) = delete;
    PollBatch& operator=(const PollBatch&) = delete;
    void point() {
        rec.wr_id = wr_id.data();
        rec.status = status.data();
        rec.opcode = opcode.data();
        rec.vendor_err = vendor_err.data();
        rec.byte_len = byte_len.data();
        rec.qp_num = qpn.data();
        rec.src_qp = zero32.data();
        rec.wc_flags = zero32.data();
        rec.imm = zero32.data();
        rec.hw_ts = zero64.data();
        rec.ts = ts.data();
    }
    std::vector<uint64_t> wr_id;
    uint32_t n;
    std::vector<uint8_t> status, opcode;
    std::vector<uint32_t> byte_len, qpn, vendor_err, zero32;
    std::vector<uint64_t> zero64, ts;
    st_poll_cq_rec rec{};
};

}  // namespace sigmatrace::analyzer::test
