#include "analyzer/outputs/timeline_track_names.h"

#include <fmt/core.h>

namespace sigmatrace::analyzer {

std::string timeline_process_name(const Topology& topo, ProcId p) {
    const Process& pr = topo.proc(p);
    const std::string node = pr.node == kNoId ? "?" : topo.node(pr.node).name;
    return pr.rank >= 0 ? fmt::format("rank {} @ {} (pid {})", pr.rank, node, pr.pid) : fmt::format("pid {} @ {}", pr.pid, node);
}

std::string timeline_qp_name(const Topology& topo, QpId q) {
    const Qp& qp = topo.qp(q);
    std::string name = fmt::format("{}QP {}", qp.gpu ? (qp.poster == records::Poster::gpu ? "GPU " : "direct ") : "", qp.qp_num);
    if (qp.peer.proc != kNoId) {
        const Process& pr = topo.proc(qp.peer.proc);
        name += pr.rank >= 0 ? fmt::format(" -> rank {}", pr.rank) : fmt::format(" -> pid {}", pr.pid);
        if (qp.peer.qp != kNoId) name += fmt::format(" QP {}", topo.qp(qp.peer.qp).qp_num);
    } else if (qp.peer.node != kNoId) {
        name += " -> " + topo.node(qp.peer.node).name;
    }
    if (qp.dev != kNoId) name += fmt::format(" [{}]", topo.device(qp.dev).name);
    return name;
}

}  // namespace sigmatrace::analyzer
