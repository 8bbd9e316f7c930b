#include "core/engine.h"

#include <endian.h>
#include <fmt/core.h>
#include <sched.h>
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/clock.h"
#include "core/fabric_objects.h"
#include "core/runtime.h"
#include "core/transfer.h"

namespace softfabric::engine {
namespace {

// Translates a (key, address, length) triple through an MR table: the address the bytes live at in the MR
// owner's address space, or false when the key is stale, of another PD, lacks `access` or is out of bounds.
bool translate(const MrEntry* table, uint32_t key, uint64_t pd_id, uint64_t addr, uint64_t length, uint32_t access,
               uint64_t& out) {
    if (key == 0) return false;
    const MrEntry& m = table[mr_slot_of(key)];
    if (m.key.load(std::memory_order_acquire) != key) return false;
    if (m.pd_id != pd_id || (m.access & access) != access) return false;
    if (addr < m.iova) return false;
    uint64_t off = addr - m.iova;
    if (off > m.length || length > m.length - off) return false;
    out = m.addr + off;
    return true;
}

const MrEntry* mr_table_of(unsigned char* arena) {
    auto* h = reinterpret_cast<ArenaHeader*>(arena);
    return reinterpret_cast<const MrEntry*>(arena + h->mr_table_offset);
}

// The 40-byte GRH a UD receiver finds in front of the payload when the sender used a global route.
void fill_grh(unsigned char* grh, uint32_t payload, const ibv_gid& sgid, const ibv_gid& dgid) {
    std::memset(grh, 0, kUdGrhBytes);
    grh[0] = 6 << 4;  // IP version 6
    uint16_t len = htobe16(static_cast<uint16_t>(payload));
    std::memcpy(grh + 4, &len, 2);
    grh[6] = 0x1b;  // next header: IBA transport
    grh[7] = 64;    // hop limit
    std::memcpy(grh + 8, sgid.raw, 16);
    std::memcpy(grh + 24, dgid.raw, 16);
}

// Runs `update` on the 8 bytes at `addr` of process `p` while holding the atomic unit of NIC `nic`: fabric
// atomics to one NIC are serialized (IBV_ATOMIC_HCA). `update` returns whether to write the value back.
template <typename Update>
int atomic_at(FabricRegion& region, NicId nic, const PeerQp& p, uint64_t addr, Update update) {
    std::atomic<int32_t>& owner = region.nics[nic.index()].atomic_owner;
    const int32_t self = getpid();
    for (uint32_t spins = 0;; ++spins) {
        int32_t expected = 0;
        if (owner.compare_exchange_weak(expected, self, std::memory_order_acquire)) break;
        if (spins % 1024 == 1023) {
            // The holder may have died inside its critical section: take the unit over.
            if (expected != 0 && kill(expected, 0) != 0 && errno == ESRCH)
                owner.compare_exchange_strong(expected, 0, std::memory_order_relaxed);
            sched_yield();
        }
    }
    uint64_t value = 0;
    iovec l{&value, 8};
    iovec r{reinterpret_cast<void*>(addr), 8};
    int err = read_from_process(p.pid, p.local, &l, 1, &r, 1, 8);
    if (!err && update(value)) err = write_to_process(p.pid, p.local, &l, 1, &r, 1, 8);
    owner.store(0, std::memory_order_release);
    return err;
}

}  // namespace

uint64_t transport_timeout_ns(uint8_t timeout) {
    if (timeout == 0) timeout = 14;
    if (timeout > 31) timeout = 31;
    return 4096ull << timeout;
}

uint64_t rnr_timer_ns(uint32_t encoded) {
    // IB spec table, in units of 10 us; entry 0 means 655.36 ms.
    static constexpr uint32_t kTens[32] = {65536, 1,    2,    3,    4,    6,     8,     12,    16,   24,   32,
                                           48,    64,   96,   128,  192,  256,   384,   512,   768,  1024, 1536,
                                           2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
    return uint64_t{kTens[encoded & 31]} * 10'000ull;
}

ibv_wc_opcode wc_opcode_of(Opcode op) {
    switch (op) {
        case Opcode::Send:
        case Opcode::SendWithImm: return IBV_WC_SEND;
        case Opcode::RdmaWrite:
        case Opcode::RdmaWriteWithImm: return IBV_WC_RDMA_WRITE;
        case Opcode::RdmaRead: return IBV_WC_RDMA_READ;
        case Opcode::AtomicCmpSwp: return IBV_WC_COMP_SWAP;
        case Opcode::AtomicFetchAdd: return IBV_WC_FETCH_ADD;
    }
    return IBV_WC_SEND;
}

void CqSink::deliver(const SendCompletion& c) {
    if (!cq_) return;
    ibv_wc wc{};
    wc.wr_id = c.id;
    wc.status = c.status;
    wc.opcode = c.opcode;
    wc.vendor_err = c.vendor_err;
    wc.byte_len = c.byte_len;
    wc.qp_num = c.qp_num;
    cq_->push(wc, c.time_ns);
    rt_.completed_into(cq_, c.status != IBV_WC_SUCCESS);
}

QueuePair::QueuePair(Runtime& rt, const QueuePairConfig& config)
    : rt_(rt), config_(config), default_sink_(rt, config.send_cq), sink_(&default_sink_) {
    LocalArena& arena = rt.arena();
    shared_offset_ = arena.allocate(sizeof(SharedQp));
    if (!shared_offset_) throw FabricError("Cannot create QP: the fabric arena of this process is full");
    shared_ = arena.at<SharedQp>(shared_offset_);
    if (config.rq_depth) {
        ArenaBlock rq = create_recv_ring(rt, config.rq_depth, config.max_recv_sge);
        if (!rq.offset) {
            arena.release(shared_offset_, sizeof(SharedQp));
            throw FabricError("Cannot create QP: the fabric arena of this process is full");
        }
        rq_offset_ = rq.offset;
        rq_bytes_ = rq.bytes;
        rq_ = arena.at<RecvRing>(rq_offset_);
    }
    if (config.recv_cq_offset) recv_cq_ = arena.at<SharedCq>(config.recv_cq_offset);
    capacity_ = std::bit_ceil(std::max(config.sq_depth, 1u));
    stride_ = static_cast<uint32_t>((sizeof(Wqe) + sizeof(Sge) * std::max(config.max_send_sge, 1u) +
                                     config.max_inline + 63) & ~size_t{63});
    sq_.assign(size_t{capacity_} * stride_, 0);

    shared_->state.store(IBV_QPS_RESET);
    shared_->type = config.type;
    shared_->nic = config.nic.index();
    shared_->pd_id = config.pd_id;
    shared_->member = rt.member();
    shared_->rq_offset = rq_offset_;
    shared_->srq_offset = config.srq_offset;
    shared_->recv_cq_offset = config.recv_cq_offset;
    shared_->dc_role = static_cast<uint32_t>(config.dc_role);
    qpn_ = rt.claim_qpn(shared_offset_);
    if (!qpn_) {
        arena.release(rq_offset_, rq_bytes_);
        arena.release(shared_offset_, sizeof(SharedQp));
        throw FabricError(fmt::format("Cannot create QP: all {} QP numbers of the fabric are in use", kQpSlots));
    }
    rt.add_qp(this);
}

QueuePair::~QueuePair() {
    rt_.remove_qp(this);
    shared_->state.store(IBV_QPS_RESET);
    rt_.release_qpn(qpn_);
    shared_->qpn = 0;
    rt_.arena().release(rq_offset_, rq_bytes_);
    rt_.arena().release(shared_offset_, sizeof(SharedQp));
}

bool QueuePair::grow_inline(uint32_t max_inline) {
    std::lock_guard lock(sq_lock_);
    if (max_inline <= config_.max_inline) return true;
    if (tail_ != done_ || staged_ != 0) return false;
    config_.max_inline = max_inline;
    stride_ = static_cast<uint32_t>((sizeof(Wqe) + sizeof(Sge) * std::max(config_.max_send_sge, 1u) +
                                     config_.max_inline + 63) & ~size_t{63});
    sq_.assign(size_t{capacity_} * stride_, 0);
    return true;
}

void QueuePair::set_state(ibv_qp_state s) {
    if (s == IBV_QPS_RESET) {
        std::lock_guard lock(sq_lock_);
        tail_ = exec_ = done_ = 0;
        staged_ = 0;
        next_due_.store(kNever);
        if (rq_) rq_->head.store(rq_->tail.load());
        shared_->flush_request.store(0);
        shared_->state.store(IBV_QPS_RESET, std::memory_order_release);
        return;
    }
    shared_->state.store(s, std::memory_order_release);
    if (s == IBV_QPS_ERR) {
        {
            std::lock_guard lock(sq_lock_);
            enter_error_from(done_);
            progress(now_ns());
        }
        flush_receives();
    }
}

Wqe* QueuePair::reserve() {
    if (tail_ + staged_ - done_ >= capacity_) return nullptr;
    Wqe* w = at(tail_ + staged_);
    std::memset(static_cast<void*>(w), 0, sizeof(Wqe));
    ++staged_;
    return w;
}

void QueuePair::abort() { staged_ = 0; }

void QueuePair::commit(uint64_t now) {
    uint64_t first_due = kNever;
    for (uint32_t i = 0; i < staged_; ++i) {
        Wqe* w = at(tail_);
        // Inline bytes first, then the gather list (an mlx5 WQE may carry both: headers inline, payload by
        // reference); the verbs front end uses one or the other.
        w->length = (w->flags & kInline) ? w->inline_length : 0;
        for (uint32_t s = 0; s < w->num_sge; ++s) w->length += w->sges()[s].length;
        if (w->opcode == Opcode::AtomicCmpSwp || w->opcode == Opcode::AtomicFetchAdd) w->length = 8;
        w->status = IBV_WC_SUCCESS;
        if (state() == IBV_QPS_ERR) {
            w->status = IBV_WC_WR_FLUSH_ERR;
            w->phase = Wqe::Phase::Executed;
            w->t_done = now;
        } else {
            schedule(w, now);
        }
        first_due = std::min(first_due, w->phase == Wqe::Phase::Executed ? now : w->t_exec);
        ++tail_;
    }
    staged_ = 0;
    uint64_t due = first_due > kEagerNs ? first_due - kEagerNs : 0;
    if (due < next_due_.load(std::memory_order_relaxed)) next_due_.store(due, std::memory_order_release);
}

bool QueuePair::waited_on() const {
    return (config_.send_cq && config_.send_cq->armed.load(std::memory_order_relaxed)) ||
           (recv_cq_ && recv_cq_->armed.load(std::memory_order_relaxed));
}

void QueuePair::schedule(Wqe* w, uint64_t earliest) {
    LinkModel& links = rt_.links();
    NicId src = config_.nic;
    NicId dst = per_wqe_destination() ? w->ud.nic : transport_.dest_nic;
    const bool acked = config_.type == IBV_QPT_RC || config_.dc_role == DcRole::Initiator;
    switch (w->opcode) {
        case Opcode::Send:
        case Opcode::SendWithImm:
        case Opcode::RdmaWrite:
        case Opcode::RdmaWriteWithImm: {
            Transmission tx = links.transmit(src, dst, w->length, earliest);
            w->t_sent = tx.start_ns;
            w->t_exec = tx.arrive_ns;
            w->lost = tx.lost;
            // UD and UC complete once sent; RC and DC when the ACK is back.
            w->t_done = acked ? tx.arrive_ns + tx.latency_ns : tx.end_ns;
            break;
        }
        case Opcode::RdmaRead: {
            Transmission req = links.transmit(src, dst, 0, earliest);
            Transmission resp = links.transmit(dst, src, w->length, req.arrive_ns);
            w->t_sent = req.start_ns;
            w->t_exec = w->t_done = resp.arrive_ns;
            w->lost = req.lost || resp.lost;
            break;
        }
        case Opcode::AtomicCmpSwp:
        case Opcode::AtomicFetchAdd: {
            Transmission req = links.transmit(src, dst, 8, earliest);
            Transmission resp = links.transmit(dst, src, 8, req.arrive_ns);
            w->t_sent = req.start_ns;
            w->t_exec = req.arrive_ns;
            w->t_done = resp.arrive_ns;
            w->lost = req.lost || resp.lost;
            break;
        }
    }
}

void QueuePair::enter_error_from(uint64_t from) {
    uint64_t now = now_ns();
    for (uint64_t i = from; i < tail_; ++i) {
        Wqe* w = at(i);
        if (w->status == IBV_WC_SUCCESS) w->status = IBV_WC_WR_FLUSH_ERR;
        if (w->phase == Wqe::Phase::Queued) {
            w->phase = Wqe::Phase::Executed;
            w->t_done = now;
        } else if (w->status == IBV_WC_WR_FLUSH_ERR) {
            w->t_done = std::min(w->t_done, now);
        }
    }
    exec_ = std::max(exec_, tail_);
}

uint64_t QueuePair::progress(uint64_t now) {
    uint64_t next = kNever;
    if (exec_ < tail_ && state() == IBV_QPS_ERR) enter_error_from(exec_);
    while (exec_ < tail_) {
        Wqe* w = at(exec_);
        if (w->phase == Wqe::Phase::Executed) {
            ++exec_;
            continue;
        }
        if (w->t_exec > now + kEagerNs) {
            next = w->t_exec - kEagerNs;
            break;
        }
        Outcome o = execute(w, now);
        if (o == Outcome::Retry) {
            next = w->t_exec > kEagerNs ? w->t_exec - kEagerNs : 0;
            break;
        }
        w->phase = Wqe::Phase::Executed;
        ++exec_;
        if (o == Outcome::Failed) {
            shared_->state.store(IBV_QPS_ERR, std::memory_order_release);
            enter_error_from(exec_);
        }
    }
    while (done_ < exec_) {
        Wqe* w = at(done_);
        if (w->t_done > now) {
            next = std::min(next, w->t_done);
            break;
        }
        deliver(w, now);
        ++done_;
    }
    next_due_.store(next, std::memory_order_release);
    // Work left for later: make sure the engine thread will look (cheap when it already will).
    if (next != kNever) rt_.kick(next, waited_on() ? 0 : app_window_ns());
    return next;
}

void QueuePair::deliver(Wqe* w, uint64_t now) {
    bool signaled = (w->flags & kSignaled) || transport_.sq_sig_all;
    if (w->status == IBV_WC_SUCCESS && !signaled) return;
    SendCompletion c{};
    c.id = w->id;
    c.status = w->status;
    c.opcode = wc_opcode_of(w->opcode);
    c.byte_len = static_cast<uint32_t>(w->length);
    c.qp_num = qpn_;
    // The CQE timestamp is when the operation completed on the modelled link, as a NIC stamps a CQE when it
    // writes it: a delivery delayed because this process or the engine thread waited for a CPU does not move it.
    c.time_ns = std::min(w->t_done, now);
    sink_->deliver(c);
}

QueuePair::Outcome QueuePair::lost_attempt(Wqe* w, uint64_t) {
    if (++w->attempts > transport_.retry_cnt) {
        w->status = IBV_WC_RETRY_EXC_ERR;
        return Outcome::Failed;
    }
    // No ACK comes back: the requester retransmits when its timer expires.
    schedule(w, w->t_sent + transport_timeout_ns(transport_.timeout));
    return Outcome::Retry;
}

QueuePair::Outcome QueuePair::rnr_nak(Wqe* w, uint64_t, uint32_t responder_rnr_timer) {
    NicId dst = per_wqe_destination() ? w->ud.nic : transport_.dest_nic;
    rt_.links().count_rnr(dst, config_.nic);
    if (transport_.rnr_retry != 7 && ++w->rnr_attempts > transport_.rnr_retry) {
        w->status = IBV_WC_RNR_RETRY_EXC_ERR;
        return Outcome::Failed;
    }
    uint64_t nak_back = w->t_exec + rt_.links().latency(dst, config_.nic, w->t_exec);
    schedule(w, nak_back + rnr_timer_ns(responder_rnr_timer));
    return Outcome::Retry;
}

bool QueuePair::local_iov(Wqe* w, bool need_write, iovec* iov, int& n) {
    n = 0;
    if ((w->flags & kInline) && w->inline_length) iov[n++] = {w->inline_data(config_.max_send_sge), w->inline_length};
    const MrEntry* table = rt_.arena().mr_table();
    uint32_t access = need_write ? IBV_ACCESS_LOCAL_WRITE : 0;
    for (uint32_t i = 0; i < w->num_sge; ++i) {
        const Sge& s = w->sges()[i];
        if (s.length == 0) continue;
        uint64_t addr = 0;
        if (!translate(table, s.lkey, config_.pd_id, s.addr, s.length, access, addr)) return false;
        iov[n++] = {reinterpret_cast<void*>(addr), s.length};
    }
    return true;
}

void QueuePair::responder_error(const PeerQp& p, SharedCq* rcq, uint64_t wr_id, ibv_wc_status status) {
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = status;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = p.qp->qpn;
    rcq->push(wc, now_ns());
    rt_.completed_into(rcq, true);
    uint32_t s = p.qp->state.load();
    if (s == IBV_QPS_RTR || s == IBV_QPS_RTS) p.qp->state.compare_exchange_strong(s, IBV_QPS_ERR);
    p.qp->flush_request.store(1, std::memory_order_release);
    rt_.wake_member(p.member);
}

QueuePair::Outcome QueuePair::execute(Wqe* w, uint64_t now) {
    if (w->status != IBV_WC_SUCCESS) return Outcome::Failed;
    const bool ud = config_.type == IBV_QPT_UD;
    const bool dci = config_.dc_role == DcRole::Initiator;
    // UD and UC have no ACK/NAK: whatever keeps the responder from accepting a message drops it silently, and
    // the sender completes successfully.
    const bool reliable = config_.type == IBV_QPT_RC || dci;
    const bool local_write = w->opcode == Opcode::RdmaRead || w->opcode == Opcode::AtomicCmpSwp ||
                             w->opcode == Opcode::AtomicFetchAdd;
    iovec local[kMaxIov];
    int nlocal = 0;
    if (!local_iov(w, local_write, local, nlocal)) {
        w->status = IBV_WC_LOC_PROT_ERR;
        return Outcome::Failed;
    }
    if (ud && w->length > transport_.path_mtu) {
        w->status = IBV_WC_LOC_LEN_ERR;
        return Outcome::Failed;
    }
    NicId src = config_.nic;
    NicId dst = ud || dci ? w->ud.nic : transport_.dest_nic;
    if (w->lost) {
        if (!reliable) return Outcome::Done;
        return lost_attempt(w, now);
    }

    // Find the responder. Anything that keeps the packet from being accepted is, to the requester, a loss.
    PeerQp p;
    uint32_t dqpn = ud || dci ? w->ud.qpn : transport_.dest_qpn;
    bool reachable = rt_.find_qp(dqpn, p) && p.qp->nic == dst.index() && rt_.peer_alive(p.member);
    if (reachable) {
        uint32_t ts = p.qp->state.load(std::memory_order_acquire);
        reachable = (ts == IBV_QPS_RTR || ts == IBV_QPS_RTS) && p.qp->type == static_cast<uint32_t>(config_.type);
        if (reachable && ud) {
            uint32_t qkey = (w->ud.qkey & 0x8000'0000u) ? shared_->qkey.load() : w->ud.qkey;
            reachable = qkey == p.qp->qkey.load();
        }
        // A DCI reaches a DCT (in RTR: a DCT never moves further) that accepts its access key; a DCT that refuses
        // the key does not answer, so the initiator retries and fails as for an absent target.
        if (reachable && dci)
            reachable = p.qp->dc_role == static_cast<uint32_t>(DcRole::Target) && w->ud.qkey == p.qp->qkey.load();
    }
    if (!reachable) {
        rt_.links().count_lost(src, dst);
        if (!reliable) return Outcome::Done;
        return lost_attempt(w, now);
    }

    const MrEntry* peer_mrs = mr_table_of(p.arena);
    const uint32_t qp_access = p.qp->access_flags.load(std::memory_order_acquire);
    auto remote_ok = [&](uint32_t access, uint64_t& addr) {
        return (qp_access & access) == access &&
               translate(peer_mrs, w->rkey, p.qp->pd_id, w->remote_addr, w->length, access, addr);
    };
    // A NAK to the requester (RC), or a silent drop (UC).
    auto remote_error = [&](ibv_wc_status status) {
        if (!reliable) {
            rt_.links().count_lost(src, dst);
            return Outcome::Done;
        }
        w->status = status;
        return Outcome::Failed;
    };
    auto dead_during_copy = [&](int err) {
        if (err == ESRCH) {
            rt_.links().count_lost(src, dst);
            return true;
        }
        return false;
    };

    switch (w->opcode) {
        case Opcode::Send:
        case Opcode::SendWithImm:
        case Opcode::RdmaWriteWithImm: {
            const bool is_write = w->opcode == Opcode::RdmaWriteWithImm;
            uint64_t remote_addr = 0;
            if (is_write && w->length && !remote_ok(IBV_ACCESS_REMOTE_WRITE, remote_addr)) {
                return remote_error(IBV_WC_REM_ACCESS_ERR);
            }
            auto* ring = reinterpret_cast<RecvRing*>(p.arena + (p.qp->srq_offset ? p.qp->srq_offset : p.qp->rq_offset));
            alignas(16) unsigned char entry_buf[16 + 16 * kMaxSge];
            auto* e = reinterpret_cast<RecvEntry*>(entry_buf);
            if (ring == reinterpret_cast<RecvRing*>(p.arena) || !ring->consume(e)) {
                if (!reliable) {
                    rt_.links().count_lost(src, dst);
                    return Outcome::Done;
                }
                return rnr_nak(w, now, p.qp->min_rnr_timer.load());
            }
            auto* rcq = reinterpret_cast<SharedCq*>(p.arena + p.qp->recv_cq_offset);
            ibv_wc wc{};
            wc.wr_id = e->wr_id;
            wc.qp_num = p.qp->qpn;
            wc.src_qp = qpn_;
            wc.slid = lid_of(src);
            wc.sl = ud ? w->ud.sl : transport_.sl;
            if (is_write) {
                iovec remote{reinterpret_cast<void*>(remote_addr), w->length};
                int err = write_to_process(p.pid, p.local, local, nlocal, &remote, 1, w->length);
                if (dead_during_copy(err)) return reliable ? lost_attempt(w, now) : Outcome::Done;
                if (err) {
                    w->status = IBV_WC_REM_ACCESS_ERR;
                    return Outcome::Failed;
                }
                wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
            } else {
                // Scatter into the receive buffers, behind the 40-byte GRH room on UD.
                uint64_t skip = ud ? kUdGrhBytes : 0;
                uint64_t need = w->length + skip;
                iovec remote[kMaxIov];
                int nremote = 0;
                uint64_t room = 0;
                uint64_t grh_addr = 0;
                bool prot_ok = true;
                const uint32_t nsge = std::min(e->num_sge, ring->max_sge);
                for (uint32_t i = 0; i < nsge && room < need; ++i) {
                    const ibv_sge& s = e->sge[i];
                    if (s.length == 0) continue;
                    uint64_t addr = 0;
                    if (!translate(peer_mrs, s.lkey, p.qp->pd_id, s.addr, s.length, IBV_ACCESS_LOCAL_WRITE, addr)) {
                        prot_ok = false;
                        break;
                    }
                    uint64_t len = s.length;
                    if (room < skip) {  // part of this SGE holds the GRH
                        uint64_t g = std::min(skip - room, len);
                        if (room == 0 && g == kUdGrhBytes) grh_addr = addr;
                        room += g;
                        addr += g;
                        len -= g;
                    }
                    if (len) {
                        remote[nremote++] = {reinterpret_cast<void*>(addr), len};
                        room += len;
                    }
                }
                if (!prot_ok) {
                    responder_error(p, rcq, e->wr_id, IBV_WC_LOC_PROT_ERR);
                    return remote_error(IBV_WC_REM_OP_ERR);
                }
                if (room < need) {
                    responder_error(p, rcq, e->wr_id, IBV_WC_LOC_LEN_ERR);
                    return remote_error(IBV_WC_REM_INV_REQ_ERR);
                }
                int err = write_to_process(p.pid, p.local, local, nlocal, remote, nremote, w->length);
                if (!err && ud && w->ud.has_grh && grh_addr) {
                    unsigned char grh[kUdGrhBytes];
                    fill_grh(grh, static_cast<uint32_t>(w->length), gid_of(src), w->ud.dgid);
                    iovec g_local{grh, kUdGrhBytes};
                    iovec g_remote{reinterpret_cast<void*>(grh_addr), kUdGrhBytes};
                    err = write_to_process(p.pid, p.local, &g_local, 1, &g_remote, 1, kUdGrhBytes);
                    wc.wc_flags |= IBV_WC_GRH;
                }
                if (dead_during_copy(err)) return reliable ? lost_attempt(w, now) : Outcome::Done;
                if (err) {
                    responder_error(p, rcq, e->wr_id, IBV_WC_LOC_PROT_ERR);
                    return remote_error(IBV_WC_REM_OP_ERR);
                }
                wc.opcode = IBV_WC_RECV;
                wc.byte_len = static_cast<uint32_t>(need);
            }
            if (w->opcode != Opcode::Send) {
                wc.imm_data = w->imm_data;
                wc.wc_flags |= IBV_WC_WITH_IMM;
            }
            if (is_write) wc.byte_len = static_cast<uint32_t>(w->length);
            wc.status = IBV_WC_SUCCESS;
            rcq->push(wc, std::min(w->t_exec, now_ns()));  // when the data arrived (see deliver())
            rt_.completed_into(rcq, (w->flags & kSolicited) != 0);
            rt_.links().count_delivered(src, dst, w->length);
            return Outcome::Done;
        }
        case Opcode::RdmaWrite: {
            uint64_t remote_addr = 0;
            if (w->length && !remote_ok(IBV_ACCESS_REMOTE_WRITE, remote_addr)) {
                return remote_error(IBV_WC_REM_ACCESS_ERR);
            }
            iovec remote{reinterpret_cast<void*>(remote_addr), w->length};
            int err = write_to_process(p.pid, p.local, local, nlocal, &remote, 1, w->length);
            if (dead_during_copy(err)) return reliable ? lost_attempt(w, now) : Outcome::Done;
            if (err) {
                return remote_error(IBV_WC_REM_ACCESS_ERR);
            }
            rt_.links().count_delivered(src, dst, w->length);
            return Outcome::Done;
        }
        case Opcode::RdmaRead: {
            uint64_t remote_addr = 0;
            if (w->length && !remote_ok(IBV_ACCESS_REMOTE_READ, remote_addr)) {
                return remote_error(IBV_WC_REM_ACCESS_ERR);
            }
            iovec remote{reinterpret_cast<void*>(remote_addr), w->length};
            int err = read_from_process(p.pid, p.local, local, nlocal, &remote, 1, w->length);
            if (dead_during_copy(err)) return reliable ? lost_attempt(w, now) : Outcome::Done;
            if (err) {
                return remote_error(IBV_WC_REM_ACCESS_ERR);
            }
            rt_.links().count_delivered(dst, src, w->length);
            return Outcome::Done;
        }
        case Opcode::AtomicCmpSwp:
        case Opcode::AtomicFetchAdd: {
            if (w->remote_addr % 8 != 0 || nlocal != 1 || local[0].iov_len < 8)
                return remote_error(IBV_WC_REM_INV_REQ_ERR);
            uint64_t remote_addr = 0;
            if (!remote_ok(IBV_ACCESS_REMOTE_ATOMIC, remote_addr)) {
                return remote_error(IBV_WC_REM_ACCESS_ERR);
            }
            uint64_t original = 0;
            int err = atomic_at(rt_.region(), dst, p, remote_addr, [&](uint64_t& value) {
                original = value;
                if (w->opcode == Opcode::AtomicFetchAdd) {
                    value += w->compare_add;
                    return true;
                }
                if (value != w->compare_add) return false;
                value = w->swap;
                return true;
            });
            if (dead_during_copy(err)) return reliable ? lost_attempt(w, now) : Outcome::Done;
            if (err) {
                return remote_error(IBV_WC_REM_ACCESS_ERR);
            }
            std::memcpy(local[0].iov_base, &original, 8);
            rt_.links().count_delivered(src, dst, 8);
            rt_.links().count_delivered(dst, src, 8);
            return Outcome::Done;
        }
    }
    return Outcome::Done;
}

int post_to_ring(RecvRing* ring, uint64_t wr_id, const ibv_sge* sges, uint32_t num_sge) {
    if (num_sge > ring->max_sge) return EINVAL;
    uint64_t t = ring->tail.load(std::memory_order_relaxed);
    if (t - ring->head.load(std::memory_order_acquire) >= ring->capacity) return ENOMEM;
    RecvEntry* e = ring->entry(t);
    e->wr_id = wr_id;
    e->num_sge = num_sge;
    for (uint32_t i = 0; i < num_sge; ++i) e->sge[i] = sges[i];
    ring->tail.store(t + 1, std::memory_order_release);
    return 0;
}

int QueuePair::post_receive(uint64_t wr_id, const ibv_sge* sges, uint32_t num_sge) {
    if (!rq_) return EINVAL;
    std::lock_guard lock(rq_lock_);
    int err = post_to_ring(rq_, wr_id, sges, num_sge);
    if (err == 0 && state() == IBV_QPS_ERR) {
        // Posted to a QP in ERROR: completes right away with a flush error, as on hardware.
        flush_receives_locked();
    }
    return err;
}

void QueuePair::flush_receives() {
    std::lock_guard lock(rq_lock_);
    flush_receives_locked();
}

void QueuePair::flush_receives_locked() {
    if (!rq_ || !recv_cq_) return;
    alignas(16) unsigned char entry_buf[16 + 16 * kMaxSge];
    auto* e = reinterpret_cast<RecvEntry*>(entry_buf);
    bool any = false;
    while (rq_->consume(e)) {
        ibv_wc wc{};
        wc.wr_id = e->wr_id;
        wc.status = IBV_WC_WR_FLUSH_ERR;
        wc.opcode = IBV_WC_RECV;
        wc.qp_num = qpn_;
        recv_cq_->push(wc, now_ns());
        any = true;
    }
    if (any) rt_.completed_into(recv_cq_, true);
}

bool QueuePair::handle_flush_request() {
    if (!shared_->flush_request.load(std::memory_order_acquire)) return false;
    // The engine thread calls this while it walks the QP registry: never block on the send queue (an
    // application thread may hold it across an ibv_wr_start..ibv_wr_complete batch); the next pass retries.
    std::unique_lock sq(sq_lock_, std::try_to_lock);
    if (!sq.owns_lock()) return true;
    if (!shared_->flush_request.exchange(0, std::memory_order_acq_rel)) return false;
    enter_error_from(done_);
    progress(now_ns());
    sq.unlock();
    flush_receives();
    return false;
}

}  // namespace softfabric::engine
