// Barrier spread (docs/analyzer.md, "Barriers"): a barrier epoch is a round in which every participant signals the same remote
// synchronization word (an atomic or a small write) once; spread = last arrival - first arrival.
//
// Detection from the pattern, streaming: every (destination device, rkey, remote address) that receives
// atomics or small writes is a candidate word. A participant's k-th signal to a word belongs to the word's
// epoch k. Epoch k is closed once every participant has signalled at least k+1 times and the busiest one
// kCloseLag rounds more, so only a few rounds are kept open per word. At the end, a word is a barrier when it has at least two participants and
// at least two complete epochs, and (nearly) every epoch it saw was complete. An arrival is the signal's post
// time: the moment the participant entered the barrier.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "analyzer/analyses/data_link.h"
#include "analyzer/analyses/model.h"
#include "analyzer/analyses/quantile_histogram.h"
#include "analyzer/analyses/topology.h"

namespace sigmatrace::analyzer {

struct BarrierWordSpec {
    uint64_t raddr = 0;
    std::optional<uint32_t> rkey;
};

struct BarrierOptions {
    std::optional<BarrierWordSpec> word;   // only this word (--barrier-word); else detect from the pattern
    uint32_t max_signal_bytes = 64;        // writes up to this size can be signals
};

struct EpochSample {
    int64_t first_ts = 0;
    int64_t spread_ns = 0;
    ProcId last = kNoId;
    ProcId first = kNoId;
};

// One synchronization word that turned out to be a barrier.
struct BarrierWord {
    Peer target;                 // where the word lives
    uint32_t rkey = 0;
    uint64_t raddr = 0;
    std::vector<ProcId> participants;
    uint64_t epochs = 0;         // complete epochs
    uint64_t incomplete = 0;     // epochs some participant did not signal (trace cut, irregular pattern)
    QuantileHistogram spread_ns;
    std::map<ProcId, uint64_t> times_last;
    std::vector<EpochSample> samples;  // the first kMaxSamples epochs, for plots
};

struct BarrierResult {
    std::vector<BarrierWord> words;
    uint64_t candidate_words = 0;
    uint64_t dropped_candidates = 0;   // words not tracked because kMaxWords were already
};

class BarrierDetector {
public:
    static constexpr std::size_t kMaxWords = 4096;
    static constexpr std::size_t kMaxOpenEpochs = 256;
    static constexpr std::size_t kMaxSamples = 2000;
    static constexpr uint32_t kCloseLag = 8;

    explicit BarrierDetector(BarrierOptions options) : options_(std::move(options)) {}

    // `qp` is the initiator's QP: the word is identified by the remote address it connects to (GID/LID), so
    // detection does not wait for the target process's events to be read.
    void add(const Operation& op, const Qp& qp) { add(std::span<const Operation>(&op, 1), qp); }
    // Operations of one QP (op_reconstruction.h): the target's address is taken once. `run`, when they are one
    // (data_link.h SendRun: completed, one opcode), says what they share, so that which of them are signals is
    // decided once where it can be.
    void add(std::span<const Operation> ops, const Qp& qp, const SendRun* run = nullptr);
    BarrierResult finish(Topology& topo);

