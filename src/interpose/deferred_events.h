// The events format of deferred emission (SIGMATRACE_DEFER_FORMAT=events; the default, records, is
// deferred_records_writer.h): turning captured records (deferred_ring.h) into LTTng events, the same events,
// field for field, that immediate emission writes from the application's structures (data_events.h), plus each
// element's capture time `ts` in trace-clock ns.
//
// Consecutive records of one ring that are whole, successful calls of the same kind on the same object (posts
// with ret 0, polls that returned completions) become one event of up to SIGMATRACE_MAX_BATCH elements, each
// keeping its own `ts`: an event costs ~80 ns plus ~5 ns per element and field, so a thread that posts
// thousands of WRs between idle points pays for tens of events, not thousands (ib_write_bw: 32 posts per event).
// A merged event says ret 0, bad_index -1, batch_offset 0 (posts) or ret = n (polls), exactly what one call of
// those WRs would have said. Records that failed, or parts of a long chain, stay events of their own.
//
// A drain builds several events at once — one of send-queue posts, one of receive posts (to a QP or an SRQ),
// two of polls (two CQs: a send CQ and a receive CQ polled in turn) — so that a thread that calls them in turn
// still fills its events: ib_write_bw polls its send CQ after every 16 WRs, and with one open event each poll
// cut the posts' event in two (half as many WRs per event, twice the events: ~10 ns more per 64 KiB WRITE in
// situ, PERFORMANCE.md); ib_send_lat's poll of its receive CQ, repost, reply and poll of its send CQ made
// four events per round trip. The price: within one drain, events come out of capture order between those
// open events (each goes out when the next record for it cannot join it, or at the end of the drain, the
// oldest first). Nothing depends on emission order: every element carries its capture time, and the
// analyzer orders elements by it (docs/analyzer.md, reordering).
#pragma once

#include <array>
#include <cstdint>

#include <sigmatrace/schema.h>

#include "interpose/capture_clock.h"
#include "interpose/deferred_ring.h"

namespace sigmatrace::interpose::deferred {

// A consumer's runs of records. Allocates nothing, takes no lock: usable from the emitter thread, exit paths
// and signal handlers. ~6 KiB, so it lives with its ring (deferred_rings.cpp), used only by the consumer that
// holds the ring, rather than on a consumer's stack: a fatal-signal handler may run on a small alternate stack.
// May change errno (callers keep it).
class EventBuilder {
public:
    EventBuilder() noexcept = default;
    EventBuilder(const EventBuilder&) = delete;
    EventBuilder& operator=(const EventBuilder&) = delete;

    // A run starts with the conversion point its capture times are converted with and ends with flush().
    void start_run(const capture_clock::Anchor& anchor) noexcept { anchor_ = anchor; }

    // Adds `rec`'s elements to the open event of its kind, emitting that one first when `rec` cannot join it.
    void add(const RecordHeader* rec) noexcept;
    // Emits the open events, if any, in the order of their first elements' capture times.
    void flush() noexcept;
    // Forgets the open events without emitting them (a forked child: they are its parent's).
    void discard() noexcept;

private:
    static constexpr uint32_t kBatch = SIGMATRACE_MAX_BATCH;

    // One event being built: kind pad = none. Scalars from its first record; each kind adds its sequences.
    struct Open {
        RecordKind kind = RecordKind::pad;
        bool mergeable = false;
        uint64_t handle = 0;
        uint32_t qp_num = 0;
        uint32_t api = 0;
        int32_t ret = 0;
        int32_t bad_index = -1;
        uint32_t batch_offset = 0;
        uint32_t n = 0;
        uint64_t ts[kBatch];
        uint64_t wr_id[kBatch];
    };
    struct OpenSends : Open {
        uint64_t raddr[kBatch];
        uint64_t ah[kBatch];
        uint32_t send_flags[kBatch];
        uint32_t bytes[kBatch];
        uint32_t rkey[kBatch];
        uint32_t imm[kBatch];
        uint32_t remote_qpn[kBatch];
        uint16_t num_sge[kBatch];
        uint8_t opcode[kBatch];
    };
    struct OpenRecvs : Open {  // post_recv or post_srq_recv
        uint32_t bytes[kBatch];
        uint16_t num_sge[kBatch];
    };
    struct OpenPolls : Open {
        uint64_t hw_ts[kBatch];
        uint32_t vendor_err[kBatch];
        uint32_t byte_len[kBatch];
        uint32_t qp_num[kBatch];  // each completion's (hides Open::qp_num, a post event's; polls have none)
        uint32_t src_qp[kBatch];
        uint32_t wc_flags[kBatch];
        uint32_t imm[kBatch];
        uint8_t status[kBatch];
        uint8_t opcode[kBatch];
    };

    std::array<Open*, 4> all_open() noexcept { return {&sends_, &recvs_, &polls_[0], &polls_[1]}; }
    // Adds `rec` to `o` (its kind's open event), emitting `o` first when `rec` cannot join it.
    template <typename O> void add_to(O& o, const RecordHeader* rec) noexcept;
    // The open poll event `rec` goes to: the one of its CQ, else a free one, else the older one (emitted then).
    OpenPolls& polls_for(const RecordHeader* rec) noexcept;
    static bool joins(const Open& o, const RecordHeader* rec) noexcept;
    static void start(Open& o, const RecordHeader* rec) noexcept;
    static void append(OpenSends& o, const RecordHeader* rec, uint32_t n) noexcept;
    static void append(OpenRecvs& o, const RecordHeader* rec, uint32_t n) noexcept;
    static void append(OpenPolls& o, const RecordHeader* rec, uint32_t n) noexcept;
    static void emit(OpenSends& o) noexcept;
    static void emit(OpenRecvs& o) noexcept;
    static void emit(OpenPolls& o) noexcept;

    capture_clock::Anchor anchor_;
    OpenSends sends_;
    OpenRecvs recvs_;
    OpenPolls polls_[2];
};

}  // namespace sigmatrace::interpose::deferred
