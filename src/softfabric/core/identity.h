// Names and addresses of fabric NICs, derived from (node, rail) only, so that every process computes the same
// values without asking anyone (docs/softfabric.md, "Identity"):
//
//   node name        node<N>
//   device name      sfab_<R>                       (the same names on every node, like mlx5_0 on a cluster)
//   NIC index        N * kMaxRails + R
//   LID              1 + NIC index
//   node GUID        0x5346'0000'0000'0000 | N << 16 | R << 8          ("SF" in the top bytes)
//   port GUID        node GUID | 1
//   sys image GUID   0x5346'0000'0000'0000 | N << 16                    (shared by the rails of a node)
//   GID[0]           fe80::/64 subnet prefix + port GUID
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>

namespace softfabric {

inline constexpr uint32_t kMaxNodes = 64;
inline constexpr uint32_t kMaxRails = 8;
inline constexpr uint32_t kMaxNics = kMaxNodes * kMaxRails;
inline constexpr uint64_t kGuidPrefix = 0x5346'0000'0000'0000ull;
inline constexpr uint32_t kVendorId = 0x5346;  // reported vendor_id ("SF")
// The PCI function the fake sysfs puts under each NIC (its ConnectX personality): Mellanox's PCI vendor id, and
// as device id the NIC's vendor_part_id (on a ConnectX the two are the same number).
inline constexpr uint32_t kPciVendorMellanox = 0x15b3;
// The vendor_id a ConnectX reports through verbs (Mellanox's IEEE OUI, not its PCI id): what tools that key on
// the device model (rdma-core's mlx5 tests, perftest's device table) compare with.
inline constexpr uint32_t kVerbsVendorMellanox = 0x02c9;
inline constexpr uint32_t kDefaultVendorPartId = 4123;  // ConnectX-6

struct NicId {
    uint32_t node = 0;
    uint32_t rail = 0;

    uint32_t index() const { return node * kMaxRails + rail; }
    static NicId from_index(uint32_t index) { return {index / kMaxRails, index % kMaxRails}; }
    bool operator==(const NicId&) const = default;
};

std::string node_name(uint32_t node);
std::string device_name(uint32_t rail);
// "node1/sfab_0": how tools and messages name a NIC.
std::string nic_label(NicId nic);

uint16_t lid_of(NicId nic);
uint64_t node_guid_of(NicId nic);  // host byte order
uint64_t port_guid_of(NicId nic);
uint64_t sys_image_guid_of(uint32_t node);
ibv_gid gid_of(NicId nic);

// Inverses: the NIC a LID or GID designates, or nothing when it names no fabric NIC.
std::optional<NicId> nic_from_lid(uint16_t lid);
std::optional<NicId> nic_from_gid(const ibv_gid& gid);

// The vendor_part_id every fabric NIC reports, and the PCI device id of its sysfs parent:
// $SOFTFABRIC_VENDOR_PART_ID (docs/configuration.md), else kDefaultVendorPartId; 0 = a generic NIC without a PCI
// parent. Read once per process.
uint32_t configured_part_id();
// "0000:0b:00.0": the PCI address of a NIC's sysfs parent, unique per rail within a node.
std::string pci_address(uint32_t rail);

// Parses "node3" or "3" into 3.
std::optional<uint32_t> parse_node_name(const std::string& text);

}  // namespace softfabric
