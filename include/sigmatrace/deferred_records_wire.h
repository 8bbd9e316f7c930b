// The words of a `deferred_records` event: how the tracer writes its records (<sigmatrace/deferred_records.h>,
// the layout its per-thread rings hold) into an event, and how a reader gets them back. Declared once here for
// the tracer and st-synth (EventWords encodes) and every reader (walk_records decodes).
//
// Why an encoding and not the ring's bytes: a ring record is fixed-size (a one-WR post is 96 bytes, a one-
// completion poll 80), and most of it repeats what the record before it said: the same QP, the same rkey and
// length, a zero `ah`, `imm` and status. Here a record carries only what differs from what the reader already
// knows, so a trace is several times smaller than the ring's bytes or per-field events would make it
// (docs/PERFORMANCE.md, "Trace size and channel size"), at a few dozen instructions per record on the drain.
//
// Layout 3 (layout 2 and the ring_post kind), per event. The words are little-endian bytes; records follow each other with no padding, and the
// event ends with fewer than 8 zero bytes that fill its last word. One record:
//   byte 0      kind (RecordKind, never pad)
//   byte 1      n, the entries (at most SIGMATRACE_MAX_BATCH)
//   bytes 2-3   present: bit i set when field i of the kind (fixed fields first, then entry columns, in the
//               order of kinds() below) is written
//   then        ts: the capture time in CLOCK_MONOTONIC ns, as the zigzag LEB128 varint of its difference to the
//               event's previous record's ts (0 before the first)
//   then        each present fixed field, `width` bytes
//   then        each present entry column: the field of entry 0, 1, ... n-1, `width` bytes each
// An absent fixed field equals the same field of the event's previous record of the same kind (its `initial`
// value before the first), except poll_cq's `ret`, which is then n. An absent column holds, in every entry, the
// value that column's last entry had in the event's previous record of the same kind (`initial` before the
// first). So every event decodes on its own: a lost event costs its own records only.
//
// Readers must stop at the first record that does not decode (unknown kind, n too large, a present bit the kind
// does not have, a record running past the end, a non-zero tail): a corrupt trace must not be read past what it
// says.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include <sigmatrace/deferred_records.h>

