// The named fabric: one shared-memory file, /dev/shm/softfabric-<NAME>, mapped by every process on it.
// It holds what all processes must agree on: the configuration and fault schedule, the start time, the
// member processes, the QP directory (QPN -> owner and place), per-NIC atomic units and the link table
// (reservation horizon and counters of every NIC-to-NIC link). Objects owned by one process (QPs, CQs, receive
// queues, MRs) live in that process's arena (arena.h), which peers map on demand.
//
// Sizes: 256 members, 65536 QP slots, 64 nodes x 8 rails, every directed NIC pair has a LinkState (16 MiB,
// sparse: pages are only touched for links in use).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/identity.h"

namespace softfabric {

inline constexpr uint64_t kRegionMagic = 0x4c42'4146'5446'4f53ull;  // "SOFTFABL"
inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr uint32_t kMaxMembers = 256;
inline constexpr uint32_t kQpSlotBits = 16;
inline constexpr uint32_t kQpSlots = 1u << kQpSlotBits;
inline constexpr uint32_t kMaxFaults = 64;
inline constexpr uint32_t kMaxOverrides = 64;

// One directed NIC-to-NIC link: the time until which it is busy sending (bandwidth model), and counters.
struct alignas(64) LinkState {
    std::atomic<uint64_t> next_free_ns;
    std::atomic<uint64_t> bytes;     // payload bytes delivered in this direction
    std::atomic<uint64_t> ops;       // messages that delivered payload in this direction
    std::atomic<uint64_t> lost;      // transmission attempts dropped (loss, link down, dead or absent peer)
    std::atomic<uint64_t> rnr_naks;  // receiver-not-ready NAKs returned to senders on this link
    uint64_t bandwidth_bytes_per_s;  // configured; 0 = unlimited (valid once params_ready is set)
    uint64_t latency_ns;             // configured one-way latency
    std::atomic<uint64_t> params_ready;  // filled from the configuration on first use, keeping the table sparse
};
static_assert(sizeof(LinkState) == 64);

// One process attached to the fabric.
struct alignas(64) MemberSlot {
    std::atomic<int32_t> pid;  // 0 = free
    std::atomic<uint32_t> generation;
    uint64_t start_time;  // /proc/<pid>/stat starttime: tells a live member from a reused pid
    std::atomic<int32_t> arena_fd;  // the member's arena memfd, in its own fd table (-1 until created)
    uint32_t node;
    std::atomic<uint32_t> wake;  // futex word: peers bump it and FUTEX_WAKE the member's engine thread
    uint32_t reserved;
    uint64_t arena_size;
};
static_assert(sizeof(MemberSlot) == 64);

// QPN -> owner. qpn = generation << 16 | slot (generation 1..255, slots 2..65535: QP0/QP1 are special in IB).
struct alignas(16) QpDirEntry {
    std::atomic<uint32_t> qpn;  // 0 = free
    uint16_t member;
    uint16_t reserved;
    uint64_t offset;  // SharedQp offset in the owner's arena
};
static_assert(sizeof(QpDirEntry) == 16);

// A NIC's atomic unit: fabric atomics to one NIC are serialized by this lock (IBV_ATOMIC_HCA semantics).
struct alignas(64) NicState {
    std::atomic<int32_t> atomic_owner;  // pid holding it, 0 = free
};

struct RegionConfig {
    uint64_t default_bandwidth;
    uint64_t default_latency_ns;
    uint32_t mtu;
    uint32_t num_faults;
    uint32_t num_overrides;
    uint32_t reserved;
    uint64_t loss_seed;
    uint64_t digest;  // identifies the configuration (same settings -> same digest)
    Fault faults[kMaxFaults];
    LinkOverride overrides[kMaxOverrides];
};
static_assert(std::is_trivially_copyable_v<Fault>);
static_assert(std::is_trivially_copyable_v<LinkOverride>);

struct FabricRegion {
    uint64_t magic;
    uint32_t layout_version;
    uint32_t reserved0;
    uint64_t region_size;
    uint64_t start_ns;  // CLOCK_MONOTONIC at (re)initialization: fault windows count from here
    char name[64];
    std::atomic<uint32_t> qp_alloc_hint;
    std::atomic<uint32_t> pd_counter;
    std::atomic<uint64_t> loss_draws;  // sequence number of the loss random stream
    RegionConfig config;
    MemberSlot members[kMaxMembers];
    NicState nics[kMaxNics];
    QpDirEntry qps[kQpSlots];
    LinkState links[kMaxNics * kMaxNics];

    LinkState& link(NicId from, NicId to) { return links[from.index() * kMaxNics + to.index()]; }
};

class FabricError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// How open() treats an existing fabric.
enum class OpenMode {
    Join,      // provider: create if absent; an idle fabric keeps its configuration but restarts its clock
    Launch,    // sigmatrace fabric: an idle fabric is (re)initialized with the given configuration (defaults when
               // none); a busy one is joined, unless a configuration was given and it differs (then refused)
    ReadOnly,  // --stats: never create or reset
};

// A mapping of the named fabric.
class Fabric {
public:
    // Opens the fabric NAME. `config` is used when the fabric is created or (Launch) reconfigured.
    static std::unique_ptr<Fabric> open(const std::string& name, OpenMode mode, const FabricConfig* config);
    ~Fabric();
    Fabric(const Fabric&) = delete;
    Fabric& operator=(const Fabric&) = delete;

    FabricRegion& region() { return *region_; }
    const std::string& name() const { return name_; }
    static std::string shm_name(const std::string& fabric_name);  // "/softfabric-NAME"

    // Registers process `pid` (default: this one) on `node`, reusing its slot when it already has one (a
    // launcher registered it before exec). Returns the slot index.
    uint32_t join(uint32_t node, int pid = 0);
    // Holds the fabric's lock (an flock on its file, released if the holder dies) for a sequence of steps
    // that other launches must not interleave with; join_locked() is join() for its holder.
    class Exclusive {
    public:
        explicit Exclusive(const Fabric& f) : f_(f) { f_.lock_exclusive(); }
        ~Exclusive() { f_.unlock(); }
        Exclusive(const Exclusive&) = delete;
        Exclusive& operator=(const Exclusive&) = delete;

    private:
        const Fabric& f_;
    };
    uint32_t join_locked(uint32_t node, int pid = 0);
    // The pids of the live members.
    std::vector<int> live_member_pids() const;
    // Releases a member slot (normal exit).
    void leave(uint32_t slot);
    // True while the member in `slot` is the same live process that had `generation`.
    bool member_alive(uint32_t slot, uint32_t generation) const;
    // Frees directory entries of members that died (called when a slot is reused and on QPN exhaustion).
    void collect_dead_members();

private:
    Fabric(std::string name, int fd, FabricRegion* region);
    void lock_exclusive() const;
    void unlock() const;
    void initialize(const FabricConfig& config);
    void restart_clock_and_tables();
    bool has_live_members() const;

    std::string name_;
    int fd_ = -1;
    FabricRegion* region_ = nullptr;
};

// Process liveness helpers (pid reuse is told apart with the start time from /proc/<pid>/stat).
uint64_t process_start_time(int pid);  // 0 when the process does not exist
bool process_alive(int pid, uint64_t start_time);

// The configuration as stored in the region, and back (applies defaults and overrides to every link).
void store_config(FabricRegion& region, const FabricConfig& config);
uint64_t config_digest(const FabricConfig& config);

}  // namespace softfabric
