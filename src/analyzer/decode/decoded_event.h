// One SigmaTrace event as the analysis sees it: the schema's fields by index, already converted to plain values,
// independent of Babeltrace2. The Babeltrace2 decoder (bt_event_decoder.h) fills it from a CTF event; unit tests
// and the fuzzer fill it directly. Everything after decoding works on this struct only, so that layer can be
// tested and fuzzed without a trace.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "analyzer/decode/schema_table.h"

namespace sigmatrace::analyzer {

// A field's value. Integers are stored as 64 bits (signed ones sign-extended, read back with as_signed()).
// Sequences point at storage owned by whoever filled the event, valid until the next event.
struct FieldValue {
    uint64_t u = 0;
    std::string_view s;
    const uint64_t* seq = nullptr;
    uint32_t seq_len = 0;
    bool is_sequence = false;
    bool present = false;  // false when the trace's event class lacks the field (older minor version)
};

// Sequences longer than this are cut (and the event counted as malformed): the schema never writes more than
// SIGMATRACE_MAX_BATCH elements, so a longer one is a corrupt or foreign trace, and cutting keeps handlers'
// work per event bounded.
inline constexpr uint32_t kMaxSequenceLength = 1024;

// A capture time (the tracer's CLOCK_MONOTONIC ns: cycles of LTTng's 1 GHz clock) as ns from origin, cycle 0 being
// `origin_ns`: 0 stays 0 (no capture time), and what overflows or lands at or before the origin becomes 0 (the
// element is then timed by its event), as Babeltrace2's conversion does.
inline uint64_t capture_ns_from_origin(int64_t origin_ns, uint64_t cycles) {
    if (cycles == 0 || cycles > static_cast<uint64_t>(INT64_MAX - (origin_ns > 0 ? origin_ns : 0))) return 0;
    const int64_t ns = origin_ns + static_cast<int64_t>(cycles);
    return ns > 0 ? static_cast<uint64_t>(ns) : 0;
}

// How a reader turns the capture times of an event's records into ns from origin: one of
//   - identity (the times already are ns from origin);
//   - linear: capture_ns_from_origin(origin, t), inline where each record would otherwise pay a call (a 1 GHz
//     clock whose times are not moved: the common case);
//   - through a reader's own conversion function and its context (other clocks, moved times).
class CaptureClock {
public:
    using Convert = uint64_t (*)(const void* ctx, uint64_t monotonic_ns);
    CaptureClock() = default;
    static CaptureClock linear(int64_t origin_ns) {
        CaptureClock c;
        c.linear_ = true;
        c.origin_ns_ = origin_ns;
        return c;
    }
    static CaptureClock through(Convert convert, const void* ctx) {
        CaptureClock c;
        c.convert_ = convert;
        c.ctx_ = ctx;
        return c;
    }
    uint64_t operator()(uint64_t monotonic_ns) const {
        if (linear_) return capture_ns_from_origin(origin_ns_, monotonic_ns);
        return convert_ != nullptr ? convert_(ctx_, monotonic_ns) : monotonic_ns;
    }

private:
    bool linear_ = false;
    int64_t origin_ns_ = 0;
    Convert convert_ = nullptr;
    const void* ctx_ = nullptr;
};

struct DecodedEvent {
    EventId id = EventId::count_;
    int64_t ts_ns = 0;           // default clock, ns from origin (Unix epoch for LTTng traces)
    uint32_t trace_index = 0;    // which trace of the graph it came from (process identity is per trace)
    int64_t vpid = -1;           // vpid context, -1 when the channel has none
    int64_t vtid = -1;
    std::string_view procname;   // procname context, empty when absent
    std::string_view trace_hostname;  // the trace environment's hostname, empty when absent
    std::array<FieldValue, kMaxEventFields> f{};
    // Found inconsistent by a stage before the analysis (records that stop decoding): counted as malformed.
    bool inconsistent = false;
    // A `deferred_records` event's conversion of its records' capture times (CLOCK_MONOTONIC ns of the tracer)
    // to ns from origin, set by the reader from the event's clock, for the element decoder and the event dump;
    // valid while the event is handed on. Identity by default: the times already are ns from origin (tests, the
    // fuzzer).
    CaptureClock capture;

    // A capture time of this event's records as ns from origin (0: none, or not convertible).
    uint64_t capture_time(uint64_t monotonic_ns) const { return capture(monotonic_ns); }

