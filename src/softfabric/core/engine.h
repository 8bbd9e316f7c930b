// The fabric engine: the transport that executes a QP's send queue. It is independent of the verbs API, so
// that other front ends (mlx5 WQEs written by GPU threads into a ring) can submit operations and get
// their completions through their own CompletionSink (docs/softfabric.md, "Engine API for other front ends").
//
// Model. Posting reserves the links the operation crosses (link_model.h), which fixes when its data reaches the
// target (t_exec) and when its completion is due at the initiator (t_done, one latency later for the ACK, or
// when a READ/atomic response arrives). The owning process executes operations in order at t_exec, copying
// with process_vm_writev/readv into the peer, consuming the peer's receive queue and pushing the peer's
// receive completion into its CQ; it delivers its own completions in order at t_done. Execution happens on
// the threads that post or poll, or on the process's engine thread when nobody does (runtime.h).
// An operation due within kEagerNs when a thread reaches it is executed right away: that bounds how early
// data may become visible, while completions are never early.
//
// Errors follow the RC rules: the first failed operation completes with its status, the QP moves to ERROR, and
// every later operation is flushed (IBV_WC_WR_FLUSH_ERR). Lost attempts (loss, link down, dead or absent
// peer) are retried after the QP's timeout up to retry_cnt times (then IBV_WC_RETRY_EXC_ERR); a SEND that
// finds no receive waits the responder's min_rnr_timer, up to rnr_retry times (7 = forever; then
// IBV_WC_RNR_RETRY_EXC_ERR).
#pragma once

#include <infiniband/verbs.h>

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/identity.h"
#include "core/shared_objects.h"

namespace softfabric {
class Runtime;

// A QP somewhere on the fabric, as a sender sees it (Runtime::find_qp).
struct PeerQp {
    SharedQp* qp = nullptr;
    unsigned char* arena = nullptr;  // base of its owner's arena, mapped in this process
    int pid = 0;
    uint32_t member = 0;
    bool local = false;  // it belongs to this process
};
}

namespace softfabric::engine {

inline constexpr uint64_t kEagerNs = 5'000;
// A QP that an application thread progressed (posted to, or polled its send CQ) within its application window is
// left to that thread by the engine thread, unless the application waits for completion events on its CQs. The
// window starts at kAppWindowNs and doubles each time the engine thread looks and finds the application still at
// work, up to kAppWindowMaxNs: each look preempts a busy-polling thread pinned to the engine's CPU, and one look
// per 200 us cost a 64 KiB ib_write_bw ~12% of its bandwidth (docs/PERFORMANCE.md, "Software fabric"). The price:
// when a busy application stops progressing a QP that still has work due, the engine takes the work over up to
// kAppWindowMaxNs later (kAppWindowNs after a short burst).
inline constexpr uint64_t kAppWindowNs = 200'000;
inline constexpr uint64_t kAppWindowMaxNs = 3'200'000;
inline constexpr uint32_t kMaxSge = 32;
inline constexpr uint32_t kMaxInline = 1024;
inline constexpr uint32_t kMaxQueueDepth = 16384;
inline constexpr uint32_t kUdGrhBytes = 40;

enum class Opcode : uint8_t {
    Send,
    SendWithImm,
    RdmaWrite,
    RdmaWriteWithImm,
    RdmaRead,
    AtomicCmpSwp,
    AtomicFetchAdd,
};

enum WqeFlag : uint32_t {
    kSignaled = 1u << 0,
    kSolicited = 1u << 1,
    kInline = 1u << 2,  // inline_length bytes at inline_data() come first, then the num_sge gather entries
    kFence = 1u << 3,
};

struct Sge {
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
};

// Where a UD or DC send goes (from the address handle and the WR, or from the WQE's address vector). For DC, qkey
// holds the DC access key (its low 32 bits).
struct UdDestination {
    NicId nic;
    uint32_t qpn = 0;
    uint32_t qkey = 0;
    uint8_t sl = 0;
    bool has_grh = false;
    ibv_gid dgid{};
};

// One send work request. The front end fills the request part after reserve(); the engine owns the rest.
struct Wqe {
    // --- request (front end)
    uint64_t id;
    Opcode opcode;
    uint32_t flags;
    uint32_t num_sge;
    uint32_t inline_length;
    uint32_t imm_data;  // network byte order
    uint32_t rkey;
    uint64_t remote_addr;
    uint64_t compare_add;  // atomic compare (CAS) or add (FAA)
    uint64_t swap;
    UdDestination ud;
    // --- engine state
    enum class Phase : uint8_t { Queued, Executed } phase;
    bool lost;
    ibv_wc_status status;
    uint32_t attempts;      // retransmissions after loss
    uint32_t rnr_attempts;  // retransmissions after RNR NAK
    uint64_t length;        // payload bytes
    uint64_t t_sent;        // when the current attempt started
    uint64_t t_exec;        // when it executes (data reaches the target; READ: the response reaches us)
    uint64_t t_done;        // when its completion is due

