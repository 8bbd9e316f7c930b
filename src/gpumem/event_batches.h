// The watcher's per-sweep event batches: decoded WQEs and CQEs gathered on the sweeping thread's stack and
// emitted as gpu_wqe / gpu_cqe events of at most SIGMATRACE_MAX_BATCH entries (the schema's sequence bound), so a
// sweep allocates nothing. Shared by the doorbell-record path (watcher.cpp) and the index scanner of DBR-less
// queues (index_scanner.cpp).
#pragma once

#include <cstdint>

#include "mlx5_format/mlx5_layout.h"
#include "mlx5_format/wqe_decoder.h"
#include "provider/trace.h"

namespace sigmatrace::gpumem {

// One gpu_wqe event's worth of decoded WQEs.
class WqeBatch {
public:
    WqeBatch(uint32_t qpn, bool redact_addr, bool redact_keys)
        : qpn_(qpn), redact_addr_(redact_addr), redact_keys_(redact_keys) {}
    ~WqeBatch() { flush(); }
    WqeBatch(const WqeBatch&) = delete;
    WqeBatch& operator=(const WqeBatch&) = delete;

    // `pi` is the extended WQEBB index of the WQE; `pi_new` what the producer had reached when it was read (the
    // doorbell record, or the scanner's frontier).
    void add(uint64_t pi, const DecodedWqe& w, uint64_t pi_new) {
        if (n_ == 0) first_pi_ = pi;
        idx_[n_] = w.wqe_index;
        opcode_[n_] = w.opcode;
        opmod_[n_] = w.opmod;
        fm_ce_se_[n_] = w.fm_ce_se;
        bytes_[n_] = w.bytes;
        raddr_[n_] = redact_addr_ ? 0 : w.raddr;
        rkey_[n_] = redact_keys_ ? 0 : w.rkey;
        imm_[n_] = w.imm;
        arg_[n_] = w.atomic_arg;
        pi_new_ = pi_new;
        if (++n_ == SIGMATRACE_MAX_BATCH) flush();
    }
    void flush() {
        if (n_ == 0) return;
        st_gpu_wqe_rec rec{qpn_, static_cast<uint32_t>(first_pi_), static_cast<uint32_t>(pi_new_), n_, idx_,
                           opcode_, opmod_, fm_ce_se_, bytes_, raddr_, rkey_, imm_, arg_};
        ST_TRACE_EMIT(gpu_wqe, &rec);
        n_ = 0;
    }

private:
    uint32_t qpn_;
    bool redact_addr_, redact_keys_;
    uint32_t n_ = 0;
    uint64_t first_pi_ = 0, pi_new_ = 0;
    uint16_t idx_[SIGMATRACE_MAX_BATCH];
    uint8_t opcode_[SIGMATRACE_MAX_BATCH], opmod_[SIGMATRACE_MAX_BATCH], fm_ce_se_[SIGMATRACE_MAX_BATCH];
    uint32_t bytes_[SIGMATRACE_MAX_BATCH], rkey_[SIGMATRACE_MAX_BATCH], imm_[SIGMATRACE_MAX_BATCH];
    uint64_t raddr_[SIGMATRACE_MAX_BATCH], arg_[SIGMATRACE_MAX_BATCH];
};

// One gpu_cqe event's worth of CQEs.
class CqeBatch {
public:
    explicit CqeBatch(uint32_t cqn) : cqn_(cqn) {}
    ~CqeBatch() { flush(); }
    CqeBatch(const CqeBatch&) = delete;
    CqeBatch& operator=(const CqeBatch&) = delete;

    void add(const mlx5::Cqe64& e) {
        counter_[n_] = e.wqe_index();
        opcode_[n_] = e.opcode();
        const bool error = e.opcode() == mlx5::cqe_op::REQ_ERR || e.opcode() == mlx5::cqe_op::RESP_ERR;
        syndrome_[n_] = error ? e.syndrome() : 0;
        bytes_[n_] = e.bytes();
        qpn_[n_] = e.qpn();
        ts_[n_] = error ? 0 : e.hw_timestamp();
        if (++n_ == SIGMATRACE_MAX_BATCH) flush();
    }
    void flush() {
        if (n_ == 0) return;
        st_gpu_cqe_rec rec{cqn_, n_, counter_, opcode_, syndrome_, bytes_, qpn_, ts_};
        ST_TRACE_EMIT(gpu_cqe, &rec);
        n_ = 0;
    }

private:
    uint32_t cqn_;
    uint32_t n_ = 0;
    uint16_t counter_[SIGMATRACE_MAX_BATCH];
    uint8_t opcode_[SIGMATRACE_MAX_BATCH], syndrome_[SIGMATRACE_MAX_BATCH];
    uint32_t bytes_[SIGMATRACE_MAX_BATCH], qpn_[SIGMATRACE_MAX_BATCH];
    uint64_t ts_[SIGMATRACE_MAX_BATCH];
};

}  // namespace sigmatrace::gpumem
