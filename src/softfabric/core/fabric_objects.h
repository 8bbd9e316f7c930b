// Creating the shared objects of this process's arena — completion queues, receive rings (SRQs), memory
// registrations — independently of the verbs API: the verbs provider uses these, and so can another front end
// (docs/softfabric.md, "Engine API for other front ends").
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/runtime.h"

namespace softfabric {

// A block of this process's arena.
struct ArenaBlock {
    uint64_t offset = 0;  // 0: none
    uint64_t bytes = 0;
};

// A CQ with room for at least `min_entries` completions (capacity: the next power of two above). Its events go
// to `channel_fd` (the provider's end of a completion channel, -1 for none) carrying `owner_token`. Returns an
// empty block when the arena is full.
ArenaBlock create_shared_cq(Runtime& rt, uint32_t min_entries, int channel_fd = -1, uint64_t owner_token = 0);
// A receive ring (an SRQ, or a front end's own receive queue) of at least `min_entries` entries.
ArenaBlock create_recv_ring(Runtime& rt, uint32_t min_entries, uint32_t max_sge);
// Gives a block back (reused after a grace period: peers may still be looking at it).
void release_block(Runtime& rt, const ArenaBlock& block);

// Registers [addr, addr + length) for protection domain `pd_id`, addressed by peers (and local SGEs) through
// `iova`. Returns the key (lkey = rkey), or 0 when the MR table is full.
uint32_t register_memory(Runtime& rt, uint64_t pd_id, const void* addr, uint64_t length, uint64_t iova, int access);
void deregister_memory(Runtime& rt, uint32_t key);

}  // namespace softfabric