    Sge* sges() { return reinterpret_cast<Sge*>(this + 1); }
    unsigned char* inline_data(uint32_t max_sge) { return reinterpret_cast<unsigned char*>(sges() + max_sge); }
};

struct SendCompletion {
    uint64_t id;
    ibv_wc_status status;
    ibv_wc_opcode opcode;
    uint32_t byte_len;
    uint32_t qp_num;
    uint32_t vendor_err;
    uint64_t time_ns;  // when it completed in the link model (t_done), never later than its delivery
};

// Where a QP's send completions go. The verbs front end pushes them into a CQ (CqSink); another front end may
// translate them (e.g. into mlx5 CQEs) or call back.
class CompletionSink {
public:
    virtual void deliver(const SendCompletion& c) = 0;

protected:
    ~CompletionSink() = default;
};

// A sink that pushes into a fabric CQ and raises its completion-channel event.
class CqSink final : public CompletionSink {
public:
    CqSink(Runtime& rt, SharedCq* cq) : rt_(rt), cq_(cq) {}
    void deliver(const SendCompletion& c) override;

private:
    Runtime& rt_;
    SharedCq* cq_;
};

// Transport attributes of a connected QP (set by the front end's modify_qp).
struct TransportAttrs {
    NicId dest_nic;
    uint32_t dest_qpn = 0;
    uint8_t timeout = 14;      // 4.096 us * 2^timeout; 0 is treated as 14 (never hang)
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;     // 7 = retry forever
    uint8_t sl = 0;
    bool has_grh = false;
    ibv_gid dgid{};
    uint32_t path_mtu = 4096;  // bytes
    bool sq_sig_all = false;
};

struct QueuePairConfig {
    ibv_qp_type type = IBV_QPT_RC;
    NicId nic;
    uint64_t pd_id = 0;
    uint32_t sq_depth = 1;
    uint32_t max_send_sge = 1;
    uint32_t max_inline = 0;
    uint32_t rq_depth = 0;  // 0 when the QP uses an SRQ
    uint32_t max_recv_sge = 1;
    uint64_t srq_offset = 0;       // RecvRing of the SRQ in this process's arena
    uint64_t recv_cq_offset = 0;   // SharedCq in this process's arena
    SharedCq* send_cq = nullptr;   // used by the default sink
    DcRole dc_role = DcRole::None; // IBV_QPT_DRIVER QPs: a DC initiator (per-WQE destination) or target
};

class QueuePair {
public:
    // Allocates the shared state and receive queue in the arena and takes a QPN. Throws FabricError.
    QueuePair(Runtime& rt, const QueuePairConfig& config);
    ~QueuePair();
    QueuePair(const QueuePair&) = delete;
    QueuePair& operator=(const QueuePair&) = delete;

    uint32_t qpn() const { return qpn_; }
    ibv_qp_type type() const { return config_.type; }
    NicId nic() const { return config_.nic; }
    SharedQp& shared() { return *shared_; }
    RecvRing* receive_ring() { return rq_; }
    Runtime& runtime() { return rt_; }
    const QueuePairConfig& config() const { return config_; }
    uint32_t sq_depth() const { return capacity_; }

    // Makes room for `max_inline` inline bytes per WQE (a front end whose WQEs may carry more inline data than
    // the QP was created with: an mlx5 WQE holds as much as fits in it). Only while nothing is queued; false
    // otherwise.
    bool grow_inline(uint32_t max_inline);
    // Replaces the default CqSink (another front end's completions); nullptr restores the default.
    void set_completion_sink(CompletionSink* sink) { sink_ = sink ? sink : &default_sink_; }

    ibv_qp_state state() const { return static_cast<ibv_qp_state>(shared_->state.load(std::memory_order_acquire)); }
    // Applies a state the front end validated: RESET empties both queues without completions, ERROR flushes.
    void set_state(ibv_qp_state s);
    TransportAttrs& transport() { return transport_; }

