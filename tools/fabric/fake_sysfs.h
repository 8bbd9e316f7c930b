// The sysfs tree libibverbs reads to find devices (SYSFS_PATH): one uverbs<R> / sfab_<R> pair per rail of the
// node, with the attributes libibverbs and ibv_devinfo read (node_type, node_guid, sys_image_guid, GIDs,
// P_Keys, GID types, port state) and a `softfabric` file that tells the provider which fabric, node and rail it
// is. With a ConnectX part id (core/identity.h) each device sits under a PCI function (vendor 0x15b3, device =
// part id, numa_node, local_cpus, driver -> mlx5_core), which UCX and Open MPI read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace sigmatrace::fabric {

void write_fake_sysfs(const std::filesystem::path& root, const std::string& fabric_name, uint32_t node,
                      uint32_t rails);

}  // namespace sigmatrace::fabric
