// Reading the fabric's per-link counters (for `sigmatrace fabric --stats` and for tests).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/identity.h"

namespace softfabric {

struct LinkStats {
    NicId from;
    NicId to;
    uint64_t bytes = 0;
    uint64_t ops = 0;
    uint64_t lost = 0;
    uint64_t rnr_naks = 0;
};

struct FabricStats {
    std::string name;
    uint64_t uptime_ns = 0;  // since the fabric started
    uint32_t live_members = 0;
    std::vector<LinkStats> links;  // links that carried or lost anything
};

// Reads the counters of fabric `name`. Throws FabricError when it does not exist.
FabricStats read_stats(const std::string& name);

std::string format_stats_text(const FabricStats& stats);
std::string format_stats_json(const FabricStats& stats);

}  // namespace softfabric
