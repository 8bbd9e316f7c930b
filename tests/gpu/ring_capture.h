// What the watcher decoded from a ring and what it counted lost, read out of its records as the analyzer reads
// them (ring_post records inside deferred_records events). Compiled by the host compiler: the record wire format's
// templates (include/sigmatrace/deferred_records_wire.h) are C++20 that nvcc's front end does not take.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace sigmatrace::gpu_check {

struct Captured {
    std::mutex mu;   // the watcher thread emits, the check reads after stopping it
    std::vector<uint64_t> raddr;
    std::vector<uint16_t> index;
    std::vector<uint32_t> rkey, bytes;
    uint64_t lost = 0, malformed = 0;
};

// Routes the trace callback backend's events into `cap` until stop_capture() (one capture at a time).
void start_capture(Captured& cap);
void stop_capture();

}  // namespace sigmatrace::gpu_check
