#include "fabric/fake_sysfs.h"

#include <endian.h>
#include <fmt/core.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <system_error>

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

void link(const std::filesystem::path& at, const std::filesystem::path& target) {
    std::filesystem::create_directories(at.parent_path());
    std::error_code ec;
    std::filesystem::create_symlink(target, at, ec);
    if (ec) throw std::runtime_error(fmt::format("Cannot create the link {} -> {}: {}", at.string(), target.string(),
                                                 ec.message()));
}

// The kernel's cpumask format: 32-bit hex words, most significant first, comma separated.
std::string cpumask_text(long cpus) {
    if (cpus < 1) cpus = 1;
    std::string s;
    for (long word = (cpus - 1) / 32; word >= 0; --word) {
        const long bits = std::min(32L, cpus - word * 32);
        const uint32_t mask = bits >= 32 ? 0xffffffffu : ((1u << bits) - 1);
        s += fmt::format("{}{:08x}", s.empty() ? "" : ",", mask);
    }
    return s;
}

// The PCI function a ConnectX NIC hangs under: what UCX reads to recognize an mlx5 device (vendor, device),
// where it and Open MPI look for locality (numa_node, local_cpus) and the driver (driver -> mlx5_core).
// No `modalias` file: libibverbs would hand a device with a ConnectX modalias to the system's mlx5 provider.
void write_pci_function(const std::filesystem::path& root, const std::filesystem::path& pci, uint32_t part_id) {
    put(pci / "vendor", fmt::format("0x{:04x}\n", softfabric::kPciVendorMellanox));
    put(pci / "device", fmt::format("0x{:04x}\n", part_id));
    put(pci / "subsystem_vendor", fmt::format("0x{:04x}\n", softfabric::kPciVendorMellanox));
    put(pci / "subsystem_device", "0x0007\n");
    put(pci / "class", "0x020700\n");  // network controller, InfiniBand
    const bool numa = std::filesystem::exists("/sys/devices/system/node/node0");
    put(pci / "numa_node", numa ? "0\n" : "-1\n");
    const long cpus = sysconf(_SC_NPROCESSORS_CONF);
    put(pci / "local_cpus", cpumask_text(cpus) + "\n");
    put(pci / "local_cpulist", cpus > 1 ? fmt::format("0-{}\n", cpus - 1) : "0\n");
    put(pci / "current_link_speed", "16.0 GT/s PCIe\n");  // PCIe Gen4 x16, as a ConnectX-6 slot
    put(pci / "current_link_width", "16\n");
    put(pci / "max_link_speed", "16.0 GT/s PCIe\n");
    put(pci / "max_link_width", "16\n");
    const auto driver = root / "bus/pci/drivers/mlx5_core";
    std::filesystem::create_directories(driver);
    if (!std::filesystem::exists(driver / "module")) link(driver / "module", "../../../../module/mlx5_core");
    std::filesystem::create_directories(root / "module/mlx5_core");
    link(pci / "driver", "../../../bus/pci/drivers/mlx5_core");
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
        // With a ConnectX personality the device directory sits under a PCI function, as on a real machine:
        // class/infiniband/<dev> -> devices/pci0000:00/<bdf>/infiniband/<dev> (an absolute link, so that it also
        // resolves where the launcher exposes class/infiniband at /sys/class/infiniband).
        const uint32_t part_id = sf::configured_part_id();
        std::filesystem::path ib = root / "class/infiniband" / dev;
        if (part_id != 0) {
            const auto pci = root / "devices/pci0000:00" / sf::pci_address(rail);
            write_pci_function(root, pci, part_id);
            ib = pci / "infiniband" / dev;
            link(root / "class/infiniband" / dev, ib);
            link(ib / "device", "../../../" + sf::pci_address(rail));
        }
        put(ib / "node_type", "1: CA\n");
        put(ib / "node_guid", guid_text(sf::node_guid_of(nic)) + "\n");
        put(ib / "sys_image_guid", guid_text(sf::sys_image_guid_of(node)) + "\n");
        put(ib / "node_desc", fmt::format("{} {}\n", sf::node_name(node), dev));
        put(ib / "fw_ver", "0.1.0\n");
        put(ib / "hca_type", part_id ? fmt::format("MT{}\n", part_id) : "softfabric\n");
        put(ib / "softfabric", fmt::format("fabric={}\nnode={}\nrail={}\n", fabric_name, node, rail));
        auto port = ib / "ports/1";
        put(port / "gids/0", gid_text(sf::gid_of(nic)) + "\n");
        put(port / "pkeys/0", "0xffff\n");
        put(port / "gid_attrs/types/0", "IB/RoCE v1\n");
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
