// The names of the timeline's tracks, the same in both Perfetto formats (JSON and protobuf): a process
// ("rank 3 @ node3 (pid 1234)") and a QP ("QP 257 -> rank 1 QP 320 [sfab0]"; "GPU QP" / "direct QP" for directly
// driven queues). The peers are known only once the trace is read, so the writers call these at the end too.
#pragma once

#include <string>

#include "analyzer/analyses/topology.h"

namespace sigmatrace::analyzer {

std::string timeline_process_name(const Topology& topo, ProcId p);
std::string timeline_qp_name(const Topology& topo, QpId q);

}  // namespace sigmatrace::analyzer
