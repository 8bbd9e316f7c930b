// Reading the send queue of a DBR-less QP (qpc.send_dbr_mode = NO_DBR: DOCA GPUNetIO's GPU_SM_NO_DBR, NCCL GIN):
// the producer writes WQEs and rings the doorbell register, but never the doorbell record, and the doorbell is
// an MMIO write into the NIC that no host agent can see. What is left in memory is the ring itself: WQE n sits
// at slot n mod ring, and its control segment carries n mod 2^16 and the QP number. So new WQEs are found by
// index scanning: from the next expected index, slot by slot, while the slots hold the expected indices.
//
// When a scanned WQE may be decoded. A GPU's stores are not ordered across a WQE until the producer's fence
// before its doorbell, so the control segment can be visible while the other segments still hold the previous
// lap's bytes (or are being rewritten by the next lap). Nothing in the ring says "complete". The rule used:
//
//   WQE p is committed when its bytes (all its WQEBBs, control segment carrying p and the QP number) were read
//   byte-identical by two different sweeps at least `settle` apart, and the producer's known frontier h
//   satisfies p + ring >= h + guard (closer to being rewritten, it is counted lost, as on the doorbell-record
//   path: a producer writing out of order may be rewriting it).
//
// A WQE that is still being written changes between the two reads, so it waits; one that is overwritten by the
// next lap first is counted lost. Rules that were considered and not used as sufficient on their own:
//   - "a later WQE is present": producers share a QP and reserve slots with an atomic add (NVSHMEM, DOCA in
//     GPU sharing mode), so WQE p+1 can be complete while the thread writing p has not finished; and even one
//     thread's stores to different addresses are unordered without a fence between them;
//   - "a CQE (or QUERY_QP's sw_sq_wqebb_counter) has passed p": it proves p was complete when the NIC fetched
//     it, but a completion is exactly what lets the producer reuse p's slot, so the read that follows can be
//     torn by the next lap: it does not make the read safe, and stability covers that case too;
//   - the doorbell value: an MMIO register on hardware, not readable memory (on the software fabric it is, but
//     the watcher behaves as it must on hardware).
// Residual risk: a producer that leaves a WQE half-written for longer than `settle` and two sweeps (a GPU thread
// preempted between its stores, a CPU proxy descheduled mid-WQE) has that torn WQE committed. A control segment
// elsewhere in a multi-block WQE that happens to carry the expected index and QP number would be taken as a
// WQE start (a 40-bit coincidence). docs/gpumem.md, "DBR-less QPs".
//
// Loss. A slot whose control segment carries the right QP and index p + k*ring (k >= 1) was overwritten by a
// later lap: WQE p is lost. Under the watcher's guard assumption (the producer writes in index order, at most
// `guard` WQEBBs out of order), the producer that wrote index e has written every index up to e - guard, so
// every WQE p <= e - ring - guard is gone too: the scan counts those lost at once and goes on one WQEBB at a time
// from there. With a writer that writes in order, loss equals exactly what was overwritten.
//
// Cost: per sweep and queue one 64-byte read while nothing is new; per new WQE two reads of its WQEBBs and a
// compare. While nobody records, the scan still follows the producer (one read per new WQE, nothing decoded):
// there is no other way to know where it is when recording starts. State: one copy of the ring (the bytes last read) and 24 bytes per slot, allocated when the queue is
// learned; sweeps allocate nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumem/memory_reader.h"
#include "gpumem/queue_types.h"

namespace sigmatrace::gpumem {

class WqeBatch;

// What the scanner remembers about a DBR-less queue between sweeps.
struct ScanCursor {
    uint64_t next = 0;      // extended index of the next WQEBB to commit or count lost
    uint64_t frontier = 0;  // one past the highest WQEBB the producer is known to have written

    // Per ring slot: the WQE whose bytes `last` holds for that slot, and since when they have been unchanged.
    struct Seen {
        uint64_t index = ~uint64_t{0};
        uint64_t since_ns = 0;
        uint64_t sweep = 0;
    };
    std::vector<Seen> seen;
    std::vector<uint8_t> last;  // ring-shaped: the bytes read for each slot's WQE

    // Sizes the state for a ring of `wqebbs` blocks starting at `initial_pi` (cold path).
    void reset(uint32_t wqebbs, uint64_t initial_pi);
};

struct ScanParams {
    uint64_t now_ns = 0;     // time of this sweep
    uint64_t sweep = 0;      // number of this sweep (strictly increasing)
    uint64_t settle_ns = 0;  // two reads must be at least this far apart
    uint32_t guard = 0;      // WQEBBs the producer may write out of order / beyond its frontier
    bool record = true;      // false: nobody records -- only follow the producer (no decoding, no loss counted)
};

struct ScanResult {
    size_t decoded = 0;
    uint64_t lost = 0;       // WQEBBs
    uint64_t malformed = 0;  // WQEs
    bool read_failed = false;
};

// One sweep of a DBR-less send queue: reads from cursor.next on, commits what is safe into `batch` (in index
// order), counts what was overwritten. `snapshot` is scratch of at least q.wqebbs * 64 bytes.
ScanResult scan_dbr_less_queue(const SendQueue& q, ScanCursor& cursor, MemoryReader& memory, uint8_t* snapshot,
                               const ScanParams& params, WqeBatch& batch);

}  // namespace sigmatrace::gpumem
