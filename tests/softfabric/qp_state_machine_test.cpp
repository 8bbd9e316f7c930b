// The modify_qp transition table (IB spec / kernel ib_modify_qp_is_ok) for RC and UD.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "common/verbs/rc_setup.h"
#include "provider/qp_state_machine.h"

namespace softfabric::provider {
namespace {

constexpr int kRcInit = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kRcRtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRcRts = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                       IBV_QP_MAX_QP_RD_ATOMIC;

TEST(QpStateMachine, RcHappyPath) {
    EXPECT_TRUE(transition_ok(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, kRcInit));
    EXPECT_TRUE(transition_ok(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR, kRcRtr));
    EXPECT_TRUE(transition_ok(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS, kRcRts));
    EXPECT_TRUE(transition_ok(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_ERR, IBV_QP_STATE));
    EXPECT_TRUE(transition_ok(IBV_QPT_RC, IBV_QPS_ERR, IBV_QPS_RESET, IBV_QP_STATE));
}

TEST(QpStateMachine, RcRejectsSkipsAndMissingOrExtraAttributes) {
    EXPECT_FALSE(transition_ok(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_RTR, kRcRtr));
    EXPECT_FALSE(transition_ok(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTS, kRcRts));
    EXPECT_FALSE(transition_ok(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR, kRcRtr & ~IBV_QP_DEST_QPN));
    EXPECT_FALSE(transition_ok(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, kRcInit | IBV_QP_QKEY));
    EXPECT_FALSE(transition_ok(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS, kRcRts & ~IBV_QP_RETRY_CNT));
    EXPECT_FALSE(transition_ok(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_ERR, IBV_QP_STATE | IBV_QP_TIMEOUT));
    EXPECT_FALSE(transition_ok(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QP_STATE));
}

// The bring-up every workload, test program and benchmark shares (tools/common/verbs) is a sequence the
// fabric accepts, carries the caller's path and options, and adds a GRH exactly when given a GID.
TEST(QpStateMachine, SharedRcBringUpIsAnAcceptedSequence) {
    namespace verbs = sigmatrace::verbs;
    const uint8_t gid[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
    for (const uint8_t* g : {static_cast<const uint8_t*>(nullptr), gid}) {
        const auto t = verbs::rc_transitions({.qpn = 0x1234, .lid = 7, .gid = g},
                                             {.access = verbs::kFullAccess, .mtu = IBV_MTU_1024, .rd_atomic = 16,
                                              .timeout = 3, .retry_cnt = 2, .rnr_retry = 1, .min_rnr_timer = 9});
        EXPECT_TRUE(transition_ok(IBV_QPT_RC, IBV_QPS_RESET, t[0].attr.qp_state, t[0].mask));
        EXPECT_TRUE(transition_ok(IBV_QPT_RC, t[0].attr.qp_state, t[1].attr.qp_state, t[1].mask));
        EXPECT_TRUE(transition_ok(IBV_QPT_RC, t[1].attr.qp_state, t[2].attr.qp_state, t[2].mask));
        EXPECT_EQ(t[2].attr.qp_state, IBV_QPS_RTS);
        EXPECT_EQ(t[0].attr.qp_access_flags, static_cast<unsigned>(verbs::kFullAccess));
        EXPECT_EQ(t[1].attr.dest_qp_num, 0x1234u);
        EXPECT_EQ(t[1].attr.ah_attr.dlid, 7);
        EXPECT_EQ(t[1].attr.path_mtu, IBV_MTU_1024);
        EXPECT_EQ(t[1].attr.max_dest_rd_atomic, 16);
        EXPECT_EQ(t[1].attr.min_rnr_timer, 9);
        EXPECT_EQ(t[2].attr.max_rd_atomic, 16);
        EXPECT_EQ(t[2].attr.timeout, 3);
        EXPECT_EQ(t[2].attr.retry_cnt, 2);
        EXPECT_EQ(t[2].attr.rnr_retry, 1);
        EXPECT_EQ(t[1].attr.rq_psn, 0u);
        EXPECT_EQ(t[2].attr.sq_psn, 0u);
        EXPECT_EQ(t[1].attr.ah_attr.is_global, g != nullptr ? 1 : 0);
        if (g != nullptr) {
            EXPECT_EQ(std::memcmp(t[1].attr.ah_attr.grh.dgid.raw, gid, 16), 0);
            EXPECT_EQ(t[1].attr.ah_attr.grh.hop_limit, 1);
        }
    }
    const verbs::SetupError e("modify to RTR", EINVAL);
    EXPECT_EQ(e.err(), EINVAL);
    EXPECT_STREQ(e.what(), "modify to RTR failed (errno 22: Invalid argument)");
}

TEST(QpStateMachine, UdUsesQkeyAndNoPath) {
    EXPECT_TRUE(transition_ok(IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT,
                              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
    EXPECT_FALSE(transition_ok(IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT, kRcInit));
    EXPECT_TRUE(transition_ok(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_STATE));
    EXPECT_FALSE(transition_ok(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, kRcRtr));
    EXPECT_TRUE(transition_ok(IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

}  // namespace
}  // namespace softfabric::provider
