// The analysis of one trace set: takes decoded events (and losses) in time order, streams them through
// topology, operation reconstruction, statistics, traffic and barrier detection, and at the end produces the
// analysis document (json_report.h). Knows nothing of Babeltrace2: trace_reader.h drives it from a graph,
// unit tests and the fuzzer drive it directly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/analyses/barrier_detector.h"
#include "analyzer/decode/decoded_event.h"
#include "analyzer/decode/event_sink.h"
#include "analyzer/analyses/gray_link_detector.h"
#include "analyzer/analyses/incast_detector.h"
#include "analyzer/analyses/clock_alignment.h"
#include "analyzer/analyses/op_reconstruction.h"
#include "analyzer/analyses/outstanding.h"
#include "analyzer/analyses/phase_tracker.h"
#include "analyzer/analyses/queue_progress.h"
#include "analyzer/analyses/statistics.h"
#include "analyzer/analyses/time_windows.h"
#include "analyzer/analyses/topology.h"
#include "analyzer/analyses/traffic.h"

namespace sigmatrace::analyzer {

struct AnalysisOptions {
    BarrierOptions barrier;
    double skew_threshold = 1.5;           // traffic_skew finding when inbound or outbound skew exceeds it
    uint64_t error_storm_threshold = 10;   // error_storm finding at this many error completions (flushes included)
    int64_t stall_after_ns = 1'000'000'000; // stalled_queue: work outstanding without a completion this long
    double straggler_fraction = 0.5;       // barrier_straggler: last in more than this fraction of epochs
    double rail_imbalance_threshold = 1.5; // rail_imbalance: max/mean bytes over a node's NICs above this
    GrayLinkOptions gray;                  // gray_link (gray_link_detector.h)
    IncastOptions incast;                  // incast (incast_detector.h)
    WindowOptions windows;                 // timeline windows and outstanding work (time_windows.h, outstanding.h)
    PhaseOptions phases;                   // communication phases (phase_tracker.h)
    ClockOptions clock;                    // clock alignment (clock_alignment.h)
};

// A loss reported by the trace itself (lttng ring buffer full): events or whole packets discarded.
struct DiscardRecord {
    uint32_t trace_index = 0;
    std::string trace;       // trace path or hostname, for the message
    std::string stream;      // stream name (channel_cpu)
    uint64_t count = 0;      // 0 when the trace could not say how many
    bool packets = false;
    // The stream's class declares no data-path event: sigmatrace record's set-up channel, whose size is fixed
    // (its loss wants --blocking, not a larger --channel-size). A one-channel trace's streams carry both.
    bool setup_only = false;
    int64_t begin_ns = 0;
    int64_t end_ns = 0;
    template <class Archive> void serialize(Archive& ar) {   // share_codec.cpp
        ar(trace_index, trace, stream, count, packets, setup_only, begin_ns, end_ns);
    }
};

// A finding reported while the trace is still being read (--live): the report's finding object (kind,
// severity, summary, evidence), and when what caused it happened.
struct LiveFinding {
    nlohmann::json finding;
    int64_t event_ns = 0;   // trace clock, ns from origin
};

// An error-status completion, kept as evidence.
struct ErrorSample {
    int64_t ts = 0;
    ProcId proc = kNoId;
    QpId qp = kNoId;
    uint8_t status = 0;
    uint8_t opcode = 0;
    uint64_t wr_id = 0;
    template <class Archive> void serialize(Archive& ar) { ar(ts, proc, qp, status, opcode, wr_id); }   // share_codec.cpp
};

// The earliest error completions, by completion time (then process and QP; one QP's in the order they came):
// defined by the errors alone, not by the order they were read in, so shares of a trace merge into the same.
class FirstErrors {
public:
    static constexpr std::size_t kKept = 16;
    void add(const ErrorSample& e) {
        if (kept_.size() == kKept && !before(e, kept_.back())) return;
        kept_.insert(std::upper_bound(kept_.begin(), kept_.end(), e, before), e);
        if (kept_.size() > kKept) kept_.pop_back();
    }
    void merge(const FirstErrors& other) {
        for (const ErrorSample& e : other.kept_) add(e);
    }
    bool empty() const { return kept_.empty(); }
    const ErrorSample& front() const { return kept_.front(); }
    auto begin() const { return kept_.begin(); }
    auto end() const { return kept_.end(); }
    template <class Archive> void serialize(Archive& ar) { ar(kept_); }   // share_codec.cpp

private:
    static bool before(const ErrorSample& a, const ErrorSample& b) {
        return std::tie(a.ts, a.proc, a.qp) < std::tie(b.ts, b.proc, b.qp);
    }
    std::vector<ErrorSample> kept_;
};

// A clock estimate in bytes (share_codec.cpp): what the ranks reading a trace in shares are sent for their
// second read. load_clock_result() is nullopt for bytes that are not one.
std::string save_clock_result(const ClockResult& clocks);
std::optional<ClockResult> load_clock_result(std::string_view bytes);

class Analysis : public EventSink, public OpListener {
public:
    explicit Analysis(AnalysisOptions options = {});
    Analysis(const Analysis&) = delete;
    Analysis& operator=(const Analysis&) = delete;

