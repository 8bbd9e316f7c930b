#include "analyzer/decode/lttng_stream_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <queue>

#include "analyzer/decode/element_decoder.h"
#include "analyzer/decode/lttng_tsdl.h"
#include "analyzer/decode/read_guard.h"
#include "analyzer/decode/reorder_stage.h"
#include "analyzer/decode/unread_fields.h"
#include "sigmatrace/deferred_records_wire.h"
#include "sigmatrace/lttng_packet_layout.h"

namespace sigmatrace::analyzer {

namespace fs = std::filesystem;

ReaderChoice reader_choice_from_env() {
    const char* v = std::getenv("SIGMATRACE_ANALYZE_READER");
    if (v == nullptr || *v == '\0' || std::string_view(v) == "auto") return ReaderChoice::Auto;
    if (std::string_view(v) == "babeltrace") return ReaderChoice::Babeltrace;
    if (std::string_view(v) == "direct") return ReaderChoice::Direct;
    fmt::print(stderr, "sigmatrace-analyze: Ignoring SIGMATRACE_ANALYZE_READER={}: expected auto, babeltrace or direct\n", v);
    return ReaderChoice::Auto;
}

bool plan_is_pristine(const ReadPlan& plan) {
    if (!plan.problems.empty()) return false;
    for (const TracePlan& t : plan.traces) {
        if (!t.readable || t.needs_copy()) return false;
        for (const StreamPlan& s : t.streams)
            if (!s.layout_known || s.excluded || s.skipped_any) return false;
    }
    return true;
}

namespace {

struct Refused {
    std::string why;
};
[[noreturn]] void refuse_stream(std::string why) { throw Refused{std::move(why)}; }

// lttng-ust's packet header and context (lttng_tsdl.cpp checks the metadata declares exactly these).
using lttng_packet::kOffContent;
using lttng_packet::kOffDiscarded;
using lttng_packet::kOffInstance;
using lttng_packet::kOffSeqNum;
using lttng_packet::kOffStreamId;
using lttng_packet::kOffTsBegin;
using lttng_packet::kOffTsEnd;
using lttng_packet::kHeaderBytes;

uint64_t le(const uint8_t* p, unsigned bytes) {
    // Little-endian host (checked at build time below). Every member of our events is 1, 2, 4 or 8 bytes wide:
    // the record format's fixed-width loads, one move each (a copy of a width known only at run time is a call).
    namespace W = records::wire_detail;
    const auto* b = reinterpret_cast<const std::byte*>(p);
    switch (bytes) {
    case 1: return W::load<1>(b);
    case 2: return W::load<2>(b);
    case 4: return W::load<4>(b);
    case 8: return W::load<8>(b);
    default: {
        uint64_t v = 0;
        std::memcpy(&v, p, bytes);
        return v;
    }
    }
}
static_assert(std::endian::native == std::endian::little, "the direct reader reads little-endian traces in place");

// A stream file read one packet at a time into a buffer of this stream's own (reused from packet to packet):
// memory follows the packet size, not the trace length, and no page of the file is mapped into the process.
class StreamFile {
public:
    explicit StreamFile(const fs::path& p) : path_(p) {
        fd_ = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd_ < 0) refuse_stream(fmt::format("cannot open {}", p.string()));
        struct stat st {};
        if (::fstat(fd_, &st) != 0) {
            ::close(fd_);
            refuse_stream(fmt::format("cannot stat {}", p.string()));
        }
        size_ = static_cast<uint64_t>(st.st_size);
    }
    ~StreamFile() { ::close(fd_); }
    StreamFile(const StreamFile&) = delete;
    StreamFile& operator=(const StreamFile&) = delete;
    uint64_t size() const { return size_; }
    // The bytes [begin, end) of the file, valid until the next read().
    const uint8_t* read(uint64_t begin, uint64_t end) {
        if (end > size_ || end < begin) refuse_stream(fmt::format("a packet beyond its file: {}", path_.string()));
        const uint64_t n = end - begin;
        if (capacity_ < n) {
            // Not value-initialized: pread fills it (a packet is megabytes; zeroing it first cost as much as
            // reading it).
            buf_.reset(new uint8_t[n]);
            capacity_ = n;
        }
        uint64_t done = 0;
        while (done < n) {
            const ssize_t r = ::pread(fd_, buf_.get() + done, n - done, static_cast<off_t>(begin + done));
            if (r <= 0) refuse_stream(fmt::format("cannot read {} at {}", path_.string(), begin + done));
            done += static_cast<uint64_t>(r);
        }
        return buf_.get();
    }

private:
    fs::path path_;
    int fd_ = -1;
    uint64_t size_ = 0;
    std::unique_ptr<uint8_t[]> buf_;
    uint64_t capacity_ = 0;
};

// The most members a stream's event context and an event's payload may have (lttng-ust writes 3 and at most
// about 30): decode_struct keeps their integers on the stack, each stream its next event's members (Stream).
constexpr std::size_t kMaxContextFields = 16, kMaxPayloadFields = 64;

// A decoded member of a structure: an integer's value, or where an array's, sequence's or string's bytes are.
struct Slot {
    uint64_t u = 0;
    const uint8_t* p = nullptr;
    uint32_t n = 0;   // elements (bytes of a string, up to its NUL)
};

// A structure member as decode_struct reads it: what its CtfField says, small and worked out once per class
// (every event reads every member of its context and payload).
struct MemberPlan {
    CtfFieldKind kind = CtfFieldKind::Int;
    uint8_t bytes = 0;        // an integer's width, or an array's or sequence's element's (bits / 8)
    uint8_t align_mask = 0;   // its alignment in bytes, less one
    uint8_t sign_shift = 0;   // a signed integer narrower than 64 bits: 64 - bits (int_at's sign extension)
    int32_t length_field = -1;
    uint32_t length = 0;
    // The first of a stretch of fixed-size members on byte alignment (integers, arrays; lttng-ust writes its
    // structures packed): how many there are and their bytes, checked against the content once. 0: none.
    uint32_t stretch_members = 0;
    uint64_t stretch_bytes = 0;
    bool stretch_has_length = false;   // the stretch holds a sequence's length (is_length)
    bool is_length = false;            // a later sequence's length
    uint64_t at = 0;                   // a stretch member's offset from its stretch's start

