// The fabric runtime of one process: its membership of the fabric, its arena, the mappings of its peers'
// arenas, and the engine thread that progresses its QPs when no application thread does.
//
// There is one per process by nature (a process is one fabric member with one arena), so it is a process-wide
// object, created by the first ibv_open_device of a fabric device and kept until exit. A forked child starts
// without one (verbs objects of the parent are not usable in the child, as with hardware without fork support).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/arena.h"
#include "core/engine.h"
#include "core/fabric_region.h"
#include "core/link_model.h"

namespace softfabric {

class Runtime {
public:
    // The runtime of this process, attached to fabric `fabric_name` as a member of `node`; created on first
    // use. Throws FabricError (the message says what to do).
    static Runtime& attach(const std::string& fabric_name, uint32_t node);
    static Runtime* current();

    Fabric& fabric() { return *fabric_; }
    FabricRegion& region() { return fabric_->region(); }
    LinkModel& links() { return links_; }
    LocalArena& arena() { return *arena_; }
    PeerArenas& peers() { return *peers_; }
    uint32_t member() const { return member_; }
    uint32_t generation() const { return generation_; }
    int pid() const { return pid_; }
    uint32_t node() const { return node_; }

    // QP directory: a fabric-unique QPN for a SharedQp at `shared_offset` in this arena (0 when all are taken).
    uint32_t claim_qpn(uint64_t shared_offset);
    void release_qpn(uint32_t qpn);
    uint64_t new_pd_id();

    // False when no QP has this number, or its process is gone.
    bool find_qp(uint32_t qpn, PeerQp& out);
    // Whether member `slot` is still alive (checked through a pidfd at most once per millisecond).
    bool peer_alive(uint32_t slot);

    // A completion was pushed into `cq` (of any process): raise its channel event if it is armed.
    void completed_into(SharedCq* cq, bool solicited);
    void wake_member(uint32_t slot);
    // Local work becomes due at `due_ns`: wake the engine thread if it would not look by `due_ns + window_ns`.
    // `window_ns` is the QP's application window (an application thread will progress the work itself within
    // it), 0 when none will (the application waits for a completion event).
    void kick(uint64_t due_ns, uint64_t window_ns);
    // How many times the engine thread has walked its QPs (tests: it must not compete with application threads).
    uint64_t engine_passes() const { return engine_passes_.load(std::memory_order_relaxed); }

    // Registries the engine thread walks.
    void add_qp(engine::QueuePair* qp);
    void remove_qp(engine::QueuePair* qp);
    void add_event_cq(SharedCq* cq);
    void remove_event_cq(SharedCq* cq);

    ~Runtime();

private:
    Runtime(std::unique_ptr<Fabric> fabric, uint32_t node);
    void engine_main();
    void engine_pass(uint64_t now, uint64_t& next);
    void signal_channel(SharedCq* cq);
    void stop();
    static void at_exit();

    struct PeerWatch {
        std::atomic<uint32_t> generation{0};
        std::atomic<uint64_t> checked_ns{0};
        std::atomic<bool> dead{false};
        int pidfd = -1;
    };

    std::unique_ptr<Fabric> fabric_;
    LinkModel links_;
    uint32_t node_;
    uint32_t member_ = 0;
    uint32_t generation_ = 0;
    int pid_ = 0;
    std::unique_ptr<LocalArena> arena_;
    std::unique_ptr<PeerArenas> peers_;

    std::mutex watch_mutex_;
    std::unique_ptr<PeerWatch[]> watches_;

    std::mutex registry_mutex_;  // the engine thread holds it while it walks; create/destroy take it briefly
    std::vector<engine::QueuePair*> qps_;
    std::vector<SharedCq*> event_cqs_;

    std::atomic<bool> stopping_{false};
    std::atomic<uint64_t> engine_sleep_until_{0};
    std::atomic<uint64_t> engine_passes_{0};
    std::thread engine_;
};

}  // namespace softfabric
