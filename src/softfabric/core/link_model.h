// The link model: every directed NIC-to-NIC link serializes what it carries at its bandwidth (a reservation
// horizon in the shared link table, advanced with a CAS so that all processes sharing a link queue behind each
// other) and adds its latency. The fault schedule is evaluated at the time a transmission starts:
//   slow F  bandwidth / F and latency x F        (a gray failure)
//   loss P  the attempt is dropped with probability P
//   down    every attempt is dropped
// Times in the schedule are relative to the fabric's start.
#pragma once

#include <cstdint>

#include "core/fabric_region.h"

namespace softfabric {

struct Transmission {
    uint64_t start_ns = 0;   // first byte leaves
    uint64_t end_ns = 0;     // last byte leaves (start + serialization)
    uint64_t arrive_ns = 0;  // last byte reaches the far end (end + latency)
    uint64_t latency_ns = 0; // the effective one-way latency at that time (for the way back)
    bool lost = false;       // dropped by a loss or down fault
};

class LinkModel {
public:
    explicit LinkModel(FabricRegion& region) : region_(region) {}

    // Sends `bytes` from one NIC to another, not before `earliest_ns`.
    Transmission transmit(NicId from, NicId to, uint64_t bytes, uint64_t earliest_ns);
    // The effective latency of a link at `at_ns` (for ACKs and NAKs, which are not serialized).
    uint64_t latency(NicId from, NicId to, uint64_t at_ns);

    void count_delivered(NicId from, NicId to, uint64_t bytes) {
        LinkState& l = region_.link(from, to);
        l.bytes.fetch_add(bytes, std::memory_order_relaxed);
        l.ops.fetch_add(1, std::memory_order_relaxed);
    }
    void count_lost(NicId from, NicId to) { region_.link(from, to).lost.fetch_add(1, std::memory_order_relaxed); }
    void count_rnr(NicId from, NicId to) { region_.link(from, to).rnr_naks.fetch_add(1, std::memory_order_relaxed); }

    FabricRegion& region() { return region_; }

private:
    struct Conditions {
        double slow_factor = 1.0;
        double loss_probability = 0.0;
        bool down = false;
    };
    LinkState& params(NicId from, NicId to);
    Conditions conditions(NicId from, NicId to, uint64_t at_ns) const;
    bool draw_loss(double probability);

    FabricRegion& region_;
};

}  // namespace softfabric
