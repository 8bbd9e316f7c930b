// The libmlx5 stand-in's routing for fabric objects (docs/softfabric.md, "mlx5 DevX and direct verbs"): libmlx5
// functions the fabric does not implement fail on fabric contexts and objects with EOPNOTSUPP, in each function's
// return convention, instead of reaching the real libmlx5 (which would take the fabric's objects for its own);
// mlx5dv_qp_ex_from_ibv_qp_ex gives a table whose unemulated setters fail the ibv_wr_* batch. Run on fabric
// node 0 (`sigmatrace fabric --node 0 -- ...`), so that libmlx5.so.1 resolves to the stand-in.
#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

class Mlx5dvRefusals : public ::testing::Test {
protected:
    void SetUp() override {
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        ASSERT_NE(list, nullptr);
        for (int i = 0; i < n && !ctx_; ++i)
            if (std::strcmp(ibv_get_device_name(list[i]), "sfab_0") == 0) {
                ASSERT_TRUE(mlx5dv_is_supported(list[i]));
                mlx5dv_context_attr attr{};
                attr.flags = MLX5DV_CONTEXT_FLAGS_DEVX;
                ctx_ = mlx5dv_open_device(list[i], &attr);
            }
        ibv_free_device_list(list);
        ASSERT_NE(ctx_, nullptr) << "no sfab_0: run under `sigmatrace fabric --node 0`";
        pd_ = ibv_alloc_pd(ctx_);
        cq_ = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
        ASSERT_NE(pd_, nullptr);
        ASSERT_NE(cq_, nullptr);
        ibv_srq_init_attr sa{};
        sa.attr.max_wr = 8;
        sa.attr.max_sge = 1;
        srq_ = ibv_create_srq(pd_, &sa);
        ASSERT_NE(srq_, nullptr);
    }
    void TearDown() override {
        if (qp_) {
            EXPECT_EQ(ibv_destroy_qp(qp_), 0);
        }
        if (srq_) {
            EXPECT_EQ(ibv_destroy_srq(srq_), 0);
        }
        if (cq_) {
            EXPECT_EQ(ibv_destroy_cq(cq_), 0);
        }
        if (pd_) {
            EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
        }
        if (ctx_) {
            EXPECT_EQ(ibv_close_device(ctx_), 0);
        }
    }

    // A DC initiator in RTS, driven through ibv_wr_* (what pyverbs' DC tests use).
    // Its own transitions, not tools/common/verbs: a DCI has no remote QP, path or access flags.
    void make_dci() {
        ibv_qp_init_attr_ex a{};
        a.qp_type = IBV_QPT_DRIVER;
        a.send_cq = a.recv_cq = cq_;
        a.cap.max_send_wr = 8;
        a.cap.max_send_sge = 1;
        a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        a.pd = pd_;
        a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
        mlx5dv_qp_init_attr dv{};
        dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
        dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
        qp_ = mlx5dv_create_qp(ctx_, &a, &dv);
        ASSERT_NE(qp_, nullptr) << std::strerror(errno);
        ibv_qp_attr m{};
        m.qp_state = IBV_QPS_INIT;
        m.port_num = 1;
        ASSERT_EQ(ibv_modify_qp(qp_, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT), 0);
        m.qp_state = IBV_QPS_RTR;
        m.path_mtu = IBV_MTU_1024;
        ASSERT_EQ(ibv_modify_qp(qp_, &m, IBV_QP_STATE | IBV_QP_PATH_MTU), 0);
        m.qp_state = IBV_QPS_RTS;
        m.timeout = 14;
        m.retry_cnt = 1;
        m.rnr_retry = 1;
        m.max_rd_atomic = 1;
        ASSERT_EQ(ibv_modify_qp(qp_, &m,
                                IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
                  0);
    }

    ibv_context* ctx_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_cq* cq_ = nullptr;
    ibv_srq* srq_ = nullptr;
    ibv_qp* qp_ = nullptr;
};

TEST_F(Mlx5dvRefusals, IntFunctionsReturnEopnotsupp) {
    uint32_t in[4] = {}, out[4] = {};
    EXPECT_EQ(mlx5dv_devx_cq_query(cq_, in, sizeof in, out, sizeof out), EOPNOTSUPP);
    EXPECT_EQ(mlx5dv_devx_srq_modify(srq_, in, sizeof in, out, sizeof out), EOPNOTSUPP);
    mlx5dv_clock_info clock{};
    EXPECT_EQ(mlx5dv_get_clock_info(ctx_, &clock), EOPNOTSUPP);
    mlx5dv_port port{};
    EXPECT_EQ(mlx5dv_query_port(ctx_, 1, &port), EOPNOTSUPP);
    uint32_t qpn = 0;
    EXPECT_EQ(mlx5dv_reserved_qpn_alloc(ctx_, &qpn), EOPNOTSUPP);
    EXPECT_EQ(mlx5dv_crypto_logout(ctx_), EOPNOTSUPP);
}

TEST_F(Mlx5dvRefusals, PointerFunctionsReturnNullWithErrno) {
    errno = 0;
    EXPECT_EQ(mlx5dv_dr_domain_create(ctx_, MLX5DV_DR_DOMAIN_TYPE_NIC_RX), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(mlx5dv_alloc_var(ctx_, 0), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    mlx5dv_mkey_init_attr mk{};
    mk.pd = pd_;  // the call's only handle on the device is the PD inside its attributes
    mk.create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT;
    mk.max_entries = 1;
    EXPECT_EQ(mlx5dv_create_mkey(&mk), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(mlx5dv_devx_create_cmd_comp(ctx_), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(mlx5dv_vfio_get_events_fd(ctx_), -1);  // a descriptor-returning function: -1, not 95
    EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(Mlx5dvRefusals, QpExTableRefusesWhatTheFabricDoesNotEmulate) {
    make_dci();
    ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp_);
    ASSERT_NE(qpx, nullptr);
    mlx5dv_qp_ex* mqp = mlx5dv_qp_ex_from_ibv_qp_ex(qpx);
    ASSERT_NE(mqp, nullptr);
    EXPECT_EQ(mlx5dv_qp_cancel_posted_send_wrs(mqp, 1), EOPNOTSUPP);
    EXPECT_EQ(mlx5dv_dci_stream_id_reset(qp_, 0), EOPNOTSUPP);
    EXPECT_EQ(mlx5dv_modify_qp_udp_sport(qp_, 4791), EOPNOTSUPP);

    uint8_t wqe[64] = {};
    ibv_wr_start(qpx);
    qpx->wr_id = 1;
    ibv_wr_send(qpx);
    mlx5dv_wr_raw_wqe(mqp, wqe);
    EXPECT_EQ(ibv_wr_complete(qpx), EOPNOTSUPP);

    ibv_wr_start(qpx);
    ibv_wr_send(qpx);
    mlx5dv_wr_set_dc_addr(mqp, nullptr, 0x123, 0);  // no address handle: refused, not dereferenced
    EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
    ibv_wc wc{};
    EXPECT_EQ(ibv_poll_cq(cq_, 1, &wc), 0);  // neither batch posted anything
}

}  // namespace
