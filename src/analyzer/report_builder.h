// Builds the analysis document (the `--json` contract of DESIGN.md, schema "sigmatrace.analysis/1") from a
// finished Analysis, findings included. The text and HTML reports are rendered from this document, so every
// output says the same thing.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/model.h"

namespace sigmatrace::analyzer {

class Analysis;
struct OpAggregate;

inline constexpr const char* kAnalysisSchema = "sigmatrace.analysis/1";

// "RDMA_WRITE", "RECV", ...: the contract's opcode names.
std::string opcode_name(uint8_t code);

class ReportBuilder {
public:
    explicit ReportBuilder(const Analysis& a) : a_(a) {}
    nlohmann::json build() const;

private:
    nlohmann::json trace_section() const;
    uint64_t lost_records_total() const;
    nlohmann::json processes_section() const;
    nlohmann::json ops_section() const;
    nlohmann::json qps_section() const;
    nlohmann::json peers_section() const;
    nlohmann::json traffic_section() const;
    nlohmann::json rails_section() const;
    nlohmann::json barriers_section(nlohmann::json& findings) const;
    nlohmann::json links_section() const;
    nlohmann::json options_section() const;
    void add_gray_link_findings(nlohmann::json& findings) const;
    void add_incast_findings(nlohmann::json& findings) const;
    void add_findings(nlohmann::json& doc, nlohmann::json& findings) const;
    nlohmann::json warnings() const;

    nlohmann::json proc_ref(ProcId p) const;   // {rank, node, pid}
    std::string proc_label(ProcId p) const;     // "rank 3 (node3)" or "pid 1234 (node3)"
    std::string node_name(NodeId n) const;
    nlohmann::json nic_ref(DevId d) const;      // {node, device}
    std::string nic_label(DevId d) const;       // "node3/sfab_1"

    // Processes that did anything RDMA (see Topology::rdma_active), in id order.
    std::vector<ProcId> active_processes() const;
    // The nodes of the trace: those of its RDMA processes and those its transfers reach, by name.
    std::vector<NodeId> trace_nodes() const;

    const Analysis& a_;
};

// {p50, p99, max} (ns, integers) of an aggregate's latency, nulls when it has no completed operation.
nlohmann::json latency_json(const OpAggregate& agg);

}  // namespace sigmatrace::analyzer
