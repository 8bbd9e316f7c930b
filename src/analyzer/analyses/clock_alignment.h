// Clock alignment (docs/analyzer.md, "Clocks"): how far each host's trace clock is from a reference host's,
// estimated from the traffic itself.
//
// Every message that crosses hosts orders two events: on an RC QP the k-th message-consuming operation (SEND,
// SEND_WITH_IMM, SEND_WITH_INV, RDMA_WRITE_WITH_IMM) posted on QP A is the k-th receive completed on its peer QP
// B, and it was posted before it completed there. With each host's clock reading true time plus a skew s_h(t),
// that gives  s_B - s_A < done_B - post_A : an upper bound on the relative skew of B against A from A->B
// messages, a lower bound from B->A ones. The relative skew is modelled as offset + drift x (t - t0); the fit
// keeps the (offset, drift) that leaves the widest band between the bounds, with no drift unless the bounds
// clearly show one, and states how far every line the bounds allow is from it (the truth is one of them when
// the model holds): in offset at t0 and in drift. Bounds that leave no band contradict each other (a clock that
// jumped, or messages mismatched): that host pair is reported as such. Hosts are placed relative to the
// reference host (the one of the lowest rank) along the best-constrained pairs.
//
// The analyzer moves each estimated host's times by its estimate before analysing (ClockCorrection, applied by
// the readers on a second read of the trace: analyze_main.cpp).
//
// Memory is bounded per QP: the k-th operations are kept for a stride of k that doubles when a QP's samples
// fill (both sides of a QP pair count the same messages, so they keep the same k).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analyzer/analyses/model.h"
#include "analyzer/analyses/topology.h"

namespace sigmatrace::analyzer {

// A bound on the relative skew at local time t: delta(t) < value (upper) or delta(t) > value (lower).
struct SkewBound {
    double t = 0;
    double value = 0;
};

// The fit of one host pair's relative skew delta(t) = offset + drift x (t - t0).
struct PairFit {
    bool two_sided = false;    // bounds on both sides: an estimate exists
    bool consistent = false;   // the bounds leave a band (else they contradict each other)
    double offset_ns = 0;      // at t0
    double drift = 0;          // dimensionless (1e-6 = 1 ppm)
    double half_width_ns = 0;  // the band's half-width at the fitted drift (negative: by how much they contradict)
    // Consistent fits: every line the bounds allow has a drift in [drift_lo, drift_hi] (within the 1000 ppm the fit
    // considers) and an offset at t0 in [offset_lo_ns, offset_hi_ns]: where the truth lies when the model holds.
    double drift_lo = 0, drift_hi = 0;
    double offset_lo_ns = 0, offset_hi_ns = 0;
    // How far the truth may be from the fit: its offset at t0 (how far the bounds cross, for a contradictory fit),
    // and its drift (0 for a contradictory fit, which allows none).
    double offset_uncertainty_ns() const {
        return consistent ? std::max(offset_hi_ns - offset_ns, offset_ns - offset_lo_ns) : std::abs(half_width_ns);
    }
    double drift_uncertainty() const { return consistent ? std::max(drift_hi - drift, drift - drift_lo) : 0.0; }
};
PairFit fit_relative_skew(const std::vector<SkewBound>& upper, const std::vector<SkewBound>& lower, double t0);

struct HostClock {
    enum class Status { reference, estimated, one_sided, unconstrained, contradictory };
    std::string host;
    Status status = Status::unconstrained;
    std::string relative_to;     // the host its estimate was derived from (the reference's: itself)
    double offset_ns = 0;        // this host's clock minus the reference's, at the trace's start
    double drift_ppm = 0;
    // How far the truth may be from offset_ns at the time it is given at, and from drift_ppm, when the model holds
    // (accumulated along the path from the reference; a contradictory host's: how far its bounds cross, no drift's).
    double uncertainty_ns = 0;
    double drift_uncertainty_ppm = 0;
    uint64_t bounds = 0;         // constraints on the pair it was derived from
    template <class Archive> void serialize(Archive& ar) {   // share_codec.cpp
        ar(host, status, relative_to, offset_ns, drift_ppm, uncertainty_ns, drift_uncertainty_ppm, bounds);
    }
};
const char* status_name(HostClock::Status s);

struct ClockResult {
    std::string reference;
    int64_t at_ns = 0;              // the time the offsets are given at (the middle of the messages, as recorded)
    std::vector<HostClock> hosts;   // sorted by host name; empty when the trace has one host
    bool applied = false;           // the readers moved estimated hosts' times onto the reference's (Analysis sets it)
    template <class Archive> void serialize(Archive& ar) { ar(reference, at_ns, hosts, applied); }   // share_codec.cpp
};

// One host's times moved onto the reference host's clock: local - (offset + drift x (local - t0)). Monotonic
// (|drift| < 1), so a stream's order is kept.
struct ClockShift {
    double offset_ns = 0;
    double drift = 0;
    int64_t t0 = 0;
    int64_t to_reference(int64_t local) const {
        return local - std::llround(offset_ns + drift * static_cast<double>(local - t0));
    }
};

// How the analysis treats hosts' clocks (docs/analyzer.md, "Clocks").
struct ClockOptions {
    bool align = true;   // --clock-align off: the analyses use the recorded times (the estimate is still reported)
    // The first read of a trace of several hosts: operations are reconstructed for the clock constraints only.
    bool constraints_only = false;
    // The second read: the first read's estimate. The readers move each estimated host's times by it
    // (Analysis::clock_correction), and the report gives it.
    std::optional<ClockResult> applied;
};

// The shifts the readers apply, by the trace's hostname: the hosts a ClockResult estimated (its reference and
// hosts it could not place keep their recorded times).
class ClockCorrection {
public:
    ClockCorrection() = default;
    explicit ClockCorrection(const ClockResult& r);
    // Null: that host's times stay as recorded.
    const ClockShift* find(std::string_view host) const {
        const auto it = shifts_.find(host);
        return it == shifts_.end() ? nullptr : &it->second;
    }
    bool empty() const { return shifts_.empty(); }

private:
    std::map<std::string, ClockShift, std::less<>> shifts_;
};

class ClockConstraints {
public:
    static constexpr std::size_t kMaxSamplesPerQp = 1024;

