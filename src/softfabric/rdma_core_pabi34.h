// The rdma-core provider private ABI that the software fabric is built against: IBVERBS_PRIVATE_34 with the
// structure layouts of rdma-core v36..v56 (Debian 12 ships v44).
//
// libibverbs does not install the header that declares these (libibverbs/driver.h is internal to
// rdma-core), so this project declares what it needs itself, written from the documented layout
// (docs/architecture.md, "Platform facts"; offsets are for x86_64 / LP64). Nothing here is copied
// from rdma-core: every member name and offset below is checked by a static_assert, and the provider refuses
// to load, with a message, when the running libibverbs has another private ABI (pabi_guard.cpp).
//
// Public types (struct ibv_device, ibv_context, verbs_context, ibv_qp_ex, ibv_cq_ex, ...) come from the
// installed <infiniband/verbs.h>.
#pragma once

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <ctime>

namespace softfabric::pabi {

inline constexpr const char* kPrivateAbiNode = "IBVERBS_PRIVATE_34";
inline constexpr unsigned kPrivateAbiNumber = 34;
inline constexpr unsigned kOldestLayoutRelease = 36;  // rdma-core v36 added the last member we rely on
inline constexpr unsigned kNewestLayoutRelease = 56;  // v57 moved to IBVERBS_PRIVATE_57

// `enum rdma_driver_id` value for a driver the kernel does not know.
inline constexpr uint32_t kRdmaDriverUnknown = 0;

struct verbs_device_ops;
struct verbs_sysfs_dev;

// ccan list node embedded in verbs_device.
struct list_node_abi {
    list_node_abi* next;
    list_node_abi* prev;
};

enum verbs_match_kind : uint8_t {
    VERBS_MATCH_SENTINEL = 0,
    VERBS_MATCH_PCI = 1,
    VERBS_MATCH_MODALIAS = 2,
    VERBS_MATCH_DRIVER_ID = 3,
};

// One row of a provider's match table; the table ends with an all-zero row.
struct verbs_match_ent {
    void* driver_data;
    union {
        const char* modalias;
        uint64_t driver_id;
    } u;
    uint16_t vendor;
    uint16_t device;
    uint8_t kind;
};
static_assert(sizeof(verbs_match_ent) == 24);
static_assert(offsetof(verbs_match_ent, u) == 8);
static_assert(offsetof(verbs_match_ent, vendor) == 16);
static_assert(offsetof(verbs_match_ent, device) == 18);
static_assert(offsetof(verbs_match_ent, kind) == 20);

// What libibverbs learned about a device from sysfs; handed to match_device/alloc_device.
struct verbs_sysfs_dev {
    list_node_abi entry;
    void* provider_data;
    const verbs_match_ent* match;
    unsigned int flags;
    char sysfs_name[64];
    dev_t sysfs_cdev;
    char ibdev_name[64];
    char ibdev_path[256];
    char modalias[512];
    uint64_t node_guid;
    uint32_t driver_id;
    enum ibv_node_type node_type;
    int ibdev_idx;
    uint32_t num_ports;
    uint32_t abi_ver;
    struct timespec time_created;
};
static_assert(sizeof(verbs_sysfs_dev) == 992);
static_assert(offsetof(verbs_sysfs_dev, provider_data) == 16);
static_assert(offsetof(verbs_sysfs_dev, match) == 24);
static_assert(offsetof(verbs_sysfs_dev, flags) == 32);
static_assert(offsetof(verbs_sysfs_dev, sysfs_name) == 36);
static_assert(offsetof(verbs_sysfs_dev, sysfs_cdev) == 104);
static_assert(offsetof(verbs_sysfs_dev, ibdev_name) == 112);
static_assert(offsetof(verbs_sysfs_dev, ibdev_path) == 176);
static_assert(offsetof(verbs_sysfs_dev, modalias) == 432);
static_assert(offsetof(verbs_sysfs_dev, node_guid) == 944);
static_assert(offsetof(verbs_sysfs_dev, driver_id) == 952);
static_assert(offsetof(verbs_sysfs_dev, node_type) == 956);
static_assert(offsetof(verbs_sysfs_dev, ibdev_idx) == 960);
static_assert(offsetof(verbs_sysfs_dev, num_ports) == 964);
static_assert(offsetof(verbs_sysfs_dev, abi_ver) == 968);
static_assert(offsetof(verbs_sysfs_dev, time_created) == 976);

// The device object; `device` must be first (libibverbs converts with container_of).
struct verbs_device {
    struct ibv_device device;
    const verbs_device_ops* ops;
    int refcount;  // atomic_int in rdma-core; only libibverbs touches it
    list_node_abi entry;
    verbs_sysfs_dev* sysfs;
    uint64_t core_support;
};
static_assert(sizeof(struct ibv_device) == 664);
static_assert(sizeof(verbs_device) == 712);
static_assert(offsetof(verbs_device, ops) == 664);
static_assert(offsetof(verbs_device, refcount) == 672);
static_assert(offsetof(verbs_device, entry) == 680);
static_assert(offsetof(verbs_device, sysfs) == 696);
static_assert(offsetof(verbs_device, core_support) == 704);

// How a provider registers itself. Changing this structure is what changes the private ABI number.
struct verbs_device_ops {
    const char* name;
    uint32_t match_min_abi_version;
    uint32_t match_max_abi_version;
    const verbs_match_ent* match_table;
    const verbs_device_ops** static_providers;
    bool (*match_device)(verbs_sysfs_dev* sysfs_dev);
    struct verbs_context* (*alloc_context)(struct ibv_device* device, int cmd_fd, void* private_data);
    struct verbs_context* (*import_context)(struct ibv_device* device, int cmd_fd);
    verbs_device* (*alloc_device)(verbs_sysfs_dev* sysfs_dev);
    void (*uninit_device)(verbs_device* device);
};
static_assert(sizeof(verbs_device_ops) == 72);
static_assert(offsetof(verbs_device_ops, match_table) == 16);
static_assert(offsetof(verbs_device_ops, static_providers) == 24);
static_assert(offsetof(verbs_device_ops, match_device) == 32);
static_assert(offsetof(verbs_device_ops, alloc_context) == 40);
static_assert(offsetof(verbs_device_ops, import_context) == 48);
static_assert(offsetof(verbs_device_ops, alloc_device) == 56);
static_assert(offsetof(verbs_device_ops, uninit_device) == 64);

// A memory region as libibverbs allocates it: ibv_dereg_mr reads mr_type and access through container_of.
enum verbs_mr_type : int {
    IBV_MR_TYPE_MR = 0,
    IBV_MR_TYPE_NULL_MR = 1,
    IBV_MR_TYPE_IMPORTED_MR = 2,
    IBV_MR_TYPE_DMABUF_MR = 3,
};
struct verbs_mr {
    struct ibv_mr ibv_mr;
    verbs_mr_type mr_type;
    int access;
};
static_assert(sizeof(struct ibv_mr) == 48);
static_assert(sizeof(verbs_mr) == 56);
static_assert(offsetof(verbs_mr, mr_type) == 48);
static_assert(offsetof(verbs_mr, access) == 52);

// A QP that ibv_qp_to_qp_ex() accepts: the library casts ibv_qp* to verbs_qp* and checks VERBS_QP_EX.
inline constexpr uint32_t VERBS_QP_XRCD = 1u << 0;
inline constexpr uint32_t VERBS_QP_EX = 1u << 1;
struct verbs_qp {
    union {
        struct ibv_qp qp;
        struct ibv_qp_ex qp_ex;
    };
    uint32_t comp_mask;
    void* xrcd;  // struct verbs_xrcd*
};
static_assert(sizeof(struct ibv_qp) == 160);
static_assert(sizeof(struct ibv_qp_ex) == 352);
static_assert(sizeof(verbs_qp) == 368);
static_assert(offsetof(verbs_qp, comp_mask) == 352);
static_assert(offsetof(verbs_qp, xrcd) == 360);

struct verbs_cq {
    union {
        struct ibv_cq cq;
        struct ibv_cq_ex cq_ex;
    };
};
static_assert(sizeof(verbs_cq) == 288);

// Members of verbs_context_ops the fabric never sets keep this placeholder type (the slot stays NULL, and
// libibverbs keeps its EOPNOTSUPP stub there).
using unused_op = void (*)();

// The provider's operation table, sorted by name exactly as in rdma-core v36..v56 (76 pointers).
struct verbs_context_ops {
    unused_op advise_mr;
    unused_op alloc_dm;
    unused_op alloc_mw;
    struct ibv_mr* (*alloc_null_mr)(struct ibv_pd* pd);
    unused_op alloc_parent_domain;
    struct ibv_pd* (*alloc_pd)(struct ibv_context* context);
    unused_op alloc_td;
    void (*async_event)(struct ibv_context* context, struct ibv_async_event* event);
    unused_op attach_counters_point_flow;
    int (*attach_mcast)(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid);
    unused_op bind_mw;
    unused_op close_xrcd;
    void (*cq_event)(struct ibv_cq* cq);
    struct ibv_ah* (*create_ah)(struct ibv_pd* pd, struct ibv_ah_attr* attr);
    unused_op create_counters;
    struct ibv_cq* (*create_cq)(struct ibv_context* context, int cqe, struct ibv_comp_channel* channel,
                                int comp_vector);
    struct ibv_cq_ex* (*create_cq_ex)(struct ibv_context* context, struct ibv_cq_init_attr_ex* init_attr);
    unused_op create_flow;
    unused_op create_flow_action_esp;
    struct ibv_qp* (*create_qp)(struct ibv_pd* pd, struct ibv_qp_init_attr* attr);
    struct ibv_qp* (*create_qp_ex)(struct ibv_context* context, struct ibv_qp_init_attr_ex* attr);
    unused_op create_rwq_ind_table;
    struct ibv_srq* (*create_srq)(struct ibv_pd* pd, struct ibv_srq_init_attr* attr);
    struct ibv_srq* (*create_srq_ex)(struct ibv_context* context, struct ibv_srq_init_attr_ex* attr);
    unused_op create_wq;
    unused_op dealloc_mw;
    int (*dealloc_pd)(struct ibv_pd* pd);
    unused_op dealloc_td;
    int (*dereg_mr)(verbs_mr* vmr);
    int (*destroy_ah)(struct ibv_ah* ah);
    unused_op destroy_counters;
    int (*destroy_cq)(struct ibv_cq* cq);
    unused_op destroy_flow;
    unused_op destroy_flow_action;
    int (*destroy_qp)(struct ibv_qp* qp);
    unused_op destroy_rwq_ind_table;
    int (*destroy_srq)(struct ibv_srq* srq);
    unused_op destroy_wq;
    int (*detach_mcast)(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid);
    void (*free_context)(struct ibv_context* context);
    unused_op free_dm;
    int (*get_srq_num)(struct ibv_srq* srq, uint32_t* srq_num);
    unused_op import_dm;
    unused_op import_mr;
    unused_op import_pd;
    int (*modify_cq)(struct ibv_cq* cq, struct ibv_modify_cq_attr* attr);
    unused_op modify_flow_action_esp;
    int (*modify_qp)(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask);
    unused_op modify_qp_rate_limit;
    int (*modify_srq)(struct ibv_srq* srq, struct ibv_srq_attr* attr, int attr_mask);
    unused_op modify_wq;
    unused_op open_qp;
    unused_op open_xrcd;
    int (*poll_cq)(struct ibv_cq* cq, int num_entries, struct ibv_wc* wc);
    int (*post_recv)(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad_wr);
    int (*post_send)(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad_wr);
    unused_op post_srq_ops;
    int (*post_srq_recv)(struct ibv_srq* srq, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad_wr);
    int (*query_device_ex)(struct ibv_context* context, const struct ibv_query_device_ex_input* input,
                           struct ibv_device_attr_ex* attr, size_t attr_size);
    unused_op query_ece;
    int (*query_port)(struct ibv_context* context, uint8_t port_num, struct ibv_port_attr* port_attr);
    int (*query_qp)(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask,
                    struct ibv_qp_init_attr* init_attr);
    int (*query_qp_data_in_order)(struct ibv_qp* qp, enum ibv_wr_opcode op, uint32_t flags);
    int (*query_rt_values)(struct ibv_context* context, struct ibv_values_ex* values);
    int (*query_srq)(struct ibv_srq* srq, struct ibv_srq_attr* attr);
    unused_op read_counters;
    unused_op reg_dm_mr;
    unused_op reg_dmabuf_mr;
    struct ibv_mr* (*reg_mr)(struct ibv_pd* pd, void* addr, size_t length, uint64_t hca_va, int access);
    int (*req_notify_cq)(struct ibv_cq* cq, int solicited_only);
    unused_op rereg_mr;
    int (*resize_cq)(struct ibv_cq* cq, int cqe);
    unused_op set_ece;
    unused_op unimport_dm;
    unused_op unimport_mr;
    unused_op unimport_pd;
};
static_assert(sizeof(verbs_context_ops) == 76 * sizeof(void*));
static_assert(offsetof(verbs_context_ops, alloc_pd) == 40);
static_assert(offsetof(verbs_context_ops, async_event) == 56);
static_assert(offsetof(verbs_context_ops, cq_event) == 96);
static_assert(offsetof(verbs_context_ops, create_ah) == 104);
static_assert(offsetof(verbs_context_ops, create_cq) == 120);
static_assert(offsetof(verbs_context_ops, create_cq_ex) == 128);
static_assert(offsetof(verbs_context_ops, create_qp) == 152);
static_assert(offsetof(verbs_context_ops, create_qp_ex) == 160);
static_assert(offsetof(verbs_context_ops, create_srq) == 176);
static_assert(offsetof(verbs_context_ops, create_srq_ex) == 184);
static_assert(offsetof(verbs_context_ops, dealloc_pd) == 208);
static_assert(offsetof(verbs_context_ops, dereg_mr) == 224);
static_assert(offsetof(verbs_context_ops, destroy_ah) == 232);
static_assert(offsetof(verbs_context_ops, destroy_cq) == 248);
static_assert(offsetof(verbs_context_ops, destroy_qp) == 272);
static_assert(offsetof(verbs_context_ops, destroy_srq) == 288);
static_assert(offsetof(verbs_context_ops, detach_mcast) == 304);
static_assert(offsetof(verbs_context_ops, free_context) == 312);
static_assert(offsetof(verbs_context_ops, get_srq_num) == 328);
static_assert(offsetof(verbs_context_ops, modify_cq) == 360);
static_assert(offsetof(verbs_context_ops, modify_qp) == 376);
static_assert(offsetof(verbs_context_ops, modify_srq) == 392);
static_assert(offsetof(verbs_context_ops, poll_cq) == 424);
static_assert(offsetof(verbs_context_ops, post_recv) == 432);
static_assert(offsetof(verbs_context_ops, post_send) == 440);
static_assert(offsetof(verbs_context_ops, post_srq_recv) == 456);
static_assert(offsetof(verbs_context_ops, query_device_ex) == 464);
static_assert(offsetof(verbs_context_ops, query_port) == 480);
static_assert(offsetof(verbs_context_ops, query_qp) == 488);
static_assert(offsetof(verbs_context_ops, query_qp_data_in_order) == 496);
static_assert(offsetof(verbs_context_ops, query_rt_values) == 504);
static_assert(offsetof(verbs_context_ops, query_srq) == 512);
static_assert(offsetof(verbs_context_ops, reg_mr) == 544);
static_assert(offsetof(verbs_context_ops, req_notify_cq) == 552);
static_assert(offsetof(verbs_context_ops, resize_cq) == 568);
static_assert(offsetof(verbs_context_ops, unimport_pd) == 600);

// The four private functions a provider calls (resolved with dlvsym at load time, see pabi_guard.h).
using register_driver_fn = void (*)(const verbs_device_ops* ops);
using init_and_alloc_context_fn = void* (*)(struct ibv_device* device, int cmd_fd, size_t alloc_size,
                                            struct verbs_context* context_offset, uint32_t driver_id);
using set_ops_fn = void (*)(struct verbs_context* vctx, const verbs_context_ops* ops);
using uninit_context_fn = void (*)(struct verbs_context* vctx);

}  // namespace softfabric::pabi
