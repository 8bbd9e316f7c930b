#include "interpose/deferred_records_writer.h"

#include <cstring>

#include "interpose/config.h"
#include "provider/trace.h"

namespace sigmatrace::interpose::deferred {
namespace {

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

}  // namespace

bool RecordsWriter::add(const RecordHeader* rec) noexcept {
    if (rec->kind == RecordKind::pad) return false;
    bool flushed = false;
    if (used_ + records::max_encoded_size(rec->size) > kBytes) {
        flush();
        flushed = true;
    }
    // Redaction reads the atomic, not config(): this may run on the emitter thread.
    const uint32_t redact = redact_bits();
    const records::EncodeOptions opt{(redact & kRedactAddresses) != 0, (redact & kRedactKeys) != 0};
    used_ += static_cast<uint32_t>(encoder_.encode(*rec, capture_clock::to_ns(anchor_, rec->ts), opt,
                                                   reinterpret_cast<std::byte*>(words_) + used_));
    return flushed;
}

void RecordsWriter::emit_empty() noexcept {
    emit_records(words_, 0, origin_pid_, origin_tid_, lost_);
    lost_ = 0;
}

void RecordsWriter::flush() noexcept {
    if (used_ == 0) return;
    const uint32_t words = (used_ + 7) / 8;
    // The last word's fill: zero bytes, which readers check.
    std::memset(reinterpret_cast<std::byte*>(words_) + used_, 0, words * 8 - used_);
    emit_records(words_, words, origin_pid_, origin_tid_, lost_);
    lost_ = 0;  // counted once, on the ring's first event
    used_ = 0;
    encoder_.reset();
}

}  // namespace sigmatrace::interpose::deferred