    // Observers of every operation (the Perfetto writer); not owned, must outlive finish().
    void add_listener(OpListener* l) { listeners_.push_back(l); }

    void on_event(const DecodedEvent& ev) override;
    void on_element(const DataElement& e) override;
    void on_elements(std::span<const DataElement> es) override;
    // From the reordering stage in front of this analysis (reorder_stage.h), at the end of the stream.
    void on_ordering(const OrderingSummary& s) override { ordering_ = s; }
    // A share counts its own traces' losses only.
    void on_discarded(const DiscardRecord& d);
    // The trace's streams were recorded until at least `ns` (a packet's end): a job that went silent was still
    // being recorded until then (a stall is measured to it, queue_progress.h).
    void on_recorded_until(int64_t ns) { recorded_until_ = std::max(recorded_until_, ns); }
    // A trace that could not be read (whole or in part); the analysis continues with the rest.
    void on_read_problem(std::string message) { read_problems_.push_back(std::move(message)); }
    void set_trace_paths(std::vector<std::string> paths) { trace_paths_ = std::move(paths); }

    // Finishes reconstruction (in-flight WRs) and builds the document. Call once.
    nlohmann::json finish();

    // A trace analysed in shares (docs/architecture.md, "Analysis in shares"): analyses that each read every
    // trace's set-up events in the same order, so that their topologies' ids agree, and the data events of their
    // own hosts' traces only. set_share() names a share's hosts (the traces' hostnames; a share of no host is
    // allowed), before the first event: events of the others' traces build its topology and count nowhere.
    // finish_share() ends a share's reconstruction (its work requests still in flight handed over); merge_share()
    // adds another finished share into this one, which finish() then completes. It merges nothing and returns
    // false when the topologies differ (objects a share created from data events alone, a damaged trace's) or a
    // part cannot be merged exactly: such a trace is analysed whole. What merges: the statistics, the traffic,
    // the receives left unconsumed, the error completions (counts and the earliest), each QP's progress,
    // outstanding work and clock constraints, the time windows, the phases, the gray-link detector's links and
    // the incast detector's senders (each measured by one share: else the merge is refused), the barrier
    // detector's signal logs (refused when one was cut short: barrier_detector.h), event and per-process counts,
    // anomalies, losses and the trace's time span.
    void set_share(std::vector<std::string> hosts) {
        share_hosts_ = std::move(hosts);
        sharing_ = true;
        incast_.keep_fans();
        barriers_.log_signals();
    }
    void finish_share();
    bool merge_share(Analysis& other);
    // A finished share in bytes, for a process other than its reader to merge (share_codec.cpp: under mpirun
    // each rank reads a share and rank 0 merges them): what merge_share() takes from it, and the identities of
    // its topology's objects. Finishes the share first.
    std::string save_share();
    // The share saved in `bytes` as an analysis to pass to like.merge_share(), standing on a copy of `like`'s
    // topology (every share builds the same one from the set-up events). Null, with the reason in `why`, when
    // the bytes are not a share saved by this build, or the share's objects are not `like`'s.
    static std::unique_ptr<Analysis> load_share(std::string_view bytes, const Analysis& like, std::string* why);
    // Whether this analysis reads the data of the traces of `host` (a trace's hostname).
    bool owns_host(std::string_view host) const {
        return !sharing_ || std::find(share_hosts_.begin(), share_hosts_.end(), host) != share_hosts_.end();
    }
    // Whether this analysis reads the data events of trace `trace`, whose hostname is `host` (the readers ask
    // before decoding one, and skip the others'): decided by the host the first time the trace is seen.
    bool owns(uint32_t trace, std::string_view host) {
        if (!sharing_) return true;
        if (trace >= owned_traces_.size()) owned_traces_.resize(trace + 1, kUnknownTrace);
        if (owned_traces_[trace] == kUnknownTrace) owned_traces_[trace] = owns_host(host) ? 1 : 0;
        return owned_traces_[trace] == 1;
    }
    // Trace `trace` as seen so far (one never seen is not a share's).
    bool owns(uint32_t trace) const {
        return !sharing_ || (trace < owned_traces_.size() && owned_traces_[trace] == 1);
    }
    // The first read's end (options.clock.constraints_only): finishes reconstruction and estimates the clocks.
    ClockResult finish_clocks();
    // What the readers apply to each trace's times (by its hostname): null when nothing is to be moved.
    const ClockCorrection* clock_correction() const { return correction_.empty() ? nullptr : &correction_; }