    // A share of a trace (analysis.h, merge_share): a word's participants are in several shares, so a share
    // logs each candidate word's signals per participant (arrival and post times) instead of making epochs, and
    // finish() replays the merged logs, each word's participants in arrival order (completion time), into the
    // detector. What a share cannot keep: a word with one participant in the share stops being logged past
    // kLogCap signals (its first kCloseLag + 1 kept: enough to know it could not be a barrier, unless another
    // participant arrived before the last of them), and logging stops past kMaxLogged signals in all. Before
    // the first operation.
    static constexpr std::size_t kLogCap = std::size_t{1} << 16;
    static constexpr std::size_t kMaxLogged = std::size_t{1} << 24;
    void log_signals() { log_ = true; }
    // Whether `other`'s logs merge into this one's to what one detector given both shares' signals finds: no
    // logging stopped or word dropped, at most kMaxWords words together, and no word whose log was cut before
    // its fate was known.
    bool can_merge(const BarrierDetector& other) const;
    void merge(BarrierDetector& other);
    // A share in bytes (share_codec.cpp): what can_merge() and merge() take, the signal logs.
    template <class Archive> void serialize(Archive& ar) {
        ar(log_full_, logged_, dropped_, logs_);
        last_log_key_ = nullptr;
        last_log_ = nullptr;
    }

private:
    // Where a word lives but for its address: what the keys of a run of one QP's signals share. Numbered in
    // the order first seen: a recent slot names it by its number.
    struct Target {
        Gid gid;                  // the target's GID, or
        uint32_t lid = 0;         // its LID, or
        QpId local_qp = kNoId;    // for a QP with no remote address (loopback), the QP itself
        bool operator==(const Target&) const = default;
        uint64_t bits() const {   // the hashes' share of it
            return (gid.iid * 0x9e3779b97f4a7c15ULL) ^ gid.prefix ^ (static_cast<uint64_t>(lid) << 48) ^ local_qp;
        }
    };
    struct TargetHash {
        std::size_t operator()(const Target& t) const { return std::hash<uint64_t>()(t.bits()); }
    };
    struct Key {
        Target target;
        uint32_t rkey;
        uint64_t raddr;
        bool operator==(const Key&) const = default;
        template <class Archive> void serialize(Archive& ar) {
            ar(target.gid.prefix, target.gid.iid, target.lid, target.local_qp, rkey, raddr);
        }
    };
    struct KeyHash {
        std::size_t operator()(const Key& k) const {
            return std::hash<uint64_t>()(k.raddr ^ (static_cast<uint64_t>(k.rkey) << 32) ^ k.target.bits());
        }
    };
    struct OpenEpoch {
        int64_t first = 0;
        int64_t last = 0;
        ProcId first_proc = kNoId;
        ProcId last_proc = kNoId;
        uint32_t count = 0;
    };
    // Participants per signal count, ascending by count. Flat: participants stay within a few rounds of each
    // other, so there are few distinct counts, and every signal moves one participant up by one.
    struct SignalCounts {
        std::vector<std::pair<uint32_t, uint32_t>> by_count;  // (signals so far, participants with that many)
        void move(uint32_t from, uint32_t to);                // one participant's count changes
        void add_new();                                       // a participant with 0 signals
        uint32_t min() const { return by_count.front().first; }
        uint32_t max() const { return by_count.back().first; }
    };
    // The open epochs, consecutive by number from `base`; an entry with count 0 is an epoch that does not exist
    // (below a late signal's epoch re-opened after its successors had closed).
    struct OpenEpochs {
        std::deque<OpenEpoch> epochs;
        uint32_t base = 0;
        std::size_t size = 0;  // entries with count > 0
        OpenEpoch& at(uint32_t k);
        // The lowest existing epoch (holes in front are dropped); size > 0 required.
        OpenEpoch& lowest();
        void pop_lowest();
    };
    struct Word {
        Key key{};
        QpId via = kNoId;   // a QP that signals it: resolves the target at the end
        uint32_t rkey = 0;
        uint64_t raddr = 0;
        std::unordered_map<ProcId, uint32_t> signals;   // participant -> signals so far
        SignalCounts counts;
        uint32_t min_signals = 0;
        OpenEpochs open;
        BarrierWord result;
        bool irregular = false;   // a participant joined after epochs had closed
        bool closed_any = false;
        // Can no longer be a barrier (detection from the pattern only): irregular, or one participant whose
        // epochs have begun to close, so that any newcomer would make it irregular. Its signals are then only
        // looked up, not counted: most small writes of a bandwidth run go to words like that (one writer
        // cycling over its buffer), and counting them was most of the detector's time.
        bool dead = false;
    };

    // Inline: every operation is asked, and most are not signals.
    bool is_signal(const Operation& op) const {
        // Atomics and writes (small ones), by opcode bit; a receive's opcode (>= 128) is none of them.
        constexpr uint32_t kAtomics = 1u << static_cast<int>(WrOpcode::ATOMIC_CMP_AND_SWP) |
                                      1u << static_cast<int>(WrOpcode::ATOMIC_FETCH_AND_ADD) |
                                      1u << static_cast<int>(WrOpcode::ATOMIC_WRITE);
        constexpr uint32_t kWrites = 1u << static_cast<int>(WrOpcode::RDMA_WRITE) | 1u << static_cast<int>(WrOpcode::RDMA_WRITE_WITH_IMM);
        // Outcomes of an operation that did not reach its target's memory.
        constexpr uint32_t kNotDelivered = 1u << static_cast<int>(OpOutcome::Failed) | 1u << static_cast<int>(OpOutcome::Flushed) |
                                           1u << static_cast<int>(OpOutcome::FlushedAtTeardown) |
                                           1u << static_cast<int>(OpOutcome::Lost);
        static_assert(kOpRecv >= 32);
        if (op.opcode >= 32 || (kNotDelivered >> static_cast<int>(op.outcome) & 1) != 0) return false;
        const uint32_t bit = 1u << op.opcode;
        const bool atomic = (bit & kAtomics) != 0;
        const bool small_write = (bit & kWrites) != 0 && op.bytes <= options_.max_signal_bytes;
        if (!atomic && !small_write) return false;
        if (options_.word) {
            if (op.raddr != options_.word->raddr) return false;
            if (options_.word->rkey && op.rkey != *options_.word->rkey) return false;
        }
        return true;
    }
    // A signal to the word of `key`, whose target is numbered `target`; `slot` is its slot in recent_.
    void add_signal(const Operation& op, const Key& key, uint32_t target, std::size_t slot);
    void close_epoch(Word& w, const OpenEpoch& e);
    void bury_if_dead(Word& w) const;

