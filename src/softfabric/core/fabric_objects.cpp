#include "core/fabric_objects.h"

#include <algorithm>
#include <bit>

namespace softfabric {

ArenaBlock create_shared_cq(Runtime& rt, uint32_t min_entries, int channel_fd, uint64_t owner_token) {
    uint32_t capacity = std::bit_ceil(min_entries + 1);
    ArenaBlock b;
    b.bytes = SharedCq::bytes_for(capacity);
    b.offset = rt.arena().allocate(b.bytes);
    if (!b.offset) return {};
    SharedCq* cq = rt.arena().at<SharedCq>(b.offset);
    cq->capacity = capacity;
    cq->member = rt.member();
    cq->channel_wfd = channel_fd;
    cq->owner_token = owner_token;
    return b;
}

ArenaBlock create_recv_ring(Runtime& rt, uint32_t min_entries, uint32_t max_sge) {
    uint32_t capacity = std::bit_ceil(std::max(min_entries, 1u));
    uint32_t sge = std::max(max_sge, 1u);
    ArenaBlock b;
    b.bytes = RecvRing::bytes_for(capacity, sge);
    b.offset = rt.arena().allocate(b.bytes);
    if (!b.offset) return {};
    RecvRing* ring = rt.arena().at<RecvRing>(b.offset);
    ring->capacity = capacity;
    ring->max_sge = sge;
    ring->stride = RecvRing::stride_for(sge);
    return b;
}

void release_block(Runtime& rt, const ArenaBlock& block) { rt.arena().release(block.offset, block.bytes); }

uint32_t register_memory(Runtime& rt, uint64_t pd_id, const void* addr, uint64_t length, uint64_t iova, int access) {
    uint32_t key = rt.arena().claim_mr_key();
    if (!key) return 0;
    MrEntry& e = rt.arena().mr_table()[mr_slot_of(key)];
    e.access = static_cast<uint32_t>(access);
    e.pd_id = pd_id;
    e.addr = reinterpret_cast<uint64_t>(addr);
    e.length = length;
    e.iova = iova;
    e.key.store(key, std::memory_order_release);  // published last: peers check the key first
    return key;
}

void deregister_memory(Runtime& rt, uint32_t key) {
    rt.arena().mr_table()[mr_slot_of(key)].key.store(0, std::memory_order_release);
    rt.arena().release_mr_key(key);
}

}  // namespace softfabric
