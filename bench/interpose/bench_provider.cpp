#include "bench_provider.h"

#include <cstring>

namespace sigmatrace::bench {
namespace {

int g_completions_per_poll = 1;
ibv_wc g_template[64];
// Written by the fakes so the compiler cannot drop their work.
volatile uint64_t g_sink = 0;

int post_send(ibv_qp*, ibv_send_wr* wr, ibv_send_wr**) {
    uint64_t s = 0;
    for (ibv_send_wr* w = wr; w != nullptr; w = w->next) s += w->wr_id;
    g_sink = s;
    return 0;
}
int post_recv(ibv_qp*, ibv_recv_wr* wr, ibv_recv_wr**) {
    g_sink = wr->wr_id;
    return 0;
}
int poll_cq(ibv_cq*, int n, ibv_wc* wc) {
    const int k = n < g_completions_per_poll ? n : g_completions_per_poll;
    std::memcpy(wc, g_template, sizeof(ibv_wc) * static_cast<size_t>(k));
    return k;
}
int req_notify_cq(ibv_cq*, int) {
    return 0;
}
void wr_start(ibv_qp_ex*) {}
void wr_rdma_write(ibv_qp_ex* q, uint32_t, uint64_t) {
    g_sink = q->wr_id;
}
void wr_set_sge(ibv_qp_ex*, uint32_t, uint64_t, uint32_t length) {
    g_sink = length;
}
int wr_complete(ibv_qp_ex*) {
    return 0;
}
void wr_abort(ibv_qp_ex*) {}

}  // namespace

void set_completions_per_poll(int n) {
    g_completions_per_poll = n;
    for (int i = 0; i < 64; ++i) {
        g_template[i] = ibv_wc{};
        g_template[i].wr_id = static_cast<uint64_t>(i);
        g_template[i].opcode = IBV_WC_RDMA_WRITE;
        g_template[i].qp_num = 0x100;
        g_template[i].byte_len = 4096;
    }
}

BenchDevice::BenchDevice() {
    std::strcpy(device_.name, "bench0");
    vctx_.sz = sizeof(verbs_context);
    ibv_context& c = vctx_.context;
    c.device = &device_;
    c.abi_compat = __VERBS_ABI_IS_EXTENDED;
    c.ops.post_send = &post_send;
    c.ops.post_recv = &post_recv;
    c.ops.poll_cq = &poll_cq;
    c.ops.req_notify_cq = &req_notify_cq;
    ibv_qp& q = qpx_.qp_base;
    q.context = &c;
    q.qp_num = 0x100;
    q.qp_type = IBV_QPT_RC;
    qpx_.wr_start = &wr_start;
    qpx_.wr_rdma_write = &wr_rdma_write;
    qpx_.wr_set_sge = &wr_set_sge;
    qpx_.wr_complete = &wr_complete;
    qpx_.wr_abort = &wr_abort;
    cq_.context = &c;
    set_completions_per_poll(1);
}

}  // namespace sigmatrace::bench
