// Captures the gpu_* events that the code under test emits through the callback backend, deep-copying their
// sequences (the records point at the emitter's stack).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "provider/trace_callback.h"

namespace sigmatrace::gpumem::test {

// `order`: the event's position among all captured gpu_wqe and gpu_cqe events.
struct WqeEvent {
    uint64_t order;
    uint32_t qpn, pi_old, pi_new;
    std::vector<uint16_t> wqe_index;
    std::vector<uint8_t> opcode, opmod, fm_ce_se;
    std::vector<uint32_t> bytes, rkey, imm;
    std::vector<uint64_t> raddr, atomic_arg;
};
struct CqeEvent {
    uint64_t order;
    uint32_t cqn;
    std::vector<uint16_t> wqe_counter;
    std::vector<uint8_t> opcode, syndrome;
    std::vector<uint32_t> byte_cnt, qpn;
    std::vector<uint64_t> hw_ts;
};
// One decoded WQE, flattened out of the batches.
struct Wqe {
    uint32_t qpn;
    uint16_t index;
    uint8_t opcode, opmod, fm_ce_se;
    uint32_t bytes, rkey, imm;
    uint64_t raddr, atomic_arg;
};

class TraceCapture {
public:
    TraceCapture() { set_trace_callback(&TraceCapture::on_event, this); }
    ~TraceCapture() { set_trace_callback(nullptr, nullptr); }
    TraceCapture(const TraceCapture&) = delete;
    TraceCapture& operator=(const TraceCapture&) = delete;

    std::vector<WqeEvent> wqe_events() const { std::lock_guard lk(mu_); return wqe_events_; }
    std::vector<CqeEvent> cqe_events() const { std::lock_guard lk(mu_); return cqe_events_; }
    std::vector<st_gpu_watch_stats_rec> stats() const { std::lock_guard lk(mu_); return stats_; }
    std::vector<st_gpu_cq_stats_rec> cq_stats() const { std::lock_guard lk(mu_); return cq_stats_; }
    std::vector<st_gpu_umem_reg_rec> umems() const { std::lock_guard lk(mu_); return umems_; }
    std::vector<st_gpu_uar_alloc_rec> uars() const { std::lock_guard lk(mu_); return uars_; }
    std::vector<st_gpu_qp_create_rec> qps() const { std::lock_guard lk(mu_); return qps_; }
    std::vector<st_gpu_cq_create_rec> cqs() const { std::lock_guard lk(mu_); return cqs_; }
    std::vector<st_gpu_qp_modify_rec> modifies() const { std::lock_guard lk(mu_); return modifies_; }
    std::vector<st_gpu_qp_destroy_rec> destroys() const { std::lock_guard lk(mu_); return destroys_; }

    std::vector<Wqe> wqes() const {
        std::lock_guard lk(mu_);
        std::vector<Wqe> all;
        for (const auto& e : wqe_events_)
            for (size_t i = 0; i < e.wqe_index.size(); ++i)
                all.push_back(Wqe{e.qpn, e.wqe_index[i], e.opcode[i], e.opmod[i], e.fm_ce_se[i], e.bytes[i], e.rkey[i],
                                  e.imm[i], e.raddr[i], e.atomic_arg[i]});
        return all;
    }
    uint64_t lost_total() const {
        std::lock_guard lk(mu_);
        uint64_t n = 0;
        for (const auto& s : stats_) n += s.lost_wqes;
        return n;
    }
    uint64_t malformed_total() const {
        std::lock_guard lk(mu_);
        uint64_t n = 0;
        for (const auto& s : stats_) n += s.malformed_wqes;
        return n;
    }
    size_t wqe_count() const {
        std::lock_guard lk(mu_);
        size_t n = 0;
        for (const auto& e : wqe_events_) n += e.wqe_index.size();
        return n;
    }
    void clear() {
        std::lock_guard lk(mu_);
        wqe_events_.clear();
        cqe_events_.clear();
        stats_.clear();
    }

private:
    template <typename T> static std::vector<T> seq(const T* p, uint32_t n) { return std::vector<T>(p, p + n); }

    static void on_event(EventId id, const void* rec, void* user) {
        auto* self = static_cast<TraceCapture*>(user);
        std::lock_guard lk(self->mu_);
        switch (id) {
        case EventId::gpu_wqe: {
            const auto* r = static_cast<const st_gpu_wqe_rec*>(rec);
            self->wqe_events_.push_back(WqeEvent{self->order_++, r->qpn, r->pi_old, r->pi_new, seq(r->wqe_index, r->n),
                                                 seq(r->opcode, r->n), seq(r->opmod, r->n), seq(r->fm_ce_se, r->n),
                                                 seq(r->bytes, r->n), seq(r->rkey, r->n), seq(r->imm, r->n),
                                                 seq(r->raddr, r->n), seq(r->atomic_arg, r->n)});
            break;
        }
        case EventId::gpu_cqe: {
            const auto* r = static_cast<const st_gpu_cqe_rec*>(rec);
            self->cqe_events_.push_back(CqeEvent{self->order_++, r->cqn, seq(r->wqe_counter, r->n), seq(r->opcode, r->n),
                                                 seq(r->syndrome, r->n), seq(r->byte_cnt, r->n), seq(r->qpn, r->n),
                                                 seq(r->hw_ts, r->n)});
            break;
        }
        case EventId::gpu_watch_stats: self->stats_.push_back(*static_cast<const st_gpu_watch_stats_rec*>(rec)); break;
        case EventId::gpu_cq_stats: self->cq_stats_.push_back(*static_cast<const st_gpu_cq_stats_rec*>(rec)); break;
        case EventId::gpu_umem_reg: self->umems_.push_back(*static_cast<const st_gpu_umem_reg_rec*>(rec)); break;
        case EventId::gpu_uar_alloc: self->uars_.push_back(*static_cast<const st_gpu_uar_alloc_rec*>(rec)); break;
        case EventId::gpu_qp_create: self->qps_.push_back(*static_cast<const st_gpu_qp_create_rec*>(rec)); break;
        case EventId::gpu_cq_create: self->cqs_.push_back(*static_cast<const st_gpu_cq_create_rec*>(rec)); break;
        case EventId::gpu_qp_modify: self->modifies_.push_back(*static_cast<const st_gpu_qp_modify_rec*>(rec)); break;
        case EventId::gpu_qp_destroy: self->destroys_.push_back(*static_cast<const st_gpu_qp_destroy_rec*>(rec)); break;
        default: break;
        }
    }

    mutable std::mutex mu_;
    uint64_t order_ = 0;
    std::vector<WqeEvent> wqe_events_;
    std::vector<CqeEvent> cqe_events_;
    std::vector<st_gpu_watch_stats_rec> stats_;
    std::vector<st_gpu_cq_stats_rec> cq_stats_;
    std::vector<st_gpu_umem_reg_rec> umems_;
    std::vector<st_gpu_uar_alloc_rec> uars_;
    std::vector<st_gpu_qp_create_rec> qps_;
    std::vector<st_gpu_cq_create_rec> cqs_;
    std::vector<st_gpu_qp_modify_rec> modifies_;
    std::vector<st_gpu_qp_destroy_rec> destroys_;
};

}  // namespace sigmatrace::gpumem::test