    BarrierOptions options_;
    std::unordered_map<Key, std::unique_ptr<Word>, KeyHash> words_;
    // The words by key, for add(): open addressing over twice kMaxWords slots (never more than half full), a
    // slot holding a word's hash and the word itself. Every small write of a bandwidth run is a candidate
    // signal whose word must be found, and finding it through words_ costs three dependent cache misses
    // (bucket, node, word); a slot costs one before the word.
    struct Slot {
        uint64_t hash = 0;
        Word* word = nullptr;
    };
    static constexpr int kIndexBits = 13;
    static_assert((std::size_t{1} << kIndexBits) >= 2 * kMaxWords);
    std::vector<Slot> index_ = std::vector<Slot>(std::size_t{1} << kIndexBits);
    Word* find_word(const Key& key, uint64_t hash) const;
    // The number of target `t`, the run's of QP `q`: the QP's last one when `t` is still its target. Inline:
    // a trace whose every WR is signaled asks once per operation.
    uint32_t target_id(QpId q, const Target& t) {
        if (q < target_of_qp_.size()) {
            const uint32_t id = target_of_qp_[q];
            if (id != kNoTarget && targets_[id] == t) [[likely]]
                return id;
        }
        return new_target_id(q, t);
    }
    uint32_t new_target_id(QpId q, const Target& t);
    std::vector<Target> targets_;   // by number (below kNoTarget: one per remote address or QP)
    std::unordered_map<Target, uint32_t, TargetHash> target_ids_;
    std::vector<uint32_t> target_of_qp_;   // by QpId: its last target's number (a QP may be re-addressed)

    // The words of recent signals, direct-mapped by key: consecutive signals mostly go to the same word, and a
    // bandwidth run's small writes cycle over up to hundreds of buffers, each a (soon dead) candidate word that
    // would otherwise cost a hash and a probe per write. A slot holds its word's key (the target by number)
    // and whether the word is dead, 16 bytes: a dead word's signals (most of a bandwidth run's) are answered
    // from the slot alone, without reading the word, which lies elsewhere in memory.
    static constexpr int kRecentBits = 8;
    static constexpr uint32_t kDead = 1u << 31;
    static constexpr uint32_t kNoTarget = kDead - 1;   // an empty slot's, a QP's before its first run
    struct Recent {
        uint64_t raddr = 0;
        uint32_t rkey = 0;
        uint32_t target = kNoTarget;   // | kDead: the word is dead
    };
    static std::size_t recent_slot(uint64_t raddr, uint32_t rkey, uint32_t target) {
        return static_cast<std::size_t>(((raddr ^ (static_cast<uint64_t>(rkey) << 32) ^ target) * 0x9e3779b97f4a7c15ULL) >>
                                        (64 - kRecentBits));
    }
    std::array<Recent, std::size_t{1} << kRecentBits> recent_{};
    std::array<Word*, std::size_t{1} << kRecentBits> recent_word_{};
    uint64_t dropped_ = 0;

    // log_signals(): each word's signals per participant, in arrival order.
    struct Logged {
        int64_t arrival = 0;   // completion time (post time without one): the order the detector takes it in
        int64_t post = 0;
        template <class Archive> void serialize(Archive& ar) { ar(arrival, post); }
    };
    struct ParticipantLog {
        std::vector<Logged> signals;
        bool cut = false;   // past kLogCap as the word's only participant: the first kCloseLag + 1 kept
        template <class Archive> void serialize(Archive& ar) { ar(signals, cut); }
    };
    struct WordLog {
        QpId via = kNoId;
        uint32_t rkey = 0;
        uint64_t raddr = 0;
        std::map<ProcId, ParticipantLog> by_proc;
        template <class Archive> void serialize(Archive& ar) { ar(via, rkey, raddr, by_proc); }
    };
    void log_signal(const Operation& op, const Key& key);
    // Whether a word of these logs (the second may be null) is judged as one detector would: for each cut
    // participant, every other one arrived after the signal that made the word dead.
    static bool decided(const WordLog& a, const WordLog* b);
    void replay();
    bool log_ = false;
    bool log_full_ = false;   // kMaxLogged reached: signals no longer logged
    std::size_t logged_ = 0;
    std::unordered_map<Key, WordLog, KeyHash> logs_;
    const Key* last_log_key_ = nullptr;
    WordLog* last_log_ = nullptr;
};

}  // namespace sigmatrace::analyzer
