#include "core/arena.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "core/clock.h"

namespace softfabric {
namespace {
constexpr uint64_t kGraceNs = 2'000'000'000ull;  // 2 s: far longer than any in-flight peer access
constexpr uint64_t kFirstAllocation = 4096;      // the header page
}  // namespace

LocalArena::LocalArena(uint32_t member) {
    fd_ = memfd_create("softfabric-arena", MFD_CLOEXEC);
    if (fd_ < 0) throw FabricError(fmt::format("Cannot create the fabric arena (memfd_create): {}", std::strerror(errno)));
    if (ftruncate(fd_, static_cast<off_t>(kArenaSize)) != 0) {
        int err = errno;
        close(fd_);
        throw FabricError(fmt::format("Cannot size the fabric arena to {} bytes: {}", kArenaSize, std::strerror(err)));
    }
    void* p = mmap(nullptr, kArenaSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
    if (p == MAP_FAILED) {
        int err = errno;
        close(fd_);
        throw FabricError(fmt::format("Cannot map the fabric arena: {}", std::strerror(err)));
    }
    base_ = static_cast<unsigned char*>(p);
    bump_ = kFirstAllocation;
    ArenaHeader* h = header();
    h->size = kArenaSize;
    h->owner_pid = getpid();
    h->member = member;
    h->mr_table_offset = allocate(uint64_t{kMrSlots} * sizeof(MrEntry));
    mr_generation_.assign(kMrSlots, 0);
    // Publish the header: a peer that sees the magic sees every field written above. (A release store rather
    // than a fence + plain store: ThreadSanitizer understands the former.)
    __atomic_store_n(&h->magic, kArenaMagic, __ATOMIC_RELEASE);
}

LocalArena::~LocalArena() {
    if (base_) munmap(base_, kArenaSize);
    if (fd_ >= 0) close(fd_);
}

unsigned LocalArena::size_class(uint64_t bytes) {
    uint64_t rounded = std::bit_ceil(bytes < 64 ? uint64_t{64} : bytes);
    return static_cast<unsigned>(std::countr_zero(rounded));
}

uint64_t LocalArena::allocate(uint64_t bytes) {
    unsigned cls = size_class(bytes);
    uint64_t rounded = uint64_t{1} << cls;
    std::lock_guard lock(mutex_);
    auto& list = free_lists_[cls];
    uint64_t now = now_ns();
    for (size_t i = 0; i < list.size(); ++i) {
        if (now - list[i].freed_ns >= kGraceNs) {
            uint64_t off = list[i].offset;
            list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
            std::memset(base_ + off, 0, rounded);
            return off;
        }
    }
    // Large blocks are aligned to their size class up to 4 KiB, which keeps rings page-aligned.
    uint64_t align = rounded < 4096 ? rounded : 4096;
    uint64_t off = (bump_ + align - 1) & ~(align - 1);
    if (off + rounded > kArenaSize) return 0;
    bump_ = off + rounded;
    return off;  // fresh pages of the memfd are zero
}

void LocalArena::release(uint64_t offset, uint64_t bytes) {
    if (offset == 0) return;
    std::lock_guard lock(mutex_);
    free_lists_[size_class(bytes)].push_back({offset, now_ns()});
}

uint32_t LocalArena::claim_mr_key() {
    std::lock_guard lock(mutex_);
    uint32_t slot = 0;
    if (!free_mr_slots_.empty()) {
        slot = free_mr_slots_.back();
        free_mr_slots_.pop_back();
    } else if (next_mr_slot_ < kMrSlots) {
        slot = next_mr_slot_++;
    } else {
        return 0;
    }
    uint8_t gen = ++mr_generation_[slot];
    if (gen == 0) gen = ++mr_generation_[slot];  // key 0 means "free"
    return slot << 8 | gen;
}

void LocalArena::release_mr_key(uint32_t key) {
    std::lock_guard lock(mutex_);
    free_mr_slots_.push_back(mr_slot_of(key));
}

PeerArenas::PeerArenas(FabricRegion& region, uint32_t self_member, const LocalArena& self)
    : region_(region), self_member_(self_member), self_(self) {}

PeerArenas::~PeerArenas() {
    for (auto& m : mappings_) munmap(m->base, kArenaSize);
}

unsigned char* PeerArenas::base(uint32_t slot, uint32_t generation, int* error) {
    if (slot == self_member_) return self_.base();
    const Mapping* m = entries_[slot].load(std::memory_order_acquire);
    if (m && m->generation == generation) return m->base;
    return map_slow(slot, generation, error);
}

unsigned char* PeerArenas::map_slow(uint32_t slot, uint32_t generation, int* error) {
    std::lock_guard lock(mutex_);
    if (const Mapping* cur = entries_[slot].load(); cur && cur->generation == generation) return cur->base;
    MemberSlot& m = region_.members[slot];
    int pid = m.pid.load(std::memory_order_acquire);
    int afd = m.arena_fd.load(std::memory_order_acquire);
    if (pid == 0 || afd < 0 || m.generation.load() != generation) {
        if (error) *error = ESRCH;
        return nullptr;
    }
    std::string path = fmt::format("/proc/{}/fd/{}", pid, afd);
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        if (error) *error = errno;
        return nullptr;
    }
    void* p = mmap(nullptr, kArenaSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        if (error) *error = errno;
        return nullptr;
    }
    auto* h = static_cast<ArenaHeader*>(p);
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != kArenaMagic || h->owner_pid != pid) {
        munmap(p, kArenaSize);
        if (error) *error = ESRCH;
        return nullptr;
    }
    mappings_.push_back(std::make_unique<Mapping>(Mapping{generation, static_cast<unsigned char*>(p)}));
    entries_[slot].store(mappings_.back().get(), std::memory_order_release);
    return static_cast<unsigned char*>(p);
}

}  // namespace softfabric
