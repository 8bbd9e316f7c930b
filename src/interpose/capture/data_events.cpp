#include "interpose/capture/data_events.h"

#include <cerrno>

#include <cstddef>

#include "interpose/capture/deferred_records_writer.h"
#include "interpose/state/hook_scope.h"
#include "interpose/capture/record_builder.h"

namespace sigmatrace::interpose {
namespace {

using namespace record_builder;

// One record and the event that carries it, on the calling thread's stack.
struct ImmediateEvent {
    alignas(16) std::byte record[records::kMaxRecordSize];
    records::EventWords<records::max_encoded_size(records::kMaxRecordSize)> words;
};

// The builder's target (record_builder.h) in immediate mode: each record becomes a `deferred_records` event of
// its own, written before the builder goes on (a chain longer than SIGMATRACE_MAX_BATCH is several, as its
// records are). Its capture time is 0: "the event's own timestamp", which is when the call was made.
struct ToEvent {
    ImmediateEvent* e;
    RecordHeader* begin(uint32_t) const noexcept { return reinterpret_cast<RecordHeader*>(e->record); }
    void commit(RecordHeader* h) const noexcept {
        e->words.reset();
        e->words.add(*h, 0, deferred::encode_options());
        uint32_t n = 0;
        const uint64_t* words = e->words.finish(&n);
        deferred::emit_records(words, n, 0, 0, 0);
    }
};

// Immediate emission: the event's timestamp is the capture time.
constexpr uint64_t kEventTime = 0;

}  // namespace

void emit_post_send(ibv_qp* qp, const ibv_send_wr* wr, int ret, ibv_send_wr* const* bad_wr) noexcept {
    KeepErrno keep;
    ImmediateEvent e;
    build_post_send(ToEvent{&e}, kEventTime, QpOf{qp}, wr, ret, bad_wr);
}

void emit_post_recv(ibv_qp* qp, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept {
    KeepErrno keep;
    ImmediateEvent e;
    build_post_recv<RecordKind::post_recv>(ToEvent{&e}, kEventTime, qp, wr, ret, bad_wr);
}

void emit_post_srq_recv(ibv_srq* srq, const ibv_recv_wr* wr, int ret, ibv_recv_wr* const* bad_wr) noexcept {
    KeepErrno keep;
    ImmediateEvent e;
    build_post_recv<RecordKind::post_srq_recv>(ToEvent{&e}, kEventTime, srq, wr, ret, bad_wr);
}

void emit_wr_list(const QpState& s, const WrRecord* records, uint32_t n, uint32_t first_index, int ret) noexcept {
    KeepErrno keep;
    ImmediateEvent e;
    build_wr_list(ToEvent{&e}, kEventTime, handle_of(s.qp.load(std::memory_order_relaxed)),
                  s.qp_num.load(std::memory_order_relaxed), records, n, first_index, ret);
}

void emit_poll_cq(ibv_cq* cq, const ibv_wc* wc, int ret) noexcept {
    KeepErrno keep;
    ImmediateEvent e;
    build_poll_cq(ToEvent{&e}, kEventTime, handle_of(cq), wc, ret);
}

void emit_completion_batch(const void* cq, const CompletionBatch& b) noexcept {
    KeepErrno keep;
    ImmediateEvent e;
    build_completion_batch(ToEvent{&e}, kEventTime, handle_of(cq), b);
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