    // ---- send queue (the caller holds sq_lock() around reserve..commit/abort and progress)
    std::mutex& sq_lock() { return sq_lock_; }
    Wqe* reserve();        // a cleared WQE after those already reserved; nullptr when the queue is full
    void commit(uint64_t now);  // schedules every reserved WQE; call progress() next (it executes what is due
                                // and hands the rest to the engine thread)
    void abort();          // drops the reserved WQEs
    uint32_t reserved() const { return staged_; }
    // Executes what is due and delivers due completions. Returns the next time it has something to do.
    uint64_t progress(uint64_t now);
    uint64_t next_due() const { return next_due_.load(std::memory_order_acquire); }
    // Application threads record that they progress this QP (post_send, poll_cq); see kAppWindowNs.
    void note_app_progress(uint64_t now) { app_progress_ns_.store(now, std::memory_order_relaxed); }
    uint64_t app_progress_ns() const { return app_progress_ns_.load(std::memory_order_relaxed); }
    // How long after the application's last progress the engine thread leaves this QP alone (kAppWindowNs up to
    // kAppWindowMaxNs). Only the engine thread sets it (Runtime::engine_pass); posting threads read it (kick).
    uint64_t app_window_ns() const { return app_window_ns_.load(std::memory_order_relaxed); }
    void set_app_window_ns(uint64_t ns) { app_window_ns_.store(ns, std::memory_order_relaxed); }
    // True when one of the QP's CQs is armed for an event: the application sleeps until a completion.
    bool waited_on() const;

    // ---- receive queue (owner)
    // Adds a receive; ENOMEM when full.
    int post_receive(uint64_t wr_id, const ibv_sge* sges, uint32_t num_sge);
    // Completes every queued receive with IBV_WC_WR_FLUSH_ERR (the QP went to ERROR).
    void flush_receives();
    // A peer moved this QP to ERROR (responder error): flush both queues. Returns true when it could not yet
    // (the send queue was busy) and must be called again.
    bool handle_flush_request();

private:
    enum class Outcome { Done, Retry, Failed };
    // UD and DC initiators take each operation's destination from the WQE (Wqe::ud), others from transport().
    bool per_wqe_destination() const {
        return config_.type == IBV_QPT_UD || config_.dc_role == DcRole::Initiator;
    }
    Wqe* at(uint64_t index) { return reinterpret_cast<Wqe*>(sq_.data() + (index & (capacity_ - 1)) * stride_); }
    void schedule(Wqe* w, uint64_t earliest);
    Outcome execute(Wqe* w, uint64_t now);
    Outcome lost_attempt(Wqe* w, uint64_t now);
    Outcome rnr_nak(Wqe* w, uint64_t now, uint32_t responder_rnr_timer);
    // The WQE's local buffers, translated through this process's MR table; false on a bad lkey.
    bool local_iov(Wqe* w, bool need_write, struct iovec* iov, int& n);
    void responder_error(const PeerQp& p, SharedCq* rcq, uint64_t wr_id, ibv_wc_status status);
    void deliver(Wqe* w, uint64_t now);
    // Flushes every WQE from `from` on (those already failed keep their status).
    void enter_error_from(uint64_t from);
    void flush_receives_locked();

    Runtime& rt_;
    QueuePairConfig config_;
    uint32_t qpn_ = 0;
    uint64_t shared_offset_ = 0;
    SharedQp* shared_ = nullptr;
    uint64_t rq_offset_ = 0;
    uint64_t rq_bytes_ = 0;
    RecvRing* rq_ = nullptr;
    SharedCq* recv_cq_ = nullptr;
    CqSink default_sink_;
    CompletionSink* sink_ = nullptr;
    TransportAttrs transport_;

    std::mutex sq_lock_;
    std::mutex rq_lock_;  // post_receive from several threads
    std::vector<unsigned char> sq_;
    uint32_t capacity_ = 0;  // power of two
    uint32_t stride_ = 0;
    uint64_t tail_ = 0;      // next WQE to fill
    uint64_t exec_ = 0;      // next WQE to execute
    uint64_t done_ = 0;      // next WQE to complete
    uint32_t staged_ = 0;    // reserved, not yet committed
    std::atomic<uint64_t> next_due_{~0ull};
    std::atomic<uint64_t> app_progress_ns_{0};
    std::atomic<uint64_t> app_window_ns_{kAppWindowNs};
};

// Adds a receive to a receive queue (a QP's RQ or an SRQ); the caller serializes producers. EINVAL when
// num_sge exceeds the queue's max_sge, ENOMEM when it is full.
int post_to_ring(RecvRing* ring, uint64_t wr_id, const ibv_sge* sges, uint32_t num_sge);

// Encodings from the IB specification.
uint64_t transport_timeout_ns(uint8_t timeout);      // 4.096 us * 2^timeout (0 -> 2^14)
uint64_t rnr_timer_ns(uint32_t encoded);             // min_rnr_timer table (0 = 655.36 ms)
ibv_wc_opcode wc_opcode_of(Opcode op);

}  // namespace softfabric::engine
