// Sequence fields of data events that no analysis reads. The Babeltrace2 consumer reads only their lengths
// (so an event whose sequences disagree with its `n` is still counted as malformed) and hands them over as
// zeros: a deferred trace's data events carry up to 32 elements per sequence, and reading an element costs two
// calls into libbabeltrace2 plus its copy in the reordering stage. These are 9 of the 30 sequences of the four
// data events (a small share of the analyzer's time on a deferred bandwidth trace).
//
// An analysis that starts using one of them must take it out of this list: the test
// UnreadFields.TheAnalysisDoesNotDependOnThem fills them with garbage and fails when the output changes.
#pragma once

#include <sigmatrace/schema.h>

#include <array>
#include <cstdint>

#include "analyzer/decode/decoded_event.h"
#include "analyzer/decode/schema_table.h"

namespace sigmatrace::analyzer {

struct UnreadField {
    EventId event;
    int field;
};

inline constexpr UnreadField kUnreadSequences[] = {
    {EventId::post_send, fields::post_send::num_sge},    {EventId::post_send, fields::post_send::imm},
    {EventId::post_recv, fields::post_recv::num_sge},    {EventId::post_srq_recv, fields::post_srq_recv::num_sge},
    {EventId::poll_cq, fields::poll_cq::src_qp},
    {EventId::poll_cq, fields::poll_cq::wc_flags},       {EventId::poll_cq, fields::poll_cq::imm},
    {EventId::poll_cq, fields::poll_cq::hw_ts},
};

// What an unread sequence's elements read as: the readers point its values here.
inline constexpr std::array<uint64_t, kMaxSequenceLength> kUnreadValues{};

constexpr bool is_unread_sequence(EventId event, int field) {
    for (const UnreadField& u : kUnreadSequences)
        if (u.event == event && u.field == field) return true;
    return false;
}

}  // namespace sigmatrace::analyzer
