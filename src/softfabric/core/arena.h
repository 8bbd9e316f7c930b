// A process's arena: a memfd of kArenaSize bytes (sparse) holding the objects peers must reach: its QPs'
// shared state, receive queues, CQ rings and the MR table. The owner allocates in it; peers map it on first
// use through /proc/<pid>/fd/<arena fd> (same permission as process_vm_writev) and address objects by offset.
// Nothing is ever named in /dev/shm, so a process that dies leaves nothing behind.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/fabric_region.h"
#include "core/shared_objects.h"

namespace softfabric {

inline constexpr uint64_t kArenaSize = 4ull << 30;  // virtual; pages are only used when touched
inline constexpr uint64_t kArenaMagic = 0x414e'4552'4146'5346ull;  // "SFAFRENA"

struct ArenaHeader {
    uint64_t magic;
    uint64_t size;
    uint64_t mr_table_offset;
    int32_t owner_pid;
    uint32_t member;
};

class LocalArena {
public:
    // Creates this process's arena. Throws FabricError.
    explicit LocalArena(uint32_t member);
    ~LocalArena();
    LocalArena(const LocalArena&) = delete;
    LocalArena& operator=(const LocalArena&) = delete;

    int fd() const { return fd_; }
    unsigned char* base() const { return base_; }
    template <typename T>
    T* at(uint64_t offset) const {
        return reinterpret_cast<T*>(base_ + offset);
    }
    template <typename T>
    uint64_t offset_of(const T* p) const {
        return static_cast<uint64_t>(reinterpret_cast<const unsigned char*>(p) - base_);
    }

    // Returns the offset of `bytes` zeroed bytes (64-byte aligned), or 0 when the arena is exhausted.
    uint64_t allocate(uint64_t bytes);
    // Returns memory for reuse. Reuse waits a grace period, so that a peer still reading the old object (it
    // validates the QPN or generation next) never sees a new object's bytes as valid.
    void release(uint64_t offset, uint64_t bytes);

    MrEntry* mr_table() const { return at<MrEntry>(header()->mr_table_offset); }
    // Claims an MR slot and returns its new key (slot << 8 | generation), or 0 when the table is full.
    uint32_t claim_mr_key();
    void release_mr_key(uint32_t key);

private:
    ArenaHeader* header() const { return reinterpret_cast<ArenaHeader*>(base_); }
    static unsigned size_class(uint64_t bytes);

    struct Freed {
        uint64_t offset;
        uint64_t freed_ns;
    };
    int fd_ = -1;
    unsigned char* base_ = nullptr;
    std::mutex mutex_;  // allocation is a control-path operation (create_qp/cq/srq, reg_mr)
    uint64_t bump_ = 0;
    std::array<std::vector<Freed>, 40> free_lists_;
    std::vector<uint32_t> free_mr_slots_;
    uint32_t next_mr_slot_ = 1;
    std::vector<uint8_t> mr_generation_;
};

// Mappings of peers' arenas, one per member slot and generation. A mapping is kept for the life of the process
// (it is virtual address space only), so a pointer into it never dangles even when the peer exits.
class PeerArenas {
public:
    PeerArenas(FabricRegion& region, uint32_t self_member, const LocalArena& self);
    ~PeerArenas();
    // The base address of member `slot`'s arena as of `generation`, mapping it if needed; nullptr when the
    // member is gone or cannot be mapped (then `error` says why).
    unsigned char* base(uint32_t slot, uint32_t generation, int* error = nullptr);

private:
    unsigned char* map_slow(uint32_t slot, uint32_t generation, int* error);

    // Immutable once published, so that a reader sees a matching (generation, base) pair.
    struct Mapping {
        uint32_t generation;
        unsigned char* base;
    };
    FabricRegion& region_;
    uint32_t self_member_;
    const LocalArena& self_;
    std::mutex mutex_;
    std::array<std::atomic<const Mapping*>, kMaxMembers> entries_{};
    std::vector<std::unique_ptr<Mapping>> mappings_;
};

}  // namespace softfabric
