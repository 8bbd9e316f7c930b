// Turning captured records (deferred_ring.h) into LTTng events: the same events, field for field, that
// immediate emission writes from the application's structures (data_events.h), plus each element's capture
// time `ts` in trace-clock ns.
//
// Consecutive records of one ring that are whole, successful calls of the same kind on the same object (posts
// with ret 0, polls that returned completions) become one event of up to SIGMATRACE_MAX_BATCH elements, each
// keeping its own `ts`: an event costs ~80 ns plus ~5 ns per element and field, so a thread that posts
// thousands of WRs between idle points pays for tens of events, not thousands (ib_write_bw: 32 posts per event).
// A merged event says ret 0, bad_index -1, batch_offset 0 (posts) or ret = n (polls), exactly what one call of
// those WRs would have said. Records that failed, or parts of a long chain, stay events of their own.
#pragma once

#include <cstdint>

#include <sigmatrace/schema.h>

#include "interpose/capture_clock.h"
#include "interpose/deferred_ring.h"

namespace sigmatrace::interpose::deferred {

// One consumer's run of records. Allocates nothing, takes no lock: usable from the emitter thread, exit paths
// and signal handlers (~3 KiB of stack). May change errno (callers keep it).
class EventBuilder {
public:
    explicit EventBuilder(const capture_clock::Anchor& anchor) noexcept : anchor_(anchor) {}
    EventBuilder(const EventBuilder&) = delete;
    EventBuilder& operator=(const EventBuilder&) = delete;
    ~EventBuilder() { flush(); }

    // Adds `rec`'s elements to the event being built, emitting that one first when `rec` cannot join it.
    void add(const RecordHeader* rec) noexcept;
    // Emits the event being built, if any.
    void flush() noexcept;

private:
    static constexpr uint32_t kBatch = SIGMATRACE_MAX_BATCH;

    bool joins(const RecordHeader* rec) const noexcept;
    void start(const RecordHeader* rec) noexcept;
    void append(const RecordHeader* rec) noexcept;
    void emit_post_send() noexcept;
    template <typename Rec> void emit_recv() noexcept;
    void emit_poll() noexcept;

    const capture_clock::Anchor anchor_;

    // The event being built: kind pad = none. Scalars from its first record.
    RecordKind kind_ = RecordKind::pad;
    bool mergeable_ = false;
    uint64_t handle_ = 0;
    uint32_t qp_num_ = 0;
    uint32_t api_ = 0;
    int32_t ret_ = 0;
    int32_t bad_index_ = -1;
    uint32_t batch_offset_ = 0;
    uint32_t n_ = 0;
    // Sequences (each event kind uses its subset).
    uint64_t ts_[kBatch];
    uint64_t wr_id_[kBatch];
    uint64_t raddr_[kBatch];  // post_send; hw_ts for polls
    uint64_t ah_[kBatch];
    uint32_t bytes_[kBatch];  // post_*; byte_len for polls
    uint32_t flags_[kBatch];  // send_flags; wc_flags for polls
    uint32_t rkey_[kBatch];   // post_send; vendor_err for polls
    uint32_t imm_[kBatch];
    uint32_t qpn_[kBatch];    // remote_qpn; qp_num for polls
    uint32_t src_qp_[kBatch];
    uint16_t num_sge_[kBatch];
    uint8_t opcode_[kBatch];
    uint8_t status_[kBatch];
};

}  // namespace sigmatrace::interpose::deferred
