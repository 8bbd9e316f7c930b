// Names, GUIDs, LIDs and GIDs are functions of (node, rail) and can be inverted (docs/softfabric.md).
#include <endian.h>
#include <gtest/gtest.h>

#include "core/identity.h"

namespace softfabric {
namespace {

TEST(Identity, FormulasMatchTheDocumentation) {
    NicId nic{3, 1};
    EXPECT_EQ(node_name(3), "node3");
    EXPECT_EQ(device_name(1), "sfab_1");
    EXPECT_EQ(nic_label(nic), "node3/sfab_1");
    EXPECT_EQ(nic.index(), 25u);
    EXPECT_EQ(lid_of(nic), 26);
    EXPECT_EQ(node_guid_of(nic), 0x5346'0000'0003'0100ull);
    EXPECT_EQ(port_guid_of(nic), 0x5346'0000'0003'0101ull);
    EXPECT_EQ(sys_image_guid_of(3), 0x5346'0000'0003'0000ull);
    ibv_gid gid = gid_of(nic);
    EXPECT_EQ(be64toh(gid.global.subnet_prefix), 0xfe80'0000'0000'0000ull);
    EXPECT_EQ(be64toh(gid.global.interface_id), 0x5346'0000'0003'0101ull);
}

TEST(Identity, LidAndGidInvertForEveryNic) {
    for (uint32_t node = 0; node < kMaxNodes; ++node) {
        for (uint32_t rail = 0; rail < kMaxRails; ++rail) {
            NicId nic{node, rail};
            ASSERT_EQ(nic_from_lid(lid_of(nic)), nic);
            ASSERT_EQ(nic_from_gid(gid_of(nic)), nic);
        }
    }
    EXPECT_FALSE(nic_from_lid(0).has_value());
    EXPECT_FALSE(nic_from_lid(kMaxNics + 1).has_value());
    ibv_gid foreign{};
    foreign.global.interface_id = htobe64(0x0002'c903'0000'0001ull);
    EXPECT_FALSE(nic_from_gid(foreign).has_value());
}

TEST(Identity, ParsesNodeNames) {
    EXPECT_EQ(parse_node_name("node12"), 12u);
    EXPECT_EQ(parse_node_name("7"), 7u);
    EXPECT_FALSE(parse_node_name("node").has_value());
    EXPECT_FALSE(parse_node_name("nodeX").has_value());
    EXPECT_FALSE(parse_node_name("-1").has_value());
}

}  // namespace
}  // namespace softfabric
