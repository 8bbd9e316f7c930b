// The modify_qp transition table (IB spec / kernel ib_modify_qp_is_ok) for RC and UD.
#include <gtest/gtest.h>

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
