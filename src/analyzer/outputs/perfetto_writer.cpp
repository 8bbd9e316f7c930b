#include "analyzer/outputs/perfetto_writer.h"
#include "analyzer/outputs/timeline_track_names.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <sigmatrace/opcodes.h>

#include "analyzer/outputs/report_builder.h"
#include "analyzer/outputs/json_text.h"

namespace sigmatrace::analyzer {

namespace {
constexpr std::size_t kMaxWaitingFlowEnds = 4096;   // per QP pair: bounds memory when one side is not traced
}  // namespace

const char* outcome_name(OpOutcome o) {
    switch (o) {
    case OpOutcome::Completed: return "completed";
    case OpOutcome::Failed: return "failed";
    case OpOutcome::Flushed: return "flushed";
    case OpOutcome::InFlight: return "in flight at end";
    case OpOutcome::Observed: return "observed (no CQE)";
    case OpOutcome::Lost: return "completion lost";
    case OpOutcome::Unconfirmed: return "unconfirmed (QP torn down)";
    case OpOutcome::FlushedAtTeardown: return "flushed at teardown";
    }
    return "?";
}

bool two_sided_send(uint8_t opcode) {
    return opcode == static_cast<uint8_t>(WrOpcode::SEND) || opcode == static_cast<uint8_t>(WrOpcode::SEND_WITH_IMM) ||
           opcode == static_cast<uint8_t>(WrOpcode::RDMA_WRITE_WITH_IMM) ||
           opcode == static_cast<uint8_t>(WrOpcode::SEND_WITH_INV);
}
// One-sided operations: the target's CPU sees nothing, the target's QP is where the data lands (or is read).
bool one_sided(uint8_t opcode) {
    return opcode == static_cast<uint8_t>(WrOpcode::RDMA_WRITE) || opcode == static_cast<uint8_t>(WrOpcode::RDMA_READ) ||
           opcode == static_cast<uint8_t>(WrOpcode::ATOMIC_CMP_AND_SWP) ||
           opcode == static_cast<uint8_t>(WrOpcode::ATOMIC_FETCH_AND_ADD);
}

PerfettoWriter::~PerfettoWriter() {
    if (f_) std::fclose(f_);
}

bool PerfettoWriter::open(const std::string& path) {
    f_ = std::fopen(path.c_str(), "wb");
    if (!f_) return false;
    std::fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", f_);
    return true;
}

void PerfettoWriter::write_flow(const FlowEnd& from, const FlowEnd& to) {
    const uint64_t id = next_flow_++;
    fmt::print(f_, ",\n{{\"name\":\"transfer\",\"cat\":\"transfer\",\"ph\":\"s\",\"id\":{},\"ts\":{:.3f},\"pid\":{},\"tid\":{}}}",
               id, us(from.ts), from.proc + 1, from.qp + 1);
    fmt::print(f_,
               ",\n{{\"name\":\"transfer\",\"cat\":\"transfer\",\"ph\":\"f\",\"bp\":\"e\",\"id\":{},\"ts\":{:.3f},\"pid\":{},"
               "\"tid\":{}}}",
               id, us(to.ts), to.proc + 1, to.qp + 1);
}

void PerfettoWriter::write_marker(const RemoteMarker& m, const Peer& peer) {
    qps_seen_.insert(peer.qp);
    const Process& from = topo_.proc(m.proc);
    nlohmann::json args = {{"bytes", m.bytes},
                           {"from", from.rank >= 0 ? fmt::format("rank {}", from.rank) : fmt::format("pid {}", from.pid)},
                           {"when", "at or before this point: the initiator's completion"}};
    if (m.raddr) args["remote_addr"] = fmt::format("0x{:x}", m.raddr);
    fmt::print(f_, "{}{{\"name\":\"{} (remote)\",\"cat\":\"remote\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":0.001,\"pid\":{},"
               "\"tid\":{},\"args\":{}}}",
               first_ ? "" : ",\n", opcode_name(m.opcode), us(m.done_ts), peer.proc + 1, peer.qp + 1, json_text(args));
    first_ = false;
    ++remote_markers_;
    write_flow(FlowEnd{m.proc, m.qp, m.post_ts}, FlowEnd{peer.proc, peer.qp, m.done_ts});
}

void PerfettoWriter::on_operation(const Operation& op) {
    if (!f_ || !sampler_.keep()) return;
    if (!have_base_) {
        // Timestamps are written relative to the first operation, minus a second so that operations posted
        // earlier (reconstructed later) stay positive: doubles cannot hold absolute Unix-epoch nanoseconds.
        base_ = op.post_ts - 1000000000;
        have_base_ = true;
    }
    qps_seen_.insert(op.qp);
    const int64_t dur = op.done_ts - op.post_ts;
    nlohmann::json args = {{"bytes", op.bytes}, {"wr_id", fmt::format("0x{:x}", op.wr_id)}, {"outcome", outcome_name(op.outcome)}};
    if (op.wc_status) args["status"] = std::string(wc_status_name(op.wc_status));
    if (op.implied) args["completed_by"] = "next signaled completion (unsignaled WR)";
    if (op.poster != records::Poster::verbs) args[records::poster_name(op.poster)] = true;
    if (op.peer.proc != kNoId) {
        const Process& pr = topo_.proc(op.peer.proc);
        args["peer"] = pr.rank >= 0 ? fmt::format("rank {}", pr.rank) : fmt::format("pid {}", pr.pid);
    } else if (op.peer.node != kNoId) {
        args["peer"] = topo_.node(op.peer.node).name;
    }
    fmt::print(f_, "{}{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},\"pid\":{},\"tid\":{},\"args\":{}}}",
               first_ ? "" : ",\n", opcode_name(op.opcode), records::poster_name(op.poster), us(op.post_ts),
               static_cast<double>(dur) / 1000.0, op.proc + 1, op.qp + 1, json_text(args));
    first_ = false;

    // Flows: a two-sided send and the receive it consumed, matched in order per connection. The connection is
    // named by its two QP numbers (each side knows both from its RTR transition), so matching does not wait for
    // the peer to be resolved.
    // One-sided transfers: a marker on the target QP's track at the initiator's completion (by then the data
    // has been placed at, or read from, the target), and a flow from the operation to it. A target QP not known
    // yet (its creation comes later in the trace) is looked up again at the end.
    if (op.outcome == OpOutcome::Completed && one_sided(op.opcode)) {
        const RemoteMarker m{op.proc, op.qp, op.opcode, op.post_ts, op.done_ts, op.bytes, op.raddr};
        if (op.peer.qp != kNoId && op.peer.proc != kNoId) write_marker(m, op.peer);
        else if (unresolved_markers_.size() < kMaxUnresolvedMarkers) unresolved_markers_.push_back(m);
        else ++markers_dropped_;
        return;
    }

    const Qp& qp = topo_.qp(op.qp);
    if (!qp.has_remote || qp.dest_qpn == 0 || op.outcome != OpOutcome::Completed) return;
    if (op.is_recv()) {
        const auto key = std::make_pair(qp.dest_qpn, qp.qp_num);
        const FlowEnd end{op.proc, op.qp, op.done_ts};
        auto& waiting = sends_[key];
        if (!waiting.empty()) {
            write_flow(waiting.front(), end);
            waiting.pop_front();
        } else if (recvs_[key].size() < kMaxWaitingFlowEnds) {
            recvs_[key].push_back(end);
        }
    } else if (two_sided_send(op.opcode)) {
        const auto key = std::make_pair(qp.qp_num, qp.dest_qpn);
        const FlowEnd start{op.proc, op.qp, op.post_ts};
        auto& waiting = recvs_[key];
        if (!waiting.empty()) {
            write_flow(start, waiting.front());
            waiting.pop_front();
        } else if (sends_[key].size() < kMaxWaitingFlowEnds) {
            sends_[key].push_back(start);
        }
    }
}

bool PerfettoWriter::close() {
    if (!f_) return false;
    // Peers are resolved now (Analysis::finish ran): the markers whose target QP was not known while reading.
    for (const RemoteMarker& m : unresolved_markers_) {
        const Peer& peer = topo_.qp(m.qp).peer;
        if (peer.qp != kNoId && peer.proc != kNoId) write_marker(m, peer);
        else ++markers_dropped_;   // the target is not traced
    }
    unresolved_markers_.clear();
    std::set<ProcId> procs;
    for (QpId q : qps_seen_) procs.insert(topo_.qp(q).proc);
    for (ProcId p : procs) {
        const Process& pr = topo_.proc(p);
        const std::string name = timeline_process_name(topo_, p);
        fmt::print(f_, "{}{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{}}}", first_ ? "" : ",\n", p + 1,
                   json_text(nlohmann::json{{"name", name}}));
        first_ = false;
        fmt::print(f_, ",\n{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"sort_index\":{}}}}}", p + 1,
                   pr.rank >= 0 ? pr.rank : 1000000 + static_cast<int64_t>(p));
    }
    for (QpId q : qps_seen_) {
        const Qp& qp = topo_.qp(q);
        const std::string name = timeline_qp_name(topo_, q);
        fmt::print(f_, ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{}}}", qp.proc + 1, q + 1,
                   json_text(nlohmann::json{{"name", name}}));
    }
    fmt::print(f_,
               "\n],\"otherData\":{{\"generator\":\"sigmatrace-analyze\",\"operations_written\":{},\"operations_dropped\":{},"
               "\"sampling\":{},\"remote_markers\":{},\"remote_markers_without_target\":{}}}}}\n",
               sampler_.written(), sampler_.dropped(), json_text(nlohmann::json(sampler_.statement())), remote_markers_,
               markers_dropped_);
    const bool ok = std::ferror(f_) == 0;
    const bool closed = std::fclose(f_) == 0;
    f_ = nullptr;
    return ok && closed;
}

}  // namespace sigmatrace::analyzer
