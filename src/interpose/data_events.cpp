#include "interpose/data_events.h"

#include <cerrno>

#include "interpose/config.h"
#include "interpose/wr_fields.h"
#include "provider/trace.h"

namespace sigmatrace::interpose {
namespace {

constexpr uint32_t kBatch = SIGMATRACE_MAX_BATCH;

// Restores errno on scope exit: tracing must never change what the application sees.
class ErrnoKeeper {
public:
    ErrnoKeeper() noexcept : saved_(errno) {}
    ~ErrnoKeeper() { errno = saved_; }
    ErrnoKeeper(const ErrnoKeeper&) = delete;
    ErrnoKeeper& operator=(const ErrnoKeeper&) = delete;

private:
    int saved_;
};

// Out-of-line emitters: each expands the (large) tracepoint body once.
__attribute__((noinline)) void emit(const st_post_send_rec* r) noexcept { ST_TRACE_EMIT(post_send, r); }
__attribute__((noinline)) void emit(const st_post_recv_rec* r) noexcept { ST_TRACE_EMIT(post_recv, r); }
__attribute__((noinline)) void emit(const st_post_srq_recv_rec* r) noexcept { ST_TRACE_EMIT(post_srq_recv, r); }
__attribute__((noinline)) void emit(const st_poll_cq_rec* r) noexcept { ST_TRACE_EMIT(poll_cq, r); }

// Immediate emission: every element's `ts` is 0 (the event's own timestamp is the capture time).
constexpr uint64_t kNoCaptureTime[kBatch] = {};

// Sequence storage for one post_send event.
struct SendBatch {
    uint64_t wr_id[kBatch];
    uint8_t opcode[kBatch];
    uint32_t send_flags[kBatch];
    uint16_t num_sge[kBatch];
    uint32_t bytes[kBatch];
    uint64_t raddr[kBatch];
    uint32_t rkey[kBatch];
    uint32_t imm[kBatch];
    uint32_t remote_qpn[kBatch];
    uint64_t ah[kBatch];

