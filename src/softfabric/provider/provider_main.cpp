// The provider's entry points: registration with libibverbs at load time, device matching and allocation,
// and context creation (which attaches the process to the fabric named in the device's sysfs entry).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "provider/command_channel.h"
#include "provider/objects.h"
#include "provider/pabi_guard.h"

namespace softfabric::provider {
namespace {

// Fabric devices are named sfab_<rail> (core/identity.h); libibverbs matches "rdma_device:N<ibdev name>".
const pabi::verbs_match_ent kMatchTable[] = {
    {nullptr, {"rdma_device:*Nsfab_*"}, 0, 0, pabi::VERBS_MATCH_MODALIAS},
    {nullptr, {nullptr}, 0, 0, pabi::VERBS_MATCH_SENTINEL},
};

// Reads <ibdev_path>/softfabric, written by `sigmatrace fabric`: "fabric=NAME\nnode=N\nrail=R\n".
bool read_identity(const pabi::verbs_sysfs_dev* sysfs, std::string& fabric, NicId& nic) {
    std::ifstream in(std::string(sysfs->ibdev_path) + "/softfabric");
    if (!in) return false;
    std::string line;
    bool have_node = false, have_rail = false;
    while (std::getline(in, line)) {
        auto eq = line.find('=');
        if (eq == std::string::npos) continue;
        std::string key = line.substr(0, eq), value = line.substr(eq + 1);
        if (key == "fabric") fabric = value;
        if (key == "node") nic.node = static_cast<uint32_t>(std::strtoul(value.c_str(), nullptr, 10)), have_node = true;
        if (key == "rail") nic.rail = static_cast<uint32_t>(std::strtoul(value.c_str(), nullptr, 10)), have_rail = true;
    }
    return !fabric.empty() && have_node && have_rail && nic.node < kMaxNodes && nic.rail < kMaxRails &&
           fabric.size() < sizeof(DeviceObject::fabric_name);
}

bool match_device(pabi::verbs_sysfs_dev* sysfs) {
    std::string fabric;
    NicId nic;
    return sysfs->match != nullptr && read_identity(sysfs, fabric, nic);
}

pabi::verbs_device* alloc_device(pabi::verbs_sysfs_dev* sysfs) {
    auto* d = static_cast<DeviceObject*>(std::calloc(1, sizeof(DeviceObject)));
    if (!d) return nullptr;
    std::string fabric;
    if (!read_identity(sysfs, fabric, d->nic)) {
        std::free(d);
        return nullptr;
    }
    std::snprintf(d->fabric_name, sizeof d->fabric_name, "%s", fabric.c_str());
    return &d->vdev;
}

void uninit_device(pabi::verbs_device* vdev) { std::free(reinterpret_cast<DeviceObject*>(vdev)); }

void free_context(ibv_context* ctx) {
    ContextObject* obj = context_object(ctx);
    ContextImpl* impl = obj->impl;
    close_command_file(ctx->cmd_fd);
    if (impl->async_write_fd >= 0) close(impl->async_write_fd);
    private_abi().uninit_context(&obj->vctx);  // closes cmd_fd and async_fd
    delete impl;
    std::free(obj);
}

const pabi::verbs_context_ops& context_ops() {
    static const pabi::verbs_context_ops ops = [] {
        pabi::verbs_context_ops o{};
        o.alloc_pd = alloc_pd;
        o.cq_event = cq_event;
        o.create_ah = create_ah;
        o.create_cq = create_cq;
        o.create_cq_ex = create_cq_ex;
        o.create_qp = create_qp;
        o.create_qp_ex = create_qp_ex;
        o.create_srq = create_srq;
        o.create_srq_ex = create_srq_ex;
        o.dealloc_pd = dealloc_pd;
        o.dereg_mr = dereg_mr;
        o.destroy_ah = destroy_ah;
        o.destroy_cq = destroy_cq;
        o.destroy_qp = destroy_qp;
        o.destroy_srq = destroy_srq;
        o.free_context = free_context;
        o.modify_qp = modify_qp;
        o.modify_srq = modify_srq;
        o.poll_cq = poll_cq;
        o.post_recv = post_recv;
        o.post_send = post_send;
        o.post_srq_recv = post_srq_recv;
        o.query_device_ex = query_device_ex;
        o.query_port = query_port;
        o.query_qp = query_qp;
        o.query_qp_data_in_order = query_qp_data_in_order;
        o.query_srq = query_srq;
        o.reg_mr = reg_mr;
        o.req_notify_cq = req_notify_cq;
        o.resize_cq = resize_cq;
        return o;
    }();
    return ops;
}

struct verbs_context* alloc_context(ibv_device* ibdev, int cmd_fd, void*) {
    auto* device = reinterpret_cast<DeviceObject*>(ibdev);
    Runtime* rt = nullptr;
    try {
        rt = &Runtime::attach(device->fabric_name, device->nic.node);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "softfabric: cannot open %s: %s\n", ibdev->name, e.what());
        close(cmd_fd);
        errno = ENODEV;
        return nullptr;
    }
    // libibverbs opened /dev/infiniband/uverbsN (a stand-in): the command file replaces it (command_channel.h).
    close(cmd_fd);
    int command_fd = open_command_file();
    if (command_fd < 0) return nullptr;
    auto* obj = static_cast<ContextObject*>(private_abi().init_and_alloc_context(
        ibdev, command_fd, sizeof(ContextObject), nullptr /* verbs_context at offset 0 */, pabi::kRdmaDriverUnknown));
    if (!obj) {
        close_command_file(command_fd);
        return nullptr;
    }
    auto* impl = new ContextImpl;
    impl->device = device;
    impl->rt = rt;
    impl->nic = device->nic;
    impl->command_fd = command_fd;
    obj->impl = impl;
    private_abi().set_ops(&obj->vctx, &context_ops());
    // An async event file of our own, so that libibverbs does not ask the (absent) kernel for one.
    int p[2];
    if (pipe2(p, O_CLOEXEC) == 0) {
        obj->vctx.context.async_fd = p[0];
        impl->async_write_fd = p[1];
    }
    // One completion vector per CPU, as a ConnectX has an event queue per core: UCX passes the lowest CPU near the
    // device as a CQ's comp_vector.
    obj->vctx.context.num_comp_vectors = std::max(1L, sysconf(_SC_NPROCESSORS_CONF));
    return &obj->vctx;
}

const pabi::verbs_device_ops kDeviceOps = {
    .name = "softfabric",
    .match_min_abi_version = 0,
    .match_max_abi_version = INT_MAX,
    .match_table = kMatchTable,
    .static_providers = nullptr,
    .match_device = match_device,
    .alloc_context = alloc_context,
    .import_context = nullptr,
    .alloc_device = alloc_device,
    .uninit_device = uninit_device,
};

// Registration at dlopen time, as rdma-core's own providers do, after checking the private ABI.
[[gnu::constructor]] void register_provider() {
    std::string problem = load_private_abi();
    if (!problem.empty()) {
        std::fprintf(stderr, "%s\n", problem.c_str());
        return;
    }
    private_abi().register_driver(&kDeviceOps);
}

}  // namespace
}  // namespace softfabric::provider
