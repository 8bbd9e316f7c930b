// Decides where a queue's memory lives (host, host memory mapped into a GPU, GPU memory) at set-up time, using
// only the GPU runtimes the application has already loaded (never loading one): the CUDA driver's pointer
// attributes, ROCm's hsa_amd_pointer_info, and the host ranges the application registered with a GPU runtime
// (cudaHostRegister / hipHostRegister / hsa_amd_memory_lock_to_pool, seen by the hooks).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "gpumem/queue_types.h"

namespace sigmatrace::gpumem {

class MemoryClassifier {
public:
    virtual ~MemoryClassifier() = default;
    virtual MemType classify(uint64_t addr);

    // A host range the application registered with a GPU runtime (mapped into the GPU's address space).
    void note_host_registration(uint64_t addr, uint64_t len);
    void forget_host_registration(uint64_t addr);

private:
    bool in_registered_range(uint64_t addr);

    std::mutex mu_;
    struct Range {
        uint64_t addr, len;
    };
    std::vector<Range> registered_;
};

// AMD: the classification hsa_amd_pointer_info gives, when libhsa-runtime64 is already loaded; otherwise false.
bool classify_with_hsa(uint64_t addr, MemType& out);

}  // namespace sigmatrace::gpumem
