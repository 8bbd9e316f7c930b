#include "gpu_common/gpu_qp.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "mlx5_format/mlx5_layout.h"

namespace sigmatrace::workloads {

namespace mlx5 = sigmatrace::gpumem::mlx5;

bool TruthLog::write(const std::string& path) const {
    std::lock_guard lk(mu_);
    std::vector<TruthRecord> sorted = records_;
    std::sort(sorted.begin(), sorted.end(), [](const TruthRecord& a, const TruthRecord& b) {
        return a.qpn != b.qpn ? a.qpn < b.qpn : a.index < b.index;
    });
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return false;
    std::fprintf(f, "# qpn index opcode opmod bytes raddr rkey imm atomic_arg signaled\n");
    for (const auto& r : sorted)
        std::fprintf(f, "%u %llu %u %u %u 0x%llx 0x%x 0x%x 0x%llx %d\n", r.qpn, static_cast<unsigned long long>(r.index),
                     r.opcode, r.opmod, r.bytes, static_cast<unsigned long long>(r.raddr), r.rkey, r.imm,
                     static_cast<unsigned long long>(r.atomic_arg), r.signaled ? 1 : 0);
    return std::fclose(f) == 0;
}

void store_segment(uint8_t* dst, const uint8_t* src) {
    uint64_t w[2];
    std::memcpy(w, src, 16);
    __atomic_store_n(reinterpret_cast<uint64_t*>(dst), w[0], __ATOMIC_RELAXED);
    __atomic_store_n(reinterpret_cast<uint64_t*>(dst) + 1, w[1], __ATOMIC_RELAXED);
}

namespace {

// struct mlx5_wqe_raddr_seg and struct mlx5_wqe_data_seg, stored as a GPU thread stores them.
void store_raddr_segment(uint8_t* dst, uint64_t raddr, uint32_t rkey) {
    uint8_t s[16] = {};
    mlx5::store_be64(s, raddr);
    mlx5::store_be32(s + 8, rkey);
    store_segment(dst, s);
}
void store_data_segment(uint8_t* dst, uint32_t bytes, uint32_t lkey, uint64_t laddr) {
    uint8_t s[16] = {};
    mlx5::store_be32(s, bytes);
    mlx5::store_be32(s + 4, lkey);
    mlx5::store_be64(s + 8, laddr);
    store_segment(dst, s);
}

// What a GPU kernel does with an error CQE here: stop, saying which QP and why.
void abort_on_error(const GpuQp::Polled& p, uint32_t qpn) {
    if (p.kind != GpuQp::Cqe::Error) return;
    std::fprintf(stderr, "gpu_qp: QP 0x%x completed with an error CQE (syndrome 0x%x, vendor syndrome 0x%x)\n", qpn,
                 p.syndrome, p.vendor_syndrome);
    std::abort();
}

}  // namespace

uint64_t GpuQp::reserve(uint32_t n) {
    const uint64_t base = resv_head.fetch_add(n, std::memory_order_relaxed);
    // NVSHMEM's ibgda_reserve_wqe_slots: wait until the ring has room for the whole reservation.
    while (base + n - cons_idx.load(std::memory_order_acquire) > nwqes) {
        flush();   // WQEs published but not rung would never complete
        const Polled p = poll();
        abort_on_error(p, qpn);
        if (p.kind == Cqe::None) {
            std::this_thread::yield();
            continue;
        }
        // Completed through `counter` (inclusive, 16-bit): extend against what we have posted.
        const uint64_t ready = ready_head.load(std::memory_order_acquire);
        const uint64_t done = ready - static_cast<uint16_t>(static_cast<uint16_t>(ready) - p.counter - wqe_wqebbs);
        uint64_t cur = cons_idx.load(std::memory_order_relaxed);
        while (done > cur && done <= ready && !cons_idx.compare_exchange_weak(cur, done)) {}
        std::this_thread::yield();
    }
    return base;
}

void GpuQp::write_ctrl(uint8_t* seg, uint64_t idx, uint8_t opcode, uint8_t opmod, uint32_t ds, bool signaled,
                       uint32_t imm) {
    uint8_t c[16] = {};
    mlx5::store_be32(c, (uint32_t{opmod} << 24) | (static_cast<uint32_t>(idx & 0xffff) << 8) | opcode);
    mlx5::store_be32(c + 4, (qpn << 8) | ds);
    c[11] = signaled ? mlx5::kCtrlCqUpdate : 0;
    std::memcpy(c + 12, &imm, 4);
    store_segment(seg, c);
}

void GpuQp::record(uint64_t idx, uint8_t opcode, uint8_t opmod, uint32_t bytes, uint64_t raddr, uint32_t rkey,
                   uint32_t imm, uint64_t arg, bool signaled) {
    if (truth) truth->add({qpn, idx, opcode, opmod, bytes, raddr, rkey, imm, arg, signaled});
}

void GpuQp::write_rdma(uint64_t idx, uint8_t opcode, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                       uint32_t bytes, bool signaled) {
    // ibgda_write_rdma_write_wqe / ibgda_write_rdma_read_wqe: ctrl + raddr + one data segment, ds = 3.
    uint8_t* w = slot(idx);
    store_raddr_segment(w + 16, raddr, rkey);
    store_data_segment(w + 32, bytes, lkey, laddr);
    write_ctrl(w, idx, opcode, 0, 3, signaled, 0);
    record(idx, opcode, 0, bytes, raddr, rkey, 0, 0, signaled);
}

void GpuQp::write_rdma_write(uint64_t idx, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                             uint32_t bytes, bool signaled) {
    write_rdma(idx, mlx5::op::RDMA_WRITE, laddr, lkey, raddr, rkey, bytes, signaled);
}

void GpuQp::write_rdma_read(uint64_t idx, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                            uint32_t bytes, bool signaled) {
    write_rdma(idx, mlx5::op::RDMA_READ, laddr, lkey, raddr, rkey, bytes, signaled);
}

void GpuQp::write_rdma_write_inline(uint64_t idx, uint32_t value, uint64_t raddr, uint32_t rkey, bool with_imm,
                                    uint32_t imm, bool signaled) {
    // DeepEP's ibgda_write_rdma_write_inl_wqe: 4 inline bytes, ds = 3, an immediate when asked for.
    uint8_t* w = slot(idx);
    store_raddr_segment(w + 16, raddr, rkey);
    uint8_t s[16] = {};
    mlx5::store_be32(s, 4 | mlx5::kInlineSegFlag);
    std::memcpy(s + 4, &value, 4);
    store_segment(w + 32, s);
    const uint8_t opcode = with_imm ? mlx5::op::RDMA_WRITE_IMM : mlx5::op::RDMA_WRITE;
    write_ctrl(w, idx, opcode, 0, 3, signaled, with_imm ? imm : 0);
    record(idx, opcode, 0, 4, raddr, rkey, with_imm ? imm : 0, 0, signaled);
}

void GpuQp::write_fetch_add(uint64_t idx, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t add,
                            bool signaled) {
    uint8_t* w = slot(idx);
    store_raddr_segment(w + 16, raddr, rkey);
    uint8_t s[16] = {};
    mlx5::store_be64(s, add);
    store_segment(w + 32, s);
    store_data_segment(w + 48, 8, lkey, laddr);
    write_ctrl(w, idx, mlx5::op::ATOMIC_FA, 0, 4, signaled, 0);
    record(idx, mlx5::op::ATOMIC_FA, 0, 8, raddr, rkey, 0, add, signaled);
}

void GpuQp::store_av(uint64_t idx, const DcTarget& to) {
    // struct mlx5_wqe_av, extended (48 bytes), LID-routed: no GRH bit in grh_gid_fl.
    uint8_t av[48] = {};
    mlx5::store_be64(av, to.key);
    mlx5::store_be32(av + 8, to.dctn | mlx5::kExtendedAvFlag);
    mlx5::store_be16(av + 14, to.lid);
    for (uint32_t k = 0; k < 3; ++k) store_segment(segment(idx, 1 + k), av + 16 * k);
}

void GpuQp::write_dc_rdma_write(uint64_t idx, const DcTarget& to, uint64_t laddr, uint32_t lkey, uint64_t raddr,
                                uint32_t rkey, uint32_t bytes, bool signaled) {
    store_av(idx, to);
    store_raddr_segment(segment(idx, 4), raddr, rkey);
    store_data_segment(segment(idx, 5), bytes, lkey, laddr);
    write_ctrl(slot(idx), idx, mlx5::op::RDMA_WRITE, 0, 6, signaled, 0);
    record(idx, mlx5::op::RDMA_WRITE, 0, bytes, raddr, rkey, 0, 0, signaled);
}

void GpuQp::write_dc_fetch_add(uint64_t idx, const DcTarget& to, uint64_t laddr, uint32_t lkey, uint64_t raddr,
                               uint32_t rkey, uint64_t add, bool signaled) {
    store_av(idx, to);
    store_raddr_segment(segment(idx, 4), raddr, rkey);
    uint8_t s[16] = {};
    mlx5::store_be64(s, add);
    store_segment(segment(idx, 5), s);
    store_data_segment(segment(idx, 6), 8, lkey, laddr);
    write_ctrl(slot(idx), idx, mlx5::op::ATOMIC_FA, 0, 7, signaled, 0);
    record(idx, mlx5::op::ATOMIC_FA, 0, 8, raddr, rkey, 0, add, signaled);
}

void GpuQp::write_nop(uint64_t idx, bool signaled) {
    write_ctrl(slot(idx), idx, mlx5::op::NOP, 0, 1, signaled, 0);
    record(idx, mlx5::op::NOP, 0, 0, 0, 0, 0, 0, signaled);
}

void GpuQp::submit(uint64_t base, uint32_t n) {
    // DeepEP's ibgda_submit_requests: WQE writes first, then publish in reservation order. The release half of
    // the CAS below orders the WQE writes before the publication (the GPU code's membar; a separate fence would
    // add nothing and is not modelled by ThreadSanitizer).
    uint64_t expected = base;
    while (!ready_head.compare_exchange_weak(expected, base + n, std::memory_order_acq_rel)) {
        expected = base;
        std::this_thread::yield();
    }
    if (cpu_db != nullptr) {
        // CPU_PROXY: the producer index goes to host memory; the proxy rings.
        uint64_t cur = __atomic_load_n(cpu_db, __ATOMIC_RELAXED);
        while (cur < base + n && !__atomic_compare_exchange_n(cpu_db, &cur, base + n, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {}
        return;
    }
    std::lock_guard lk(doorbell_mu_);
    const uint64_t pi = ready_head.load(std::memory_order_acquire);
    if (ring_every != 0) {
        if (pi / ring_every == rung_ / ring_every) return;   // not past the next boundary: no doorbell yet
        rung_ = pi;
    }
    ring(pi);
}

void GpuQp::flush() {
    if (ring_every == 0) return;
    std::lock_guard lk(doorbell_mu_);
    const uint64_t pi = ready_head.load(std::memory_order_acquire);
    if (pi == rung_) return;
    rung_ = pi;
    ring(pi);
}

void GpuQp::ring(uint64_t pi) {
    // ibgda_post_send: doorbell record (release), then the doorbell -- the first 8 bytes of a ctrl segment.
    uint8_t db[8];
    mlx5::store_be32(db, static_cast<uint32_t>(pi & 0xffff) << 8);
    mlx5::store_be32(db + 4, qpn << 8);
    uint64_t word;
    std::memcpy(&word, db, 8);
    if (ring_twice) __atomic_store_n(bf, word, __ATOMIC_RELEASE);
    const uint32_t cur = dbr_less ? 0 : __builtin_bswap32(__atomic_load_n(dbrec, __ATOMIC_RELAXED)) & 0xffff;
    if (!dbr_less && static_cast<uint16_t>(pi - cur) < 0x8000 && static_cast<uint16_t>(pi) != cur) {
        const auto value = static_cast<uint32_t>(dbr_full_counter ? pi : (pi & 0xffff));
        __atomic_store_n(dbrec, __builtin_bswap32(value), __ATOMIC_RELEASE);
    }
    if (blueflame && pi != 0) {
        // The whole last WQE (every writer here posts one WQEBB), 8 bytes at a time, into this post's buffer.
        const auto* src = reinterpret_cast<const uint64_t*>(slot(pi - 1));
        auto* dst = bf + (bf_odd_ ? 0x100 / 8 : 0);
        for (int i = 0; i < 8; ++i) __atomic_store_n(dst + i, __atomic_load_n(src + i, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        bf_odd_ = !bf_odd_;
        return;
    }
    __atomic_store_n(bf, word, __ATOMIC_RELEASE);
}

bool GpuQp::proxy_progress() {
    const uint64_t pi = __atomic_load_n(cpu_db, __ATOMIC_ACQUIRE);
    if (pi == proxied_) return false;
    proxied_ = pi;
    std::lock_guard lk(doorbell_mu_);
    ring(pi);
    return true;
}

GpuQp::Polled GpuQp::poll() const {
    if (cq_ncqe != 0) {
        // rocSHMEM's poll: consume every valid CQE in order, hand it back as INVALID, publish the consumer index
        // (DOCA's poll_one_cq_at only reads).
        std::lock_guard lk(cq_mu_);
        for (;;) {
            auto* e = const_cast<uint8_t*>(cqe) + ((cq_ci_ & (cq_ncqe - 1)) << 6);
            const uint8_t op_own = __atomic_load_n(e + 63, __ATOMIC_ACQUIRE);
            const bool owner = (cq_ci_ & cq_ncqe) != 0;
            if ((op_own >> 4) == mlx5::cqe_op::INVALID || ((op_own & 1) != 0) != owner) break;
            if ((op_own >> 4) == mlx5::cqe_op::REQ_ERR) return {Cqe::Error, mlx5::load_be16(e + 60), e[55], e[54]};
            last_counter_ = mlx5::load_be16(e + 60);
            any_completion_ = true;
            ++cq_ci_;
            if (!cq_invalidate) continue;
            __atomic_store_n(e + 63, static_cast<uint8_t>(mlx5::cqe_op::INVALID << 4 | (owner ? 1 : 0)), __ATOMIC_RELAXED);
            __atomic_store_n(cq_dbrec, __builtin_bswap32(static_cast<uint32_t>(cq_ci_ & 0xffffff)), __ATOMIC_RELEASE);
        }
        return {any_completion_ ? Cqe::Ok : Cqe::None, last_counter_};
    }
    const uint64_t tail = __atomic_load_n(reinterpret_cast<const uint64_t*>(cqe + 56), __ATOMIC_ACQUIRE);
    uint8_t t[8];
    std::memcpy(t, &tail, 8);
    const uint8_t opcode = t[7] >> 4;
    const uint16_t counter = mlx5::load_be16(t + 4);
    if (opcode == mlx5::cqe_op::REQ_ERR)
        return {Cqe::Error, counter, __atomic_load_n(cqe + 55, __ATOMIC_RELAXED), __atomic_load_n(cqe + 54, __ATOMIC_RELAXED)};
    return {opcode == mlx5::cqe_op::INVALID ? Cqe::None : Cqe::Ok, counter};  // a fresh CQ is filled with 0xff: INVALID
}

void GpuQp::quiet(uint64_t idx) {
    // Every WQE before idx is complete once the collapsed CQE shows the last WQE's index (idx - wqe_wqebbs) or
    // later (modulo 2^16): the last WQE of every submission is signalled.
    flush();
    while (idx != 0) {
        const Polled p = poll();
        abort_on_error(p, qpn);
        if (p.kind == Cqe::Ok && static_cast<uint16_t>(p.counter - static_cast<uint16_t>(idx - wqe_wqebbs)) < 0x8000) break;
        std::this_thread::yield();
    }
    uint64_t cur = cons_idx.load(std::memory_order_relaxed);
    while (idx > cur && !cons_idx.compare_exchange_weak(cur, idx)) {}
}

}  // namespace sigmatrace::workloads