namespace sigmatrace::records {

static_assert(std::endian::native == std::endian::little, "the words are the tracer's little-endian bytes");
static_assert(SIGMATRACE_MAX_BATCH <= 255, "n is one byte");

// The layout's version, carried by each `deferred_records` event (`layout`). A reader refuses other values.
// Layout 1 (the ring's records as they are) was never released; layout 3 added the ring_post kind (schema minor
// 6) to layout 2, which it reads unchanged.
inline constexpr uint32_t kLayout = 3;
inline constexpr bool layout_readable(uint64_t layout) {
    return layout == 2 || layout == kLayout;
}

// One field of a ring record, in the fixed part or in each entry.
struct FieldSpec {
    uint16_t offset;   // in the Fixed or Entry struct
    uint8_t width;     // bytes: 1, 2, 4 or 8
    uint64_t initial;  // its value before any record of its kind in an event (zero-extended to 64 bits)
};

// Which of a kind's entry columns a redaction option clears.
inline constexpr uint8_t kNoColumn = 0xff;

struct KindSpec {
    uint8_t n_fixed = 0, n_entry = 0;
    uint16_t fixed_size = 0, entry_size = 0;  // sizeof the Fixed and Entry structs
    FieldSpec fixed[6]{};
    FieldSpec entry[13]{};
    int8_t ret_is_n = -1;                      // the fixed field whose absent value is n (poll_cq's ret), or -1
    uint8_t raddr = kNoColumn, rkey = kNoColumn;  // columns redaction clears
};

namespace wire_detail {

#define ST_FIELD_(Struct, member, init) \
    FieldSpec { static_cast<uint16_t>(offsetof(Struct, member)), static_cast<uint8_t>(sizeof(Struct::member)), init }

inline constexpr uint64_t kMinusOne32 = 0xffffffffu;  // bad_index -1 (int32_t) zero-extended

// A kind's spec from its Fixed and Entry structs and their fields, in wire order.
template <typename Fixed, typename Entry, std::size_t NF, std::size_t NE>
constexpr KindSpec make_spec(const FieldSpec (&fixed)[NF], const FieldSpec (&entry)[NE]) {
    static_assert(NF <= 6 && NE <= 13);
    KindSpec k;
    k.n_fixed = NF;
    k.n_entry = NE;
    k.fixed_size = sizeof(Fixed);
    k.entry_size = sizeof(Entry);
    for (std::size_t i = 0; i < NF; ++i) k.fixed[i] = fixed[i];
    for (std::size_t i = 0; i < NE; ++i) k.entry[i] = entry[i];
    return k;
}

constexpr KindSpec send_spec() {
    KindSpec k = make_spec<SendFixed, SendEntry>(
        {ST_FIELD_(SendFixed, qp, 0), ST_FIELD_(SendFixed, qp_num, 0), ST_FIELD_(SendFixed, ret, 0),
         ST_FIELD_(SendFixed, bad_index, kMinusOne32), ST_FIELD_(SendFixed, api, 0), ST_FIELD_(SendFixed, batch_offset, 0)},
        {ST_FIELD_(SendEntry, wr_id, 0), ST_FIELD_(SendEntry, raddr, 0), ST_FIELD_(SendEntry, ah, 0),
         ST_FIELD_(SendEntry, send_flags, 0), ST_FIELD_(SendEntry, bytes, 0), ST_FIELD_(SendEntry, rkey, 0),
         ST_FIELD_(SendEntry, imm, 0), ST_FIELD_(SendEntry, remote_qpn, 0), ST_FIELD_(SendEntry, num_sge, 0),
         ST_FIELD_(SendEntry, opcode, 0)});
    k.raddr = 1;  // the columns of raddr and rkey in the list above (redaction clears them)
    k.rkey = 5;
    return k;
}

constexpr KindSpec recv_spec() {
    return make_spec<RecvFixed, RecvEntry>(
        {ST_FIELD_(RecvFixed, handle, 0), ST_FIELD_(RecvFixed, qp_num, 0), ST_FIELD_(RecvFixed, ret, 0),
         ST_FIELD_(RecvFixed, bad_index, kMinusOne32), ST_FIELD_(RecvFixed, batch_offset, 0)},
        {ST_FIELD_(RecvEntry, wr_id, 0), ST_FIELD_(RecvEntry, bytes, 0), ST_FIELD_(RecvEntry, num_sge, 0)});
}

constexpr KindSpec poll_spec() {
    KindSpec k = make_spec<PollFixed, CompletionEntry>(
        {ST_FIELD_(PollFixed, cq, 0), ST_FIELD_(PollFixed, ret, 0), ST_FIELD_(PollFixed, api, 0)},
        {ST_FIELD_(CompletionEntry, wr_id, 0), ST_FIELD_(CompletionEntry, hw_ts, 0),
         ST_FIELD_(CompletionEntry, vendor_err, 0), ST_FIELD_(CompletionEntry, byte_len, 0),
         ST_FIELD_(CompletionEntry, qp_num, 0), ST_FIELD_(CompletionEntry, src_qp, 0),
         ST_FIELD_(CompletionEntry, wc_flags, 0), ST_FIELD_(CompletionEntry, imm, 0),
         ST_FIELD_(CompletionEntry, status, 0), ST_FIELD_(CompletionEntry, opcode, 0)});
    k.ret_is_n = 1;
    return k;
}

constexpr KindSpec ring_post_spec() {
    KindSpec k = make_spec<RingPostFixed, RingWqeEntry>(
        {ST_FIELD_(RingPostFixed, queue, 0), ST_FIELD_(RingPostFixed, qp_num, 0), ST_FIELD_(RingPostFixed, poster, 0)},
        {ST_FIELD_(RingWqeEntry, pi, 0), ST_FIELD_(RingWqeEntry, raddr, 0), ST_FIELD_(RingWqeEntry, atomic_arg, 0),
         ST_FIELD_(RingWqeEntry, dgid_prefix, 0), ST_FIELD_(RingWqeEntry, dgid_iid, 0), ST_FIELD_(RingWqeEntry, bytes, 0),
         ST_FIELD_(RingWqeEntry, rkey, 0), ST_FIELD_(RingWqeEntry, imm, 0), ST_FIELD_(RingWqeEntry, dest_qpn, 0),
         ST_FIELD_(RingWqeEntry, ctrl, 0), ST_FIELD_(RingWqeEntry, dlid, 0), ST_FIELD_(RingWqeEntry, opcode, 0),
         ST_FIELD_(RingWqeEntry, send_flags, 0)});
    k.raddr = 1;
    k.rkey = 6;
    return k;
}

#undef ST_FIELD_

inline constexpr int kKinds = 6;  // pad and the five record kinds
inline constexpr KindSpec kSpecs[kKinds] = {KindSpec{}, send_spec(), recv_spec(), recv_spec(), poll_spec(), ring_post_spec()};

constexpr bool specs_fit() {
    for (int kind = 1; kind < kKinds; ++kind) {
        const KindSpec& k = kSpecs[kind];
        if (k.n_fixed + k.n_entry > 16) return false;  // present is 16 bits
        for (int i = 0; i < k.n_fixed; ++i)
            if (k.fixed[i].offset + k.fixed[i].width > k.fixed_size) return false;
        for (int i = 0; i < k.n_entry; ++i)
            if (k.entry[i].offset + k.entry[i].width > k.entry_size) return false;
    }
    return true;
}
static_assert(specs_fit());
static_assert(kSpecs[1].entry[kSpecs[1].raddr].offset == offsetof(SendEntry, raddr) &&
              kSpecs[1].entry[kSpecs[1].rkey].offset == offsetof(SendEntry, rkey));
static_assert(kSpecs[5].entry[kSpecs[5].raddr].offset == offsetof(RingWqeEntry, raddr) &&
              kSpecs[5].entry[kSpecs[5].rkey].offset == offsetof(RingWqeEntry, rkey));
static_assert(static_cast<int>(RecordKind::poll_cq) == 4 && static_cast<int>(RecordKind::ring_post) == 5);

// Fixed-width loads and stores (little-endian: the low bytes of the 64-bit value): with the width a constant they
// are one move each, which is what keeps encoding at a few ns per record (a memcpy of a run-time width is a call).
template <uint8_t W> uint64_t load(const std::byte* p) noexcept {
    if constexpr (W == 1) return static_cast<uint8_t>(*p);
    else {
        using U = std::conditional_t<W == 2, uint16_t, std::conditional_t<W == 4, uint32_t, uint64_t>>;
        static_assert(W == sizeof(U));
        U v;
        std::memcpy(&v, p, W);
        return v;
    }
}
template <uint8_t W> void store(std::byte* p, uint64_t v) noexcept {
    using U = std::conditional_t<W == 1, uint8_t, std::conditional_t<W == 2, uint16_t, std::conditional_t<W == 4, uint32_t, uint64_t>>>;
    static_assert(W == sizeof(U));
    const U u = static_cast<U>(v);
    std::memcpy(p, &u, W);
}

// What a reader already knows, per event: the last record's values of each kind, and the last ts.
struct Known {
    uint64_t fixed[kKinds][6];
    uint64_t entry[kKinds][13];
    uint64_t ts;
    void reset() noexcept;   // to each field's initial value: at the start of every event
};

// The state every event starts from, built at compile time: reset(), which a writer and a reader each pay per
// event, is then one copy instead of a walk over kSpecs' field descriptions.
consteval Known initial_known() {
    Known k{};
    for (int kind = 0; kind < kKinds; ++kind) {
        for (int i = 0; i < 6; ++i) k.fixed[kind][i] = kSpecs[kind].fixed[i].initial;
        for (int i = 0; i < 13; ++i) k.entry[kind][i] = kSpecs[kind].entry[i].initial;
    }
    k.ts = 0;
    return k;
}
inline constexpr Known kInitialKnown = initial_known();
inline void Known::reset() noexcept { *this = kInitialKnown; }

}  // namespace wire_detail

inline const KindSpec* spec_of(RecordKind kind) {
    const auto k = static_cast<uint16_t>(kind);
    return k >= 1 && k < wire_detail::kKinds ? &wire_detail::kSpecs[k] : nullptr;
}

// The most bytes encode() writes for a ring record of `size` bytes: never more than the ring record itself
// (its 16-byte header against at most 4 + 10 here; its fields unpadded).
constexpr uint32_t max_encoded_size(uint32_t ring_record_size) {
    return ring_record_size;
}

struct EncodeOptions {
    bool clear_addresses = false;  // raddr written as 0
    bool clear_keys = false;       // rkey written as 0
};

// One record as read off the wire, valid during the visit that receives it (walk_views): each fixed field's
// value, and each entry column's n values, either on the wire (present) or all equal to what the reader already
// knew (absent). What walk_records() lays out as a ring record, and what a reader that wants the fields
// themselves (the analyzer's element decoder) reads without that copy.
struct RecordView {
    RecordKind kind = RecordKind::pad;
    uint32_t n = 0;
    uint32_t present = 0;             // the record's present bits
    uint64_t ts = 0;                  // capture time, through the walk's to_ns
    uint64_t fixed[6]{};              // the kind's fixed fields, zero-extended
    // Each column's value in every entry when absent, and in the last entry (the only one when n is 1) always.
    const uint64_t* known = nullptr;
    const std::byte* column[13]{};    // each present column's n values

