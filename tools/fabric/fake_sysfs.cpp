#include "fabric/fake_sysfs.h"

#include <endian.h>
#include <fmt/core.h>

#include <fstream>
#include <stdexcept>

#include "core/identity.h"

namespace sigmatrace::fabric {
namespace {

void put(const std::filesystem::path& file, const std::string& text) {
    std::filesystem::create_directories(file.parent_path());
    std::ofstream out(file);
    out << text;
    if (!out) throw std::runtime_error(fmt::format("Cannot write {}", file.string()));
}

// "5346:0000:0001:0000": how the kernel prints GUIDs in sysfs.
std::string guid_text(uint64_t g) {
    return fmt::format("{:04x}:{:04x}:{:04x}:{:04x}", (g >> 48) & 0xffff, (g >> 32) & 0xffff, (g >> 16) & 0xffff,
                       g & 0xffff);
}

std::string gid_text(const ibv_gid& gid) {
    std::string s;
    for (int i = 0; i < 16; i += 2) s += fmt::format("{}{:02x}{:02x}", i ? ":" : "", gid.raw[i], gid.raw[i + 1]);
    return s;
}

}  // namespace

void write_fake_sysfs(const std::filesystem::path& root, const std::string& fabric_name, uint32_t node,
                      uint32_t rails) {
    namespace sf = softfabric;
    put(root / "class/infiniband_verbs/abi_version", "6\n");
    // Created last rail first: tmpfs lists a directory newest first, and libibverbs keeps that order, so
    // ibv_get_device_list() returns sfab_0 first (programs that take the first device get rail 0).
    for (uint32_t r = rails; r-- > 0;) {
        const uint32_t rail = r;
        sf::NicId nic{node, rail};
        std::string dev = sf::device_name(rail);
        auto verbs = root / fmt::format("class/infiniband_verbs/uverbs{}", rail);
        put(verbs / "ibdev", dev + "\n");
        put(verbs / "dev", "0:0\n");  // 0:0: libibverbs skips the device-number check on /dev/infiniband/uverbsN
        put(verbs / "abi_version", "1\n");
        auto ib = root / "class/infiniband" / dev;
        put(ib / "node_type", "1: CA\n");
        put(ib / "node_guid", guid_text(sf::node_guid_of(nic)) + "\n");
        put(ib / "sys_image_guid", guid_text(sf::sys_image_guid_of(node)) + "\n");
        put(ib / "node_desc", fmt::format("{} {}\n", sf::node_name(node), dev));
        put(ib / "fw_ver", "0.1.0\n");
        put(ib / "hca_type", "softfabric\n");
        put(ib / "softfabric", fmt::format("fabric={}\nnode={}\nrail={}\n", fabric_name, node, rail));
        auto port = ib / "ports/1";
        put(port / "gids/0", gid_text(sf::gid_of(nic)) + "\n");
        put(port / "pkeys/0", "0xffff\n");
        put(port / "lid", fmt::format("0x{:x}\n", sf::lid_of(nic)));
        put(port / "sm_lid", "0x1\n");
        put(port / "lid_mask_count", "0\n");
        put(port / "state", "4: ACTIVE\n");
        put(port / "phys_state", "5: LinkUp\n");
        put(port / "rate", "100 Gb/sec (4X EDR)\n");
        put(port / "link_layer", "InfiniBand\n");
        put(port / "cap_mask", "0x00010800\n");
    }
}

}  // namespace sigmatrace::fabric
