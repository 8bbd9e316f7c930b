// A minimal in-process "provider" for the shim benchmarks: a real verbs_context whose entry points do the
// least a provider must (read the WRs, hand back completions), so that what the benchmarks measure is the
// inline verbs call plus the shim, not a device.
#pragma once

#include <infiniband/verbs.h>

#include <vector>

namespace sigmatrace::bench {

class BenchDevice {
public:
    BenchDevice();
    ibv_context* ctx() { return &vctx_.context; }
    ibv_qp* qp() { return &qpx_.qp_base; }
    ibv_qp_ex* qpx() { return &qpx_; }
    ibv_cq* cq() { return &cq_; }

private:
    verbs_context vctx_{};
    ibv_device device_{};
    ibv_qp_ex qpx_{};
    ibv_cq cq_{};
};

// What the fake poll_cq returns per call (the benchmark sets it).
void set_completions_per_poll(int n);

}  // namespace sigmatrace::bench
