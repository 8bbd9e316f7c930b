#include "interpose/state/object_state.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace sigmatrace::interpose {
__thread QpState* tls_last_qp __attribute__((tls_model("initial-exec"))) = nullptr;
__thread CqState* tls_last_cq __attribute__((tls_model("initial-exec"))) = nullptr;

namespace {

__thread uint32_t tls_thread_token __attribute__((tls_model("initial-exec"))) = 0;
std::atomic<uint32_t> g_next_thread_token{1};

}  // namespace

uint32_t this_thread_token() noexcept {
    uint32_t t = tls_thread_token;
    if (t == 0) [[unlikely]] {
        t = g_next_thread_token.fetch_add(1, std::memory_order_relaxed);
        if (t == 0) t = g_next_thread_token.fetch_add(1, std::memory_order_relaxed);  // after 2^32 threads
        tls_thread_token = t;
    }
    return t;
}

Registry& Registry::instance() noexcept {
    // Deliberately never destroyed: wrappers may run from other threads or atexit handlers while the process
    // tears down static objects.
    static Registry* r = new Registry();
    return *r;
}

QpState* Registry::add_qp(ibv_qp* qp, ibv_context* ctx, uint32_t qp_num, uint32_t qp_type) {
    QpState* s;
    if (!free_qps_.empty()) {
        s = free_qps_.back();
        free_qps_.pop_back();
    } else {
        s = new QpState();
    }
    s->counters.reset();
    s->emitted = {};
    s->emitted_at_ns = 0;
    s->qpx = nullptr;
    s->wrapped_send_ops = 0;
    s->orig = {};
    s->list.close();
    s->qp_type = qp_type;
    s->ctx.store(ctx, std::memory_order_relaxed);
    s->qp_num.store(qp_num, std::memory_order_relaxed);
    s->qp.store(qp, std::memory_order_release);
    qps_by_pointer_.insert(s);
    qps_by_number_.insert(s);
    live_qps_.push_back(s);
    return s;
}

void Registry::remove_qp(QpState* s) {
    qps_by_pointer_.erase(s);
    qps_by_number_.erase(s);
    live_qps_.erase(std::remove(live_qps_.begin(), live_qps_.end(), s), live_qps_.end());
    // Clearing the keys makes every stale reference (thread caches, old tables) miss from now on.
    s->qp.store(nullptr, std::memory_order_release);
    s->ctx.store(nullptr, std::memory_order_relaxed);
    s->qp_num.store(0, std::memory_order_relaxed);
    free_qps_.push_back(s);
}

CqState* Registry::add_cq(ibv_cq_ex* cq) {
    CqState* s;
    if (!free_cqs_.empty()) {
        s = free_cqs_.back();
        free_cqs_.pop_back();
    } else {
        s = new CqState();
    }
    s->orig = {};
    s->wc_flags = 0;
    s->pass_mode = 0;
    s->batch.n = 0;
    s->cq.store(cq, std::memory_order_release);
    cqs_.insert(s);
    live_cqs_.push_back(s);
    return s;
}

void Registry::remove_cq(CqState* s) {
    cqs_.erase(s);
    live_cqs_.erase(std::remove(live_cqs_.begin(), live_cqs_.end(), s), live_cqs_.end());
    s->cq.store(nullptr, std::memory_order_release);
    free_cqs_.push_back(s);
}

QpState* qp_state_lookup(const void* qp) noexcept {
    QpState* s = Registry::instance().qp_by_pointer(qp);
    tls_last_qp = s;
    return s;
}

CqState* cq_state_lookup(const void* cq) noexcept {
    CqState* s = Registry::instance().cq_by_pointer(cq);
    tls_last_cq = s;
    return s;
}

void fatal_missing_state(const char* call, const char* object, const void* p) noexcept {
    char msg[224];
    const int n = std::snprintf(msg, sizeof msg,
                                "sigmatrace: fatal: %s on %s %p, which is not (or no longer) a live %s; the application "
                                "used a destroyed %s\n",
                                call, object, p, object, object);
    if (n > 0) {
        ssize_t ignored = ::write(STDERR_FILENO, msg, std::min(static_cast<size_t>(n), sizeof msg - 1));
        (void)ignored;
    }
    std::abort();
}

}  // namespace sigmatrace::interpose