    // An integer member's (or a sequence element's) value from its `bytes` little-endian bytes at `p`.
    uint64_t int_at(const uint8_t* p) const {
        const uint64_t v = le(p, bytes);
        return sign_shift != 0 ? static_cast<uint64_t>(static_cast<int64_t>(v << sign_shift) >> sign_shift) : v;
    }
    // The bytes a fixed-size member (integer, array) takes.
    uint64_t fixed_size() const { return kind == CtfFieldKind::Int ? bytes : uint64_t{length} * bytes; }
};

std::vector<MemberPlan> plan_of(const std::vector<CtfField>& fields) {
    std::vector<MemberPlan> plan;
    plan.reserve(fields.size());
    for (const CtfField& f : fields)
        plan.push_back(MemberPlan{f.kind, static_cast<uint8_t>(f.type.bits / 8), static_cast<uint8_t>(f.type.align / 8 - 1),
                                  static_cast<uint8_t>(f.type.is_signed && f.type.bits < 64 ? 64 - f.type.bits : 0),
                                  f.length_field, f.length});
    for (const MemberPlan& m : plan)
        if (m.kind == CtfFieldKind::Sequence && m.length_field >= 0 && static_cast<std::size_t>(m.length_field) < plan.size())
            plan[static_cast<std::size_t>(m.length_field)].is_length = true;
    const auto fixed = [](const MemberPlan& m) {
        return m.align_mask == 0 && (m.kind == CtfFieldKind::Int || m.kind == CtfFieldKind::Array);
    };
    for (std::size_t i = 0; i < plan.size(); ++i) {
        if (!fixed(plan[i])) continue;
        MemberPlan& head = plan[i];
        const std::size_t first = i;
        for (; i < plan.size() && fixed(plan[i]); ++i) {
            plan[i].at = head.stretch_bytes;
            head.stretch_bytes += plan[i].fixed_size();
            head.stretch_has_length = head.stretch_has_length || plan[i].is_length;
        }
        head.stretch_members = static_cast<uint32_t>(i - first);
        --i;   // the member after the stretch is looked at by the loop's next step
    }
    return plan;
}

// Decodes the members planned in `plan` from packet bytes `pkt` at byte `pos` (content ends at `end`), into `out`
// (kSlots; else only checks that they fit, reading just the sequences' lengths: the first pass). False when a
// member does not fit in the content.
template <bool kSlots>
bool decode_struct(const std::vector<MemberPlan>& plan, const uint8_t* pkt, uint64_t& pos_io, uint64_t end, Slot* out) {
    std::array<uint64_t, kMaxPayloadFields> ints;   // written before read: a length member comes before its sequence
    // Locals: `out` could alias the members and the position, which would then be reloaded after every store.
    const MemberPlan* const members = plan.data();
    const std::size_t count = plan.size();
    uint64_t pos = pos_io;
    if (count > ints.size()) return false;
    for (std::size_t i = 0; i < count; ++i) {
        if (const uint32_t stretch = members[i].stretch_members; stretch != 0) {
            if (pos > end || end - pos < members[i].stretch_bytes) return false;
            if constexpr (!kSlots) {
                if (members[i].stretch_has_length)
                    for (std::size_t k = i; k < i + stretch; ++k)
                        if (members[k].is_length) ints[k] = members[k].int_at(pkt + pos + members[k].at);
                pos += members[i].stretch_bytes;
                i += stretch - 1;
                continue;
            }
            for (const std::size_t last = i + stretch - 1;; ++i) {
                const MemberPlan& f = members[i];
                if (f.kind == CtfFieldKind::Int) {
                    const uint64_t v = f.int_at(pkt + pos);
                    ints[i] = v;
                    out[i] = Slot{v, nullptr, 0};
                    pos += f.bytes;
                } else {
                    out[i] = Slot{0, pkt + pos, f.length};
                    pos += f.fixed_size();
                }
                if (i == last) break;
            }
            continue;
        }
        const MemberPlan f = members[i];
        if (f.kind == CtfFieldKind::String) {
            if (pos >= end) return false;
            const void* nul = std::memchr(pkt + pos, 0, end - pos);
            if (nul == nullptr) return false;
            const uint64_t len = static_cast<uint64_t>(static_cast<const uint8_t*>(nul) - (pkt + pos));
            if constexpr (kSlots) out[i] = Slot{0, pkt + pos, static_cast<uint32_t>(len)};
            pos += len + 1;
            continue;
        }
        pos = (pos + f.align_mask) & ~uint64_t{f.align_mask};
        const uint64_t bytes = f.bytes;
        if (f.kind == CtfFieldKind::Int) {
            if (pos > end || end - pos < bytes) return false;
            const uint64_t v = f.int_at(pkt + pos);
            ints[i] = v;
            if constexpr (kSlots) out[i] = Slot{v, nullptr, 0};
            pos += bytes;
            continue;
        }
        const uint64_t n = f.kind == CtfFieldKind::Array ? f.length : ints[static_cast<std::size_t>(f.length_field)];
        if (pos > end || n > (end - pos) / bytes) return false;
        if constexpr (kSlots) out[i] = Slot{0, pkt + pos, static_cast<uint32_t>(n)};
        pos += n * bytes;
    }
    pos_io = pos;
    return true;
}

// ns from origin of clock value `v` as Babeltrace2 computes it (1 GHz): fails where it reports an overflow.
bool clock_ns(int64_t origin, uint64_t v, int64_t& ns) {
    if (v >= static_cast<uint64_t>(INT64_MAX)) return false;
    return !__builtin_add_overflow(origin, static_cast<int64_t>(v), &ns);
}

// A trace's clock as the analysis sees it: ns from origin, moved onto the reference host's clock when the
// analysis aligns clocks (Analysis::clock_correction).
struct TraceClock {
    int64_t origin = 0;                 // ns from origin of cycle 0
    const ClockShift* shift = nullptr;  // null: times as recorded
};

// A capture time (the tracer's CLOCK_MONOTONIC ns = clock cycles) as ns from origin, as BtMessageConsumer
// converts it: 0 stays 0, what cannot be converted or lands at or before the origin becomes 0.
uint64_t capture_ns(const void* ctx, uint64_t cycles) {
    const TraceClock& c = *static_cast<const TraceClock*>(ctx);
    const uint64_t ns = capture_ns_from_origin(c.origin, cycles);
    if (ns == 0 || c.shift == nullptr) return ns;
    const int64_t moved = c.shift->to_reference(static_cast<int64_t>(ns));
    return moved > 0 ? static_cast<uint64_t>(moved) : 0;
}

enum class Kind : uint8_t { Absent, Unsigned, Signed, String, SeqUnsigned, SeqSigned, SeqUnread };

// How a CTF event class becomes a DecodedEvent (BtMessageConsumer::ClassInfo's counterpart).
struct EventMap {
    const CtfEventClass* ec = nullptr;
    const EventSchema* schema = nullptr;   // nullptr: another provider's event
    std::array<int, kMaxEventFields> member{};
    std::array<Kind, kMaxEventFields> kind{};
    int ts_field = -1;
    std::vector<MemberPlan> plan;          // the payload's members, as decode_struct reads them
};

struct Trace {
    fs::path dir;
    CtfTraceLayout layout;
    std::string name;                   // Babeltrace's trace name: the hostname, "" without one
    std::vector<EventMap> events;       // parallel to layout.events
    // Per stream class (parallel to layout.streams): where its event context holds the process's identity.
    struct ContextSlots {
        int64_t vpid = -1, vtid = -1, procname = -1;
        std::vector<MemberPlan> plan;      // the event context's members, as decode_struct reads them
    };
    std::vector<ContextSlots> slots;
    int64_t index = -1;                 // assigned when its first event or discard is delivered
    TraceClock clock;
};

struct Message {
    enum Type : uint8_t { None, Event, Discard } type = None;
    int64_t ns = 0;
    // Event
    const EventMap* em = nullptr;
    // Discard
    uint64_t count = 0;
    int64_t begin_ns = 0, end_ns = 0;
};

struct Stream {
    Trace* trace = nullptr;
    const CtfStreamClass* sc = nullptr;
    const Trace::ContextSlots* slots = nullptr;   // its stream class's
    const std::vector<PacketRange>* packets = nullptr;
    std::unique_ptr<StreamFile> file;
    std::string name;         // the file's absolute path (Babeltrace's stream name)
    uint64_t instance = 0;
    std::size_t rank = 0;     // the muxer's tie order
    bool setup_only = false;  // its class declares no data-path event (DiscardRecord::setup_only)

