// The fabric's configuration: link defaults, per-link overrides and the fault schedule, read from the text
// file given to `sigmatrace fabric --config FILE` (format: docs/softfabric.md, "Configuration file").
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/identity.h"

namespace softfabric {

// Bandwidth 0 means unlimited (no serialization delay).
struct LinkParams {
    uint64_t bandwidth_bytes_per_s = 12'500'000'000ull;  // 100 Gbit/s, an EDR/CX-5 port
    uint64_t latency_ns = 1'000;                         // one-way, NIC to NIC
};

// Matches NICs: node and rail, either may be a wildcard.
struct NicSelector {
    static constexpr int32_t kAny = -1;
    int32_t node = kAny;
    int32_t rail = kAny;

    bool matches(NicId nic) const {
        return (node == kAny || static_cast<uint32_t>(node) == nic.node) &&
               (rail == kAny || static_cast<uint32_t>(rail) == nic.rail);
    }
    std::string to_string() const;
};

// A directed link pattern; `both` also matches the reverse direction.
struct LinkSelector {
    NicSelector src;
    NicSelector dst;
    bool both = false;

    bool matches(NicId from, NicId to) const {
        return (src.matches(from) && dst.matches(to)) || (both && src.matches(to) && dst.matches(from));
    }
    std::string to_string() const;
};

struct LinkOverride {
    LinkSelector link;
    bool has_bandwidth = false;
    bool has_latency = false;
    LinkParams params;
};

enum class FaultKind : uint32_t { Slow = 1, Loss = 2, Down = 3 };

// One entry of the fault schedule; times are relative to fabric start, end kNeverEnds = until the end.
struct Fault {
    static constexpr uint64_t kNeverEnds = ~0ull;
    FaultKind kind = FaultKind::Slow;
    LinkSelector link;
    double value = 1.0;  // Slow: factor (>= 1); Loss: probability in [0, 1]; Down: unused
    uint64_t from_ns = 0;
    uint64_t to_ns = kNeverEnds;
};

// The trace clock of a node's processes, made to run off like a host's clock: offset plus drift since the
// fabric's start (`clock nodeN offset T drift Dppm`). Applied by `sigmatrace fabric` through an LTTng-UST clock
// plugin; the fabric's own timing is untouched.
struct ClockSkew {
    uint32_t node = 0;
    int64_t offset_ns = 0;
    double drift_ppm = 0;
};

struct FabricConfig {
    LinkParams defaults;
    uint32_t mtu = 4096;
    uint64_t loss_seed = 1;
    std::vector<LinkOverride> overrides;
    std::vector<Fault> faults;
    std::vector<ClockSkew> clocks;   // at most one per node (a later statement for a node replaces it)

    // The skew of `node`'s clock, nullptr when it runs true.
    const ClockSkew* clock_of(uint32_t node) const {
        for (const ClockSkew& c : clocks)
            if (c.node == node) return &c;
        return nullptr;
    }
};

class ConfigError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Parses a configuration text; errors name the file and line ("FILE:LINE: what").
FabricConfig parse_config(std::string_view text, const std::string& file_name);
FabricConfig load_config_file(const std::string& path);

// Value parsers, exposed for the environment knobs and tests. They throw ConfigError.
uint64_t parse_bandwidth(std::string_view text);  // "100Gbit/s", "12.5GB/s", "unlimited" (0)
uint64_t parse_duration_ns(std::string_view text);  // "1us", "2.5ms", "3s", "250ns"

}  // namespace softfabric