    // Entry e's field C of kind Kind (this record's kind), zero-extended.
    template <int Kind, std::size_t C> uint64_t entry(uint32_t e) const noexcept {
        static_assert(C < wire_detail::kSpecs[Kind].n_entry);
        constexpr FieldSpec f = wire_detail::kSpecs[Kind].entry[C];
        return present & (1u << (wire_detail::kSpecs[Kind].n_fixed + C)) ? wire_detail::load<f.width>(column[C] + e * f.width)
                                                                         : known[C];
    }
};

// The index of kind Kind's fixed field or entry column at `offset` in its Fixed or Entry struct (offsetof): a
// compile-time error when it has none, so that readers name fields by their struct members, never by position.
template <int Kind> consteval std::size_t fixed_field_at(std::size_t offset) {
    for (std::size_t i = 0; i < wire_detail::kSpecs[Kind].n_fixed; ++i)
        if (wire_detail::kSpecs[Kind].fixed[i].offset == offset) return i;
    throw "no fixed field at this offset";
}
template <int Kind> consteval std::size_t entry_column_at(std::size_t offset) {
    for (std::size_t i = 0; i < wire_detail::kSpecs[Kind].n_entry; ++i)
        if (wire_detail::kSpecs[Kind].entry[i].offset == offset) return i;
    throw "no entry column at this offset";
}

namespace wire_detail {

// The encoding of one kind, with every field's offset and width a constant.
template <int Kind> struct KindCodec {
    static constexpr const KindSpec& k = kSpecs[Kind];

    template <std::size_t I>
    static void fixed_out(const std::byte* fixed, uint64_t* known, uint32_t n, uint32_t& present, std::byte*& p) noexcept {
        constexpr FieldSpec f = k.fixed[I];
        const uint64_t v = load<f.width>(fixed + f.offset);
        if constexpr (static_cast<int>(I) == k.ret_is_n) {
            if (v == n) return;
        } else {
            if (v == known[I]) return;
            known[I] = v;
        }
        present |= 1u << I;
        store<f.width>(p, v);
        p += f.width;
    }
    template <std::size_t C>
    static void column_out(const std::byte* ents, uint32_t n, uint64_t* known, uint8_t cleared, uint32_t& present,
                           std::byte*& p) noexcept {
        constexpr FieldSpec f = k.entry[C];
        constexpr bool clearable = C == k.raddr || C == k.rkey;
        const bool clear = clearable && (cleared & (C == k.raddr ? 1 : 2)) != 0;
        const uint64_t last = known[C];
        uint32_t e = 0;
        if (!clear)
            while (e < n && load<f.width>(ents + e * k.entry_size + f.offset) == last) ++e;
        else if (last == 0)
            e = n;
        if (e == n) return;
        present |= 1u << (k.n_fixed + C);
        for (e = 0; e < n; ++e) store<f.width>(p + e * f.width, clear ? 0 : load<f.width>(ents + e * k.entry_size + f.offset));
        known[C] = clear ? 0 : load<f.width>(ents + (n - 1) * k.entry_size + f.offset);
        p += n * f.width;
    }
    // Reading: each present field taken off the wire into `v`, the known values updated as the format says.
    // False when a present field runs past `end`.
    template <std::size_t I>
    static bool fixed_in(RecordView& v, uint64_t* known, const std::byte*& p, const std::byte* end) noexcept {
        constexpr FieldSpec f = k.fixed[I];
        uint64_t x;
        if (v.present & (1u << I)) {
            if (end - p < f.width) return false;
            x = load<f.width>(p);
            p += f.width;
        } else if constexpr (static_cast<int>(I) == k.ret_is_n) {
            x = v.n;
        } else {
            x = known[I];
        }
        if constexpr (static_cast<int>(I) != k.ret_is_n) known[I] = x;
        v.fixed[I] = x;
        return true;
    }
    // The present columns only, in order: a record mostly changes two or three of its kind's columns.
    static bool columns_in(RecordView& v, uint64_t* known, const std::byte*& p, const std::byte* end) noexcept {
        for (uint32_t cols = v.present >> k.n_fixed; cols != 0; cols &= cols - 1) {
            const auto c = static_cast<unsigned>(std::countr_zero(cols));
            const uint8_t width = k.entry[c].width;
            const std::size_t bytes = std::size_t{v.n} * width;
            if (static_cast<std::size_t>(end - p) < bytes) return false;
            v.column[c] = p;
            p += bytes;
            switch (width) {
            case 1: known[c] = load<1>(p - 1); break;
            case 2: known[c] = load<2>(p - 2); break;
            case 4: known[c] = load<4>(p - 4); break;
            default: known[c] = load<8>(p - 8); break;
            }
        }
        return true;
    }
    template <std::size_t... I>
    static bool read(RecordView& v, uint64_t* known_fixed, uint64_t* known_entry, const std::byte*& p,
                     const std::byte* end, std::index_sequence<I...>) noexcept {
        v.known = known_entry;
        constexpr uint32_t kFixedBits = (1u << k.n_fixed) - 1;
        if ((v.present & kFixedBits) == 0) {
            // The common case: the call's fixed fields (QP, CQ, result) as the previous record of its kind had them.
            (static_cast<void>(v.fixed[I] = static_cast<int>(I) == k.ret_is_n ? v.n : known_fixed[I]), ...);
        } else if (!(fixed_in<I>(v, known_fixed, p, end) && ...)) {
            return false;
        }
        return v.n == 0 || columns_in(v, known_entry, p, end);
    }
    // The ring record's fields (after its header) from a view of this kind.
    template <std::size_t C> static void lay_out_column(const RecordView& v, std::byte* ents) noexcept {
        constexpr FieldSpec f = k.entry[C];
        for (uint32_t e = 0; e < v.n; ++e) store<f.width>(ents + e * k.entry_size + f.offset, v.entry<Kind, C>(e));
    }
    template <std::size_t... I, std::size_t... C>
    static void lay_out(const RecordView& v, std::byte* fixed, std::index_sequence<I...>, std::index_sequence<C...>) noexcept {
        (store<k.fixed[I].width>(fixed + k.fixed[I].offset, v.fixed[I]), ...);
        (lay_out_column<C>(v, fixed + k.fixed_size), ...);
    }

    template <std::size_t... I, std::size_t... C>
    static uint32_t encode(const std::byte* fixed, uint32_t n, uint64_t* known_fixed, uint64_t* known_entry, uint8_t cleared,
                           std::byte*& p, std::index_sequence<I...>, std::index_sequence<C...>) noexcept {
        uint32_t present = 0;
        (fixed_out<I>(fixed, known_fixed, n, present, p), ...);
        if (n > 0) (column_out<C>(fixed + k.fixed_size, n, known_entry, cleared, present, p), ...);
        return present;
    }
};

// Calls f(KindCodec<K>{}) for the kind's codec and returns what it returns; false for pad (never in an event).
template <typename F> bool with_codec(RecordKind kind, F&& f) {
    switch (kind) {
    case RecordKind::post_send: return f(KindCodec<1>{});
    case RecordKind::post_recv: return f(KindCodec<2>{});
    case RecordKind::post_srq_recv: return f(KindCodec<3>{});
    case RecordKind::poll_cq: return f(KindCodec<4>{});
    case RecordKind::ring_post: return f(KindCodec<5>{});
    case RecordKind::pad: break;
    }
    return false;
}

}  // namespace wire_detail

// Writes the records of one event. reset() at the start of each event.
class WireEncoder {
public:
    WireEncoder() noexcept { known_.reset(); }
    void reset() noexcept { known_.reset(); }

