// st-alltoall: the demo workload (`sigmatrace demo`), an MPI job of unmodified-looking verbs code with something
// to see in its trace:
//   1. an all-to-all of RDMA WRITEs with skewed destinations: every rank writes --iters rounds of --size bytes to
//      every other rank, and --hot-factor times as many to rank --hot (an incast-like hot spot); with --imm 1 the
//      last write of each round to each peer carries an immediate (RDMA_WRITE_WITH_IMM, as NCCL's IB transport
//      signals its receiver), consuming a receive the peer posted: messages both ways between every pair of
//      ranks, which is what orders events across hosts' clocks;
//   2. --epochs rounds of an RDMA barrier: every rank adds 1 to a counter on rank 0 with ATOMIC_FETCH_AND_ADD
//      (rank 0 through a QP connected to itself) and waits, polling the counter with 8-byte RDMA READs, until all
//      ranks have arrived; rank --late sleeps --late-ms before arriving each time (a straggler).
// MPI (over shared memory, never RDMA: run it with --mca btl self,vader) only exchanges the connection data. Every rank checks
// what it received and prints one line; exit 0 when all data arrived intact and every barrier completed.
//
//   mpirun -np 4 --mca btl self,vader --mca pml ob1 sigmatrace fabric --node rank -- st-alltoall [options]
#include <infiniband/verbs.h>
#include <mpi.h>
#include <arpa/inet.h>
#include <sched.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "common/verbs/rc_setup.h"

