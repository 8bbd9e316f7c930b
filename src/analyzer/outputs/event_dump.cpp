#include "analyzer/outputs/event_dump.h"

#include <sigmatrace/deferred_records.h>
#include <sigmatrace/deferred_records_wire.h>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>
#include <iterator>
#include <type_traits>

#include "analyzer/decode/schema_table.h"

namespace sigmatrace::analyzer {
namespace {

void append_int(std::string& out, uint64_t v, const FieldSchema& f) {
    if (f.hex) fmt::format_to(std::back_inserter(out), "{:#x}", v);
    else if (f.is_signed) fmt::format_to(std::back_inserter(out), "{}", static_cast<int64_t>(v));
    else fmt::format_to(std::back_inserter(out), "{}", v);
}

// A 32-bit signed field arrives zero- or sign-extended depending on its source; print it as its width says.
uint64_t as_width(uint64_t v, const FieldSchema& f) {
    if (!f.is_signed || f.bits >= 64 || f.bits == 0) return v;
    const uint64_t sign = uint64_t{1} << (f.bits - 1);
    const uint64_t mask = (uint64_t{1} << f.bits) - 1;
    v &= mask;
    return (v ^ sign) - sign;
}

}  // namespace

std::string format_event_line(const DecodedEvent& ev, bool from_record) {
    std::string out;
    auto it = std::back_inserter(out);
    const int64_t ns = ev.ts_ns;
    const std::time_t secs = static_cast<std::time_t>(ns >= 0 ? ns / 1'000'000'000 : (ns - 999'999'999) / 1'000'000'000);
    const int64_t frac = ns - static_cast<int64_t>(secs) * 1'000'000'000;
    std::tm tm{};
    gmtime_r(&secs, &tm);
    fmt::format_to(it, "[{:%Y-%m-%d %H:%M:%S}.{:09}] ", tm, frac);
    fmt::format_to(it, "{} {}[{}/{}] ", ev.trace_hostname.empty() ? "-" : ev.trace_hostname,
                   ev.procname.empty() ? "-" : ev.procname, ev.vpid, ev.vtid);
    const auto schemas = event_schemas();
    const auto id = static_cast<std::size_t>(ev.id);
    if (id >= schemas.size()) {
        out += "? {}";
        return out;
    }
    const EventSchema& schema = schemas[id];
    fmt::format_to(it, "sigmatrace:{} {{", schema.name);
    bool first = true;
    for (std::size_t i = 0; i < schema.fields.size() && i < ev.f.size(); ++i) {
        const FieldSchema& f = schema.fields[i];
        const FieldValue& v = ev.f[i];
        if (!v.present) continue;
        if (ev.id == EventId::deferred_records && static_cast<int>(i) == fields::deferred_records::words) continue;
        fmt::format_to(it, "{} {} = ", first ? "" : ",", f.name);
        first = false;
        switch (f.kind) {
        case FieldKind::String: fmt::format_to(it, "\"{}\"", v.s); break;
        case FieldKind::Integer: append_int(out, as_width(v.u, f), f); break;
        case FieldKind::Sequence:
            out += "[";
            for (uint32_t k = 0; k < v.seq_len; ++k) {
                out += k == 0 ? " " : ", ";
                append_int(out, as_width(v.seq[k], f), f);
            }
            out += v.seq_len == 0 ? "]" : " ]";
            break;
        }
    }
    out += first ? "}" : " }";
    if (from_record) out += " (record)";
    return out;
}

std::unique_ptr<EventDump> EventDump::open(const std::string& path) {
    if (path == "-") return std::make_unique<EventDump>(stdout);
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return nullptr;
    auto dump = std::make_unique<EventDump>(f);
    dump->owns_out_ = true;
    return dump;
}

EventDump::~EventDump() {
    if (owns_out_) std::fclose(out_);
}

bool EventDump::finish() {
    if (std::fflush(out_) != 0) ok_ = false;
    if (owns_out_) {
        owns_out_ = false;
        if (std::fclose(out_) != 0) ok_ = false;
        out_ = nullptr;
    }
    return ok_;
}

void EventDump::write_line(const DecodedEvent& ev, bool from_record) {
    if (!ok_) return;
    line_ = format_event_line(ev, from_record);
    line_ += '\n';
    if (std::fwrite(line_.data(), 1, line_.size(), out_) != line_.size()) ok_ = false;
    ++lines_;
}

template <typename Rec> void EventDump::write_record(const DecodedEvent& carrier, const Rec& rec) {
    // The record as the event immediate emission would have written for its call, field by field in schema
    // order, as a reader would decode it from a trace.
    DecodedEvent& e = call_;
    e.id = std::is_same_v<Rec, st_post_send_rec>      ? EventId::post_send
           : std::is_same_v<Rec, st_post_recv_rec>    ? EventId::post_recv
           : std::is_same_v<Rec, st_post_srq_recv_rec> ? EventId::post_srq_recv
           : std::is_same_v<Rec, st_gpu_wqe_rec>       ? EventId::gpu_wqe
                                                       : EventId::poll_cq;
    e.ts_ns = carrier.ts_ns;
    e.trace_index = carrier.trace_index;
    e.vpid = carrier.vpid;
    e.vtid = carrier.vtid;
    e.procname = carrier.procname;
    e.trace_hostname = carrier.trace_hostname;
    for (FieldValue& v : e.f) v = FieldValue{};
    std::size_t i = 0;
    records::visit_fields(
        rec,
        [&](const char*, auto value) {
            FieldValue& v = e.f[i++];
            v.present = true;
            if constexpr (std::is_signed_v<decltype(value)>) v.u = static_cast<uint64_t>(static_cast<int64_t>(value));
            else v.u = static_cast<uint64_t>(value);
        },
        [&](const char*, const auto* values) {
            auto& buf = seqs_[i];
            for (uint32_t k = 0; k < rec.n; ++k) buf[k] = static_cast<uint64_t>(values[k]);
            FieldValue& v = e.f[i++];
            v.present = true;
            v.is_sequence = true;
            v.seq = buf.data();
            v.seq_len = rec.n;
        });
    write_line(e, true);
}

void EventDump::on_event(const DecodedEvent& ev) {
    if (!ok_) return;
    if (ev.id == EventId::deferred_records) {
        // Each call the carrier holds, then the carrier: what babeltrace2 alone shows for the events format.
        namespace F = fields::deferred_records;
        const FieldValue& words = ev.f[F::words];
        if (records::layout_readable(ev.u(F::layout)))
            records::walk_records(
                words.seq, words.seq_len,
                [&](const records::RecordHeader& h) {
                    records::expand_record(h, scratch_, [&](const auto& rec) { write_record(ev, rec); });
                },
                [&ev](uint64_t t) { return ev.capture_time(t); });
    }
    write_line(ev, false);
}

}  // namespace sigmatrace::analyzer