    // Cursor.
    std::size_t packet = 0;   // next packet to open when pkt == nullptr
    const uint8_t* pkt = nullptr;
    uint64_t pos = 0, end = 0;
    uint64_t clock = 0;
    uint64_t begin_cycles = 0, end_cycles = 0;
    uint64_t prev_discarded = 0, prev_end_cycles = 0;
    bool have_prev = false;
    int64_t last_ns = INT64_MIN;
    uint64_t expected_seq = 0;
    Message next;
    // The class of the last event id read (its stream class's), and that id.
    uint64_t last_id = 0;
    const CtfEventClass* last_class = nullptr;
    // The next event's context and payload members, decoded where advance() finds its end: they point into the
    // packet, which stays this stream's until the event is taken (the next advance()).
    std::vector<Slot> context_slots = std::vector<Slot>(kMaxContextFields);
    std::vector<Slot> payload_slots = std::vector<Slot>(kMaxPayloadFields);

    void reset() {
        packet = 0;
        pkt = nullptr;
        have_prev = false;
        last_ns = INT64_MIN;
        next = Message{};
    }
};

int64_t to_ns(const Trace& t, uint64_t cycles, const char* what) {
    int64_t ns = 0;
    if (!clock_ns(t.layout.clock_origin_ns, cycles, ns))
        refuse_stream(fmt::format("a {} clock value {} that overflows ns from origin", what, cycles));
    return t.clock.shift ? t.clock.shift->to_reference(ns) : ns;
}

// Moves `s` to its next message (event or discard) in `s.next`; Message::None at its end. Refuses what it
// cannot read exactly.
template <bool kSlots> void advance(Stream& s) {
    const Trace& t = *s.trace;
    for (;;) {
        if (s.pkt == nullptr) {
            if (s.packet >= s.packets->size()) {
                s.next = Message{};
                return;
            }
            const PacketRange& r = (*s.packets)[s.packet++];
            if (r.end > s.file->size() || r.end < r.begin || r.end - r.begin < kHeaderBytes) refuse_stream("a packet beyond its file");
            const uint8_t* p = s.file->read(r.begin, r.end);
            if (le(p + kOffStreamId, 4) != s.sc->id || le(p + kOffInstance, 8) != s.instance)
                refuse_stream(fmt::format("two streams in one file: {}", s.name));
            const uint64_t content = le(p + kOffContent, 8);
            if (content % 8 != 0 || content / 8 > r.end - r.begin || content / 8 < kHeaderBytes)
                refuse_stream(fmt::format("a packet content size of {} bits", content));
            const uint64_t seq = le(p + kOffSeqNum, 8);
            if (s.have_prev && seq != s.expected_seq) refuse_stream(fmt::format("a packet sequence gap in {} (discarded packets)", s.name));
            s.expected_seq = seq + 1;
            s.begin_cycles = le(p + kOffTsBegin, 8);
            s.end_cycles = le(p + kOffTsEnd, 8);
            const uint64_t discarded = le(p + kOffDiscarded, 8);
            const int64_t begin_ns = to_ns(t, s.begin_cycles, "packet");
            const int64_t end_ns = to_ns(t, s.end_cycles, "packet");
            if (end_ns < begin_ns || (s.have_prev && begin_ns < to_ns(t, s.prev_end_cycles, "packet")))
                refuse_stream(fmt::format("packet times going backwards in {}", s.name));
            Message m;
            if (!s.have_prev && discarded != 0) {
                m.type = Message::Discard;
                m.ns = m.begin_ns = begin_ns;
                m.end_ns = end_ns;
                m.count = 0;   // before this packet: Babeltrace gives no count
            } else if (s.have_prev && discarded != s.prev_discarded) {
                if (discarded < s.prev_discarded) refuse_stream(fmt::format("an events_discarded counter going back in {}", s.name));
                m.type = Message::Discard;
                m.ns = m.begin_ns = to_ns(t, s.prev_end_cycles, "packet");
                m.end_ns = end_ns;
                m.count = discarded - s.prev_discarded;
            }
            s.have_prev = true;
            s.prev_discarded = discarded;
            s.prev_end_cycles = s.end_cycles;
            s.pkt = p;
            s.pos = kHeaderBytes;
            s.end = content / 8;
            s.clock = s.begin_cycles;
            if (begin_ns < s.last_ns) refuse_stream(fmt::format("stream times going backwards in {}", s.name));
            s.last_ns = begin_ns;
            if (m.type == Message::Discard) {
                s.next = m;
                return;
            }
        }
        if (s.pos >= s.end) {
            if (s.pos > s.end) refuse_stream("an event past its packet's content");
            const int64_t end_ns = to_ns(t, s.end_cycles, "packet");
            if (end_ns < s.last_ns) refuse_stream(fmt::format("an event after its packet's end in {}", s.name));
            s.last_ns = end_ns;
            s.pkt = nullptr;
            continue;
        }
        // Event header (aligned on a byte: align(8) bits).
        const uint8_t* p = s.pkt;
        uint64_t pos = s.pos;
        uint64_t id = 0;
        const auto update = [&](uint64_t v, unsigned bits) {
            const uint64_t mask = (uint64_t{1} << bits) - 1;
            if (v < (s.clock & mask)) s.clock += mask + 1;
            s.clock = (s.clock & ~mask) | v;
        };
        const auto need = [&](uint64_t bytes) {
            if (pos > s.end || s.end - pos < bytes) refuse_stream(fmt::format("an event header past its packet's content in {}", s.name));
        };
        bool extended = false;
        if (s.sc->large_header) {
            need(2);
            id = le(p + pos, 2);
            pos += 2;
            if (id == 65535) {
                extended = true;
            } else {
                need(4);
                update(le(p + pos, 4), 32);
                pos += 4;
            }
        } else {
            need(4);
            const uint64_t w = le(p + pos, 4);
            id = w & 31;
            if (id == 31) {
                pos += 1;
                extended = true;
            } else {
                update(w >> 5, 27);
                pos += 4;
            }
        }
        if (extended) {
            need(12);
            id = le(p + pos, 4);
            s.clock = le(p + pos + 4, 8);
            pos += 12;
        }
        if (id != s.last_id || s.last_class == nullptr) {   // a stream mostly repeats its event class
            s.last_class = t.layout.event(s.sc->id, id);
            s.last_id = id;
        }
        const CtfEventClass* ec = s.last_class;
        if (ec == nullptr) refuse_stream(fmt::format("an event of unknown id {} in {}", id, s.name));
        Message m;
        m.type = Message::Event;
        m.ns = to_ns(t, s.clock, "event");
        if (m.ns < s.last_ns) refuse_stream(fmt::format("event times going backwards in {}", s.name));
        s.last_ns = m.ns;
        m.em = &t.events[static_cast<std::size_t>(ec - t.layout.events.data())];
        if (!decode_struct<kSlots>(s.slots->plan, p, pos, s.end, s.context_slots.data()))
            refuse_stream(fmt::format("an event context past its packet in {}", s.name));
        if (!decode_struct<kSlots>(m.em->plan, p, pos, s.end, s.payload_slots.data()))
            refuse_stream(fmt::format("an event payload past its packet in {}", s.name));
        s.pos = pos;
        s.next = m;
        return;
    }
}

std::string read_metadata_text(const fs::path& dir) {
    std::ifstream in(dir / "metadata", std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const MetadataCheck m = check_metadata(bytes.data(), bytes.size());
    if (!m.ok) refuse_stream(fmt::format("metadata of {}: {}", dir.string(), m.problem));
    if (!m.lttng_layout) refuse_stream(fmt::format("metadata of {}: not lttng-ust's packet layout", dir.string()));
    return m.text;
}

// The mapping of each event class to the schema (BtMessageConsumer::class_info's rules, refusing where that
// reports a problem).
void map_events(Trace& t, bool read_every_field) {
    t.events.resize(t.layout.events.size());
    for (std::size_t e = 0; e < t.layout.events.size(); ++e) {
        const CtfEventClass& ec = t.layout.events[e];
        EventMap& m = t.events[e];
        m.ec = &ec;
        m.plan = plan_of(ec.fields);
        m.member.fill(-1);
        m.kind.fill(Kind::Absent);
        m.schema = find_event_schema(ec.name);
        if (m.schema == nullptr) {
            if (std::string_view(ec.name).starts_with("sigmatrace:"))
                refuse_stream(fmt::format("the event class {} that this SigmaTrace does not know", ec.name));
            if (damaged_event_name(ec.name)) refuse_stream("an event class with a damaged name");
            continue;
        }
        for (std::size_t i = 0; i < m.schema->fields.size(); ++i) {
            const FieldSchema& fs = m.schema->fields[i];
            int idx = -1;
            for (std::size_t k = 0; k < ec.fields.size(); ++k)
                if (ec.fields[k].name == fs.name) idx = static_cast<int>(k);
            if (idx < 0) continue;
            const CtfField& f = ec.fields[static_cast<std::size_t>(idx)];
            Kind k = Kind::Absent;
            if (fs.kind == FieldKind::Integer && f.kind == CtfFieldKind::Int) k = f.type.is_signed ? Kind::Signed : Kind::Unsigned;
            else if (fs.kind == FieldKind::String && (f.kind == CtfFieldKind::String || f.is_text())) k = Kind::String;
            else if (fs.kind == FieldKind::Sequence && (f.kind == CtfFieldKind::Array || f.kind == CtfFieldKind::Sequence) && !f.is_text())
                k = f.type.is_signed ? Kind::SeqSigned : Kind::SeqUnsigned;
            if (k == Kind::Absent)
                refuse_stream(fmt::format("the field {} of {} has another type than the schema's", fs.name, ec.name));
            if ((k == Kind::SeqSigned || k == Kind::SeqUnsigned) && !read_every_field &&
                is_unread_sequence(m.schema->id, static_cast<int>(i)))
                k = Kind::SeqUnread;
            m.member[i] = idx;
            m.kind[i] = k;
            if (capture_fields(m.schema->id).ts == static_cast<int>(i)) m.ts_field = static_cast<int>(i);
        }
    }
}

class DirectReader {
public:
    DirectReader(Analysis& analysis, EventSink* tap) : analysis_(analysis), read_every_field_(tap != nullptr) { tee_.set_tap(tap); }

    void open(const ReadPlan& plan) {
        for (const TracePlan& tp : plan.traces) {
            auto t = std::make_unique<Trace>();
            t->dir = tp.dir;
            std::string why;
            auto layout = parse_lttng_tsdl(read_metadata_text(tp.dir), why);
            if (!layout) refuse_stream(fmt::format("metadata of {}: {}", tp.dir.string(), why));
            t->layout = std::move(*layout);
            t->name = t->layout.hostname;
            t->clock.origin = t->layout.clock_origin_ns;
            if (const ClockCorrection* c = analysis_.clock_correction()) t->clock.shift = c->find(t->layout.hostname);
            for (const auto& o : traces_)
                if (std::memcmp(o->layout.uuid, t->layout.uuid, 16) == 0) refuse_stream("two trace directories with one UUID");
            // One stream class per channel (sigmatrace record's: the set-up channel and the data channel).
            for (const CtfStreamClass& sc : t->layout.streams) {
                Trace::ContextSlots& slot = t->slots.emplace_back();
                const auto& ctx = sc.context;
                for (std::size_t k = 0; k < ctx.size(); ++k) {
                    if (ctx[k].name == "vpid" && ctx[k].kind == CtfFieldKind::Int) slot.vpid = static_cast<int64_t>(k);
                    if (ctx[k].name == "vtid" && ctx[k].kind == CtfFieldKind::Int) slot.vtid = static_cast<int64_t>(k);
                    if (ctx[k].name == "procname" && (ctx[k].kind == CtfFieldKind::String || ctx[k].is_text()))
                        slot.procname = static_cast<int64_t>(k);
                }
                if (ctx.size() > kMaxContextFields) refuse_stream(fmt::format("an event context of {} members", ctx.size()));
                slot.plan = plan_of(ctx);
            }
            for (const CtfEventClass& ec : t->layout.events)
                if (ec.fields.size() > kMaxPayloadFields)
                    refuse_stream(fmt::format("the event class {} with {} fields", ec.name, ec.fields.size()));
            map_events(*t, read_every_field_);
            // A share (analysis.h, set_share) reads another host's trace for its set-up events only: a stream
            // class that declares none (the data channel of sigmatrace record's traces) is left unread.
            // A stream class that declares no data-path event is the set-up channel (its loss is told apart).
            std::vector<bool> setup_class(t->layout.streams.size(), false), data_class(t->layout.streams.size(), false);
            for (const EventMap& m : t->events)
                if (m.schema != nullptr)
                    if (const CtfStreamClass* sc = t->layout.stream(m.ec->stream_id))
                        (carries_data_path(m.schema->id) ? data_class : setup_class)[static_cast<std::size_t>(sc - t->layout.streams.data())] = true;
            const bool owned = analysis_.owns_host(t->layout.hostname);
            const fs::path abs = fs::absolute(tp.dir).lexically_normal();
            for (const StreamPlan& sp : tp.streams) {
                if (sp.packets.empty()) continue;
                auto s = std::make_unique<Stream>();
                s->trace = t.get();
                s->packets = &sp.packets;
                s->file = std::make_unique<StreamFile>(sp.file);
                s->name = (abs / sp.file.filename()).string();
                const PacketRange& first = sp.packets.front();
                if (first.end > s->file->size() || first.end < first.begin || first.end - first.begin < kHeaderBytes)
                    refuse_stream("a packet beyond its file");
                const uint8_t* header = s->file->read(first.begin, first.begin + kHeaderBytes);
                s->sc = t->layout.stream(le(header + kOffStreamId, 4));
                if (s->sc == nullptr) refuse_stream(fmt::format("a packet of an undeclared stream class in {}", s->name));
                const auto sc_index = static_cast<std::size_t>(s->sc - t->layout.streams.data());
                s->slots = &t->slots[sc_index];
                if (!owned && !setup_class[sc_index]) continue;
                s->setup_only = setup_class[sc_index] && !data_class[sc_index];
                s->instance = le(header + kOffInstance, 8);
                for (const auto& o : streams_)
                    if (o->trace == t.get() && o->sc == s->sc && o->instance == s->instance)
                        refuse_stream("two stream files of one stream");
                streams_.push_back(std::move(s));
            }
            traces_.push_back(std::move(t));
        }
        // The muxer's tie order: trace UUID, trace name, stream class id, stream id.
        std::vector<Stream*> order;
        for (auto& s : streams_) order.push_back(s.get());
        std::sort(order.begin(), order.end(), [](const Stream* a, const Stream* b) {
            const int u = std::memcmp(a->trace->layout.uuid, b->trace->layout.uuid, 16);
            if (u != 0) return u < 0;
            if (a->trace->name != b->trace->name) return a->trace->name < b->trace->name;
            if (a->sc->id != b->sc->id) return a->sc->id < b->sc->id;
            return a->instance < b->instance;
        });
        for (std::size_t i = 0; i < order.size(); ++i) order[i]->rank = i;
    }

    // The first pass: every stream decodes to its end (refusing what it cannot read), nothing handed over.
    // Its progress counts for the guard's watchdog like the second pass's.
    void validate(ReadProgress* progress) {
        for (auto& s : streams_) {
            // A share (analysis.h, set_share) validates its own hosts' streams: every stream is some share's, and a
            // share refusing makes the trace read whole.
            if (!analysis_.owns_host(s->trace->layout.hostname)) continue;
            s->reset();
            do {
                advance<false>(*s);
                if (progress) progress->beat();
            } while (s->next.type != Message::None);
            s->reset();
        }
    }

    // The second pass. Every read here already succeeded in the first; a stream file that changed in between
    // (a trace still being written) stops the read where it fails, keeping what was read, as a Babeltrace2
    // read error does.
    ReadSummary run(ReadProgress* progress, const std::string& root) {
        ReadSummary sum;
        try {
            merge(progress);
        } catch (const Refused& r) {
            sum.problems.push_back(fmt::format(
                "Trace read stopped early: path={}, last event at {} ns, reason={} (did the trace change while it was "
                "read?); results cover the trace up to there",
                root, last_ts_, r.why));
        }
        reorder_.finish();
        sum.traces_opened = traces_.size();
        sum.events = events_read_;
        sum.foreign_events = foreign_events_;
        return sum;
    }

private:
    void merge(ReadProgress* progress) {
        auto later = [](const Stream* a, const Stream* b) {
            return a->next.ns != b->next.ns ? a->next.ns > b->next.ns : a->rank > b->rank;
        };
        std::priority_queue<Stream*, std::vector<Stream*>, decltype(later)> heap(later);
        for (auto& s : streams_) {
            advance<true>(*s);
            if (s->next.type != Message::None) heap.push(s.get());
        }
        while (!heap.empty()) {
            Stream* s = heap.top();
            heap.pop();
            if (s->next.type == Message::Event) on_event(*s);
            else on_discard(*s);
            if (progress) progress->beat();
            advance<true>(*s);
            if (s->next.type != Message::None) heap.push(s);
        }
        // Each stream's last packet end: when its recording stopped or rotated, even if its process was silent.
        for (auto& s : streams_) analysis_.on_recorded_until(s->last_ns);
    }

    uint32_t trace_index(Trace& t) {
        if (t.index < 0) {
            t.index = next_trace_index_++;
            analysis_.owns(static_cast<uint32_t>(t.index), t.layout.hostname);   // a share learns the trace's host
        }
        return static_cast<uint32_t>(t.index);
    }

    void on_discard(Stream& s) {
        DiscardRecord d;
        d.trace_index = trace_index(*s.trace);
        d.trace = s.trace->name;
        d.packets = false;
        d.setup_only = s.setup_only;
        d.stream = display_path(s.name);
        d.count = s.next.count;
        d.begin_ns = s.next.begin_ns;
        d.end_ns = s.next.end_ns;
        analysis_.on_discarded(d);
    }

    // The stream name as BtMessageConsumer shows it: relative to the working directory when below it.
    static std::string display_path(const std::string& name) {
        std::error_code ec;
        const fs::path rel = fs::path(name).lexically_relative(fs::current_path(ec));
        if (ec || rel.empty() || *rel.begin() == "..") return name;
        return rel.string();
    }

    void on_event(Stream& s) {
        ++events_read_;
        const Message& m = s.next;
        const EventMap& em = *m.em;
        if (em.schema == nullptr) {
            ++foreign_events_;
            return;
        }
        Trace& t = *s.trace;
        DecodedEvent& ev = ev_;
        ev.id = em.schema->id;
        ev.trace_index = trace_index(t);
        // A share of the trace (analysis.h, set_share) reads only its own traces' data events.
        if (carries_data_path(ev.id) && !analysis_.owns(ev.trace_index, t.layout.hostname)) return;
        ev.trace_hostname = t.layout.hostname;
        ev.ts_ns = m.ns;
        last_ts_ = std::max(last_ts_, ev.ts_ns);
        ev.vpid = ev.vtid = -1;
        ev.procname = {};
        if (!s.sc->context.empty()) {
            const std::vector<Slot>& ctx = s.context_slots;
            const Trace::ContextSlots& slot = *s.slots;
            if (slot.vpid >= 0) ev.vpid = static_cast<int64_t>(ctx[static_cast<std::size_t>(slot.vpid)].u);
            if (slot.vtid >= 0) ev.vtid = static_cast<int64_t>(ctx[static_cast<std::size_t>(slot.vtid)].u);
            if (slot.procname >= 0)
                ev.procname = text(s.sc->context[static_cast<std::size_t>(slot.procname)], ctx[static_cast<std::size_t>(slot.procname)]);
        }
        const std::vector<CtfField>& cf = em.ec->fields;
        const std::vector<Slot>& slots = s.payload_slots;
        const std::size_t nfields = em.schema->fields.size();
        for (std::size_t i = 0; i < nfields; ++i) {
            FieldValue& v = ev.f[i];
            v = FieldValue{};
            v.is_sequence = em.schema->fields[i].kind == FieldKind::Sequence;
            if (em.kind[i] == Kind::Absent) {
                if (v.is_sequence) v.seq = seq_storage_[i].data();
                continue;
            }
            const CtfField& f = cf[static_cast<std::size_t>(em.member[i])];
            const Slot& sl = slots[static_cast<std::size_t>(em.member[i])];
            v.present = true;
            switch (em.kind[i]) {
            case Kind::Unsigned:
            case Kind::Signed: v.u = sl.u; break;
            case Kind::String: v.s = text(f, sl); break;
            case Kind::SeqUnsigned:
            case Kind::SeqSigned: {
                const uint32_t len = std::min<uint32_t>(sl.n, kMaxSequenceLength);
                auto& buf = seq_storage_[i];
                if (buf.size() < len) buf.resize(len);
                const MemberPlan& elem = em.plan[static_cast<std::size_t>(em.member[i])];
                if (elem.bytes == 8) {
                    std::memcpy(buf.data(), sl.p, std::size_t{len} * 8);
                } else {
                    for (uint32_t k = 0; k < len; ++k) buf[k] = elem.int_at(sl.p + std::size_t{k} * elem.bytes);
                }
                if (static_cast<int>(i) == em.ts_field)
                    for (uint32_t k = 0; k < len; ++k) buf[k] = capture_ns(&t.clock, buf[k]);
                v.seq = buf.data();
                v.seq_len = len;
                break;
            }
            case Kind::SeqUnread:
                v.seq = kUnreadValues.data();
                v.seq_len = std::min<uint32_t>(sl.n, kMaxSequenceLength);
                break;
            default: break;
            }
        }
        // Fields past this event's stay empty: only those the previous event set need clearing.
        for (std::size_t i = nfields; i < fields_set_; ++i) ev.f[i] = FieldValue{};
        fields_set_ = nfields;
        if (em.schema->id == EventId::deferred_records) {
            adopt_salvaged_origin(ev);
            ev.capture = t.clock.shift == nullptr ? CaptureClock::linear(t.clock.origin) : CaptureClock::through(capture_ns, &t.clock);
        } else {
            ev.capture = {};
        }
        tee_.on_event(ev);
    }

    // A string member, or a text array's bytes up to the first NUL (Babeltrace2's string of it).
    static std::string_view text(const CtfField& f, const Slot& sl) {
        const char* c = reinterpret_cast<const char*>(sl.p);
        if (f.kind == CtfFieldKind::String) return {c, sl.n};
        const void* nul = std::memchr(c, 0, sl.n);
        return {c, nul ? static_cast<std::size_t>(static_cast<const char*>(nul) - c) : sl.n};
    }

    Analysis& analysis_;
    ReorderStage reorder_{analysis_};
    ElementDecoder decoder_{reorder_};
    TeeSink tee_{decoder_};
    bool read_every_field_;
    std::vector<std::unique_ptr<Trace>> traces_;
    std::vector<std::unique_ptr<Stream>> streams_;
    DecodedEvent ev_;
    std::size_t fields_set_ = kMaxEventFields;   // ev_.f's entries the last event may have set: all, at first
    std::array<std::vector<uint64_t>, kMaxEventFields> seq_storage_;
    uint32_t next_trace_index_ = 0;
    uint64_t events_read_ = 0, foreign_events_ = 0;
    int64_t last_ts_ = 0;
};

}  // namespace

std::optional<ReadSummary> read_direct(const ReadPlan& plan, const std::string& root, Analysis& analysis, EventSink* tap,
                                       ReadProgress* progress, std::string& why) {
    auto reader = std::make_unique<DirectReader>(analysis, tap);
    try {
        reader->open(plan);
        reader->validate(progress);
    } catch (const Refused& r) {
        why = r.why;
        return std::nullopt;
    }
    return reader->run(progress, root);
}

}  // namespace sigmatrace::analyzer