    void attach(st_post_send_rec& r) const noexcept {
        r.ts = kNoCaptureTime;
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
    }
};

struct RecvBatch {
    uint64_t wr_id[kBatch];
    uint16_t num_sge[kBatch];
    uint32_t bytes[kBatch];
};

// Fills and emits post_recv / post_srq_recv events (same sequences, different handle field).
template <typename Rec, typename Handle>
void trace_recv_chain(Handle* handle, uint32_t qp_num, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept {
    ErrnoKeeper keep;
    RecvBatch b;
    Rec r{};
    r.ts = kNoCaptureTime;
    if constexpr (requires { r.qp; }) {
        r.qp = reinterpret_cast<uint64_t>(handle);
        r.qp_num = qp_num;
    } else {
        r.srq = reinterpret_cast<uint64_t>(handle);
    }
    r.ret = ret;
    r.bad_index = bad_index_of(wr, ret, bad_wr);
    r.wr_id = b.wr_id;
    r.num_sge = b.num_sge;
    r.bytes = b.bytes;
    uint32_t offset = 0, n = 0;
    for (const ibv_recv_wr* w = wr; w != nullptr; w = w->next) {
        b.wr_id[n] = w->wr_id;
        b.num_sge[n] = static_cast<uint16_t>(w->num_sge);
        b.bytes[n] = sge_bytes(w->sg_list, w->num_sge);
        if (++n == kBatch) {
            r.batch_offset = offset;
            r.n = n;
            emit(&r);
            offset += n;
            n = 0;
        }
    }
    if (n > 0 || offset == 0) {
        r.batch_offset = offset;
        r.n = n;
        emit(&r);
    }
}

}  // namespace

void trace_post_send(ibv_qp* qp, const ibv_send_wr* wr, int ret, ibv_send_wr* const* bad_wr) noexcept {
    ErrnoKeeper keep;
    const uint32_t redact = config().redact;
    const bool ud = qp->qp_type == IBV_QPT_UD;
    SendBatch b;
    st_post_send_rec r{};
    r.qp = reinterpret_cast<uint64_t>(qp);
    r.qp_num = qp->qp_num;
    r.ret = ret;
    r.bad_index = bad_index_of(wr, ret, bad_wr);
    r.api = kApiPostSend;
    b.attach(r);
    uint32_t offset = 0, n = 0;
    for (const ibv_send_wr* w = wr; w != nullptr; w = w->next) {
        b.wr_id[n] = w->wr_id;
        b.opcode[n] = static_cast<uint8_t>(w->opcode);
        b.send_flags[n] = w->send_flags;
        b.num_sge[n] = static_cast<uint16_t>(w->num_sge);
        b.bytes[n] = sge_bytes(w->sg_list, w->num_sge);
        const RemoteTarget target = remote_target(*w, ud);
        b.raddr[n] = (redact & kRedactAddresses) ? 0 : target.raddr;
        b.rkey[n] = (redact & kRedactKeys) ? 0 : target.rkey;
        b.imm[n] = has_imm(w->opcode) ? w->imm_data : 0;
        b.remote_qpn[n] = ud ? w->wr.ud.remote_qpn : 0;
        b.ah[n] = ud ? reinterpret_cast<uint64_t>(w->wr.ud.ah) : 0;
        if (++n == kBatch) {
            r.batch_offset = offset;
            r.n = n;
            emit(&r);
            offset += n;
            n = 0;
        }
    }
    if (n > 0 || offset == 0) {
        r.batch_offset = offset;
        r.n = n;
        emit(&r);
    }
}

void trace_post_recv(ibv_qp* qp, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept {
    trace_recv_chain<st_post_recv_rec>(qp, qp->qp_num, wr, ret, bad_wr);
}

void trace_post_srq_recv(ibv_srq* srq, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept {
    trace_recv_chain<st_post_srq_recv_rec>(srq, 0, wr, ret, bad_wr);
}

void trace_wr_list(const QpState& s, const WrRecord* records, uint32_t n, uint32_t first_index, int ret) noexcept {
    ErrnoKeeper keep;
    const uint32_t redact = config().redact;
    SendBatch b;
    st_post_send_rec r{};
    r.qp = reinterpret_cast<uint64_t>(s.qp.load(std::memory_order_relaxed));
    r.qp_num = s.qp_num.load(std::memory_order_relaxed);
    r.ret = ret;
    // wr_complete posts all WRs of the list or none: on failure the first one is where it stopped.
    r.bad_index = ret != 0 ? 0 : -1;
    r.api = kApiWrBuilder;
    b.attach(r);
    uint32_t done = 0;
    while (done < n || (n == 0 && done == 0)) {
        const uint32_t k = (n - done) < kBatch ? (n - done) : kBatch;
        for (uint32_t i = 0; i < k; ++i) {
            const WrRecord& w = records[done + i];
            b.wr_id[i] = w.wr_id;
            b.opcode[i] = w.opcode;
            b.send_flags[i] = w.send_flags;
            b.num_sge[i] = w.num_sge;
            b.bytes[i] = w.bytes;
            b.raddr[i] = (redact & kRedactAddresses) ? 0 : w.raddr;
            b.rkey[i] = (redact & kRedactKeys) ? 0 : w.rkey;
            b.imm[i] = w.imm;
            b.remote_qpn[i] = w.remote_qpn;
            b.ah[i] = w.ah;
        }
        r.batch_offset = first_index + done;
        r.n = k;
        emit(&r);
        if (k == 0) break;
        done += k;
    }
}

void trace_poll_cq(ibv_cq* cq, const ibv_wc* wc, int ret) noexcept {
    ErrnoKeeper keep;
    CompletionBatch b;
    st_poll_cq_rec r{};
    r.cq = reinterpret_cast<uint64_t>(cq);
    r.ret = ret;
    r.api = kApiPollCq;
    r.ts = kNoCaptureTime;
    r.wr_id = b.wr_id;
    r.status = b.status;
    r.opcode = b.opcode;
    r.vendor_err = b.vendor_err;
    r.byte_len = b.byte_len;
    r.qp_num = b.qp_num;
    r.src_qp = b.src_qp;
    r.wc_flags = b.wc_flags;
    r.imm = b.imm;
    r.hw_ts = b.hw_ts;
    if (ret <= 0) {
        r.n = 0;
        emit(&r);
        return;
    }
    for (int done = 0; done < ret;) {
        const int k = (ret - done) < static_cast<int>(kBatch) ? (ret - done) : static_cast<int>(kBatch);
        for (int i = 0; i < k; ++i) {
            const ibv_wc& c = wc[done + i];
            b.wr_id[i] = c.wr_id;
            b.status[i] = static_cast<uint8_t>(c.status);
            b.opcode[i] = static_cast<uint8_t>(c.opcode);
            b.vendor_err[i] = c.vendor_err;
            b.byte_len[i] = c.byte_len;
            b.qp_num[i] = c.qp_num;
            b.src_qp[i] = c.src_qp;
            b.wc_flags[i] = c.wc_flags;
            b.imm[i] = (c.wc_flags & IBV_WC_WITH_IMM) ? c.imm_data : 0;
            b.hw_ts[i] = 0;
        }
        r.n = static_cast<uint32_t>(k);
        emit(&r);
        done += k;
    }
}

void trace_completion_batch(const void* cq, const CompletionBatch& b) noexcept {
    ErrnoKeeper keep;
    st_poll_cq_rec r{};
    r.cq = reinterpret_cast<uint64_t>(cq);
    r.ret = static_cast<int32_t>(b.n);
    r.api = kApiCqEx;
    r.ts = kNoCaptureTime;
    r.n = b.n;
    point_at_completions(r, b);
    emit(&r);
}

// ------------------------------------------------------------------------------------------- counters

void count_post_send(ibv_qp* qp, const ibv_send_wr* wr, int ret, ibv_send_wr* const* bad_wr) noexcept {
    QpState* s = qp_state_cached(qp);
    if (s == nullptr) return;
    const ibv_send_wr* stop = (ret != 0 && bad_wr != nullptr) ? *bad_wr : nullptr;
    uint64_t wrs = 0, bytes = 0;
    for (const ibv_send_wr* w = wr; w != nullptr && w != stop; w = w->next) {
        ++wrs;
        for (int i = 0; i < w->num_sge; ++i) bytes += w->sg_list[i].length;
    }
    s->counters.add_posted(wrs, bytes, 0, ret != 0 ? 1 : 0);
}

void count_post_recv(ibv_qp* qp, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept {
    QpState* s = qp_state_cached(qp);
    if (s == nullptr) return;
    const ibv_recv_wr* stop = (ret != 0 && bad_wr != nullptr) ? *bad_wr : nullptr;
    uint64_t wrs = 0;
    for (const ibv_recv_wr* w = wr; w != nullptr && w != stop; w = w->next) ++wrs;
    s->counters.add_posted(0, 0, wrs, ret != 0 ? 1 : 0);
}

void count_completions(const ibv_context* ctx, const ibv_wc* wc, int n) noexcept {
    // Completions come in runs from one QP: look each run's QP up once and add the run's totals.
    Registry& reg = Registry::instance();
    int i = 0;
    while (i < n) {
        const uint32_t qpn = wc[i].qp_num;
        uint64_t total = 0, errors = 0;
        for (; i < n && wc[i].qp_num == qpn; ++i) {
            ++total;
            errors += wc[i].status != IBV_WC_SUCCESS;
        }
        if (QpState* s = reg.qp_by_number(ctx, qpn)) s->counters.add_completions(total, errors);
    }
}

void count_completion(const ibv_context* ctx, uint32_t qp_num, bool error) noexcept {
    if (QpState* s = Registry::instance().qp_by_number(ctx, qp_num)) s->counters.add_completions(1, error ? 1 : 0);
}

}  // namespace sigmatrace::interpose
