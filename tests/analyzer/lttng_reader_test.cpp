// The direct CTF reader (lttng_tsdl.h, lttng_stream_reader.h) on the committed records trace: the layout it
// reads from the metadata, the metadata it refuses, and a damaged stream refused before any event is handed on.
// That both readers give the same outputs on every committed trace is analyzer_reader_equivalence's.
#include <gtest/gtest.h>
#include <fmt/core.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/ctf_precheck.h"
#include "analyzer/decode/lttng_stream_reader.h"
#include "analyzer/decode/lttng_tsdl.h"
#include "analyzer/decode/schema_table.h"
#include "analyzer/decode/trace_reader.h"
#include "analyzer/outputs/json_text.h"

namespace fs = std::filesystem;
using namespace sigmatrace::analyzer;

namespace {

const fs::path kRecords = fs::path(DATA_DIR) / "records";

std::string metadata_text(const fs::path& dir) {
    std::ifstream in(dir / "metadata", std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const MetadataCheck m = check_metadata(bytes.data(), bytes.size());
    EXPECT_TRUE(m.ok) << m.problem;
    return m.text;
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return text;
}

}  // namespace

TEST(LttngTsdl, ReadsTheRecordsTraceLayout) {
    std::string why;
    const auto layout = parse_lttng_tsdl(metadata_text(kRecords), why);
    ASSERT_TRUE(layout) << why;
    EXPECT_EQ(layout->hostname, "vm");
    EXPECT_EQ(layout->clock_origin_ns, 1796226660950291009);
    ASSERT_EQ(layout->streams.size(), 1u);
    const CtfStreamClass& sc = layout->streams[0];
    EXPECT_TRUE(sc.large_header);
    ASSERT_EQ(sc.context.size(), 3u);
    EXPECT_EQ(sc.context[0].name, "vpid");
    EXPECT_TRUE(sc.context[0].type.is_signed);
    EXPECT_EQ(sc.context[2].name, "procname");
    EXPECT_EQ(sc.context[2].kind, CtfFieldKind::Array);
    EXPECT_EQ(sc.context[2].length, 17u);
    EXPECT_TRUE(sc.context[2].is_text());
    const CtfEventClass* dr = layout->event(0, 31);
    ASSERT_NE(dr, nullptr);
    EXPECT_EQ(dr->name, "sigmatrace:deferred_records");
    ASSERT_EQ(dr->fields.size(), 7u);
    EXPECT_EQ(dr->fields[2].name, "_words_length");   // `__words_length`: one underscore removed
    EXPECT_EQ(dr->fields[3].name, "words");
    EXPECT_EQ(dr->fields[3].kind, CtfFieldKind::Sequence);
    EXPECT_EQ(dr->fields[3].length_field, 2);
    EXPECT_EQ(dr->fields[3].type.bits, 64);
}

TEST(LttngTsdl, RefusesWhatIsNotLttngUst213) {
    const std::string text = metadata_text(kRecords);
    const struct {
        const char* from;
        const char* to;
        const char* reason;
    } cases[] = {
        {"tracer_minor = 13;", "tracer_minor = 12;", "lttng-ust 2.13"},
        {"byte_order = le;", "byte_order = be;", "little-endian"},
        {"freq = 1000000000;", "freq = 1000000;", "1 GHz"},
        {"integer { size = 32; align = 8; signed = 0; encoding = none; base = 10; } _layout;",
         "enum : uint8_t { a = 0 } _layout;", "a member of type 'enum'"},
        {"integer { size = 32; align = 8; signed = 0; encoding = none; base = 10; } _layout;",
         "integer { size = 12; align = 1; signed = 0; } _layout;", "bits aligned on"},
        {"event.header := struct event_header_large;", "event.header := struct event_header_other;", "event header"},
        {"uuid = \"", "uuid = \"x", "UUID"},
    };
    for (const auto& c : cases) {
        std::string why;
        EXPECT_FALSE(parse_lttng_tsdl(replaced(text, c.from, c.to), why)) << c.from;
        EXPECT_NE(why.find(c.reason), std::string::npos) << c.from << ": " << why;
    }
}

// An event id no event class has, in the middle of the first stream: refused by the first pass, so the
// analysis has seen nothing (the read then goes through Babeltrace2, which reports the damage).
TEST(LttngStreamReader, RefusesADamagedStreamBeforeHandingOverAnything) {
    const fs::path dir = fs::temp_directory_path() / fmt::format("st-lttng-reader-{}", ::getpid());
    fs::remove_all(dir);
    fs::copy(kRecords, dir, fs::copy_options::recursive);
    {
        // The first event of the first packet: its large header's 16-bit id right after the 84-byte packet
        // header and context.
        std::fstream f(dir / "sigmatrace_0", std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(84);
        const char id[2] = {static_cast<char>(0x34), static_cast<char>(0x12)};
        f.write(id, 2);
    }
    PlannedRead planned = plan_read(dir);
    ASSERT_FALSE(planned.fatal);
    ASSERT_TRUE(plan_is_pristine(planned.plan));   // the precheck does not look inside events
    Analysis a;
    std::string why;
    EXPECT_FALSE(read_direct(planned.plan, dir.string(), a, nullptr, nullptr, why));
    EXPECT_NE(why.find("unknown id 4660"), std::string::npos) << why;
    EXPECT_EQ(a.finish()["trace"]["events"].get<uint64_t>(), 0u);

    // The intact trace reads, and every event of it reaches the analysis.
    Analysis b;
    PlannedRead intact = plan_read(kRecords);
    const auto sum = read_direct(intact.plan, kRecords.string(), b, nullptr, nullptr, why);
    ASSERT_TRUE(sum) << why;
    EXPECT_GT(sum->events, 0u);
    EXPECT_EQ(b.finish()["trace"]["events"].get<uint64_t>(), sum->events - sum->foreign_events);
    fs::remove_all(dir);
}

// A payload that runs past its packet's content is refused, whether a sequence's length or the fixed members
// after it do: the first event made a deferred_records event (extended header id 31) whose words' length is
// each time too large.
TEST(LttngStreamReader, RefusesAPayloadPastItsPacket) {
    // The first packet's content ends at byte 4666; its first event's payload starts at 123 (84 bytes of packet
    // header and context, a 14-byte extended header, a 25-byte context): layout, n and the words' length, then
    // the words from 135, then origin_pid, origin_tid and lost (12 bytes).
    for (const uint32_t words : {0xffffffffu, 567u, 565u}) {   // the words past the end; the last 12 bytes past it
        const fs::path dir = fs::temp_directory_path() / fmt::format("st-lttng-payload-{}-{}", ::getpid(), words);
        fs::remove_all(dir);
        fs::copy(kRecords, dir, fs::copy_options::recursive);
        {
            std::fstream f(dir / "sigmatrace_0", std::ios::in | std::ios::out | std::ios::binary);
            const char id[4] = {31, 0, 0, 0};
            f.seekp(86);
            f.write(id, 4);
            const char len[4] = {static_cast<char>(words & 0xff), static_cast<char>(words >> 8 & 0xff),
                                 static_cast<char>(words >> 16 & 0xff), static_cast<char>(words >> 24 & 0xff)};
            f.seekp(131);
            f.write(len, 4);
        }
        PlannedRead planned = plan_read(dir);
        ASSERT_FALSE(planned.fatal);
        Analysis a;
        std::string why;
        EXPECT_FALSE(read_direct(planned.plan, dir.string(), a, nullptr, nullptr, why)) << words;
        EXPECT_NE(why.find("an event payload past its packet"), std::string::npos) << words << ": " << why;
        EXPECT_EQ(a.finish()["trace"]["events"].get<uint64_t>(), 0u);
        fs::remove_all(dir);
    }
}

// A copy of the records trace (in a fresh directory named after `name`) whose metadata has byte `value` at
// `offset` past the first `needle`; empty when the metadata has no `needle`.
fs::path copy_with_metadata_byte(const char* name, std::string_view needle, std::size_t offset, unsigned char value) {
    const fs::path dir = fs::temp_directory_path() / fmt::format("{}-{}", name, ::getpid());
    fs::remove_all(dir);
    fs::copy(kRecords, dir, fs::copy_options::recursive);
    std::fstream f(dir / "metadata", std::ios::in | std::ios::out | std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::size_t at = text.find(needle);
    if (at == std::string::npos) return {};
    f.seekp(static_cast<std::streamoff>(at + offset));
    f.put(static_cast<char>(value));
    return dir;
}

// An event class name damaged in the metadata (a flipped byte): its events are lost, not another provider's, so
// the read says it is incomplete and why, whichever reader reads it.
TEST(DamagedMetadata, AnEventClassWithADamagedNameMakesTheReadIncomplete) {
    EXPECT_TRUE(damaged_event_name("sigmat\xc5" "ace:post_send"));   // no tracepoint has such a name
    EXPECT_TRUE(damaged_event_name("sigmatsace:post_send"));          // ours, its provider changed by a byte
    EXPECT_TRUE(damaged_event_name("sigmatrace"));                    // not provider:event
    EXPECT_FALSE(damaged_event_name("lttng_ust_statedump:start"));    // another provider's
    EXPECT_FALSE(damaged_event_name("sigmatsace:not_one_of_ours"));
    EXPECT_EQ(printable_name("a\xc5:b"), "a\\xc5:b");

    // The 'r' of "sigmatrace".
    const fs::path dir = copy_with_metadata_byte("st-lttng-damaged-name", "\"sigmatrace:deferred_records\"", 7, 0xc5);
    ASSERT_FALSE(dir.empty());
    Analysis a;
    PlannedRead planned = plan_read(dir);
    ASSERT_FALSE(planned.fatal);
    const ReadSummary sum = read_planned(dir, planned, a, nullptr, nullptr);
    ASSERT_FALSE(sum.fatal);
    const auto doc = a.finish();
    EXPECT_FALSE(doc["trace"]["complete"].get<bool>());
    bool said = false;
    for (const auto& p : doc["trace"]["read_problems"])
        said |= p.get<std::string>().find("damaged name: event=\"sigmat\\xc5ace:deferred_records\"") != std::string::npos;
    EXPECT_TRUE(said) << doc["trace"]["read_problems"];
    fs::remove_all(dir);
}

// The event half of one of our names damaged to a byte that is not UTF-8: said printably, and the JSON document
// of the read is still written (a trace's strings are bytes: json_text writes an invalid one as U+FFFD).
TEST(DamagedMetadata, AnEventNameWithAByteThatIsNotUtf8StillGivesTheDocument) {
    // The 'd' of "destroy" becomes a UTF-8 lead byte, and 'e' is no continuation.
    const fs::path dir = copy_with_metadata_byte("st-lttng-damaged-event", "\"sigmatrace:qp_destroy\"", 15, 0xd7);
    ASSERT_FALSE(dir.empty());
    // The direct reader refuses the trace (its metadata is damaged) and the Babeltrace2 graph reads it; and that
    // reader alone.
    for (const char* reader : {"auto", "babeltrace"}) {
        SCOPED_TRACE(reader);
        ASSERT_EQ(::setenv("SIGMATRACE_ANALYZE_READER", reader, 1), 0);
        Analysis a;
        ASSERT_FALSE(read_traces(dir, a).fatal);
        const nlohmann::json doc = a.finish();
        EXPECT_FALSE(doc["trace"]["complete"].get<bool>());
        bool said = false;
        for (const auto& p : doc["trace"]["read_problems"])
            said |= p.get<std::string>().find("sigmatrace:qp_\\xd7estroy") != std::string::npos;
        EXPECT_TRUE(said) << json_text(doc["trace"]["read_problems"]);
        EXPECT_GT(doc["ops"]["total"].get<uint64_t>(), 0u);
    }
    ASSERT_EQ(::unsetenv("SIGMATRACE_ANALYZE_READER"), 0);
    // A string of the trace that is not UTF-8 (a process name in another locale) does not cost the document.
    EXPECT_THROW(static_cast<void>(nlohmann::json{{"procname", "caf\xe9"}}.dump()), nlohmann::json::type_error);
    EXPECT_EQ(json_text(nlohmann::json{{"procname", "caf\xe9"}}), "{\"procname\":\"caf\xef\xbf\xbd\"}");
    fs::remove_all(dir);
}

// Clock alignment's shift (clock_alignment.h, ClockCorrection): both readers move every time of a trace whose host
// was estimated, event timestamps and the records' capture times alike, by offset + drift x (t - t0); times
// within the host keep their differences (up to the drift's share).
TEST(ClockShift, BothReadersMoveEveryTimeOfTheEstimatedHost) {
    for (const char* reader : {"direct", "babeltrace"}) {
        SCOPED_TRACE(reader);
        ASSERT_EQ(::setenv("SIGMATRACE_ANALYZE_READER", reader, 1), 0);
        Analysis plain;
        ASSERT_FALSE(read_traces(kRecords, plain).fatal);
        const nlohmann::json p = plain.finish();
        const int64_t start = p["trace"]["start_ns"].get<int64_t>();
        const int64_t duration = p["trace"]["duration_ns"].get<int64_t>();

        ClockResult estimate;
        estimate.reference = "h0";
        estimate.at_ns = start;
        HostClock vm;
        vm.host = "vm";
        vm.status = HostClock::Status::estimated;
        vm.offset_ns = 1'500'000;
        vm.drift_ppm = 200;
        estimate.hosts = {vm};
        AnalysisOptions options;
        options.clock.applied = estimate;
        Analysis shifted(options);
        ASSERT_NE(shifted.clock_correction(), nullptr);
        ASSERT_FALSE(read_traces(kRecords, shifted).fatal);
        const nlohmann::json s = shifted.finish();

        // The earliest time is a capture time (records): moved by the offset alone (the drift counts from it).
        EXPECT_EQ(s["trace"]["start_ns"].get<int64_t>(), start - 1'500'000);
        // The trace's length, 1.47 s, shrinks by 200 ppm of itself.
        EXPECT_NEAR(static_cast<double>(s["trace"]["duration_ns"].get<int64_t>()), duration * (1 - 200e-6), 2.0);
        EXPECT_EQ(s["ops"]["total"], p["ops"]["total"]);
        EXPECT_EQ(s["ops"]["completed_bytes"], p["ops"]["completed_bytes"]);
        const auto p50 = [](const nlohmann::json& d) { return d["qps"][1]["latency_ns"]["p50"].get<double>(); };
        EXPECT_NEAR(p50(s), p50(p), 1 + p50(p) * 300e-6);
        EXPECT_TRUE(s["clock"]["aligned"].get<bool>());
        EXPECT_EQ(s["clock"]["at_ns"].get<int64_t>(), start);

        // A host the estimate could not place keeps its recorded times.
        estimate.hosts[0].status = HostClock::Status::contradictory;
        options.clock.applied = estimate;
        Analysis kept(options);
        EXPECT_EQ(kept.clock_correction(), nullptr);
        ASSERT_FALSE(read_traces(kRecords, kept).fatal);
        const nlohmann::json k = kept.finish();
        EXPECT_EQ(k["trace"]["start_ns"].get<int64_t>(), start);
        EXPECT_FALSE(k["clock"]["aligned"].get<bool>());
    }
    ::unsetenv("SIGMATRACE_ANALYZE_READER");
}