    // OpListener
    void on_operation(const Operation& op) override { on_operations(std::span<const Operation>(&op, 1)); }
    void on_operations(std::span<const Operation> ops) override;

    // Live (--live): the findings that became known since the last call, each once: a gray link's episode (on
    // the windows closed so far), an incast episode once it lasts --incast-min-duration, a stalled queue once
    // nothing completed on it for --stall-after, an error storm (the error completion that reached the threshold).
    std::vector<LiveFinding> new_live_findings();

    const Topology& topology() const { return topo_; }
    uint64_t events() const { return events_; }

private:
    friend class ReportBuilder;

    // The topology and queue-state effects of a set-up or object-life event, which every share applies.
    void on_object_event(const DecodedEvent& ev, ProcId p);
    void on_gpu_qp_query(const DecodedEvent& ev, ProcId p);
    void on_qp_counters(const DecodedEvent& ev, ProcId p);
    // The trace's time span: the earliest capture and the latest event.
    void note_time(int64_t begin, int64_t end) {
        if (!have_times_ || begin < first_ts_) first_ts_ = begin;
        if (!have_times_ || end > last_ts_) last_ts_ = end;
        have_times_ = true;
    }
    // What on_operations() does with a run of sends the link analyses take whole (data_link.h SendRun); false,
    // having done nothing, for any other run.
    bool take_send_run(const SendRun& run, const Qp& qp);
    // The end of the stream for reconstruction (in-flight WRs) and peers: what finish() and finish_clocks() share.
    void finish_reconstruction();

    AnalysisOptions options_;
    // set_share(): the share's hosts, and by trace index whether it reads that trace's data (kUnknownTrace until
    // the trace is seen).
    bool sharing_ = false;
    std::vector<std::string> share_hosts_;
    static constexpr int8_t kUnknownTrace = -1;
    std::vector<int8_t> owned_traces_;
    Topology topo_;
    OpReconstruction recon_;
    Statistics stats_;
    Traffic traffic_;
    BarrierDetector barriers_;
    GrayLinkDetector gray_;
    IncastDetector incast_;
    TimeWindows windows_;
    PhaseTracker phases_;
    Outstanding outstanding_;
    QueueProgress progress_;
    ClockConstraints clocks_;
    ClockResult clock_result_;        // filled by finish()
    ClockCorrection correction_;      // from options_.clock.applied
    GrayLinkResult gray_result_;      // filled by finish()
    IncastResult incast_result_;
    std::vector<OpListener*> listeners_;
    std::vector<DiscardRecord> discards_;
    OrderingSummary ordering_;
    std::vector<std::string> read_problems_;
    // Deferred records salvaged from the rings of processes that ended without emitting them (record's salvage
    // step), and records it could not save, by process.
    uint64_t salvaged_events_ = 0;
    std::map<int64_t, uint64_t> lost_records_;
    std::vector<std::string> trace_paths_;
    FirstErrors first_errors_;
    std::map<uint8_t, uint64_t> errors_by_status_;
    std::vector<uint64_t> events_by_id_ = std::vector<uint64_t>(kEventCount, 0);
    uint64_t events_ = 0;
    uint64_t counter_events_ = 0;   // qp_counters events (counters mode)
    int64_t first_ts_ = 0;
    int64_t last_ts_ = 0;
    int64_t recorded_until_ = 0;
    bool have_times_ = false;
    bool finished_ = false;
    bool reconstruction_finished_ = false;
    std::vector<ProcId> retired_scratch_;
    // Live: episodes reported per link (by its finding's link evidence), the error storm's.
    std::map<std::string, std::size_t> live_gray_reported_;
    std::map<std::string, std::size_t> live_incast_reported_;   // by receiver: episodes reported
    std::map<std::string, int64_t> live_stalls_reported_;       // by QP: the stall's start reported
    uint64_t errors_seen_ = 0;
    int64_t storm_ts_ = -1;   // when the errors reached the threshold (-1: not yet)
    bool live_storm_reported_ = false;
};

}  // namespace sigmatrace::analyzer