    // Inline: every operation is asked, and most are neither receives nor sends that consume one.
    void add(const Operation& op, const Qp& qp) {
        if (takes(op, qp)) add_message(op);
    }
    // Whether add() keeps anything of `op`: the same answer for every operation of one QP and opcode.
    static bool takes(const Operation& op, const Qp& qp) {
        return qp.type == kQptRc && op.qp != kNoId && (op.is_recv() || consumes_receive(op.opcode));
    }
    // Offsets are given at the middle of the messages' time span (`t0`, the trace's start, when there are none).
    // Needs resolved peers.
    ClockResult solve(const Topology& topo, int64_t t0) const;
    // QP q's samples as `owner`, the share of the trace that read its data events, has them (analysis.h,
    // merge_share): a QP's messages are all its own process's.
    // A share in bytes (share_codec.cpp): what take() takes.
    template <class Archive> void serialize(Archive& ar) { ar(sends_, recvs_); }
    void take(QpId q, const ClockConstraints& owner) {
        take_side(sends_, owner.sends_, q);
        take_side(recvs_, owner.recvs_, q);
    }

private:
    static constexpr uint32_t kQptRc = 2;   // IBV_QPT_RC
    // A send that the responder's receive queue answers (a receive completion there).
    static bool consumes_receive(uint8_t opcode) {
        const auto code = static_cast<WrOpcode>(opcode);
        return code == WrOpcode::SEND || code == WrOpcode::SEND_WITH_IMM || code == WrOpcode::SEND_WITH_INV ||
               code == WrOpcode::RDMA_WRITE_WITH_IMM;
    }
    // A receive, or a send that consumes one, on an RC QP.
    void add_message(const Operation& op);

    struct Samples {
        uint64_t count = 0;
        uint64_t stride = 1;
        bool broken = false;   // an error made the count unreliable: not used
        std::vector<std::pair<uint64_t, int64_t>> kept;   // (k, local time)
        void add(int64_t ts);
        template <class Archive> void serialize(Archive& ar) { ar(count, stride, broken, kept); }
    };
    static void take_side(std::vector<Samples>& mine, const std::vector<Samples>& owner, QpId q) {
        if (q >= owner.size()) return;
        if (q >= mine.size()) mine.resize(q + 1);
        mine[q] = owner[q];
    }
    // By QP id (dense): post times of message-consuming operations, completion times of receives.
    std::vector<Samples> sends_;
    std::vector<Samples> recvs_;
};

}  // namespace sigmatrace::analyzer
