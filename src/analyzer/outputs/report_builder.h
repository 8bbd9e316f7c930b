// Builds the analysis document (the `--json` contract of docs/analyzer.md, "Outputs", schema
// "sigmatrace.analysis/2") from a finished Analysis, findings included. The text and HTML reports are rendered
// from this document, so every output says the same thing.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/analyses/model.h"
#include "analyzer/analyses/queue_progress.h"

namespace sigmatrace::analyzer {

class Analysis;
struct GrayLinkResult;
struct IncastResult;
struct OpAggregate;
struct Qp;

// Version 2: latency_ns holds only operations whose own completion was seen (implied_latency_ns the others),
// receives report time_posted_ns, teardown outcomes (unconfirmed, flushed_at_teardown), bytes by outcome,
// counters-mode sections. docs/analyzer.md "Versions".
inline constexpr const char* kAnalysisSchema = "sigmatrace.analysis/2";
// Earlier versions a --baseline may be: the paths rules compare exist in both.
inline constexpr const char* kAnalysisSchemaV1 = "sigmatrace.analysis/1";

// {kind, severity, summary, evidence}: one entry of the document's findings.
nlohmann::json finding(std::string kind, std::string severity, std::string summary, nlohmann::json evidence);

// "RDMA_WRITE", "RECV", ...: the contract's opcode names.
std::string opcode_name(uint8_t code);

class ReportBuilder {
public:
    explicit ReportBuilder(const Analysis& a) : a_(a) {}
    nlohmann::json build() const;
    // The gray_link findings of `g` (the analysis's own at the end; a snapshot while a live trace is read).
    nlohmann::json gray_link_findings(const GrayLinkResult& g) const;
    nlohmann::json incast_findings(const IncastResult& r) const;   // likewise
    nlohmann::json stall_findings() const;   // the stalled_queue findings up to the latest time read

private:
    nlohmann::json trace_section() const;
    uint64_t lost_records_total() const;
    nlohmann::json processes_section() const;
    nlohmann::json ops_section() const;
    nlohmann::json qps_section() const;
    nlohmann::json peers_section() const;
    nlohmann::json counters_section() const;   // counters mode (qp_counters events), only when there are some
    std::string trace_mode() const;             // "ops", "counters" or "mixed" (processes traced either way)
    nlohmann::json traffic_section() const;
    nlohmann::json rails_section() const;
    nlohmann::json barriers_section(nlohmann::json& findings) const;
    nlohmann::json links_section() const;
    nlohmann::json options_section() const;
    nlohmann::json timeline_section() const;            // timeline_section.cpp
    nlohmann::json phases_section(nlohmann::json& findings) const;   // phases_section.cpp
    nlohmann::json phases_options() const;                            // phases_section.cpp
    nlohmann::json outstanding_json(QpId q) const;      // qps[].outstanding, null when none
    // progress_section.cpp: qps[].progress (null when none), an operation as evidence, an error completion's
    // status and syndrome, and the stalled_queue findings.
    nlohmann::json progress_json(QpId q) const;
    nlohmann::json nic_query_json(const std::optional<NicQuery>& n) const;
    nlohmann::json wqe_json(const Operation& op) const;
    nlohmann::json completion_error_json(const Operation& op) const;
    void add_stall_findings(nlohmann::json& findings, bool error_storm) const;
    void add_gray_link_findings(nlohmann::json& findings, const GrayLinkResult& g) const;
    void add_incast_findings(nlohmann::json& findings, const IncastResult& result) const;
    void add_findings(nlohmann::json& doc, nlohmann::json& findings) const;
    nlohmann::json warnings() const;

    // What a skew is computed over: inter-node flows (node pairs that moved bytes), their nodes and bytes. A
    // traffic_skew finding needs at least 3 nodes, 2 flows and 64 KiB: over 2 nodes, or a single flow, max/mean
    // is 2.00x whatever the traffic, and a few KiB of set-up traffic says nothing about balance.
    struct SkewBasis {
        static constexpr std::size_t kMinNodes = 3;
        static constexpr std::size_t kMinFlows = 2;
        static constexpr uint64_t kMinBytes = 64 * 1024;
        std::size_t nodes = 0;
        std::size_t flows = 0;
        uint64_t bytes = 0;
        bool meaningful() const { return nodes >= kMinNodes && flows >= kMinFlows && bytes >= kMinBytes; }
    };
    SkewBasis skew_basis() const;

    nlohmann::json proc_ref(ProcId p) const;   // {rank, node, pid}
    nlohmann::json qp_ref(const Qp& qp) const;  // proc_ref + {qp_num, type, device, peer}
    std::string proc_label(ProcId p) const;     // "rank 3 (node3)" or "pid 1234 (node3)"
    std::string node_name(NodeId n) const;
    nlohmann::json nic_ref(DevId d) const;      // {node, device}
    std::string nic_label(DevId d) const;       // "node3/sfab_1"

    // Processes that did anything RDMA (see Topology::rdma_active), in id order.
    std::vector<ProcId> active_processes() const;
    // One warning per job whose traced ranks are fewer than its size.
    std::vector<std::string> missing_ranks() const;
    std::string unaligned_hosts() const;
    // Clock estimates per host (traces of two or more hosts).
    nlohmann::json clock_section() const;
    // The nodes of the trace: those of its RDMA processes and those its transfers reach, by name.
    std::vector<NodeId> trace_nodes() const;

    const Analysis& a_;
    // The start of each epoch of the barrier word with the most sampled epochs: filled by barriers_section(),
    // read by phases_section() (the barrier detector can be finished only once).
    mutable std::vector<int64_t> barrier_bounds_;
};

// {p50, p99, max} (ns, integers) of an aggregate's latency, nulls when it has no completed operation.
nlohmann::json latency_json(const OpAggregate& agg);

}  // namespace sigmatrace::analyzer
