// Fuzz target for the event-handling layer: arbitrary bytes become a sequence of decoded events (any event id,
// any field values, sequences of any length disagreeing with `n`, strings, timestamps going backwards, capture
// times anywhere) fed through the element decoder and the reordering stage (which copies and holds events and
// elements when a process_info announces deferral or capture times say so) to an Analysis, then every output is rendered. The analysis must never crash, hang or leak, whatever it is fed.
//
// Built with libFuzzer by run_fuzzer.sh (clang++ -fsanitize=fuzzer,address,undefined); replayed over the
// committed corpus by every normal build (analyzer_fuzz_replay), so a regression shows without clang.
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

#include "analyzer/analyses/analysis.h"
#include "analyzer/outputs/ci_rules.h"
#include "analyzer/outputs/event_dump.h"
#include "analyzer/outputs/html_report.h"
#include "analyzer/outputs/json_text.h"
#include "analyzer/outputs/perfetto_writer.h"
#include <sigmatrace/deferred_records_wire.h>

#include "analyzer/decode/element_decoder.h"
#include "analyzer/decode/reorder_stage.h"
#include "analyzer/outputs/text_report.h"

namespace {

using namespace sigmatrace::analyzer;

class ByteReader {
public:
    ByteReader(const uint8_t* d, std::size_t n) : d_(d), n_(n) {}
    bool empty() const { return i_ >= n_; }
    uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
    uint64_t raw(int bytes) {
        uint64_t v = 0;
        for (int k = 0; k < bytes; ++k) v = (v << 8) | byte();
        return v;
    }
    // Mostly small values (so handles, QP numbers and wr_ids collide and objects connect), sometimes raw.
    uint64_t value() {
        const uint8_t sel = byte();
        if (sel < 200) return sel % 8;
        if (sel < 240) return raw(2);
        return raw(8);
    }

private:
    const uint8_t* d_;
    std::size_t n_;
    std::size_t i_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    ByteReader in(data, size);
    Analysis analysis;
    PerfettoWriter perfetto(analysis.topology(), 64);
    perfetto.open("/dev/null");
    analysis.add_listener(&perfetto);
    ReorderStage stage(analysis);
    // The element decoder in front of the stage, with --events' dump tapped in front of it, as in the
    // Babeltrace2 consumer.
    static std::FILE* const null_out = std::fopen("/dev/null", "w");
    EventDump dump(null_out);
    ElementDecoder decoder(stage);
    TeeSink tee(decoder);
    tee.set_tap(&dump);
    std::array<std::vector<uint64_t>, kMaxEventFields> seqs;
    std::vector<std::string> strings(kMaxEventFields);
    int64_t ts = 1000;
    const auto schemas = event_schemas();
    for (int events = 0; !in.empty() && events < 4096; ++events) {
        DecodedEvent ev;
        const uint8_t id = in.byte();
        ev.id = static_cast<sigmatrace::EventId>(id % (sigmatrace::kEventCount + 1));  // count_ = unknown event
        ts += static_cast<int64_t>(in.byte()) - 16;                                   // may go backwards
        ev.ts_ns = ts;
        ev.vpid = in.byte() % 4;
        ev.trace_index = in.byte() % 2;
        ev.trace_hostname = "fuzzhost";
        if (ev.id < sigmatrace::EventId::count_) {
            const EventSchema& es = schemas[static_cast<std::size_t>(ev.id)];
            for (std::size_t i = 0; i < es.fields.size(); ++i) {
                FieldValue& f = ev.f[i];
                f.present = in.byte() != 0xff;
                if (!f.present) continue;
                switch (es.fields[i].kind) {
                case FieldKind::Integer: f.u = in.value(); break;
                case FieldKind::String: {
                    strings[i].assign(in.byte() % 12, static_cast<char>('a' + in.byte() % 4));
                    f.s = strings[i];
                    break;
                }
                case FieldKind::Sequence: {
                    f.is_sequence = true;
                    const uint32_t len = in.byte() % 48;
                    seqs[i].resize(len);
                    for (uint32_t k = 0; k < len; ++k) seqs[i][k] = in.value();
                    f.seq = seqs[i].data();
                    f.seq_len = len;
                    break;
                }
                }
            }
        }
        // A deferred_records event of the known layout half the time: its words are then walked as records.
        if (ev.id == sigmatrace::EventId::deferred_records && (in.byte() & 1) != 0)
            ev.f[fields::deferred_records::layout].u = sigmatrace::records::kLayout;
        tee.on_event(ev);
        if (in.byte() == 0xfe) {
            DiscardRecord d;
            d.count = in.value();
            analysis.on_discarded(d);
        }
    }
    stage.finish();
    nlohmann::json doc = analysis.finish();
    perfetto.close();
    (void)render_text_report(doc);
    (void)render_html_report(doc, std::nullopt);
    (void)render_html_report(doc, std::string("/* charting library */"));
    (void)json_text(doc, 2);   // as the tools write it
    std::string err;
    for (const char* rule : {"p99>1us", "skew>1.5", "increase(p99)>20%", "findings[error_storm]>0"}) {
        auto r = parse_rule(rule, err);
        if (r) (void)evaluate_rule(*r, doc, &doc);
    }
    return 0;
}
