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
    const uint32_t w = rec->size / 8;
    if (used_ + w > kWords) flush();
    auto* copy = reinterpret_cast<RecordHeader*>(words_ + used_);
    std::memcpy(copy, rec, rec->size);
    copy->ts = capture_clock::to_ns(anchor_, rec->ts);
    // Redaction reads the atomic, not config(): this may run on the emitter thread.
    if (const uint32_t redact = redact_bits(); redact != 0 && copy->kind == RecordKind::post_send) {
        SendEntry* e = entries<SendFixed, SendEntry>(copy);
        for (uint32_t i = 0; i < copy->n; ++i) {
            if (redact & kRedactAddresses) e[i].raddr = 0;
            if (redact & kRedactKeys) e[i].rkey = 0;
        }
    }
    used_ += w;
}

void RecordsWriter::flush() noexcept {
    if (used_ == 0) return;
    emit_records(words_, used_);
    used_ = 0;
}

}  // namespace sigmatrace::interpose::deferred
