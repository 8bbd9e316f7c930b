// What a fabric NIC reports about itself: ibv_query_device(_ex) and ibv_query_port.
#include <endian.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/arena.h"
#include "provider/objects.h"

namespace softfabric::provider {
namespace {

ibv_mtu mtu_enum(uint32_t bytes) {
    switch (bytes) {
        case 256: return IBV_MTU_256;
        case 512: return IBV_MTU_512;
        case 1024: return IBV_MTU_1024;
        case 2048: return IBV_MTU_2048;
        default: return IBV_MTU_4096;
    }
}

}  // namespace

// A ConnectX part id by default: perftest uses the ibv_wr_* API only on ConnectX-4+, BlueField and EFA part ids,
// and UCX's mlx5 transports need the matching PCI id in sysfs (core/identity.h).
uint32_t vendor_part_id() { return configured_part_id(); }

uint32_t port_mtu_bytes(const Runtime& rt) {
    uint32_t mtu = const_cast<Runtime&>(rt).region().config.mtu;
    return mtu ? mtu : 4096;
}

int query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input*, ibv_device_attr_ex* attr, size_t attr_size) {
    ContextImpl& c = context_of(ctx);
    ibv_device_attr_ex a{};
    ibv_device_attr& d = a.orig_attr;
    std::snprintf(d.fw_ver, sizeof d.fw_ver, "%s (softfabric)", SIGMATRACE_VERSION_STRING);
    d.node_guid = htobe64(node_guid_of(c.nic));
    d.sys_image_guid = htobe64(sys_image_guid_of(c.nic.node));
    d.max_mr_size = ~0ull;
    d.page_size_cap = 0xfffff000u;
    d.vendor_id = configured_part_id() ? kVerbsVendorMellanox : kVendorId;
    d.vendor_part_id = vendor_part_id();
    d.hw_ver = 1;
    d.max_qp = static_cast<int>(kQpSlots - 2);
    d.max_qp_wr = static_cast<int>(engine::kMaxQueueDepth);
    d.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_PORT_ACTIVE_EVENT |
                         IBV_DEVICE_SRQ_RESIZE;
    d.max_sge = static_cast<int>(engine::kMaxSge);
    d.max_sge_rd = static_cast<int>(engine::kMaxSge);
    d.max_cq = 1 << 16;
    d.max_cqe = (1 << 22) - 1;
    d.max_mr = static_cast<int>(kMrSlots - 1);
    d.max_pd = 1 << 24;
    d.max_qp_rd_atom = 16;
    d.max_qp_init_rd_atom = 16;
    d.max_res_rd_atom = 16 * (1 << 16);
    d.atomic_cap = IBV_ATOMIC_HCA;
    d.max_ah = 1 << 24;
    d.max_srq = 1 << 16;
    d.max_srq_wr = static_cast<int>(engine::kMaxQueueDepth);
    d.max_srq_sge = static_cast<int>(engine::kMaxSge);
    d.max_pkeys = 1;
    d.local_ca_ack_delay = 16;
    d.phys_port_cnt = 1;
    a.phys_port_cnt_ex = d.phys_port_cnt;
    a.device_cap_flags_ex = d.device_cap_flags;
    a.completion_timestamp_mask = ~0ull;  // completion timestamps are CLOCK_MONOTONIC nanoseconds
    a.hca_core_clock = 1'000'000;         // kHz: one tick per nanosecond
    std::memcpy(attr, &a, std::min(attr_size, sizeof a));
    return 0;
}

int query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
    if (port != 1) return EINVAL;
    ContextImpl& c = context_of(ctx);
    ibv_port_attr p{};
    p.state = IBV_PORT_ACTIVE;
    p.max_mtu = IBV_MTU_4096;
    p.active_mtu = mtu_enum(port_mtu_bytes(*c.rt));
    p.gid_tbl_len = 1;
    p.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_SYS_IMAGE_GUID_SUP;
    p.max_msg_sz = 1u << 30;  // an mlx5 device's 2^log_max_msg (QUERY_HCA_CAP, mlx5/general_commands.cpp)
    p.pkey_tbl_len = 1;
    p.lid = lid_of(c.nic);
    p.sm_lid = 1;
    p.lmc = 0;
    p.max_vl_num = 1;
    p.subnet_timeout = 18;
    p.active_width = 2;    // 4x
    p.active_speed = 32;   // EDR: 4x EDR = 100 Gb/s, the default link bandwidth
    p.phys_state = 5;      // LinkUp
    p.link_layer = IBV_LINK_LAYER_INFINIBAND;
    *attr = p;
    return 0;
}

int allocation_refusal(const char* env) {
    const char* type = std::getenv(env);
    if (!configured_part_id() || !type || std::strcmp(type, "HUGE") != 0) return 0;  // ANON, PREFER_*: any memory
    constexpr size_t kHugePage = size_t{2} << 20;
    void* p = mmap(nullptr, kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p == MAP_FAILED) return ENOMEM;
    munmap(p, kHugePage);
    return 0;
}

}  // namespace softfabric::provider
