#include "interpose/deferred_records_writer.h"

#include <cstring>

#include "interpose/config.h"
#include "provider/trace.h"

namespace sigmatrace::interpose::deferred {
namespace {

// Out of line: it expands the tracepoint body.
__attribute__((noinline)) void emit_records(const uint64_t* words, uint32_t n) noexcept {
    st_deferred_records_rec r{};
    r.layout = records::kLayout;
    r.n = n;
    r.words = words;
    ST_TRACE_EMIT(deferred_records, &r);
}

}  // namespace

void RecordsWriter::add(const RecordHeader* rec) noexcept {
    if (rec->kind == RecordKind::pad) return;
    if (used_ + records::max_encoded_size(rec->size) > kBytes) flush();
    // Redaction reads the atomic, not config(): this may run on the emitter thread.
    const uint32_t redact = redact_bits();
    const records::EncodeOptions opt{(redact & kRedactAddresses) != 0, (redact & kRedactKeys) != 0};
    used_ += static_cast<uint32_t>(encoder_.encode(*rec, capture_clock::to_ns(anchor_, rec->ts), opt,
                                                   reinterpret_cast<std::byte*>(words_) + used_));
}

void RecordsWriter::flush() noexcept {
    if (used_ == 0) return;
    const uint32_t words = (used_ + 7) / 8;
    // The last word's fill: zero bytes, which readers check.
    std::memset(reinterpret_cast<std::byte*>(words_) + used_, 0, words * 8 - used_);
    emit_records(words_, words);
    used_ = 0;
    encoder_.reset();
}

}  // namespace sigmatrace::interpose::deferred
