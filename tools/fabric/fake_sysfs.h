// The sysfs tree libibverbs reads to find devices (SYSFS_PATH): one uverbs<R> / sfab_<R> pair per rail of the
// node, with the attributes libibverbs and ibv_devinfo read (node_type, node_guid, sys_image_guid, GIDs,
// P_Keys, port state) and a `softfabric` file that tells the provider which fabric, node and rail it is.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace sigmatrace::fabric {

void write_fake_sysfs(const std::filesystem::path& root, const std::string& fabric_name, uint32_t node,
                      uint32_t rails);

}  // namespace sigmatrace::fabric
