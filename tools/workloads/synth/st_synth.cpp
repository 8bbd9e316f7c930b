// st-synth: emits designed SigmaTrace events through the real LTTng provider, exactly as the tracer would, so
// the analyzer can be tested on real CTF traces with an exact ground truth (and benchmarked on traces of any
// length) without RDMA hardware, the software fabric or the preload library.
//
//   st-synth SCENARIO [--ranks N] [--iters K] [--size BYTES] [--truth FILE] [...]
//
// The parent writes the ground truth (--truth) and starts one child process per rank (this program again, with
// --rank R), so every rank is a separate traced process with its own vpid, like MPI ranks. Each rank reports a
// fabric-style identity: node "node<R>" (or R / --ranks-per-node), devices sfab0..sfab<rails-1> with a GID and
// LID per device, RC QPs to its peers on rail (peer % rails), and QP numbers unique across the job.
//
// Scenarios (see docs/analyzer.md "Test traces"):
//   traffic   designed all-to-all: rank r sends iters*(1 + (r+d)%3) RDMA WRITEs of --size bytes to each d != r
//             (x3 towards rank 0: skewed destinations), every --signal-every-th signaled; rank r reads
//             iters RDMA READs of --size/2 bytes from rank r+1; SEND/RECV of 64 bytes to rank r+1.
//   barrier   --epochs rounds; in each, every rank posts one ATOMIC_FETCH_AND_ADD to rank 0's word at a common
//             absolute time, rank --delay-rank --delay-us later; plus 8-byte writes to per-pair addresses
//             (not a barrier pattern).
//   errors    rank 0 posts --iters WRITEs to rank 1; the first fails with REM_ACCESS_ERR, the rest flush.
//   gpu       GPU-driven QPs (gpu_qp_create/modify, gpu_wqe, gpu_cqe): rank r writes iters WQEs to rank r+1,
//             every 4th signaled with a CQE; rank 0 also has a QP whose CQEs the watcher never sees.
//   ud        UD QPs: rank r sends iters SENDs via an address handle to rank r+1.
//   crash     rank 1 posts --iters WRITEs and aborts before any completion.
//   mixed     traffic + barrier + errors + gpu + ud + srq receives, small (golden traces).
//   bench     rank r posts --iters WRITEs to r+1 (one post_send each, signaled, polled in batches of 8).
//   deferred  like the tracer's deferred emission (process_info.defer_us = --defer-us, default 1000): rank r
//             posts --iters rounds of 3 signaled WRITEs to r+1 (5 us apart) and polls their completions
//             --latency-us later (5 us apart); each round's 3 posts are one deferred_records event and its
//             3 polls another, with per-call capture times, and the polls' event is emitted BEFORE the posts'.
#include <sigmatrace/schema.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <infiniband/verbs.h>
#include <sigmatrace/deferred_records_wire.h>

#include "interpose/capture/record_builder.h"
#include "provider/trace.h"

extern char** environ;

