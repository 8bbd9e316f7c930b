// The calling thread's data-path state, in one initial-exec TLS block.
//
// Why one block: in a shared library each initial-exec __thread variable is reached through its own GOT slot
// (its offset from %fs), so five separate variables cost the data path up to five GOT loads on three cache
// lines besides their own; grouped, one slot and one line (bench/interpose/message_footprint.sh counts a
// message's lines: 4 fewer with this and config.h's DataPathSettings; docs/PERFORMANCE.md, "Instructions and
// cache lines per message", says what that did and did not change).
#pragma once

#include <cstdint>

namespace sigmatrace::interpose {

namespace deferred {
class Ring;
}
struct QpState;
struct CqState;

struct ThreadHotState {
    deferred::Ring* ring = nullptr;  // this thread's capture ring (deferred_rings.h), nullptr before its first
    QpState* last_qp = nullptr;      // one-entry lookup caches (object_state.h)
    CqState* last_cq = nullptr;
    uint64_t oldest_hint = 0;        // estimate of the ring's oldest capture time (deferred_capture.cpp)
    uint32_t idle_polls = 0;         // empty polls, for the age check every kIdleAgeCheckEvery (deferred_capture.h)
};

extern __thread ThreadHotState tls_hot __attribute__((tls_model("initial-exec")));

}  // namespace sigmatrace::interpose