    // Encodes the ring record `h` (not pad; it passed the ring's own checks) with capture time `ts_ns` into
    // `out`, which has room for max_encoded_size(h.size) bytes; returns the bytes written.
    std::size_t encode(const RecordHeader& h, uint64_t ts_ns, const EncodeOptions& opt, std::byte* out) noexcept {
        using namespace wire_detail;
        const auto kind = static_cast<uint16_t>(h.kind);
        const uint32_t n = h.n;
        std::byte* p = out + 4;
        // ts: zigzag LEB128 of the difference.
        const auto delta = static_cast<int64_t>(ts_ns - known_.ts);
        uint64_t z = (static_cast<uint64_t>(delta) << 1) ^ static_cast<uint64_t>(delta >> 63);
        while (z >= 0x80) {
            *p++ = static_cast<std::byte>(z | 0x80);
            z >>= 7;
        }
        *p++ = static_cast<std::byte>(z);
        known_.ts = ts_ns;
        const auto* fixed = reinterpret_cast<const std::byte*>(&h) + sizeof(RecordHeader);
        const uint8_t cleared = static_cast<uint8_t>((opt.clear_addresses ? 1 : 0) | (opt.clear_keys ? 2 : 0));
        uint32_t present = 0;
        with_codec(h.kind, [&]<int K>(KindCodec<K>) {
            present = KindCodec<K>::encode(fixed, n, known_.fixed[K], known_.entry[K], cleared, p,
                                           std::make_index_sequence<kSpecs[K].n_fixed>{},
                                           std::make_index_sequence<kSpecs[K].n_entry>{});
            return true;
        });
        out[0] = static_cast<std::byte>(kind);
        out[1] = static_cast<std::byte>(n);
        out[2] = static_cast<std::byte>(present & 0xff);
        out[3] = static_cast<std::byte>(present >> 8);
        return static_cast<std::size_t>(p - out);
    }

private:
    wire_detail::Known known_;
};

// The words of one event being written: records appended through one WireEncoder, and the last word's fill
// zeroed when it is done. `kBytes` bounds the event (a multiple of 8). What the tracer's drains, its immediate
// emission and st-synth all write an event's words with.
template <uint32_t kBytes> class EventWords {
    static_assert(kBytes % 8 == 0 && kBytes >= max_encoded_size(kMaxRecordSize));

public:
    EventWords() noexcept = default;
    EventWords(const EventWords&) = delete;
    EventWords& operator=(const EventWords&) = delete;

    // Whether a ring record of `size` bytes fits after what is there.
    bool fits(uint32_t size) const noexcept { return used_ + max_encoded_size(size) <= kBytes; }
    bool empty() const noexcept { return used_ == 0; }
    // Appends `h` (not pad; room checked with fits()) with capture time `ts_ns`.
    void add(const RecordHeader& h, uint64_t ts_ns, const EncodeOptions& opt) noexcept {
        used_ += static_cast<uint32_t>(encoder_.encode(h, ts_ns, opt, reinterpret_cast<std::byte*>(words_) + used_));
    }
    // Zeroes the last word's fill and returns the event's words (the count in *n_words); valid until reset().
    const uint64_t* finish(uint32_t* n_words) noexcept {
        const uint32_t n = (used_ + 7) / 8;
        std::memset(reinterpret_cast<std::byte*>(words_) + used_, 0, n * 8 - used_);
        *n_words = n;
        return words_;
    }
    // The next event starts empty, its readers knowing nothing.
    void reset() noexcept {
        used_ = 0;
        encoder_.reset();
    }

private:
    WireEncoder encoder_;
    uint32_t used_ = 0;  // bytes
    alignas(16) uint64_t words_[kBytes / 8];
};

// ------------------------------------------------------------------ reading an event's records

enum class WalkStatus : uint8_t {
    ok,
    truncated,   // a record runs past the end of the words
    bad_fields,  // a present bit the kind does not have (or a column of no entries), or an overlong ts
    bad_kind,    // pad (never in an event) or unknown
    bad_count,   // n > SIGMATRACE_MAX_BATCH
    bad_tail,    // what follows the last record is not the zero bytes of the last word
};
inline const char* to_string(WalkStatus s) {
    switch (s) {
    case WalkStatus::ok: return "ok";
    case WalkStatus::truncated: return "a record runs past the end of the event";
    case WalkStatus::bad_fields: return "a record names fields its kind does not have";
    case WalkStatus::bad_kind: return "a record of unknown kind";
    case WalkStatus::bad_count: return "a record with more entries than SIGMATRACE_MAX_BATCH";
    case WalkStatus::bad_tail: return "the event ends in bytes that are not a record";
    }
    return "?";
}

struct WalkResult {
    WalkStatus status = WalkStatus::ok;
    uint32_t records = 0;  // records handed to the visitor before the walk ended
};

// Reads each record of `words` (an event's payload) and hands a view of it (RecordView; its `ts` the capture time
// in CLOCK_MONOTONIC ns passed through `to_ns`, a reader's own time base) to `visit(const RecordView&)`, in order;
// stops at the first record that does not decode.
template <typename Visit, typename ToNs>
WalkResult walk_views(const uint64_t* words, std::size_t n_words, Visit&& visit, ToNs&& to_ns) {
    using namespace wire_detail;
    WalkResult r;
    Known known = kInitialKnown;
    const auto* bytes = reinterpret_cast<const std::byte*>(words);
    const std::size_t total = n_words * sizeof(uint64_t);
    std::size_t at = 0;
    RecordView v;
    while (at < total) {
        // A record starts with its kind, never 0; the last word's fill is zeros. (A record can be shorter than a
        // word: 4 bytes and a one-byte ts when nothing else changed.)
        if (bytes[at] == std::byte{0}) {
            if (total - at >= 8) return {WalkStatus::bad_kind, r.records};
            for (std::size_t i = at; i < total; ++i)
                if (bytes[i] != std::byte{0}) return {WalkStatus::bad_tail, r.records};
            break;
        }
        if (total - at < 4) return {WalkStatus::truncated, r.records};
        const std::byte* p = bytes + at;
        const std::byte* const end = bytes + total;
        // The rest of the record with its kind's spec a constant.
        WalkStatus status = WalkStatus::bad_kind;
        const bool whole = with_codec(static_cast<RecordKind>(static_cast<uint8_t>(p[0])), [&]<int K>(KindCodec<K>) {
            constexpr const KindSpec& k = kSpecs[K];
            const uint32_t n = static_cast<uint8_t>(p[1]);
            const uint32_t present = static_cast<uint32_t>(static_cast<uint8_t>(p[2])) | static_cast<uint32_t>(static_cast<uint8_t>(p[3])) << 8;
            if (n > SIGMATRACE_MAX_BATCH) return (status = WalkStatus::bad_count, false);
            if (present >> (k.n_fixed + k.n_entry) != 0) return (status = WalkStatus::bad_fields, false);
            p += 4;
            uint64_t z = 0;
            if (end - p >= 10) [[likely]] {
                // The longest varint (10 bytes) fits: no end to watch for.
                for (int shift = 0;; shift += 7) {
                    const auto b = static_cast<uint8_t>(*p++);
                    z |= static_cast<uint64_t>(b & 0x7f) << shift;
                    if ((b & 0x80) == 0) break;
                    if (shift == 63) return (status = WalkStatus::bad_fields, false);
                }
            } else {
                for (int shift = 0;; shift += 7) {
                    if (p == end) return (status = WalkStatus::truncated, false);
                    if (shift > 63) return (status = WalkStatus::bad_fields, false);
                    const auto b = static_cast<uint8_t>(*p++);
                    z |= static_cast<uint64_t>(b & 0x7f) << shift;
                    if ((b & 0x80) == 0) break;
                }
            }
            known.ts += (z >> 1) ^ (~(z & 1) + 1);  // zigzag: the difference, two's complement
            if (n == 0 && (present >> k.n_fixed) != 0) return (status = WalkStatus::bad_fields, false);
            v.kind = static_cast<RecordKind>(K);
            v.n = n;
            v.present = present;
            v.ts = to_ns(known.ts);
            if (!KindCodec<K>::read(v, known.fixed[K], known.entry[K], p, end, std::make_index_sequence<kSpecs[K].n_fixed>{}))
                return (status = WalkStatus::truncated, false);
            return true;
        });
        if (!whole) return {status, r.records};
        visit(static_cast<const RecordView&>(v));
        ++r.records;
        at = static_cast<std::size_t>(p - bytes);
    }
    return r;
}

// The same walk, each record laid out as a ring record (<sigmatrace/deferred_records.h>) and handed to
// `visit(const RecordHeader&)`.
template <typename Visit, typename ToNs>
WalkResult walk_records(const uint64_t* words, std::size_t n_words, Visit&& visit, ToNs&& to_ns) {
    using namespace wire_detail;
    alignas(16) std::byte buf[kMaxRecordSize];
    return walk_views(
        words, n_words,
        [&](const RecordView& v) {
            const uint32_t size = *expected_size(v.kind, v.n);
            std::memset(buf, 0, size);
            auto* h = reinterpret_cast<RecordHeader*>(buf);
            h->size = size;
            h->kind = v.kind;
            h->n = static_cast<uint16_t>(v.n);
            h->ts = v.ts;
            std::byte* fixed = buf + sizeof(RecordHeader);
            with_codec(v.kind, [&]<int K>(KindCodec<K>) {
                KindCodec<K>::lay_out(v, fixed, std::make_index_sequence<kSpecs[K].n_fixed>{},
                                      std::make_index_sequence<kSpecs[K].n_entry>{});
                return true;
            });
            visit(static_cast<const RecordHeader&>(*h));
        },
        to_ns);
}
template <typename Visit> WalkResult walk_records(const uint64_t* words, std::size_t n_words, Visit&& visit) {
    return walk_records(words, n_words, visit, [](uint64_t ts) { return ts; });
}

}  // namespace sigmatrace::records
