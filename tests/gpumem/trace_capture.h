// Captures the gpu_* events that the code under test emits through the callback backend, and the watcher's
// records (ring_post, and poll_cq of api kApiRingCompletion) out of its deferred_records events, decoded through
// the wire format as the analyzer decodes them, deep-copying what it keeps (the events point at the emitter's
// stack).
#pragma once

#include <sigmatrace/deferred_records.h>
#include <sigmatrace/deferred_records_wire.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "provider/trace_callback.h"

namespace sigmatrace::gpumem::test {

// `order`: the record's position among all captured ring_post and ring-completion records. One WqeEvent per
// ring_post record (`opcode` the mlx5 opcode, `wr_opcode` the verbs one), one CqeEvent per completion record.
struct WqeEvent {
    uint64_t order;
    uint64_t queue;
    uint32_t qpn, pi_old;
    sigmatrace::records::Poster poster;
    std::vector<uint16_t> wqe_index;
    std::vector<uint8_t> opcode, opmod, fm_ce_se, wr_opcode, send_flags;
    std::vector<uint32_t> bytes, rkey, imm, dest_qpn;
    std::vector<uint16_t> dlid;
    std::vector<uint64_t> raddr, atomic_arg, pi, dgid_prefix, dgid_iid;
};
struct CqeEvent {
    uint64_t order;
    uint64_t cq;  // the CQ's key
    std::vector<uint16_t> wqe_counter;
    std::vector<uint8_t> opcode, status;  // enum ibv_wc_opcode, enum ibv_wc_status
    std::vector<uint8_t> syndrome;        // vendor_err's low byte
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
    // Each gpu_qp_destroy's position among the ring records (`order` of the next one captured after it).
    std::vector<uint64_t> destroy_orders() const { std::lock_guard lk(mu_); return destroy_orders_; }
    std::vector<st_gpu_qp_query_rec> queries() const { std::lock_guard lk(mu_); return queries_; }

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

    void take(const sigmatrace::records::RecordHeader& h) {
        namespace R = sigmatrace::records;
        if (h.kind == R::RecordKind::ring_post) {
            const R::RingPostFixed* f = R::fixed_part<R::RingPostFixed>(&h);
            const R::RingWqeEntry* e = R::entries<R::RingPostFixed, R::RingWqeEntry>(&h);
            WqeEvent w{};
            w.order = order_++;
            w.queue = f->queue;
            w.qpn = f->qp_num;
            w.pi_old = h.n ? static_cast<uint32_t>(e[0].pi) : 0;
            w.poster = static_cast<R::Poster>(f->poster);
            for (uint32_t i = 0; i < h.n; ++i) {
                w.wqe_index.push_back(static_cast<uint16_t>(e[i].pi));
                w.opcode.push_back(R::ring_mlx5_opcode(e[i]));
                w.opmod.push_back(R::ring_opmod(e[i]));
                w.fm_ce_se.push_back(R::ring_fm_ce_se(e[i]));
                w.wr_opcode.push_back(e[i].opcode);
                w.send_flags.push_back(e[i].send_flags);
                w.bytes.push_back(e[i].bytes);
                w.rkey.push_back(e[i].rkey);
                w.imm.push_back(e[i].imm);
                w.dest_qpn.push_back(e[i].dest_qpn);
                w.dlid.push_back(e[i].dlid);
                w.raddr.push_back(e[i].raddr);
                w.atomic_arg.push_back(e[i].atomic_arg);
                w.pi.push_back(e[i].pi);
                w.dgid_prefix.push_back(e[i].dgid_prefix);
                w.dgid_iid.push_back(e[i].dgid_iid);
            }
            wqe_events_.push_back(std::move(w));
        } else if (h.kind == R::RecordKind::poll_cq && R::fixed_part<R::PollFixed>(&h)->api == R::kApiRingCompletion) {
            const R::CompletionEntry* e = R::entries<R::PollFixed, R::CompletionEntry>(&h);
            CqeEvent c{};
            c.order = order_++;
            c.cq = R::fixed_part<R::PollFixed>(&h)->cq;
            for (uint32_t i = 0; i < h.n; ++i) {
                c.wqe_counter.push_back(static_cast<uint16_t>(e[i].wr_id));
                c.opcode.push_back(e[i].opcode);
                c.status.push_back(e[i].status);
                c.syndrome.push_back(static_cast<uint8_t>(e[i].vendor_err));
                c.byte_cnt.push_back(e[i].byte_len);
                c.qpn.push_back(e[i].qp_num);
                c.hw_ts.push_back(e[i].hw_ts);
            }
            cqe_events_.push_back(std::move(c));
        }
    }

    static void on_event(EventId id, const void* rec, void* user) {
        auto* self = static_cast<TraceCapture*>(user);
        std::lock_guard lk(self->mu_);
        switch (id) {
        case EventId::deferred_records: {
            const auto* r = static_cast<const st_deferred_records_rec*>(rec);
            if (!sigmatrace::records::layout_readable(r->layout)) break;
            sigmatrace::records::walk_records(r->words, r->n, [self](const sigmatrace::records::RecordHeader& h) { self->take(h); });
            break;
        }
        case EventId::gpu_watch_stats: self->stats_.push_back(*static_cast<const st_gpu_watch_stats_rec*>(rec)); break;
        case EventId::gpu_cq_stats: self->cq_stats_.push_back(*static_cast<const st_gpu_cq_stats_rec*>(rec)); break;
        case EventId::gpu_umem_reg: self->umems_.push_back(*static_cast<const st_gpu_umem_reg_rec*>(rec)); break;
        case EventId::gpu_uar_alloc: self->uars_.push_back(*static_cast<const st_gpu_uar_alloc_rec*>(rec)); break;
        case EventId::gpu_qp_create: self->qps_.push_back(*static_cast<const st_gpu_qp_create_rec*>(rec)); break;
        case EventId::gpu_cq_create: self->cqs_.push_back(*static_cast<const st_gpu_cq_create_rec*>(rec)); break;
        case EventId::gpu_qp_modify: self->modifies_.push_back(*static_cast<const st_gpu_qp_modify_rec*>(rec)); break;
        case EventId::gpu_qp_query: self->queries_.push_back(*static_cast<const st_gpu_qp_query_rec*>(rec)); break;
        case EventId::gpu_qp_destroy:
            self->destroys_.push_back(*static_cast<const st_gpu_qp_destroy_rec*>(rec));
            self->destroy_orders_.push_back(self->order_);
            break;
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
    std::vector<uint64_t> destroy_orders_;
    std::vector<st_gpu_qp_query_rec> queries_;
};

}  // namespace sigmatrace::gpumem::test
