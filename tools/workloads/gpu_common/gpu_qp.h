// The "device side" of a GPU-driven RC QP, as NVSHMEM's IBGDA transport and DeepEP write it
// (nvshmemi_ibgda_device_qp: ring, doorbell record, doorbell register, collapsed CQ, and the mvars counters
// several GPU threads share), executed here by CPU threads standing in for GPU threads. Every WQE is written
// with relaxed stores, published with release order in the doorbell record, then the doorbell rung with an
// 8-byte store to the UAR register -- the same sequence ibgda_post_send performs. A DBR-less QP (DOCA GPUNetIO's
// GPU_SM_NO_DBR, NCCL GIN) skips the doorbell record: doca_gpu_dev_verbs_submit_db_no_dbr only rings.
//
// Everything a producer writes is also appended to a TruthLog, the ground truth the acceptance tests compare
// the trace against.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace sigmatrace::workloads {

// What a producer posted: one line per WQE in the ground-truth file.
struct TruthRecord {
    uint32_t qpn;
    uint64_t index;  // extended WQEBB index (the low 16 bits are the WQE's ctrl index)
    uint8_t opcode, opmod;
    uint32_t bytes;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t imm;    // as written in the ctrl segment, read as a host integer
    uint64_t atomic_arg;
    bool signaled;
};

class TruthLog {
public:
    void add(const TruthRecord& r) {
        std::lock_guard lk(mu_);
        records_.push_back(r);
    }
    // Writes "qpn index opcode opmod bytes raddr rkey imm atomic_arg signaled" lines, sorted by (qpn, index).
    bool write(const std::string& path) const;
    size_t size() const {
        std::lock_guard lk(mu_);
        return records_.size();
    }

private:
    mutable std::mutex mu_;
    std::vector<TruthRecord> records_;
};

// A DC target as a DCI WQE's address vector names it (NVSHMEM's ibgda_get_dct: a 48-byte mlx5_wqe_av).
struct DcTarget {
    uint32_t dctn = 0;
    uint16_t lid = 0;
    uint64_t key = 0;
};

struct GpuQp {
    uint32_t qpn = 0;
    uint8_t* wqe = nullptr;        // the send ring
    uint32_t nwqes = 0;            // WQEBBs, a power of two
    uint32_t* dbrec = nullptr;     // DBR[1]
    uint64_t* bf = nullptr;        // the doorbell register in the UAR page (DBR-less: UAR base + 0x600)
    bool dbr_less = false;         // send_dbr_mode = NO_DBR: the doorbell record is never written
    const uint8_t* cqe = nullptr;  // the collapsed CQE, or the first CQE of a normal CQ ring
    TruthLog* truth = nullptr;
    // A normal CQ (rocSHMEM): ring of cq_ncqe CQEs walked by owner bit; consumed CQEs are invalidated and the
    // consumer index published in cq_dbrec[0]. cq_ncqe == 0: collapsed (NVSHMEM/DeepEP).
    uint32_t cq_ncqe = 0;
    uint32_t* cq_dbrec = nullptr;
    // rocSHMEM hands consumed CQEs back as INVALID and publishes its consumer index; DOCA's poll_one_cq_at only
    // reads (every WQE signalled, CQE i in slot i).
    bool cq_invalidate = true;
    bool dbr_full_counter = false;  // rocSHMEM writes the whole 32-bit counter into the doorbell record
    // DOCA GPUNetIO's GPU_SM_DB (NCCL GIN): doorbell, doorbell record, doorbell again (the second ring covers a
    // NIC that read the record before it moved).
    bool ring_twice = false;
    // DOCA GPUNetIO's GPU_SM_BF: after the doorbell record, the last WQE's first 64 bytes are stored into the
    // BlueFlame register in place of the 8-byte doorbell, alternating between its two 256-byte buffers.
    bool blueflame = false;
    // DOCA GPUNetIO's CPU_PROXY (NCCL GIN): the "GPU" only publishes its producer index here (host memory);
    // a CPU thread (proxy_progress) writes the doorbell record and rings, often covering several submissions.
    uint64_t* cpu_db = nullptr;
    // UCX GDAKI (gdaki.cuh): a submission rings only when the producer index crosses a multiple of ring_every
    // WQEBBs (0: every submission rings); flush() rings for the rest (the doorbell record lags until then).
    uint32_t ring_every = 0;
    // WQEBBs of every WQE this producer posts (DCI WQEs carry an address vector: 2), for the completion index a
    // CQE's wqe_counter (the first WQEBB of the completed WQE) stands for.
    uint32_t wqe_wqebbs = 1;