namespace {

constexpr uint8_t kWrWrite = 0, kWrSend = 2, kWrRead = 4, kWrFaa = 6;
constexpr uint8_t kWcSend = 0, kWcWrite = 1, kWcRead = 2, kWcFaa = 4, kWcRecv = 128;
constexpr uint32_t kSignaled = 2;
constexpr uint64_t kGidPrefix = 0xfe80000000000000ULL;

struct Params {
    std::string scenario;
    int ranks = 4;
    int rank = -1;            // >= 0 in a child
    int ranks_per_node = 1;
    int rails = 2;
    uint64_t iters = 100;
    uint32_t size = 4096;
    int signal_every = 4;
    int epochs = 10;
    int delay_rank = 2;
    uint64_t delay_us = 2000;
    uint64_t period_us = 10000;
    int64_t t0 = 0;           // CLOCK_MONOTONIC ns at which barrier epoch 0 starts
    uint64_t latency_us = 0;  // bench/traffic: time between a post and its completion (busy wait)
    uint64_t defer_us = 0;    // deferred: the process_info.defer_us announced (0 elsewhere: immediate)
    std::string truth;
    std::string self;
};

int64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// Busy-waits: a sleep would add the scheduler's wake-up latency, and the point is a known latency.
void spin_for(uint64_t us) {
    const int64_t end = now_ns() + static_cast<int64_t>(us) * 1000;
    while (now_ns() < end) {
    }
}

void sleep_until(int64_t t) {
    timespec ts{static_cast<time_t>(t / 1000000000LL), static_cast<long>(t % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
}

// ----------------------------------------------------------------------------------------- identities

int node_of(const Params& p, int rank) { return rank / p.ranks_per_node; }
std::string node_name(int node) { return "node" + std::to_string(node); }
int rail_of(const Params& p, int peer) { return peer % p.rails; }
uint64_t ctx_handle(int rail) { return 0x5500000000ULL + static_cast<uint64_t>(rail) * 0x1000; }
uint64_t gid_iid(int node, int rail) { return (static_cast<uint64_t>(node + 1) << 16) | static_cast<uint64_t>(rail); }
uint32_t lid_of(int node, int rail) { return static_cast<uint32_t>(node * 16 + rail + 1); }
uint32_t qpn_of(int rank, int peer) { return static_cast<uint32_t>(0x100 + rank * 64 + peer); }
uint32_t ud_qpn_of(int rank) { return static_cast<uint32_t>(0x8000 + rank); }
uint32_t gpu_qpn_of(int rank, int k) { return static_cast<uint32_t>(0x4000 + rank * 8 + k); }
uint64_t qp_handle(int rank, int peer) { return 0x7f0000000000ULL + (static_cast<uint64_t>(rank) << 20) + (static_cast<uint64_t>(peer) << 8); }
uint64_t cq_handle(int rail) { return 0x6600000000ULL + static_cast<uint64_t>(rail); }
constexpr uint64_t kBarrierWord = 0x10000;
constexpr uint32_t kBarrierRkey = 0xb0b;

// ----------------------------------------------------------------------------------------- emitters

void emit_identity(const Params& p) {
    const std::string host = node_name(node_of(p, p.rank));
    st_process_info_rec pi{};
    pi.schema_version = SIGMATRACE_SCHEMA_VERSION;
    pi.schema_minor = SIGMATRACE_SCHEMA_MINOR;
    pi.pid = getpid();
    pi.ppid = getppid();
    pi.rank = p.rank;
    pi.local_rank = p.rank % p.ranks_per_node;
    pi.world_size = p.ranks;
    pi.hostname = host.c_str();
    pi.job_id = "synth";
    pi.defer_us = static_cast<uint32_t>(p.defer_us);
    ST_TRACE(process_info, &pi);
    const int node = node_of(p, p.rank);
    for (int rail = 0; rail < p.rails; ++rail) {
        const std::string dev = "sfab" + std::to_string(rail);
        st_device_open_rec d{};
        d.ctx = ctx_handle(rail);
        d.device = dev.c_str();
        d.node_guid = gid_iid(node, rail);
        d.phys_port_cnt = 1;
        ST_TRACE(device_open, &d);
        st_port_info_rec pr{};
        pr.ctx = ctx_handle(rail);
        pr.port = 1;
        pr.gid_prefix = kGidPrefix;
        pr.gid_iid = gid_iid(node, rail);
        pr.lid = lid_of(node, rail);
        pr.state = 4;
        pr.link_layer = 1;
        pr.active_mtu = 5;
        ST_TRACE(port_info, &pr);
        st_cq_create_rec cq{};
        cq.ctx = ctx_handle(rail);
        cq.cq = cq_handle(rail);
        cq.cqe = 4096;
        ST_TRACE(cq_create, &cq);
    }
}

// QPs this rank already created: scenarios combined in `mixed` share them. (Process-wide state is fine here:
// each rank is its own single-threaded process.)
std::vector<int> g_connected_peers;

// An RC QP from this rank to `peer`, connected (RTR) with the peer's QPN and GID on the same rail.
void emit_rc_qp(const Params& p, int peer, uint64_t srq = 0) {
    if (std::find(g_connected_peers.begin(), g_connected_peers.end(), peer) != g_connected_peers.end()) return;
    g_connected_peers.push_back(peer);
    const int rail = rail_of(p, peer);
    st_qp_create_rec c{};
    c.ctx = ctx_handle(rail);
    c.qp = qp_handle(p.rank, peer);
    c.qp_num = qpn_of(p.rank, peer);
    c.qp_type = 2;
    c.send_cq = c.recv_cq = cq_handle(rail);
    c.srq = srq;
    c.max_send_wr = 512;
    c.max_recv_wr = 512;
    ST_TRACE(qp_create, &c);
    st_qp_modify_rec m{};
    m.qp = c.qp;
    m.qp_num = c.qp_num;
    m.attr_mask = 0x1 | 0x80 | 0x100000;
    m.qp_state = 2;  // RTR
    m.dest_qp_num = qpn_of(peer, p.rank);
    m.dlid = lid_of(node_of(p, peer), rail);
    m.is_global = 1;
    m.dgid_prefix = kGidPrefix;
    m.dgid_iid = gid_iid(node_of(p, peer), rail);
    m.port_num = 1;
    ST_TRACE(qp_modify, &m);
    m.attr_mask = 0x1;
    m.qp_state = 3;  // RTS
    m.dest_qp_num = 0;
    m.dlid = 0;
    m.is_global = 0;
    m.dgid_prefix = m.dgid_iid = 0;
    ST_TRACE(qp_modify, &m);
}

struct Wr {
    uint64_t wr_id;
    uint8_t opcode;
    uint32_t flags;
    uint32_t bytes;
    uint64_t raddr;
    uint32_t rkey;
};

// ------------------------------------------------------------------------------------------- data-path calls
//
// Each designed call is made of the verbs structures the application would pass, turned into records by the
// tracer's own builder (interpose/record_builder.h) and written into `deferred_records` events by its encoder
// (records::EventWords), so a synthetic trace says of a call exactly what a traced one does.

// Where the builder's records go: the event being written. Immediate (capture time 0: the event's timestamp),
// each record is an event of its own, as the tracer's immediate emission writes them; otherwise records wait
// for flush(), as in one of the tracer's drains.
namespace records = sigmatrace::records;
namespace rb = sigmatrace::interpose::record_builder;

class RecordsOut {
public:
    struct Target {
        RecordsOut* out;
        records::RecordHeader* begin(uint32_t) const { return reinterpret_cast<records::RecordHeader*>(out->record_); }
        void commit(records::RecordHeader* h) const { out->add(*h); }
    };
    Target target() { return Target{this}; }

    void flush() {
        if (words_.empty()) return;
        uint32_t n = 0;
        st_deferred_records_rec r{};
        r.layout = records::kLayout;
        r.words = words_.finish(&n);
        r.n = n;
        ST_TRACE(deferred_records, &r);
        words_.reset();
    }

private:
    void add(const records::RecordHeader& h) {
        if (!words_.fits(h.size)) flush();
        words_.add(h, h.ts, records::EncodeOptions{});
        if (h.ts == 0) flush();
    }

    alignas(16) std::byte record_[records::kMaxRecordSize];
    records::EventWords<8192> words_;
};

RecordsOut& records_out() {
    static RecordsOut out;  // one per rank process, which is single-threaded
    return out;
}

// The verbs chain of `wrs`: one SGE each, the remote address and key where the opcode has them.
std::vector<ibv_send_wr> send_chain(const std::vector<Wr>& wrs, std::vector<ibv_sge>& sges) {
    std::vector<ibv_send_wr> chain(wrs.size());
    sges.assign(wrs.size(), ibv_sge{});
    for (std::size_t i = 0; i < wrs.size(); ++i) {
        const Wr& w = wrs[i];
        ibv_send_wr& v = chain[i];
        sges[i].length = w.bytes;
        v.wr_id = w.wr_id;
        v.opcode = static_cast<ibv_wr_opcode>(w.opcode);
        v.send_flags = w.flags;
        v.sg_list = &sges[i];
        v.num_sge = 1;
        if (v.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || v.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
            v.wr.atomic.remote_addr = w.raddr;
            v.wr.atomic.rkey = w.rkey;
        } else {
            v.wr.rdma.remote_addr = w.raddr;
            v.wr.rdma.rkey = w.rkey;
        }
        v.next = i + 1 < wrs.size() ? &chain[i + 1] : nullptr;
    }
    return chain;
}

// One successful ibv_post_send of `wrs` on an RC QP, captured at `ts` (0: immediate).
void emit_post_send(uint64_t qp, uint32_t qpn, const std::vector<Wr>& wrs, uint64_t ts = 0) {
    std::vector<ibv_sge> sges;
    const std::vector<ibv_send_wr> chain = send_chain(wrs, sges);
    rb::build_post_send(records_out().target(), ts, rb::QpValues{qp, qpn, false}, chain.empty() ? nullptr : chain.data(), 0,
                        nullptr);
}

struct Wc {
    uint64_t wr_id;
    uint8_t status;
    uint8_t opcode;
    uint32_t byte_len;
    uint32_t qp_num;
    uint32_t src_qp = 0;
};

// One ibv_poll_cq that returned `wcs`, captured at `ts` (0: immediate).
void emit_poll(uint64_t cq, const std::vector<Wc>& wcs, uint64_t ts = 0) {
    std::vector<ibv_wc> wc(wcs.size());
    for (std::size_t i = 0; i < wcs.size(); ++i) {
        wc[i].wr_id = wcs[i].wr_id;
        wc[i].status = static_cast<ibv_wc_status>(wcs[i].status);
        wc[i].opcode = static_cast<ibv_wc_opcode>(wcs[i].opcode);
        wc[i].byte_len = wcs[i].byte_len;
        wc[i].qp_num = wcs[i].qp_num;
        wc[i].src_qp = wcs[i].src_qp;
    }
    rb::build_poll_cq(records_out().target(), ts, cq, wc.data(), static_cast<int>(wc.size()));
}

// One successful receive post of `count` WRs (wr_id first_wr_id..., one SGE of `bytes` each) on a QP, or on an
// SRQ (qp_num 0, kind post_srq_recv).
void emit_post_recv(uint64_t handle, uint32_t qpn, uint64_t first_wr_id, uint32_t count, uint32_t bytes,
                    bool srq = false) {
    std::vector<ibv_sge> sges(count);
    std::vector<ibv_recv_wr> chain(count);
    for (uint32_t i = 0; i < count; ++i) {
        sges[i].length = bytes;
        chain[i].wr_id = first_wr_id + i;
        chain[i].sg_list = &sges[i];
        chain[i].num_sge = 1;
        chain[i].next = i + 1 < count ? &chain[i + 1] : nullptr;
    }
    const ibv_recv_wr* first = count > 0 ? chain.data() : nullptr;
    if (srq) rb::build_post_recv<records::RecordKind::post_srq_recv>(records_out().target(), 0, handle, 0, first, 0, nullptr);
    else rb::build_post_recv<records::RecordKind::post_recv>(records_out().target(), 0, handle, qpn, first, 0, nullptr);
}

// Posts `count` WRs of one opcode on QP (rank -> peer) in chains of `chain`, every signal_every-th (and the
// last) signaled, and polls the signaled completions after each chain, like a bandwidth test.
void run_stream(const Params& p, int peer, uint8_t opcode, uint8_t wc_opcode, uint64_t count, uint32_t bytes,
                uint64_t raddr_base, uint64_t wr_base, std::size_t chain = 4) {
    const uint64_t qp = qp_handle(p.rank, peer);
    const uint32_t qpn = qpn_of(p.rank, peer);
    const uint64_t cq = cq_handle(rail_of(p, peer));
    for (uint64_t i = 0; i < count;) {
        std::vector<Wr> wrs;
        std::vector<Wc> wcs;
        for (std::size_t c = 0; c < chain && i < count; ++c, ++i) {
            const bool sig = ((i + 1) % static_cast<uint64_t>(p.signal_every)) == 0 || i + 1 == count;
            wrs.push_back({wr_base + i, opcode, sig ? kSignaled : 0u, bytes, raddr_base + i * bytes, 0x1234});
            if (sig) wcs.push_back({wr_base + i, 0, wc_opcode, opcode == kWrRead ? bytes : 0u, qpn});
        }
        emit_post_send(qp, qpn, wrs);
        if (p.latency_us) spin_for(p.latency_us);
        if (!wcs.empty()) emit_poll(cq, wcs);
    }
}

// ----------------------------------------------------------------------------------------- scenarios

uint64_t traffic_writes(const Params& p, int r, int d) {
    if (r == d) return 0;
    uint64_t c = p.iters * static_cast<uint64_t>(1 + (r + d) % 3);
    if (d == 0) c *= 3;
    return c;
}

void rank_traffic(const Params& p) {
    const int next = (p.rank + 1) % p.ranks;
    for (int d = 0; d < p.ranks; ++d)
        if (d != p.rank) emit_rc_qp(p, d);
    // Receives for the SENDs that the previous rank sends to this one.
    const int prev = (p.rank + p.ranks - 1) % p.ranks;
    emit_post_recv(qp_handle(p.rank, prev), qpn_of(p.rank, prev), 0x900000, static_cast<uint32_t>(p.iters), 256);
    for (int d = 0; d < p.ranks; ++d)
        if (d != p.rank) run_stream(p, d, kWrWrite, kWcWrite, traffic_writes(p, p.rank, d), p.size, 0x20000000, 0x100000);
    run_stream(p, next, kWrRead, kWcRead, p.iters, p.size / 2, 0x30000000, 0x200000);
    run_stream(p, next, kWrSend, kWcSend, p.iters, 64, 0, 0x300000);
    // Completions of the receives: the previous rank's SENDs of 64 bytes.
    std::vector<Wc> wcs;
    for (uint64_t i = 0; i < p.iters; ++i) wcs.push_back({0x900000 + i, 0, kWcRecv, 64, qpn_of(p.rank, prev), qpn_of(prev, p.rank)});
    emit_poll(cq_handle(rail_of(p, prev)), wcs);
}

void rank_barrier(const Params& p) {
    emit_rc_qp(p, 0);  // the QP that signals rank 0's word (rank 0: a loopback QP)
    const int next = (p.rank + 1) % p.ranks;
    if (next != 0) emit_rc_qp(p, next);
    const uint64_t qp0 = qp_handle(p.rank, 0);
    const uint32_t qpn0 = qpn_of(p.rank, 0);
    for (int e = 0; e < p.epochs; ++e) {
        int64_t target = p.t0 + static_cast<int64_t>(e) * static_cast<int64_t>(p.period_us) * 1000;
        if (p.rank == p.delay_rank) target += static_cast<int64_t>(p.delay_us) * 1000;
        sleep_until(target);
        emit_post_send(qp0, qpn0, {{0xba000 + static_cast<uint64_t>(e), kWrFaa, kSignaled, 8, kBarrierWord, kBarrierRkey}});
        emit_poll(cq_handle(rail_of(p, 0)), {{0xba000 + static_cast<uint64_t>(e), 0, kWcFaa, 8, qpn0}});
        // A small write to a per-pair flag (one participant per word: not a barrier).
        const int peer = next == 0 ? 0 : next;
        emit_post_send(qp_handle(p.rank, peer), qpn_of(p.rank, peer),
                       {{0xf1000 + static_cast<uint64_t>(e), kWrWrite, kSignaled, 8,
                         0x50000 + static_cast<uint64_t>(p.rank) * 64, 0xf1a9}});
        emit_poll(cq_handle(rail_of(p, peer)), {{0xf1000 + static_cast<uint64_t>(e), 0, kWcWrite, 0, qpn_of(p.rank, peer)}});
    }
}

void rank_errors(const Params& p) {
    if (p.rank > 1) return;
    const int peer = 1 - p.rank;
    emit_rc_qp(p, peer);
    if (p.rank != 0) return;
    std::vector<Wr> wrs;
    std::vector<Wc> wcs;
    for (uint64_t i = 0; i < p.iters; ++i) {
        wrs.push_back({0xe000 + i, kWrWrite, (i % 2) ? kSignaled : 0u, p.size, 0x70000000 + i * p.size, 0xdead});
        wcs.push_back({0xe000 + i, static_cast<uint8_t>(i == 0 ? 10 : 5), kWcWrite, 0, qpn_of(0, 1)});
    }
    emit_post_send(qp_handle(0, 1), qpn_of(0, 1), wrs);
    emit_poll(cq_handle(rail_of(p, 1)), wcs);
}

void emit_gpu_qp(const Params& p, int peer, int k) {
    const int rail = rail_of(p, peer);
    st_gpu_qp_create_rec c{};
    c.ctx = ctx_handle(rail);
    c.qpn = gpu_qpn_of(p.rank, k);
    c.st = 0;
    c.sq_addr = 0x7a0000000000ULL;
    c.sq_wqebb = 256;
    c.dbr_addr = 0x7a0000100000ULL;
    c.cqn_snd = 0x300 + static_cast<uint32_t>(k);
    c.mem_type = 1;
    ST_TRACE(gpu_qp_create, &c);
    st_gpu_qp_modify_rec m{};
    m.ctx = c.ctx;
    m.qpn = c.qpn;
    m.command = 0x503;
    m.remote_qpn = gpu_qpn_of(peer, k);
    m.rlid = lid_of(node_of(p, peer), rail);
    m.rgid_prefix = kGidPrefix;
    m.rgid_iid = gid_iid(node_of(p, peer), rail);
    ST_TRACE(gpu_qp_modify, &m);
}

// GPU WQEs on QP k of this rank: `count` RDMA WRITEs of `bytes`, every 4th signaled; CQEs for the signaled
// ones when `with_cqes`.
void gpu_stream(const Params& p, int k, uint64_t count, uint32_t bytes, bool with_cqes) {
    const uint32_t qpn = gpu_qpn_of(p.rank, k);
    uint32_t pi = 0;
    for (uint64_t i = 0; i < count;) {
        // Up to 8 data WQEs and the NOP after them.
        std::array<uint16_t, 9> idx{};
        std::array<uint8_t, 9> op{}, opmod{}, fm{};
        std::array<uint32_t, 9> len{}, rkey{}, imm{};
        std::array<uint64_t, 9> raddr{}, arg{};
        std::vector<uint16_t> signaled;
        uint32_t n = 0;
        const uint32_t pi_old = pi;
        for (; n < 8 && i < count; ++n, ++i, ++pi) {
            idx[n] = static_cast<uint16_t>(pi);
            op[n] = 0x08;
            const bool sig = (i + 1) % 4 == 0 || i + 1 == count;
            fm[n] = sig ? 0x08 : 0x00;
            len[n] = bytes;
            raddr[n] = 0x80000000 + i * bytes;
            rkey[n] = 0x77;
            if (sig) signaled.push_back(static_cast<uint16_t>(pi));
        }
        // A NOP (no data, not an operation) after every batch, as NVSHMEM posts for its own bookkeeping.
        idx[n] = static_cast<uint16_t>(pi++);
        op[n] = 0x00;
        ++n;
        st_gpu_wqe_rec w{};
        w.qpn = qpn;
        w.pi_old = pi_old;
        w.pi_new = pi;
        w.n = n;
        w.wqe_index = idx.data();
        w.opcode = op.data();
        w.opmod = opmod.data();
        w.fm_ce_se = fm.data();
        w.bytes = len.data();
        w.raddr = raddr.data();
        w.rkey = rkey.data();
        w.imm = imm.data();
        w.atomic_arg = arg.data();
        ST_TRACE(gpu_wqe, &w);
        if (!with_cqes || signaled.empty()) continue;
        std::array<uint16_t, 8> ctr{};
        std::array<uint8_t, 8> cop{}, syn{};
        std::array<uint32_t, 8> bc{}, cq_qpn{};
        std::array<uint64_t, 8> hw{};
        for (std::size_t s = 0; s < signaled.size(); ++s) {
            ctr[s] = signaled[s];
            cq_qpn[s] = qpn;
        }
        st_gpu_cqe_rec c{};
        c.cqn = 0x300 + static_cast<uint32_t>(k);
        c.n = static_cast<uint32_t>(signaled.size());
        c.wqe_counter = ctr.data();
        c.opcode = cop.data();
        c.syndrome = syn.data();
        c.byte_cnt = bc.data();
        c.qpn = cq_qpn.data();
        c.hw_ts = hw.data();
        ST_TRACE(gpu_cqe, &c);
    }
}

void rank_gpu(const Params& p) {
    const int next = (p.rank + 1) % p.ranks;
    emit_gpu_qp(p, next, 0);
    gpu_stream(p, 0, p.iters, p.size, true);
    if (p.rank == 0) {
        emit_gpu_qp(p, next, 1);
        gpu_stream(p, 1, p.iters / 2, p.size * 2, false);
    }
}

void rank_ud(const Params& p) {
    const int next = (p.rank + 1) % p.ranks;
    const int rail = 0;
    st_qp_create_rec c{};
    c.ctx = ctx_handle(rail);
    c.qp = 0x7e0000000000ULL + static_cast<uint64_t>(p.rank);
    c.qp_num = ud_qpn_of(p.rank);
    c.qp_type = 4;
    c.send_cq = c.recv_cq = cq_handle(rail);
    c.max_send_wr = 256;
    c.max_recv_wr = 256;
    c.sq_sig_all = 1;
    ST_TRACE(qp_create, &c);
    st_ah_create_rec ah{};
    ah.ctx = ctx_handle(rail);
    ah.ah = 0xa40000 + static_cast<uint64_t>(next);
    ah.dlid = lid_of(node_of(p, next), rail);
    ah.is_global = 1;
    ah.dgid_prefix = kGidPrefix;
    ah.dgid_iid = gid_iid(node_of(p, next), rail);
    ah.port_num = 1;
    ST_TRACE(ah_create, &ah);
    for (uint64_t i = 0; i < p.iters; ++i) {
        ibv_sge sge{};
        sge.length = 512;
        ibv_send_wr w{};
        w.wr_id = 0xdd000 + i;
        w.opcode = IBV_WR_SEND;
        w.sg_list = &sge;
        w.num_sge = 1;
        w.wr.ud.ah = reinterpret_cast<ibv_ah*>(ah.ah);  // a handle, never dereferenced
        w.wr.ud.remote_qpn = ud_qpn_of(next);
        rb::build_post_send(records_out().target(), 0, rb::QpValues{c.qp, c.qp_num, true}, &w, 0, nullptr);
        emit_poll(cq_handle(rail), {{0xdd000 + i, 0, kWcSend, 0, c.qp_num}});
    }
}

void rank_crash(const Params& p) {
    if (p.rank > 1) return;
    const int peer = 1 - p.rank;
    emit_rc_qp(p, peer);
    if (p.rank != 1) return;
    std::vector<Wr> wrs;
    for (uint64_t i = 0; i < p.iters; ++i) wrs.push_back({0xc000 + i, kWrWrite, kSignaled, p.size, 0x60000000, 0x42});
    emit_post_send(qp_handle(1, 0), qpn_of(1, 0), wrs);
    std::fflush(nullptr);
    std::abort();  // the trace ends here for this process: every WR above is in flight
}

void rank_srq(const Params& p) {
    // Rank 0 receives through an SRQ the SENDs rank 1 posts on QP 1->0 (opcode SEND, 128 bytes each).
    if (p.rank > 1) return;
    const uint64_t srq = 0x5a5a00;
    if (p.rank == 0) {
        st_srq_create_rec s{};
        s.ctx = ctx_handle(rail_of(p, 1));
        s.srq = srq;
        s.max_wr = 64;
        ST_TRACE(srq_create, &s);
        emit_rc_qp(p, 1, srq);
        emit_post_recv(srq, 0, 0x5e000, 8, 4096, true);
        std::vector<Wc> wcs;
        for (uint64_t i = 0; i < 6; ++i) wcs.push_back({0x5e000 + i, 0, kWcRecv, 128, qpn_of(0, 1), qpn_of(1, 0)});
        emit_poll(cq_handle(rail_of(p, 1)), wcs);
    }
}

void rank_bench(const Params& p) {
    const int next = (p.rank + 1) % p.ranks;
    emit_rc_qp(p, next);
    const uint64_t qp = qp_handle(p.rank, next);
    const uint32_t qpn = qpn_of(p.rank, next);
    const uint64_t cq = cq_handle(rail_of(p, next));
    std::vector<Wc> wcs;
    for (uint64_t i = 0; i < p.iters; ++i) {
        emit_post_send(qp, qpn, {{i, kWrWrite, kSignaled, p.size, 0x40000000 + (i % 1024) * p.size, 0x99}});
        wcs.push_back({i, 0, kWcWrite, 0, qpn});
        if (p.latency_us) spin_for(p.latency_us);
        if (wcs.size() == 8 || i + 1 == p.iters) {
            emit_poll(cq, wcs);
            wcs.clear();
        }
    }
}

void rank_deferred(const Params& p) {
    const int next = (p.rank + 1) % p.ranks;
    emit_rc_qp(p, next);
    const uint64_t qp = qp_handle(p.rank, next);
    const uint32_t qpn = qpn_of(p.rank, next);
    const uint64_t cq = cq_handle(rail_of(p, next));
    constexpr int kMerged = 3;
    for (uint64_t i = 0; i < p.iters; ++i) {
        std::vector<Wr> wrs;
        std::vector<Wc> wcs;
        std::array<uint64_t, kMerged> posted{}, polled{};
        for (int k = 0; k < kMerged; ++k) {
            if (k) spin_for(5);
            posted[static_cast<std::size_t>(k)] = static_cast<uint64_t>(now_ns());
            const uint64_t id = i * kMerged + static_cast<uint64_t>(k);
            wrs.push_back({id, kWrWrite, kSignaled, p.size, 0x40000000 + (id % 1024) * p.size, 0x99});
            wcs.push_back({id, 0, kWcWrite, 0, qpn});
        }
        spin_for(p.latency_us);
        for (int k = 0; k < kMerged; ++k) {
            if (k) spin_for(5);
            polled[static_cast<std::size_t>(k)] = static_cast<uint64_t>(now_ns());
        }
        // Each poll returned one completion and each post was one WR: a record each, the polls' event written
        // before the posts'.
        for (int k = 0; k < kMerged; ++k) emit_poll(cq, {wcs[static_cast<std::size_t>(k)]}, polled[static_cast<std::size_t>(k)]);
        records_out().flush();
        for (int k = 0; k < kMerged; ++k) emit_post_send(qp, qpn, {wrs[static_cast<std::size_t>(k)]}, posted[static_cast<std::size_t>(k)]);
        records_out().flush();
    }
}

void run_rank(Params p) {
    emit_identity(p);
    const std::string& s = p.scenario;
    if (s == "traffic") rank_traffic(p);
    else if (s == "barrier") rank_barrier(p);
    else if (s == "errors") rank_errors(p);
    else if (s == "gpu") rank_gpu(p);
    else if (s == "ud") rank_ud(p);
    else if (s == "crash") rank_crash(p);
    else if (s == "bench") rank_bench(p);
    else if (s == "deferred") rank_deferred(p);
    else if (s == "mixed") {
        Params q = p;
        q.iters = std::max<uint64_t>(1, p.iters / 4);
        rank_srq(q);  // first: its QP 0->1 is the one with the SRQ, which the traffic below reuses
        rank_traffic(q);
        q.epochs = p.epochs;
        rank_barrier(q);
        Params e = q;
        e.iters = 6;
        rank_errors(e);
        rank_gpu(q);
        rank_ud(q);
    }
}

// ----------------------------------------------------------------------------------------- ground truth

struct Cell {
    uint64_t bytes = 0, ops = 0;
};

std::string truth_json(const Params& p) {
    std::map<std::string, Cell> by_opcode;
    std::map<std::pair<int, int>, Cell> matrix;       // node -> node
    std::map<std::pair<int, int>, std::pair<uint64_t, uint64_t>> rails;  // (node, rail) -> tx, rx
    auto xfer = [&](const char* opcode, int src_rank, int dst_rank, int rail, uint64_t ops, uint64_t bytes_each,
                    bool count_opcode = true) {
        if (count_opcode) {
            by_opcode[opcode].ops += ops;
            by_opcode[opcode].bytes += ops * bytes_each;
        }
        const int sn = node_of(p, src_rank), dn = node_of(p, dst_rank);
        matrix[{sn, dn}].ops += ops;
        matrix[{sn, dn}].bytes += ops * bytes_each;
        rails[{sn, rail}].first += ops * bytes_each;
        rails[{dn, rail}].second += ops * bytes_each;
    };
    uint64_t epochs = 0, errors = 0, in_flight = 0;
    if (p.scenario == "traffic") {
        for (int r = 0; r < p.ranks; ++r) {
            const int next = (r + 1) % p.ranks;
            for (int d = 0; d < p.ranks; ++d)
                if (d != r) xfer("RDMA_WRITE", r, d, rail_of(p, d), traffic_writes(p, r, d), p.size);
            xfer("RDMA_READ", next, r, rail_of(p, next), p.iters, p.size / 2);  // data moves next -> r
            xfer("SEND", r, next, rail_of(p, next), p.iters, 64);
            by_opcode["RECV"].ops += p.iters;
            by_opcode["RECV"].bytes += p.iters * 64;
        }
    } else if (p.scenario == "barrier") {
        epochs = static_cast<uint64_t>(p.epochs);
        for (int r = 0; r < p.ranks; ++r) {
            const int next = (r + 1) % p.ranks;
            xfer("ATOMIC_FETCH_AND_ADD", r, 0, 0, epochs, 8);
            xfer("RDMA_WRITE", r, next, rail_of(p, next), epochs, 8);
        }
    } else if (p.scenario == "errors") {
        by_opcode["RDMA_WRITE"].ops += p.iters;
        errors = p.iters;
    } else if (p.scenario == "gpu") {
        for (int r = 0; r < p.ranks; ++r) xfer("RDMA_WRITE", r, (r + 1) % p.ranks, rail_of(p, (r + 1) % p.ranks), p.iters, p.size);
        xfer("RDMA_WRITE", 0, 1 % p.ranks, rail_of(p, 1 % p.ranks), p.iters / 2, p.size * 2);
    } else if (p.scenario == "ud") {
        for (int r = 0; r < p.ranks; ++r) xfer("SEND", r, (r + 1) % p.ranks, 0, p.iters, 512);
    } else if (p.scenario == "crash") {
        by_opcode["RDMA_WRITE"].ops += p.iters;
        in_flight = p.iters;
    } else if (p.scenario == "bench") {
        for (int r = 0; r < p.ranks; ++r) xfer("RDMA_WRITE", r, (r + 1) % p.ranks, rail_of(p, (r + 1) % p.ranks), p.iters, p.size);
    }
    // Skews over every node (max/mean, inter-node bytes only).
    const int nodes = (p.ranks + p.ranks_per_node - 1) / p.ranks_per_node;
    std::vector<double> in(static_cast<std::size_t>(nodes), 0), out(static_cast<std::size_t>(nodes), 0);
    for (const auto& [k, c] : matrix)
        if (k.first != k.second) {
            out[static_cast<std::size_t>(k.first)] += static_cast<double>(c.bytes);
            in[static_cast<std::size_t>(k.second)] += static_cast<double>(c.bytes);
        }
    auto skew = [](const std::vector<double>& v) {
        double s = 0, m = 0;
        for (double x : v) {
            s += x;
            m = std::max(m, x);
        }
        return s > 0 ? m / (s / static_cast<double>(v.size())) : 0.0;
    };
    // Formatted with fmt (GCC 12 -O3 reports a false -Wrestrict on chains of std::string operator+).
    std::string j;
    auto out_it = std::back_inserter(j);
    fmt::format_to(out_it, "{{\n  \"scenario\": \"{}\",\n  \"ranks\": {},\n  \"nodes\": {},\n", p.scenario, p.ranks, nodes);
    fmt::format_to(out_it, "  \"epochs\": {},\n  \"delay_rank\": {},\n  \"delay_ns\": {},\n", epochs, p.delay_rank,
                   p.delay_us * 1000);
    fmt::format_to(out_it, "  \"errors\": {},\n  \"in_flight\": {},\n", errors, in_flight);
    fmt::format_to(out_it, "  \"inbound_skew\": {:.9f},\n  \"outbound_skew\": {:.9f},\n  \"by_opcode\": {{", skew(in),
                   skew(out));
    const char* sep = "\n";
    for (const auto& [op, c] : by_opcode) {
        fmt::format_to(out_it, "{}    \"{}\": {{\"count\": {}, \"bytes\": {}}}", sep, op, c.ops, c.bytes);
        sep = ",\n";
    }
    j += "\n  },\n  \"node_matrix\": [";
    sep = "\n";
    for (const auto& [k, c] : matrix) {
        fmt::format_to(out_it, "{}    {{\"src\": \"{}\", \"dst\": \"{}\", \"bytes\": {}, \"ops\": {}}}", sep,
                       node_name(k.first), node_name(k.second), c.bytes, c.ops);
        sep = ",\n";
    }
    j += "\n  ],\n  \"rails\": [";
    sep = "\n";
    for (const auto& [k, tr] : rails) {
        fmt::format_to(out_it, "{}    {{\"node\": \"{}\", \"device\": \"sfab{}\", \"bytes_tx\": {}, \"bytes_rx\": {}}}", sep,
                       node_name(k.first), k.second, tr.first, tr.second);
        sep = ",\n";
    }
    j += "\n  ]\n}\n";
    return j;
}

// ----------------------------------------------------------------------------------------- main

bool parse_num(const char* s, uint64_t& out) {
    auto [p, ec] = std::from_chars(s, s + std::strlen(s), out);
    return ec == std::errc() && *p == '\0';
}

int usage() {
    std::fprintf(stderr,
                 "usage: st-synth traffic|barrier|errors|gpu|ud|crash|mixed|bench|deferred [--ranks N] [--ranks-per-node N] "
                 "[--rails R] [--iters K] [--size BYTES] [--signal-every N] [--epochs E] [--delay-rank R] "
                 "[--delay-us US] [--period-us US] [--latency-us US] [--defer-us US] [--truth FILE]\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) return usage();
    Params p;
    p.self = argv[0];
    p.scenario = argv[1];
    for (int i = 2; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (i + 1 >= argc) return usage();
        const char* v = argv[++i];
        uint64_t n = 0;
        if (a == "--truth") {
            p.truth = v;
            continue;
        }
        if (!parse_num(v, n) && !(a == "--t0")) return usage();
        if (a == "--ranks") p.ranks = static_cast<int>(n);
        else if (a == "--rank") p.rank = static_cast<int>(n);
        else if (a == "--ranks-per-node") p.ranks_per_node = static_cast<int>(n);
        else if (a == "--rails") p.rails = static_cast<int>(n);
        else if (a == "--iters") p.iters = n;
        else if (a == "--size") p.size = static_cast<uint32_t>(n);
        else if (a == "--signal-every") p.signal_every = static_cast<int>(n);
        else if (a == "--epochs") p.epochs = static_cast<int>(n);
        else if (a == "--delay-rank") p.delay_rank = static_cast<int>(n);
        else if (a == "--delay-us") p.delay_us = n;
        else if (a == "--period-us") p.period_us = n;
        else if (a == "--latency-us") p.latency_us = n;
        else if (a == "--defer-us") p.defer_us = n;
        else if (a == "--t0") p.t0 = std::strtoll(v, nullptr, 10);
        else return usage();
    }
    if (p.scenario == "deferred" && p.defer_us == 0) p.defer_us = 1000;
    if (p.ranks < 2 || p.rails < 1 || p.ranks_per_node < 1 || p.signal_every < 1) return usage();

    if (p.rank >= 0) {
        run_rank(p);
        return 0;
    }
    if (!p.truth.empty()) {
        std::FILE* f = std::fopen(p.truth.c_str(), "w");
        if (!f) {
            std::fprintf(stderr, "st-synth: Cannot write the truth: path=%s\n", p.truth.c_str());
            return 2;
        }
        std::fputs(truth_json(p).c_str(), f);
        std::fclose(f);
    }
    // Epoch 0 of a barrier starts once every child has had time to start and register with the session daemon
    // (generous: sanitizer builds on a loaded 2-core machine start slowly).
    const int64_t t0 = now_ns() + (p.scenario == "barrier" || p.scenario == "mixed" ? 1000000000 : 0);
    std::vector<pid_t> children;
    for (int r = 0; r < p.ranks; ++r) {
        std::vector<std::string> args = {p.self, p.scenario, "--rank", std::to_string(r)};
        for (int i = 2; i < argc; ++i) args.emplace_back(argv[i]);
        args.insert(args.end(), {"--t0", std::to_string(t0)});
        // The truth file is the parent's job.
        for (std::size_t i = 0; i + 1 < args.size(); ++i)
            if (args[i] == "--truth") args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
        std::vector<char*> cargv;
        for (auto& s : args) cargv.push_back(s.data());
        cargv.push_back(nullptr);
        pid_t pid = 0;
        if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, cargv.data(), environ) != 0) {
            std::fprintf(stderr, "st-synth: Cannot start rank %d: %s\n", r, std::strerror(errno));
            return 2;
        }
        children.push_back(pid);
    }
    int status = 0;
    for (pid_t c : children) {
        int st = 0;
        waitpid(c, &st, 0);
        // A crashing rank is the point of the crash scenario.
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && p.scenario != "crash") status = 1;
    }
    return status;
}
