// The fabric's time base: CLOCK_MONOTONIC nanoseconds, the same in every process on the machine, so that
// link reservations and fault windows written by one process mean the same instant in another.
#pragma once

#include <cstdint>
#include <ctime>

namespace softfabric {

inline uint64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline constexpr uint64_t kNever = ~0ull;

}  // namespace softfabric
