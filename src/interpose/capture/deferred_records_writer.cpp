#include "interpose/capture/deferred_records_writer.h"

#include "interpose/runtime/config.h"
#include "provider/trace.h"

namespace sigmatrace::interpose::deferred {

// Out of line: it expands the tracepoint body.
__attribute__((noinline)) void emit_records(const uint64_t* words, uint32_t n, int32_t origin_pid, int32_t origin_tid,
                                             uint32_t lost) noexcept {
    st_deferred_records_rec r{};
    r.layout = records::kLayout;
    r.n = n;
    r.words = words;
    r.origin_pid = origin_pid;
    r.origin_tid = origin_tid;
    r.lost = lost;
    ST_TRACE_EMIT(deferred_records, &r);
}

records::EncodeOptions encode_options() noexcept {
    // The atomic, not config(): a drain may run on the emitter thread.
    const uint32_t redact = redact_bits();
    return {(redact & kRedactAddresses) != 0, (redact & kRedactKeys) != 0};
}

bool RecordsWriter::add(const RecordHeader* rec) noexcept {
    if (rec->kind == RecordKind::pad) return false;
    bool flushed = false;
    if (!words_.fits(rec->size)) {
        flush();
        flushed = true;
    }
    words_.add(*rec, capture_clock::to_ns(anchor_, rec->ts), encode_options());
    return flushed;
}

void RecordsWriter::emit_empty() noexcept {
    uint32_t n = 0;
    emit_records(words_.finish(&n), 0, origin_pid_, origin_tid_, lost_);
    lost_ = 0;
}

void RecordsWriter::flush() noexcept {
    if (words_.empty()) return;
    uint32_t n = 0;
    const uint64_t* words = words_.finish(&n);
    emit_records(words, n, origin_pid_, origin_tid_, lost_);
    lost_ = 0;  // counted once, on the ring's first event
    words_.reset();
}

}  // namespace sigmatrace::interpose::deferred
