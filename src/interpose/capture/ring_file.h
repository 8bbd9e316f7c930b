// Deferred-emission rings that outlive their process. Under `sigmatrace record` (SIGMATRACE_SALVAGE_DIR set) a
// thread's ring (deferred_ring.h) lives in a file of that directory on /dev/shm instead of anonymous memory:
// what a process captured but never emitted — it called _exit, was killed by SIGKILL, or captured records after
// the provider's probe had unregistered at exit — is still there when the process is gone, and record's salvage step
// (salvage_rings) emits it as `deferred_records` events carrying the process's pid and tid (origin_pid,
// origin_tid), the same encoding and capture times as the process's own drains.
//
// The file: this header (page 0, with the Ring object itself at kRingOffset: its positions are the ring's own
// atomics, so the data path is unchanged), then the ring's bytes from kDataOffset. Created with the ring (a
// thread's first capture, never on the data path); a forked child maps fresh files over its inherited rings
// before it touches them. The file is removed when its process ends with the ring empty, or by the salvage.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "interpose/capture/capture_clock.h"

namespace sigmatrace::interpose::deferred {

inline constexpr uint64_t kRingFileMagic = 0x53474d5452494e47ull;  // "SGMTRING"
inline constexpr uint32_t kRingFileVersion = 1;
inline constexpr uint64_t kRingOffset = 512;
inline constexpr uint64_t kDataOffset = 4096;

struct RingFileHeader {
    uint64_t magic;
    uint32_t version;
    uint32_t ring_object_size;  // sizeof(Ring) of the writer: a reader of another build refuses the file
    uint64_t capacity;
    int32_t pid;
    std::atomic<int32_t> tid;  // the thread producing into it now (0: none)
    // The conversion of the ring's capture times to CLOCK_MONOTONIC ns, refreshed by every drain: two slots and
    // the index of the valid one, so that a kill during an update leaves a whole anchor.
    struct AnchorSlot {
        uint64_t ticks;
        uint64_t ns;
        double ns_per_tick;
    };
    AnchorSlot anchors[2];
    std::atomic<uint32_t> anchor_index;
    std::atomic<uint32_t> dropped;  // records its threads could not keep (no room): counted as lost

    void store_anchor(const capture_clock::Anchor& a) noexcept {
        const uint32_t next = anchor_index.load(std::memory_order_relaxed) ^ 1u;
        anchors[next] = AnchorSlot{a.ticks, a.ns, a.ns_per_tick};
        anchor_index.store(next, std::memory_order_release);
    }
    capture_clock::Anchor load_anchor() const noexcept {
        const AnchorSlot& s = anchors[anchor_index.load(std::memory_order_acquire) & 1u];
        return capture_clock::Anchor{s.ticks, s.ns, s.ns_per_tick};
    }
};
static_assert(sizeof(RingFileHeader) <= kRingOffset);

// What salvage_rings did.
struct SalvageCounts {
    uint32_t rings = 0;           // ring files examined
    uint32_t processes = 0;       // distinct processes records were salvaged from
    uint64_t records = 0;         // records emitted
    uint64_t lost = 0;            // records that could not be saved (an unfinished post, dropped, damage)
    uint32_t live = 0;            // rings of processes still running (left alone)
    uint32_t unreadable = 0;      // files that are not rings of this build
};

// Emits the records left in the ring files of `dir` by processes that are gone, then removes those files.
// Tracing must be active in the calling process (the provider loaded, a session recording). Returns false with
// *error when it could not run at all.
bool salvage_rings(const char* dir, SalvageCounts* counts, const char** error) noexcept;

}  // namespace sigmatrace::interpose::deferred
