// What the set-up hooks learn about GPU-driven (or directly driven) queues, and what the watcher needs to read
// them: plain values, no pointers into application memory that the watcher would dereference unchecked.
#pragma once

#include <cstdint>

#include <sigmatrace/deferred_records.h>

#include "mlx5_format/wqe_decoder.h"

namespace sigmatrace::gpumem {

// Where a ring or doorbell record lives (values of the schema's mem_type fields).
enum class MemType : uint32_t {
    Host = 0,        // ordinary host memory: read with plain loads
    Device = 1,      // GPU device memory: read through the GPU runtime's copy engine
    HostMapped = 2,  // host memory also mapped into a GPU (cudaHostRegister, hipHostMalloc, ...): plain loads
    Unknown = 3,     // a GPU runtime is loaded but could not classify it: not read
};
const char* mem_type_name(MemType m);
inline bool host_readable(MemType m) { return m == MemType::Host || m == MemType::HostMapped; }

// How the queue was learned (schema `source`).
enum class QueueSource : uint32_t { Devx = 0, InitObj = 1 };

struct UmemInfo {
    uint64_t handle = 0;  // struct mlx5dv_devx_umem*
    uint64_t ctx = 0;
    uint32_t id = 0;
    uint64_t addr = 0;    // 0 for dmabuf registrations whose address we could not learn
    uint64_t size = 0;
    MemType mem = MemType::Host;
    int dmabuf_fd = -1;
};

struct UarInfo {
    uint64_t handle = 0;  // struct mlx5dv_devx_uar*
    uint64_t ctx = 0;
    uint32_t page_id = 0;
    uint64_t reg_addr = 0;
    uint64_t base_addr = 0;
    uint32_t flags = 0;
    bool gpu_mapped = false;  // the page was mapped into a GPU (cudaHostRegister IoMemory, hipHostRegister, ...)
};

// A send queue the watcher reads.
struct SendQueue {
    uint64_t key = 0;        // identity: the devx object handle, or the ibv_qp pointer (init_obj)
    uint64_t ctx = 0;
    uint32_t qpn = 0;
    uint32_t st = 0;         // PRM service type (DevX) or ibv_qp_type (init_obj)
    Transport transport = Transport::Rc;
    QueueSource source = QueueSource::Devx;
    uint64_t ring_addr = 0;  // first WQEBB
    uint32_t wqebbs = 0;     // power of two
    MemType ring_mem = MemType::Host;
    uint64_t dbr_addr = 0;   // the send doorbell record (DBR[1]); 0 when DBR-less
    MemType dbr_mem = MemType::Host;
    bool dbr_less = false;   // send_dbr_mode = NO_DBR: the producer never writes the doorbell record
    uint32_t cqn = 0;        // send CQ
    uint32_t uar_page = 0;
    uint64_t doorbell_addr = 0;  // the doorbell register (init_obj: bf.reg), 0 if unknown (DevX: found by uar_page)
    // Who writes its WQEs (docs/gpumem.md, "Who posted"): decided by the registry when the watcher takes its queue
    // list (QueueRegistry::snapshot), from what set-up saw.
    records::Poster poster = records::Poster::cpu_direct;
    uint32_t initial_pi = 0; // producer index when learned (0 for a new DevX QP)
    uint32_t epoch = 0;      // bumped when the QP is reset: the producer index starts again from initial_pi
};

// A completion queue the watcher reads.
struct CompletionQueue {
    uint64_t key = 0;
    uint64_t ctx = 0;
    uint32_t cqn = 0;
    QueueSource source = QueueSource::Devx;
    uint64_t ring_addr = 0;
    uint32_t ncqe = 0;       // power of two
    uint32_t cqe_size = 64;  // 64 or 128 (the 64-byte CQE is the last 64 bytes of a 128-byte one)
    MemType ring_mem = MemType::Host;
    uint64_t dbr_addr = 0;   // consumer-index doorbell record (written by the consumer), 0 if unknown
    MemType dbr_mem = MemType::Host;
    bool collapsed = false;  // cc=1: the NIC rewrites slot 0 in place
    bool compressed = false; // CQE compression on: mini-CQE arrays are not decoded
};

}  // namespace sigmatrace::gpumem