namespace {

namespace verbs = sigmatrace::verbs;

constexpr int kMaxRanks = 64;
constexpr int kPort = 1;

struct Options {
    uint64_t iters = 50;
    uint32_t size = 65536;
    int hot = 1;
    uint32_t hot_factor = 4;
    int epochs = 20;
    int late = -1;          // default: the last rank
    uint32_t late_ms = 3;
    uint32_t signal_every = 8;
    bool imm = false;
};

// Receives each QP holds for --imm (posted once, before the all-to-all: one per round).
constexpr uint64_t kMaxImmReceives = 4096;

// What each rank publishes with MPI_Allgather.
struct Info {
    uint16_t lid;
    uint8_t gid[16];
    uint32_t qpn[kMaxRanks];   // qpn[p]: this rank's QP connected to rank p (qpn[rank]: rank 0's self QP)
    uint64_t buf_addr;
    uint32_t buf_rkey;
    uint64_t counter_addr;
    uint32_t counter_rkey;
};

[[noreturn]] void fail(int rank, const char* what) {
    std::fprintf(stderr, "st-alltoall: rank %d: %s failed (errno %d: %s)\n", rank, what, errno, std::strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
}

[[noreturn]] void fail(int rank, const verbs::SetupError& e) {
    std::fprintf(stderr, "st-alltoall: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
}

bool parse(int argc, char** argv, Options& o) {
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string_view a = argv[i];
        uint64_t v = 0;
        const char* s = argv[i + 1];
        if (std::from_chars(s, s + std::strlen(s), v).ec != std::errc()) return false;
        if (a == "--iters") o.iters = v;
        else if (a == "--size") o.size = static_cast<uint32_t>(v);
        else if (a == "--hot") o.hot = static_cast<int>(v);
        else if (a == "--hot-factor") o.hot_factor = static_cast<uint32_t>(v);
        else if (a == "--epochs") o.epochs = static_cast<int>(v);
        else if (a == "--late") o.late = static_cast<int>(v);
        else if (a == "--late-ms") o.late_ms = static_cast<uint32_t>(v);
        else if (a == "--signal-every") o.signal_every = static_cast<uint32_t>(v ? v : 1);
        else if (a == "--imm") o.imm = v != 0;
        else return false;
    }
    return argc % 2 == 1;
}

uint8_t pattern(int writer, uint64_t round, size_t i) { return static_cast<uint8_t>(writer * 37 + round * 11 + i * 3 + 1); }

class Rank {
public:
    Rank(int rank, int size, const Options& o) : rank_(rank), size_(size), o_(o) {}

    void setup() {
        try {
            // sfab_0 when there is one, else the first device.
            ctx_ = verbs::open_device("sfab_0");
            if (!ctx_) ctx_ = verbs::open_device();
            if (!ctx_) fail(rank_, "opening an RDMA device (run it under `sigmatrace fabric`)");
            mine_.lid = verbs::query_port(ctx_.get(), kPort).lid;
            ibv_gid gid{};
            if (ibv_query_gid(ctx_.get(), kPort, 0, &gid) == 0) std::memcpy(mine_.gid, gid.raw, 16);
            pd_ = verbs::alloc_pd(ctx_.get());
            cq_ = verbs::create_cq(ctx_.get(), 4096);
            // One slot per writer; the send buffer is refilled each round.
            recv_.assign(static_cast<size_t>(size_) * o_.size, 0);
            send_.assign(o_.size, 0);
            counter_ = static_cast<uint64_t*>(std::aligned_alloc(64, 64));
            *counter_ = 0;
            recv_mr_ = verbs::reg_mr(pd_.get(), recv_.data(), recv_.size(), verbs::kFullAccess);
            send_mr_ = verbs::reg_mr(pd_.get(), send_.data(), send_.size(), IBV_ACCESS_LOCAL_WRITE);
            counter_mr_ = verbs::reg_mr(pd_.get(), counter_, 64, verbs::kFullAccess);
            scratch_ = static_cast<uint64_t*>(std::aligned_alloc(64, 64));
            scratch_mr_ = verbs::reg_mr(pd_.get(), scratch_, 64, IBV_ACCESS_LOCAL_WRITE);
            recv_scratch_ = static_cast<uint64_t*>(std::aligned_alloc(64, 64));
            recv_scratch_mr_ = verbs::reg_mr(pd_.get(), recv_scratch_, 64, IBV_ACCESS_LOCAL_WRITE);
            mine_.buf_addr = reinterpret_cast<uint64_t>(recv_.data());
            mine_.buf_rkey = recv_mr_->rkey;
            mine_.counter_addr = reinterpret_cast<uint64_t>(counter_);
            mine_.counter_rkey = counter_mr_->rkey;
            qps_.resize(static_cast<size_t>(size_));
            const verbs::RcCaps caps{.send_wr = 256, .recv_wr = o_.imm ? static_cast<uint32_t>(o_.iters) : 1};
            for (int p = 0; p < size_; ++p) {
                if (p == rank_ && rank_ != 0) continue;
                qps_[p] = verbs::create_rc_qp(pd_.get(), cq_.get(), cq_.get(), caps);
                mine_.qpn[p] = qps_[p]->qp_num;
            }
            // The other end of rank 0's self connection.
            if (rank_ == 0) self_peer_ = verbs::create_rc_qp(pd_.get(), cq_.get(), cq_.get(), caps);
            all_.resize(static_cast<size_t>(size_));
            MPI_Allgather(&mine_, sizeof mine_, MPI_BYTE, all_.data(), sizeof mine_, MPI_BYTE, MPI_COMM_WORLD);
            for (int p = 0; p < size_; ++p)
                if (qps_[p]) connect(qps_[p].get(), p, p == rank_ ? self_peer_->qp_num : all_[p].qpn[rank_]);
            if (self_peer_) connect(self_peer_.get(), 0, qps_[0]->qp_num);
            if (o_.imm)
                for (int p = 0; p < size_; ++p)
                    if (p != rank_)
                        for (uint64_t i = 0; i < o_.iters; ++i) post_receive(qps_[p].get());
        } catch (const verbs::SetupError& e) {
            fail(rank_, e);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }

    // Phase 1: skewed all-to-all.
    void alltoall() {
        for (uint64_t round = 0; round < o_.iters; ++round) {
            for (size_t i = 0; i < send_.size(); ++i) send_[i] = pattern(rank_, round, i);
            for (int k = 1; k < size_; ++k) {
                const int p = (rank_ + k) % size_;  // staggered so ranks do not all start on the same peer
                const uint32_t count = p == o_.hot ? o_.hot_factor : 1;
                for (uint32_t c = 0; c < count; ++c) {
                    const bool last = c + 1 == count;
                    const bool sig = last || ++posted_ % o_.signal_every == 0;
                    ibv_sge sge{reinterpret_cast<uint64_t>(send_.data()), o_.size, send_mr_->lkey};
                    ibv_send_wr wr{};
                    wr.wr_id = (round << 16) | static_cast<uint64_t>(p);
                    wr.sg_list = &sge;
                    wr.num_sge = 1;
                    wr.opcode = o_.imm && last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
                    wr.imm_data = htonl(static_cast<uint32_t>(round << 8) | static_cast<uint32_t>(rank_));
                    wr.send_flags = sig ? IBV_SEND_SIGNALED : 0;
                    wr.wr.rdma.remote_addr = all_[p].buf_addr + static_cast<uint64_t>(rank_) * o_.size;
                    wr.wr.rdma.rkey = all_[p].buf_rkey;
                    post(qps_[p].get(), wr);
                    if (sig) wait_completions(1);
                    bytes_written_ += o_.size;
                }
            }
        }
        // Every peer's immediates: one per round each, from the last write of its round to this rank.
        if (o_.imm)
            while (received_ < static_cast<uint64_t>(size_ - 1) * o_.iters) wait_completions(0);
        MPI_Barrier(MPI_COMM_WORLD);  // every write has completed everywhere
    }

    // Phase 2: the RDMA barrier on rank 0's counter.
    void barriers() {
        for (int e = 0; e < o_.epochs; ++e) {
            if (rank_ == late_rank()) std::this_thread::sleep_for(std::chrono::milliseconds(o_.late_ms));
            on_root_counter(IBV_WR_ATOMIC_FETCH_AND_ADD, 0xba000000u + static_cast<uint64_t>(e));
            const uint64_t target = static_cast<uint64_t>(e + 1) * static_cast<uint64_t>(size_);
            for (;;) {
                uint64_t seen;
                if (rank_ == 0) {
                    seen = __atomic_load_n(counter_, __ATOMIC_ACQUIRE);
                } else {
                    on_root_counter(IBV_WR_RDMA_READ, 0x7ead0000u + static_cast<uint64_t>(e));
                    seen = *scratch_;
                }
                if (seen >= target) break;
                std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }

    // Checks the last round's data from every writer; returns the number of bad slots.
    int check() const {
        int bad = 0;
        if (o_.iters == 0) return 0;
        for (int p = 0; p < size_; ++p) {
            if (p == rank_) continue;
            for (size_t i = 0; i < o_.size; ++i)
                if (recv_[static_cast<size_t>(p) * o_.size + i] != pattern(p, o_.iters - 1, i)) {
                    ++bad;
                    break;
                }
        }
        return bad;
    }

    void report(int bad) const {
        const char* node = std::getenv("SOFTFABRIC_NODE");
        std::printf("rank %d on %s: wrote %llu bytes (x%u to rank %d), %d barrier(s)%s, %d of %d slots intact\n", rank_,
                    node ? node : "?", static_cast<unsigned long long>(bytes_written_), o_.hot_factor, o_.hot,
                    o_.epochs, rank_ == late_rank() ? " arriving late" : "", size_ - 1 - bad, size_ - 1);
        std::fflush(stdout);
    }

    // In dependency order: QPs, MRs, CQ, PD, device.
    void teardown() {
        qps_.clear();
        self_peer_.reset();
        recv_mr_.reset();
        send_mr_.reset();
        counter_mr_.reset();
        scratch_mr_.reset();
        recv_scratch_mr_.reset();
        cq_.reset();
        pd_.reset();
        ctx_.reset();
        std::free(counter_);
        std::free(scratch_);
        std::free(recv_scratch_);
    }

private:
    int late_rank() const { return o_.late >= 0 ? o_.late : size_ - 1; }

    // A receive for a peer's immediate (its data goes to recv_, not here).
    void post_receive(ibv_qp* q) {
        ibv_sge sge{reinterpret_cast<uint64_t>(recv_scratch_), 8, recv_scratch_mr_->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = 0x1ecf0000u;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (ibv_post_recv(q, &wr, &bad)) fail(rank_, "ibv_post_recv");
    }

    // One signaled 8-byte operation on rank 0's counter, into scratch_ (an add of 1, or a read), waited for.
    void on_root_counter(ibv_wr_opcode opcode, uint64_t wr_id) {
        ibv_sge sge{reinterpret_cast<uint64_t>(scratch_), 8, scratch_mr_->lkey};
        ibv_send_wr wr{};
        wr.wr_id = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = opcode;
        wr.send_flags = IBV_SEND_SIGNALED;
        if (opcode == IBV_WR_RDMA_READ) {
            wr.wr.rdma.remote_addr = all_[0].counter_addr;
            wr.wr.rdma.rkey = all_[0].counter_rkey;
        } else {
            wr.wr.atomic.remote_addr = all_[0].counter_addr;
            wr.wr.atomic.rkey = all_[0].counter_rkey;
            wr.wr.atomic.compare_add = 1;
        }
        post(qps_[0].get(), wr);
        wait_completions(1);
    }

    void connect(ibv_qp* q, int peer, uint32_t dest_qpn) {
        verbs::connect_rc(q, {.qpn = dest_qpn, .lid = all_[peer].lid, .gid = all_[peer].gid},
                          {.access = verbs::kFullAccess, .rd_atomic = 4, .port = kPort});
    }

    void post(ibv_qp* q, ibv_send_wr& wr) {
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(q, &wr, &bad)) fail(rank_, "ibv_post_send");
    }

    // Waits for `n` send completions (0: polls once); receive completions (--imm) are counted on the way.
    void wait_completions(int n) {
        ibv_wc wc[16];
        do {
            const int got = ibv_poll_cq(cq_.get(), 16, wc);
            if (got < 0) fail(rank_, "ibv_poll_cq");
            // Ranks often outnumber cores here: a rank with nothing to do lets the others (and their receives) run.
            if (got == 0) sched_yield();
            for (int i = 0; i < got; ++i) {
                if (wc[i].status != IBV_WC_SUCCESS) {
                    std::fprintf(stderr, "st-alltoall: rank %d: completion error %s\n", rank_,
                                 ibv_wc_status_str(wc[i].status));
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
                if (wc[i].opcode & IBV_WC_RECV)
                    ++received_;
                else
                    --n;
            }
        } while (n > 0);
    }

    int rank_, size_;
    Options o_;
    verbs::Context ctx_;
    verbs::Pd pd_;
    verbs::Cq cq_;
    std::vector<uint8_t> recv_, send_;
    uint64_t* counter_ = nullptr;
    uint64_t* scratch_ = nullptr;
    uint64_t* recv_scratch_ = nullptr;
    verbs::Mr recv_mr_, send_mr_, counter_mr_, scratch_mr_, recv_scratch_mr_;
    std::vector<verbs::Qp> qps_;
    verbs::Qp self_peer_;
    Info mine_{};
    std::vector<Info> all_;
    uint64_t posted_ = 0;
    uint64_t bytes_written_ = 0;
    uint64_t received_ = 0;   // receive completions (--imm)
};

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    Options o;
    if (!parse(argc, argv, o) || size < 2 || size > kMaxRanks || (o.imm && o.iters > kMaxImmReceives)) {
        if (rank == 0)
            std::fprintf(stderr,
                         "usage: mpirun -np N (2..64) st-alltoall [--iters K] [--size BYTES] [--hot RANK] "
                         "[--hot-factor F] [--epochs E] [--late RANK] [--late-ms MS] [--signal-every N] [--imm 0|1]\n");
        MPI_Finalize();
        return 2;
    }
    if (o.hot >= size) o.hot = size - 1;
    Rank r(rank, size, o);
    r.setup();
    r.alltoall();
    r.barriers();
    const int bad = r.check();
    r.report(bad);
    int total_bad = 0;
    MPI_Allreduce(&bad, &total_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    r.teardown();
    MPI_Finalize();
    return total_bad == 0 ? 0 : 1;
}