    // mvars: shared by the posting threads.
    std::atomic<uint64_t> resv_head{0};   // WQEBBs reserved
    std::atomic<uint64_t> ready_head{0};  // WQEBBs written, in order
    std::atomic<uint64_t> cons_idx{0};    // WQEBBs known complete (from the CQ)

    // Reserves n WQEBBs, waiting while the ring has no room (completions free it).
    uint64_t reserve(uint32_t n);
    // WQE writers (ibgda_write_*): one WQEBB each, at extended index idx.
    void write_rdma_write(uint64_t idx, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t bytes,
                          bool signaled);
    void write_rdma_write_inline(uint64_t idx, uint32_t value, uint64_t raddr, uint32_t rkey, bool with_imm,
                                 uint32_t imm, bool signaled);
    void write_fetch_add(uint64_t idx, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t add,
                         bool signaled);
    void write_nop(uint64_t idx, bool signaled);
    // DCI WQEs (ibgda_write_rdma_write_wqe / ibgda_write_amo_* with a DCI): ctrl, the 48-byte address vector of
    // `to`, then the segments of the RC form; two WQEBBs each, at extended indices idx and idx + 1.
    static constexpr uint32_t kDcWqebbs = 2;
    void write_dc_rdma_write(uint64_t idx, const DcTarget& to, uint64_t laddr, uint32_t lkey, uint64_t raddr,
                             uint32_t rkey, uint32_t bytes, bool signaled);
    void write_dc_fetch_add(uint64_t idx, const DcTarget& to, uint64_t laddr, uint32_t lkey, uint64_t raddr,
                            uint32_t rkey, uint64_t add, bool signaled);
    // Publishes [base, base + n) once every earlier reservation is published: doorbell record, then doorbell
    // (with cpu_db: the producer index, for the proxy).
    void submit(uint64_t base, uint32_t n);
    // The CPU proxy's step (ncclGinGdakiProgress): rings for what the producers published since the last step.
    // Returns true when it rang.
    bool proxy_progress();
    // Rings for everything published and not rung yet (ring_every): UCX's NODELAY / flush.
    void flush();
    // Waits until the NIC has completed every WQEBB before `idx` (the collapsed CQE's wqe_counter).
    void quiet(uint64_t idx);
    // The collapsed CQE (or, on a normal CQ, the latest one): nothing yet, the WQE index it completes, or an
    // error (the WQE index it names, its syndrome and the device's vendor syndrome).
    enum class Cqe { None, Ok, Error };
    struct Polled {
        Cqe kind = Cqe::None;
        uint16_t counter = 0;
        uint8_t syndrome = 0, vendor_syndrome = 0;
    };
    Polled poll() const;

    void write_rdma_read(uint64_t idx, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t bytes,
                         bool signaled);

private:
    mutable std::mutex cq_mu_;        // normal CQs: one consumer at a time
    mutable uint64_t cq_ci_ = 0;
    mutable uint16_t last_counter_ = 0;
    mutable bool any_completion_ = false;
    uint8_t* slot(uint64_t idx) const { return wqe + ((idx & (nwqes - 1)) << 6); }
    // The 16-byte segment `n` of the WQE at idx (segments past the first WQEBB follow the ring's wrap).
    uint8_t* segment(uint64_t idx, uint32_t n) const { return slot(idx + n / 4) + (n % 4) * 16; }
    void store_av(uint64_t idx, const DcTarget& to);
    void write_ctrl(uint8_t* seg, uint64_t idx, uint8_t opcode, uint8_t opmod, uint32_t ds, bool signaled, uint32_t imm);
    void write_rdma(uint64_t idx, uint8_t opcode, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                    uint32_t bytes, bool signaled);
    void record(uint64_t idx, uint8_t opcode, uint8_t opmod, uint32_t bytes, uint64_t raddr, uint32_t rkey, uint32_t imm,
                uint64_t arg, bool signaled);
    std::mutex doorbell_mu_;  // the doorbell register is written by one thread at a time
    uint64_t proxied_ = 0;    // the producer index the proxy last rang for (proxy thread only)
    uint64_t rung_ = 0;       // ring_every: the producer index last rung for (under doorbell_mu_)
    bool bf_odd_ = false;     // blueflame: the buffer the next copy goes to (under doorbell_mu_)
    void ring(uint64_t pi);   // doorbell record (unless DBR-less), then the doorbell
};

// Relaxed 8-byte stores of a 16-byte segment (a GPU's st.relaxed / st.global.L1::no_allocate).
void store_segment(uint8_t* dst, const uint8_t* src);

}  // namespace sigmatrace::workloads
