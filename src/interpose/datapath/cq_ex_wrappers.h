// Extended CQs (ibv_create_cq_ex, mlx5dv_create_cq): wrappers for start_poll / next_poll / end_poll.
//
// A poll pass (start_poll .. end_poll) runs under the CQ's lock, one at a time per CQ. Each completion the
// provider steps to is read through the CQ's read_* accessors — only those the CQ was created with (the
// provider leaves the others NULL or undefined) and, for error completions, only the fields verbs defines
// for them — and the pass is emitted as poll_cq events (api = 1) at end_poll.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "interpose/state/object_state.h"

namespace sigmatrace::interpose {

// `wc_flags`: the IBV_WC_EX_WITH_* flags the CQ was created with (~0 when unknown: NULL checks only).
// Under the registry mutex.
void wrap_cq_ex(CqState& s, ibv_cq_ex* cq, uint64_t wc_flags);

}  // namespace sigmatrace::interpose
