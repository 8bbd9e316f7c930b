// See index_scanner.h for the commit rule and why it is the one used.
#include "gpumem/index_scanner.h"

#include <algorithm>
#include <cstring>

#include "gpumem/event_batches.h"
#include "mlx5_format/mlx5_layout.h"
#include "mlx5_format/wqe_decoder.h"

namespace sigmatrace::gpumem {
namespace {

using mlx5::kWqeBasicBlock;

// WQEBBs read at once once the first block of a sweep shows something new (a sweep of an idle queue reads one).
constexpr uint64_t kReadChunk = 32;

// The blocks this sweep has read, as a window [from, to) of extended indices over the ring-shaped snapshot. The
// scan only moves forward and is done with a block once it moved past it, so when the window would span more
// than the ring it restarts at the block asked for.
class ReadWindow {
public:
    ReadWindow(const SendQueue& q, MemoryReader& memory, uint8_t* snapshot, uint64_t start)
        : q_(q), memory_(memory), snapshot_(snapshot), from_(start), to_(start) {}

    bool ensure(uint64_t p, uint32_t blocks) {
        if (p >= from_ && p + blocks <= to_) return true;
        const uint64_t n = q_.wqebbs;
        if (p < from_ || p > to_ || p + blocks - from_ > n) from_ = to_ = p;
        const uint64_t want = to_ == from_ ? p + blocks : std::max<uint64_t>(p + blocks, to_ + kReadChunk);
        const uint64_t end = std::min(from_ + n, want);
        for (uint64_t i = to_; i < end;) {  // at most two contiguous pieces
            const auto slot = static_cast<uint32_t>(i & (n - 1));
            const uint64_t count = std::min<uint64_t>(end - i, n - slot);
            const size_t off = size_t{slot} * kWqeBasicBlock;
            if (!memory_.read(snapshot_ + off, q_.ring_addr + off, count * kWqeBasicBlock, q_.ring_mem)) return false;
            i += count;
        }
        to_ = end;
        return true;
    }
    const uint8_t* block(uint64_t p) const { return snapshot_ + (p & (q_.wqebbs - 1)) * kWqeBasicBlock; }

private:
    const SendQueue& q_;
    MemoryReader& memory_;
    uint8_t* snapshot_;
    uint64_t from_, to_;
};

// What a ring slot holds, seen from the index p the scan expects there.
struct SlotView {
    enum Kind : uint8_t { Present, Overwritten, Other } kind = Other;
    uint32_t wqebbs = 1;  // of the WQE whose control segment is there (1 when its ds is unusable)
    uint64_t index = 0;   // extended index that control segment carries (Present: p; Overwritten: p + k * ring)
};

SlotView classify(const uint8_t* block, uint64_t p, uint32_t qpn, uint32_t ring) {
    mlx5::CtrlSeg c;
    std::memcpy(&c, block, sizeof c);
    SlotView v;
    if (c.qpn() != qpn) return v;  // never written for this QP (zeros, 0xff), or inside another WQE
    const uint32_t ds = c.ds();
    const bool ds_ok = ds != 0 && ds <= mlx5::kMaxDs && mlx5::wqebbs_for_ds(ds) <= ring;
    v.wqebbs = ds_ok ? mlx5::wqebbs_for_ds(ds) : 1;
    const auto ahead = static_cast<uint16_t>(c.wqe_index() - static_cast<uint16_t>(p));
    if (ahead == 0) {
        v.kind = SlotView::Present;
        v.index = p;
    } else if (ds_ok && ahead < 0x8000 && (ahead & (ring - 1)) == 0) {
        // A control segment of this QP at p's slot, a whole number of laps ahead: p was overwritten. (Behind:
        // the slot still holds an earlier lap -- p is not written yet.)
        v.kind = SlotView::Overwritten;
        v.index = p + ahead;
    }
    return v;
}

// True when WQE p (blocks [p, p + blocks)) reads the same as in an earlier sweep at least `settle` ago;
// otherwise remembers what it reads now and since when.
bool settled(ScanCursor& cur, const ReadWindow& win, uint64_t p, uint32_t blocks, uint32_t ring,
             const ScanParams& params) {
    ScanCursor::Seen& seen = cur.seen[p & (ring - 1)];
    bool same = seen.index == p;
    for (uint64_t b = p; same && b < p + blocks; ++b)
        same = std::memcmp(win.block(b), cur.last.data() + (b & (ring - 1)) * kWqeBasicBlock, kWqeBasicBlock) == 0;
    if (!same) {
        for (uint64_t b = p; b < p + blocks; ++b)
            std::memcpy(cur.last.data() + (b & (ring - 1)) * kWqeBasicBlock, win.block(b), kWqeBasicBlock);
        seen = {p, params.now_ns, params.sweep};
        return false;
    }
    return seen.sweep < params.sweep && params.now_ns - seen.since_ns >= params.settle_ns;
}

}  // namespace

void ScanCursor::reset(uint32_t wqebbs, uint64_t initial_pi) {
    next = frontier = initial_pi;
    seen.assign(wqebbs, Seen{});
    last.assign(size_t{wqebbs} * kWqeBasicBlock, 0);
}

ScanResult scan_dbr_less_queue(const SendQueue& q, ScanCursor& cur, MemoryReader& memory, uint8_t* snapshot,
                               const ScanParams& params, WqeBatch& batch) {
    ScanResult r;
    const uint32_t n = q.wqebbs;
    if (n == 0 || cur.seen.size() != n) return r;
    ReadWindow win(q, memory, snapshot, cur.next);
    uint64_t p = cur.next;
    // Once a WQE cannot be committed, later ones are only remembered (so that they can commit on the next sweep),
    // never committed out of order -- and only within one ring of it, so no slot is remembered twice a sweep.
    bool committing = true;
    uint64_t held = 0;
    for (uint64_t steps = 0; steps < 2 * uint64_t{n} + 2; ++steps) {
        if (!win.ensure(p, 1)) {
            r.read_failed = true;
            break;
        }
        const SlotView v = classify(win.block(p), p, q.qpn, n);
        if (v.kind == SlotView::Other) break;
        if (v.kind == SlotView::Overwritten) {
            if (!committing) break;  // counted when the scan gets there
            const uint64_t certainly_gone = v.index + 1 > uint64_t{n} + params.guard ? v.index + 1 - n - params.guard : 0;
            const uint64_t resume = std::max(p + v.wqebbs, certainly_gone);
            if (params.record) r.lost += resume - p;
            cur.frontier = std::max(cur.frontier, v.index + v.wqebbs);
            p = cur.next = resume;
            continue;
        }
        if (!committing && p + v.wqebbs > held + n) break;
        if (!win.ensure(p, v.wqebbs)) {
            r.read_failed = true;
            break;
        }
        cur.frontier = std::max(cur.frontier, p + v.wqebbs);
        if (!params.record) {  // following only
            p = cur.next = p + v.wqebbs;
            continue;
        }
        const bool stable = settled(cur, win, p, v.wqebbs, n, params);
        if (committing && stable) {
            if (p + n < cur.frontier + params.guard) {
                // The producer may be rewriting it right now: lost, as on the doorbell-record path.
                r.lost += v.wqebbs;
                p = cur.next = p + v.wqebbs;
                continue;
            }
            DecodedWqe w;
            const WqeStatus st = decode_wqe(RingView{snapshot, n}, static_cast<uint32_t>(p & (n - 1)), q.transport, w);
            if (st == WqeStatus::Ok) {
                batch.add(p, w, cur.frontier);
                ++r.decoded;
            } else {
                ++r.malformed;
            }
            p = cur.next = p + v.wqebbs;
            continue;
        }
        if (committing) held = p;
        committing = false;
        p += v.wqebbs;
    }
    return r;
}

}  // namespace sigmatrace::gpumem
