// Hand-made `deferred_records` payloads for tests: ring records built field by field
// (<sigmatrace/deferred_records.h>) and encoded into an event's words the way the tracer's drain does
// (<sigmatrace/deferred_records_wire.h>, WireEncoder).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <sigmatrace/deferred_records.h>
#include <sigmatrace/deferred_records_wire.h>

namespace sigmatrace::testing {

// One ring record: header, fixed part, entries, zero padding.
struct TestRecord {
    alignas(16) std::array<std::byte, records::kMaxRecordSize> bytes{};

    records::RecordHeader& header() { return *reinterpret_cast<records::RecordHeader*>(bytes.data()); }
    const records::RecordHeader& header() const { return *reinterpret_cast<const records::RecordHeader*>(bytes.data()); }

    template <typename Fixed, typename Entry>
    static TestRecord make(records::RecordKind kind, uint64_t ts, const Fixed& fixed, const std::vector<Entry>& entries) {
        TestRecord r;
        const auto n = static_cast<uint32_t>(entries.size());
        r.header() = records::RecordHeader{records::record_size<Fixed, Entry>(n), kind, static_cast<uint16_t>(n), ts};
        *records::fixed_part<Fixed>(&r.header()) = fixed;
        if (n > 0) std::memcpy(records::entries<Fixed, Entry>(&r.header()), entries.data(), n * sizeof(Entry));
        return r;
    }
    static TestRecord send(uint64_t ts, const records::SendFixed& f, const std::vector<records::SendEntry>& e) {
        return make(records::RecordKind::post_send, ts, f, e);
    }
    static TestRecord recv(records::RecordKind kind, uint64_t ts, const records::RecvFixed& f, const std::vector<records::RecvEntry>& e) {
        return make(kind, ts, f, e);
    }
    static TestRecord poll(uint64_t ts, const records::PollFixed& f, const std::vector<records::CompletionEntry>& e) {
        return make(records::RecordKind::poll_cq, ts, f, e);
    }
    // The record's bytes, as walk_records() hands a decoded one over (for comparing the two).
    std::vector<std::byte> image() const { return {bytes.begin(), bytes.begin() + header().size}; }
};

// The words of one event holding `recs` (their `ts` taken as CLOCK_MONOTONIC ns), and each record's encoded size.
inline std::vector<uint64_t> encode_words(const std::vector<TestRecord>& recs, const records::EncodeOptions& opt = {},
                                          std::vector<std::size_t>* sizes = nullptr) {
    records::WireEncoder enc;
    std::vector<std::byte> out(recs.size() * records::kMaxRecordSize + 8);
    std::size_t used = 0;
    for (const TestRecord& r : recs) {
        const std::size_t n = enc.encode(r.header(), r.header().ts, opt, out.data() + used);
        if (sizes != nullptr) sizes->push_back(n);
        used += n;
    }
    std::vector<uint64_t> words((used + 7) / 8);
    std::memcpy(words.data(), out.data(), used);
    return words;
}

}  // namespace sigmatrace::testing
