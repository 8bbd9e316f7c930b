// A CPU thread ringing doorbells for "GPU" producers that only publish their producer index in host memory: DOCA
// GPUNetIO's CPU_PROXY (NCCL GIN, ncclGinGdakiProgress) and NVSHMEM IBGDA's CPU NIC handlers (ibgda's progress
// thread). Each step rings, for every QP, what its producers published since the last step; one ring often
// covers several submissions, so the doorbell record lags the WQEs written. Runs from construction to
// destruction (stopped and joined then).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "gpu_common/gpu_qp.h"

namespace sigmatrace::workloads {

class CpuProxy {
public:
    // Points each QP's cpu_db at a word of its own (host memory) and starts the thread.
    explicit CpuProxy(std::vector<GpuQp*> qps) : qps_(std::move(qps)), indices_(qps_.size()) {
        for (std::size_t i = 0; i < qps_.size(); ++i) qps_[i]->cpu_db = &indices_[i];
        thread_ = std::thread([this] {
            while (!stop_.load(std::memory_order_relaxed)) {
                bool rang = false;
                for (GpuQp* q : qps_) rang |= q->proxy_progress();
                if (!rang) std::this_thread::sleep_for(std::chrono::microseconds(20));
            }
        });
    }
    ~CpuProxy() {
        stop_ = true;
        thread_.join();
    }
    CpuProxy(const CpuProxy&) = delete;
    CpuProxy& operator=(const CpuProxy&) = delete;

private:
    std::vector<GpuQp*> qps_;
    std::vector<uint64_t> indices_;   // the producers' published indices (cpu_db), one per QP
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

}  // namespace sigmatrace::workloads
