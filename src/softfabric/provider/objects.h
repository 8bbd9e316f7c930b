// The provider's verbs objects. Each is a plain head that libibverbs knows (verbs_device, verbs_context,
// ibv_pd, verbs_mr, verbs_cq, verbs_qp, ibv_srq, ibv_ah: first member, so that the library's pointer converts
// back) followed by a pointer to the C++ object holding the fabric state.
#pragma once

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/engine.h"
#include "core/identity.h"
#include "core/runtime.h"
#include "rdma_core_pabi34.h"

namespace softfabric::provider {

// ------------------------------------------------------------------------------------------------ device
struct DeviceObject {
    pabi::verbs_device vdev;  // first: libibverbs converts ibv_device* to verbs_device*
    char fabric_name[64];
    NicId nic;
};

// ------------------------------------------------------------------------------------------------ context
struct ContextImpl {
    DeviceObject* device = nullptr;
    Runtime* rt = nullptr;
    NicId nic;
    int command_fd = -1;
    int async_write_fd = -1;  // async events would be written here (none are generated yet)
};
struct ContextObject {
    struct verbs_context vctx;  // allocated by libibverbs (_verbs_init_and_alloc_context): must be first
    ContextImpl* impl;
};
// ibv_context is the LAST member of verbs_context (it "grows up"): convert like libibverbs' verbs_get_ctx().
inline ContextObject* context_object(ibv_context* ctx) {
    return reinterpret_cast<ContextObject*>(reinterpret_cast<char*>(ctx) - offsetof(struct verbs_context, context));
}
inline ContextImpl& context_of(ibv_context* ctx) { return *context_object(ctx)->impl; }

// ------------------------------------------------------------------------------------------------ PD, MR, AH
struct PdObject {
    ibv_pd ibv;
    uint64_t id;  // fabric-unique: rkeys are only valid on QPs of the same PD
};
inline PdObject& pd_of(ibv_pd* pd) { return *reinterpret_cast<PdObject*>(pd); }

struct MrObject {
    pabi::verbs_mr vmr;
    uint32_t key;
};

struct AhObject {
    ibv_ah ibv;
    engine::UdDestination dest;
    bool valid;  // the destination names a fabric NIC
};

// ------------------------------------------------------------------------------------------------ CQ
class CqImpl {
public:
    Runtime* rt = nullptr;
    SharedCq* shared = nullptr;
    uint64_t offset = 0;
    uint64_t bytes = 0;
    bool has_channel = false;
    std::mutex poll_lock;  // poll_cq is thread-safe per CQ, as on hardware
    std::vector<engine::QueuePair*> senders;  // QPs whose send queue completes here: poll progresses them
    int attached_qps = 0;
    // Extended CQ (ibv_start_poll/next_poll): the completion being read.
    ibv_wc current{};
    uint64_t current_ts = 0;
};
struct CqObject {
    pabi::verbs_cq vcq;  // first: ibv_cq* / ibv_cq_ex* convert back
    CqImpl* impl;
};
inline CqImpl& cq_of(ibv_cq* cq) { return *reinterpret_cast<CqObject*>(cq)->impl; }
inline CqImpl& cq_of(ibv_cq_ex* cq) { return *reinterpret_cast<CqObject*>(cq)->impl; }

// ------------------------------------------------------------------------------------------------ SRQ
class SrqImpl {
public:
    Runtime* rt = nullptr;
    RecvRing* ring = nullptr;
    uint64_t offset = 0;
    uint64_t bytes = 0;
    uint32_t max_wr = 0;
    uint32_t max_sge = 0;
    std::mutex post_lock;
    int attached_qps = 0;
};
struct SrqObject {
    ibv_srq ibv;
    SrqImpl* impl;
};
inline SrqImpl& srq_of(ibv_srq* srq) { return *reinterpret_cast<SrqObject*>(srq)->impl; }

// ------------------------------------------------------------------------------------------------ QP
class QpImpl {
public:
    explicit QpImpl(Runtime& rt, const engine::QueuePairConfig& config) : engine(rt, config) {}
    engine::QueuePair engine;
    ibv_qp_attr attr{};       // as last modified, for query_qp
    ibv_qp_cap cap{};         // what the QP was created with
    CqImpl* send_cq = nullptr;
    CqImpl* recv_cq = nullptr;
    SrqImpl* srq = nullptr;
    uint64_t send_ops_flags = 0;  // ibv_qp_ex operations allowed (0 = all supported ones)
    int wr_error = 0;             // first error of the current ibv_wr_start..ibv_wr_complete batch
    engine::Wqe* wr_current = nullptr;
    bool dest_known = false;      // the AV names a fabric NIC
    DcRole dc_role = DcRole::None;  // IBV_QPT_DRIVER: a DC initiator or target (mlx5dv_create_qp)
    // What mlx5dv_qp_ex_from_ibv_qp_ex returns for this QP (verbs_qp_ex.cpp): the mlx5 setters the fabric's
    // ibv_wr_* path honours, and refusals for the others.
    struct DvQpEx {
        mlx5dv_qp_ex pub;  // first: the handle the application holds converts back
        QpImpl* impl;
    } dv{};
};
struct QpObject {
    pabi::verbs_qp vqp;  // first: ibv_qp* / ibv_qp_ex* convert back, and ibv_qp_to_qp_ex() reads comp_mask
    QpImpl* impl;
};
inline QpImpl& qp_of(ibv_qp* qp) { return *reinterpret_cast<QpObject*>(qp)->impl; }
inline QpImpl& qp_of(ibv_qp_ex* qp) { return *reinterpret_cast<QpObject*>(qp)->impl; }

// ------------------------------------------------------------------------------------------------ op tables
// Implemented in verbs_*.cpp; gathered into the context's table by provider_main.cpp.
int query_device_ex(ibv_context*, const ibv_query_device_ex_input*, ibv_device_attr_ex*, size_t);
int query_port(ibv_context*, uint8_t, ibv_port_attr*);
ibv_pd* alloc_pd(ibv_context*);
int dealloc_pd(ibv_pd*);
ibv_mr* reg_mr(ibv_pd*, void*, size_t, uint64_t, int);
int dereg_mr(pabi::verbs_mr*);
ibv_cq* create_cq(ibv_context*, int, ibv_comp_channel*, int);
ibv_cq_ex* create_cq_ex(ibv_context*, ibv_cq_init_attr_ex*);
int destroy_cq(ibv_cq*);
int poll_cq(ibv_cq*, int, ibv_wc*);
int req_notify_cq(ibv_cq*, int);
void cq_event(ibv_cq*);
int resize_cq(ibv_cq*, int);
ibv_qp* create_qp(ibv_pd*, ibv_qp_init_attr*);
ibv_qp* create_qp_ex(ibv_context*, ibv_qp_init_attr_ex*);
// A DC initiator (DCI: sends only, destination in each WQE) or target (DCT: receives into attr->srq only), of
// type IBV_QPT_DRIVER: what mlx5dv_create_qp creates for MLX5DV_DCTYPE_DCI / _DCT. `access_key` is the DCT's.
ibv_qp* create_dc_qp(ibv_context*, ibv_qp_init_attr_ex*, DcRole role, uint64_t access_key);
int modify_qp(ibv_qp*, ibv_qp_attr*, int);
int query_qp(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*);
int destroy_qp(ibv_qp*);
int query_qp_data_in_order(ibv_qp*, enum ibv_wr_opcode, uint32_t);
int post_send(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
int post_recv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**);
ibv_srq* create_srq(ibv_pd*, ibv_srq_init_attr*);
ibv_srq* create_srq_ex(ibv_context*, ibv_srq_init_attr_ex*);
int modify_srq(ibv_srq*, ibv_srq_attr*, int);
int query_srq(ibv_srq*, ibv_srq_attr*);
int destroy_srq(ibv_srq*);
int post_srq_recv(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**);
ibv_ah* create_ah(ibv_pd*, ibv_ah_attr*);
int destroy_ah(ibv_ah*);

// ibv_qp_ex function pointers (verbs_qp_ex.cpp).
void install_qp_ex_ops(ibv_qp_ex* qpx);
// mlx5dv_qp_ex_from_ibv_qp_ex for a fabric QP, and whether an mlx5dv_qp_ex is one of these (verbs_qp_ex.cpp).
mlx5dv_qp_ex* dv_qp_ex(ibv_qp_ex* qpx);
bool is_fabric_dv_qp_ex(const mlx5dv_qp_ex* mqp);
// ibv_cq_ex function pointers (verbs_cq.cpp).
void install_cq_ex_ops(ibv_cq_ex* cqx, uint64_t wc_flags);

// libmlx5's MLX_{CQ,QP,SRQ}_ALLOC_TYPE (named by `env`) for an object about to be created: HUGE asks for its
// buffers on huge pages, and fails on a ConnectX when the system has none; so it does here (ENOMEM), though the
// fabric's rings live in its own arena either way. 0 when creation may go on (device_info.cpp).
int allocation_refusal(const char* env);

// The device attributes every fabric NIC reports (device_info.cpp).
uint32_t vendor_part_id();
uint32_t port_mtu_bytes(const Runtime& rt);

}  // namespace softfabric::provider