    uint64_t u(int i) const { return f[static_cast<std::size_t>(i)].u; }
    int64_t i64(int i) const { return static_cast<int64_t>(f[static_cast<std::size_t>(i)].u); }
    std::string_view str(int i) const { return f[static_cast<std::size_t>(i)].s; }
    uint32_t seq_len(int i) const { return f[static_cast<std::size_t>(i)].seq_len; }
    // Element k of sequence field i, 0 past its end: handlers loop to the event's `n` and a sequence that is
    // shorter than `n` (malformed) reads as zeros instead of out of bounds.
    uint64_t at(int i, uint32_t k) const {
        const FieldValue& v = f[static_cast<std::size_t>(i)];
        return k < v.seq_len ? v.seq[k] : 0;
    }
    // The capture time of batch element k (ns from origin, the time base of ts_ns), read from the data event's
    // `ts` sequence (field index ts_field). The sequence holds times ALREADY converted to ns from origin (the
    // Babeltrace2 consumer converts the tracer's CLOCK_MONOTONIC values with the event's clock class; tests and
    // the fuzzer write converted values directly). 0, a missing element, or a trace without the field (schema
    // minor < 2) means "captured at the event's timestamp": immediate-mode events are emitted inside the call.
    // Values above kMaxCaptureNs (year 2116 from the Unix epoch) are corrupt: they read as 0 too, which keeps
    // every difference of two times within int64 (latencies, windows).
    static constexpr uint64_t kMaxCaptureNs = uint64_t{INT64_MAX} / 2;
    // The rule above for one capture time `t`: itself, or `event_ns` when it is 0 or corrupt. Records' capture
    // times follow it too (element_decoder.h).
    static int64_t capture_or(uint64_t t, int64_t event_ns) {
        return t != 0 && t <= kMaxCaptureNs ? static_cast<int64_t>(t) : event_ns;
    }
    int64_t element_ts(int ts_field, uint32_t k) const { return capture_or(at(ts_field, k), ts_ns); }
    // The number of batch elements to process: `n`, bounded by the longest sequence actually present and by
    // kMaxSequenceLength. Sets `malformed` when the sequences disagree with `n`. The sequence at `optional_field`
    // (the per-element `ts`, absent from older traces and all zeros when not written) may be empty instead.
    uint32_t batch_size(int n_field, bool& malformed, int optional_field = -1) const {
        uint64_t n = u(n_field);
        uint32_t longest = 0;
        bool any = false;
        for (std::size_t i = 0; i < f.size(); ++i) {
            const FieldValue& v = f[i];
            if (!v.is_sequence) continue;
            if (static_cast<int>(i) == optional_field && v.seq_len == 0) continue;
            any = true;
            if (v.seq_len != n) malformed = true;
            longest = std::max(longest, v.seq_len);
        }
        if (!any) return 0;
        return static_cast<uint32_t>(std::min<uint64_t>({n, longest, kMaxSequenceLength}));
    }
};

// Records salvaged after their process ended were emitted by `sigmatrace record`'s salvage step: a
// `deferred_records` event with origin_pid > 0 belongs to the process and thread that captured its records,
// exactly as if that process had emitted it. Readers apply this to every deferred_records event they decode.
inline void adopt_salvaged_origin(DecodedEvent& ev) {
    namespace F = fields::deferred_records;
    if (ev.f[F::origin_pid].present && static_cast<int32_t>(ev.f[F::origin_pid].u) > 0) {
        ev.vpid = static_cast<int32_t>(ev.f[F::origin_pid].u);
        ev.vtid = static_cast<int32_t>(ev.f[F::origin_tid].u);
        ev.procname = {};
    }
}

// The data events of the events format whose elements carry their own capture time (`ts`, schema minor 2):
// the index of that sequence and of `n`, or -1 for events timed by their timestamp alone.
struct CaptureFields {
    int ts = -1;
    int n = -1;
};
inline CaptureFields capture_fields(EventId id) {
    switch (id) {
    case EventId::post_send: return {fields::post_send::ts, fields::post_send::n};
    case EventId::post_recv: return {fields::post_recv::ts, fields::post_recv::n};
    case EventId::post_srq_recv: return {fields::post_srq_recv::ts, fields::post_srq_recv::n};
    case EventId::poll_cq: return {fields::poll_cq::ts, fields::poll_cq::n};
    default: return {};
    }
}

}  // namespace sigmatrace::analyzer
