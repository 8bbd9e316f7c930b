#include "core/identity.h"

#include <endian.h>
#include <fmt/core.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

namespace softfabric {

std::string node_name(uint32_t node) { return fmt::format("node{}", node); }
std::string device_name(uint32_t rail) { return fmt::format("sfab_{}", rail); }
std::string nic_label(NicId nic) { return fmt::format("{}/{}", node_name(nic.node), device_name(nic.rail)); }

uint16_t lid_of(NicId nic) { return static_cast<uint16_t>(1 + nic.index()); }
uint64_t node_guid_of(NicId nic) {
    return kGuidPrefix | (static_cast<uint64_t>(nic.node) << 16) | (static_cast<uint64_t>(nic.rail) << 8);
}
uint64_t port_guid_of(NicId nic) { return node_guid_of(nic) | 1; }
uint64_t sys_image_guid_of(uint32_t node) { return kGuidPrefix | (static_cast<uint64_t>(node) << 16); }

ibv_gid gid_of(NicId nic) {
    ibv_gid gid{};
    gid.global.subnet_prefix = htobe64(0xfe80'0000'0000'0000ull);
    gid.global.interface_id = htobe64(port_guid_of(nic));
    return gid;
}

std::optional<NicId> nic_from_lid(uint16_t lid) {
    if (lid == 0 || lid > kMaxNics) return std::nullopt;
    return NicId::from_index(lid - 1u);
}

std::optional<NicId> nic_from_gid(const ibv_gid& gid) {
    uint64_t id = be64toh(gid.global.interface_id);
    if ((id & 0xffff'0000'0000'0000ull) != kGuidPrefix || (id & 0xff) != 1) return std::nullopt;
    uint32_t node = static_cast<uint32_t>((id >> 16) & 0xffff'ffffu);
    uint32_t rail = static_cast<uint32_t>((id >> 8) & 0xff);
    if (node >= kMaxNodes || rail >= kMaxRails) return std::nullopt;
    return NicId{node, rail};
}

uint32_t configured_part_id() {
    static const uint32_t id = [] {
        const char* v = std::getenv("SOFTFABRIC_VENDOR_PART_ID");
        return v && *v ? static_cast<uint32_t>(std::strtoul(v, nullptr, 0)) : kDefaultVendorPartId;
    }();
    return id;
}

std::string pci_address(uint32_t rail) { return fmt::format("0000:{:02x}:00.0", 0x0b + rail); }

std::optional<uint32_t> parse_node_name(const std::string& text) {
    std::string_view s = text;
    if (s.starts_with("node")) s.remove_prefix(4);
    if (s.empty()) return std::nullopt;
    uint32_t value = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return value;
}

}  // namespace softfabric
