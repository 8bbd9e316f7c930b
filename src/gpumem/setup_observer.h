// What the set-up hooks do after (or, for tear-down, before) the real call: learn UMEMs and UARs, decode the
// DevX commands that create, connect and destroy queues, join them into queue geometries, emit the gpu_* set-up
// events, and hand watchable queues to the registry (and so to the watcher). Also the rings that verbs QPs and
// CQs export through mlx5dv_init_obj (rocSHMEM / MORI / UCX style), and the GPU mappings of doorbell pages.
//
// Cold path (set-up calls). The exported wrappers (mlx5dv_wrappers.cpp, gpu_runtime_wrappers.cpp) only
// convert their arguments and call these; tests call these directly with PRM byte images.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "gpumem/memory_classifier.h"
#include "gpumem/queue_registry.h"

namespace sigmatrace::gpumem {

// A pointer argument of a wrapped call as the observer takes addresses (the exported wrappers convert with it).
inline uint64_t uptr(const void* p) { return reinterpret_cast<uint64_t>(p); }

class Watcher;

// What a verbs QP exports through mlx5dv_init_obj (struct mlx5dv_qp plus the ibv_qp fields we need).
struct ExportedQp {
    uint64_t ctx = 0;
    uint64_t qp = 0;            // ibv_qp*
    uint32_t qpn = 0;
    uint32_t qp_type = 0;       // enum ibv_qp_type
    uint64_t send_cq = 0;       // ibv_cq* of its send CQ (to name the CQ number if that CQ was exported too)
    uint64_t dbrec = 0;         // __be32 dbrec[2]
    uint64_t sq_buf = 0;
    uint32_t sq_wqe_cnt = 0;    // WQEBBs
    uint32_t sq_stride = 0;     // 64
    uint64_t bf_reg = 0;        // the doorbell (BlueFlame) register
};
// What a verbs CQ exports through mlx5dv_init_obj (struct mlx5dv_cq).
struct ExportedCq {
    uint64_t ctx = 0;
    uint64_t cq = 0;            // ibv_cq*
    uint32_t cqn = 0;
    uint64_t buf = 0;
    uint64_t dbrec = 0;
    uint32_t cqe_cnt = 0;
    uint32_t cqe_size = 0;
};

class SetupObserver {
public:
    // `watcher` may be null (no watcher in this process: set-up is still traced).
    SetupObserver(QueueRegistry& registry, MemoryClassifier& classifier, Watcher* watcher);

    void set_watcher(Watcher* watcher) { watcher_ = watcher; }

    // mlx5dv_devx_umem_reg[_ex]: `handle` is the returned struct mlx5dv_devx_umem* (0 on failure).
    void umem_registered(uint64_t ctx, uint64_t handle, uint32_t umem_id, uint64_t addr, uint64_t size, int dmabuf_fd,
                         int err);
    void umem_deregistering(uint64_t handle);
    // mlx5dv_devx_alloc_uar
    void uar_allocated(uint64_t ctx, uint64_t handle, uint32_t page_id, uint64_t reg_addr, uint64_t base_addr,
                       uint32_t flags, int err);
    void uar_freeing(uint64_t handle);
    // mlx5dv_devx_obj_create / modify / destroy (and the DevX commands on verbs objects, which modify only).
    void devx_created(uint64_t ctx, uint64_t obj, const void* in, size_t inlen, const void* out, size_t outlen);
    void devx_modified(uint64_t obj, const void* in, size_t inlen, const void* out, size_t outlen, int ret,
                       uint64_t verbs_ctx = 0);
    // mlx5dv_devx_obj_query / mlx5dv_devx_qp_query returned: a QUERY_QP is reported (the QP state: a
    // watchdog's query is how a QP the NIC moved to ERR shows on the host).
    void devx_queried(uint64_t obj, const void* in, size_t inlen, const void* out, size_t outlen, int ret,
                      uint64_t verbs_ctx = 0);
    void devx_destroying(uint64_t obj);
    // mlx5dv_init_obj on verbs QPs and CQs; their destruction (ibv_destroy_qp / ibv_destroy_cq, before the call).
    void verbs_qp_exported(const ExportedQp& qp);
    void verbs_cq_exported(const ExportedCq& cq);
    void verbs_object_destroying(uint64_t handle);
    // A host range mapped into a GPU (cudaHostRegister, cuMemHostRegister, hipHostRegister,
    // hsa_amd_memory_lock_to_pool). IoMemory registrations of a UAR page mark its doorbells as GPU-rung.
    void host_registered(uint64_t addr, uint64_t size, bool io_memory, int err);
    void host_unregistered(uint64_t addr);
    // cuMemGetHandleForAddressRange(DMA_BUF_FD): lets a later umem_reg_ex of that fd name its device address.
    void dmabuf_exported(int fd, uint64_t addr, uint64_t size);

    // Diagnostics the observer reported (unwatchable queues, unparsable commands), for tests.
    uint64_t problems() const { return problems_; }

private:
    enum class ObjKind : uint8_t { Qp, Cq, Dct };
    struct DevxObj {
        ObjKind kind;
        uint64_t ctx;
        uint32_t number;
    };
    void problem(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
    void created_qp(uint64_t ctx, uint64_t obj, const void* in, size_t inlen, uint32_t qpn);
    void created_cq(uint64_t ctx, uint64_t obj, const void* in, size_t inlen, uint32_t cqn);
    void created_dct(uint64_t ctx, uint32_t dctn);
    void retire(uint64_t key);

    QueueRegistry& registry_;
    MemoryClassifier& classifier_;
    Watcher* watcher_;
    std::mutex mu_;
    std::map<uint64_t, DevxObj> objs_;          // devx object handle -> what it is
    std::map<int, std::pair<uint64_t, uint64_t>> dmabufs_;  // fd -> (device address, size), latest export
    uint64_t problems_ = 0;
};

}  // namespace sigmatrace::gpumem
