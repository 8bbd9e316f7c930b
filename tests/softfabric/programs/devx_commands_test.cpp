// The DevX commands UCX's DevX memory domain issues on a fabric device, through the libmlx5 stand-in
// (docs/softfabric.md, "mlx5 DevX and direct verbs"): general commands (answered or refused with their status),
// QP state transitions on verbs QPs (mlx5dv_devx_qp_modify, checked against ibv_query_qp), and DevX event
// channels that stay quiet. Run on fabric node 0 (`sigmatrace fabric --node 0 -- ...`), so that libmlx5.so.1
// resolves to the stand-in.
#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

// PRM mailboxes, big-endian bit fields at PRM bit offsets (mlx5_ifc).
struct Box {
    std::vector<uint8_t> b;
    explicit Box(size_t bytes) : b(bytes, 0) {}
    void set(uint32_t bit, uint32_t width, uint32_t value) {
        uint8_t* w = b.data() + bit / 32 * 4;
        uint32_t word = uint32_t{w[0]} << 24 | uint32_t{w[1]} << 16 | uint32_t{w[2]} << 8 | w[3];
        const uint32_t shift = 32 - bit % 32 - width;
        const uint32_t mask = (width == 32 ? ~0u : (1u << width) - 1) << shift;
        word = (word & ~mask) | ((value << shift) & mask);
        for (int i = 0; i < 4; ++i) w[i] = static_cast<uint8_t>(word >> (24 - 8 * i));
    }
    uint32_t get(uint32_t bit, uint32_t width) const {
        const uint8_t* w = b.data() + bit / 32 * 4;
        const uint32_t word = uint32_t{w[0]} << 24 | uint32_t{w[1]} << 16 | uint32_t{w[2]} << 8 | w[3];
        return (word >> (32 - bit % 32 - width)) & (width == 32 ? ~0u : (1u << width) - 1);
    }
};

constexpr uint32_t kQpc = 0xC0;  // qpc in the modify commands' `in`
constexpr uint16_t kRst2Init = 0x502, kInit2Rtr = 0x503, kRtr2Rts = 0x504, k2Err = 0x507, k2Rst = 0x50a;
constexpr uint16_t kRts2Rts = 0x505;

class DevxCommands : public ::testing::Test {
protected:
    void SetUp() override {
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        ASSERT_NE(list, nullptr);
        for (int i = 0; i < n && !ctx_; ++i)
            if (std::strcmp(ibv_get_device_name(list[i]), "sfab_0") == 0) {
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
        ibv_qp_init_attr a{};
        a.qp_type = IBV_QPT_RC;
        a.send_cq = a.recv_cq = cq_;
        a.cap.max_send_wr = a.cap.max_recv_wr = 8;
        a.cap.max_send_sge = a.cap.max_recv_sge = 1;
        qp_ = ibv_create_qp(pd_, &a);
        ASSERT_NE(qp_, nullptr);
        ibv_port_attr port{};
        ASSERT_EQ(ibv_query_port(ctx_, 1, &port), 0);
        lid_ = port.lid;
    }
    void TearDown() override {
        if (qp_) {
            EXPECT_EQ(ibv_destroy_qp(qp_), 0);
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

    Box transition(uint16_t opcode) const {
        Box in(0x1000 / 8 + 64);  // qpc and more
        in.set(0x00, 16, opcode);
        in.set(0x48, 24, qp_->qp_num);
        return in;
    }
    int modify(Box& in, Box& out) {
        errno = 0;
        return mlx5dv_devx_qp_modify(qp_, in.b.data(), in.b.size(), out.b.data(), out.b.size());
    }
    ibv_qp_attr query(int mask) {
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        EXPECT_EQ(ibv_query_qp(qp_, &attr, mask, &init), 0);
        return attr;
    }

    ibv_context* ctx_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_cq* cq_ = nullptr;
    ibv_qp* qp_ = nullptr;
    uint16_t lid_ = 0;
};

TEST_F(DevxCommands, GeneralCapabilitiesAnswerAndQueryLagIsRefused) {
    Box in(16), out(0x1010);
    in.set(0x00, 16, 0x100);    // QUERY_HCA_CAP
    in.set(0x30, 16, 0 << 1 | 1);  // general page, current values
    ASSERT_EQ(mlx5dv_devx_general_cmd(ctx_, in.b.data(), in.b.size(), out.b.data(), out.b.size()), 0);
    EXPECT_EQ(out.get(0x00, 8), 0u);
    EXPECT_EQ(out.get(0x80 + 0x1c3, 5), 30u);  // log_max_msg
    EXPECT_EQ(out.get(0x80 + 0x21a, 1), 1u);   // dct

    Box lag(16), lag_out(64);
    lag.set(0x00, 16, 0x842);  // QUERY_LAG
    errno = 0;
    EXPECT_EQ(mlx5dv_devx_general_cmd(ctx_, lag.b.data(), lag.b.size(), lag_out.b.data(), lag_out.b.size()),
              EOPNOTSUPP);
    EXPECT_EQ(errno, EOPNOTSUPP);
    EXPECT_EQ(lag_out.get(0x00, 8), 0x02u);          // BAD_OP
    EXPECT_EQ(lag_out.get(0x20, 32), 0x842u << 16);  // syndrome: the opcode
}

TEST_F(DevxCommands, VerbsRcQpMovesThroughItsStatesWithDevxCommands) {
    Box out(16);
    Box init = transition(kRst2Init);
    init.set(kQpc + 0x490, 1, 1);   // rre
    init.set(kQpc + 0x491, 1, 1);   // rwe
    init.set(kQpc + 0x1E8, 8, 1);   // primary_address_path.vhca_port_num
    ASSERT_EQ(modify(init, out), 0) << std::strerror(errno);
    EXPECT_EQ(out.get(0x00, 8), 0u);
    ibv_qp_attr a = query(IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
    EXPECT_EQ(a.qp_state, IBV_QPS_INIT);
    EXPECT_EQ(a.qp_access_flags, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);

    // RTR2RTS from INIT: refused by the state machine, with the firmware's status; the QP stays in INIT.
    Box early = transition(kRtr2Rts);
    EXPECT_EQ(modify(early, out), EINVAL);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(out.get(0x00, 8), 0x03u);                      // BAD_PARAM
    EXPECT_EQ(out.get(0x20, 32), uint32_t{kRtr2Rts} << 16);  // syndrome: the opcode
    EXPECT_EQ(query(IBV_QP_STATE).qp_state, IBV_QPS_INIT);

    Box rtr = transition(kInit2Rtr);
    rtr.set(kQpc + 0x40, 3, IBV_MTU_1024);  // mtu
    rtr.set(kQpc + 0xA8, 24, qp_->qp_num);  // remote_qpn: itself
    rtr.set(kQpc + 0xF0, 16, lid_);         // primary_address_path.rlid
    rtr.set(kQpc + 0x1E4, 4, 3);            // primary_address_path.sl
    rtr.set(kQpc + 0x1E8, 8, 1);            // vhca_port_num
    rtr.set(kQpc + 0x4A3, 5, 12);           // min_rnr_nak
    rtr.set(kQpc + 0x4A8, 24, 0x1234);      // next_rcv_psn
    rtr.set(kQpc + 0x488, 3, 2);            // log_rra_max: 4
    ASSERT_EQ(modify(rtr, out), 0) << std::strerror(errno);
    a = query(IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_AV | IBV_QP_MIN_RNR_TIMER | IBV_QP_RQ_PSN |
              IBV_QP_MAX_DEST_RD_ATOMIC);
    EXPECT_EQ(a.qp_state, IBV_QPS_RTR);
    EXPECT_EQ(a.path_mtu, IBV_MTU_1024);
    EXPECT_EQ(a.dest_qp_num, qp_->qp_num);
    EXPECT_EQ(a.ah_attr.dlid, lid_);
    EXPECT_EQ(a.ah_attr.sl, 3);
    EXPECT_EQ(a.min_rnr_timer, 12);
    EXPECT_EQ(a.rq_psn, 0x1234u);
    EXPECT_EQ(a.max_dest_rd_atomic, 4);

    Box rts = transition(kRtr2Rts);
    rts.set(kQpc + 0x100, 5, 14);      // primary_address_path.ack_timeout
    rts.set(kQpc + 0x38D, 3, 7);       // retry_count
    rts.set(kQpc + 0x390, 3, 6);       // rnr_retry
    rts.set(kQpc + 0x388, 3, 4);       // log_sra_max: 16
    rts.set(kQpc + 0x3C8, 24, 0x777);  // next_send_psn
    ASSERT_EQ(modify(rts, out), 0) << std::strerror(errno);
    a = query(IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
              IBV_QP_SQ_PSN);
    EXPECT_EQ(a.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(a.timeout, 14);
    EXPECT_EQ(a.retry_cnt, 7);
    EXPECT_EQ(a.rnr_retry, 6);
    EXPECT_EQ(a.max_rd_atomic, 16);
    EXPECT_EQ(a.sq_psn, 0x777u);

    Box rts2rts = transition(kRts2Rts);  // not modelled: refused as unsupported, state unchanged
    EXPECT_EQ(modify(rts2rts, out), EOPNOTSUPP);
    EXPECT_EQ(query(IBV_QP_STATE).qp_state, IBV_QPS_RTS);

    Box err = transition(k2Err);
    ASSERT_EQ(modify(err, out), 0);
    EXPECT_EQ(query(IBV_QP_STATE).qp_state, IBV_QPS_ERR);
    Box rst = transition(k2Rst);
    ASSERT_EQ(modify(rst, out), 0);
    EXPECT_EQ(query(IBV_QP_STATE).qp_state, IBV_QPS_RESET);
}

TEST_F(DevxCommands, ModifyOfAnotherQpOrNoTransitionIsInvalid) {
    Box out(16);
    Box other = transition(k2Err);
    other.set(0x48, 24, qp_->qp_num + 1);
    EXPECT_EQ(modify(other, out), EINVAL);
    Box query_qp = transition(0x50b);  // QUERY_QP is no modify command
    EXPECT_EQ(modify(query_qp, out), EINVAL);
    EXPECT_EQ(query(IBV_QP_STATE).qp_state, IBV_QPS_RESET);
    // Query commands on verbs QPs stay unsupported.
    Box qin(16), qout(0x100);
    qin.set(0x00, 16, 0x50b);
    qin.set(0x48, 24, qp_->qp_num);
    EXPECT_EQ(mlx5dv_devx_qp_query(qp_, qin.b.data(), qin.b.size(), qout.b.data(), qout.b.size()), EOPNOTSUPP);
}

// CREATE_DCT: a DC target of the PD mlx5dv_init_obj numbered; its number comes back in `out`. NVSHMEM's has no
// SRQ; UCX's receives into a verbs SRQ and completes into a verbs CQ, both exported with mlx5dv_init_obj. One
// naming an SRQ or a CQ that was not exported, or an unknown pd, is refused with EINVAL; nothing is created then.
TEST_F(DevxCommands, DctIsCreatedWithOrWithoutAnExportedSrqAndOtherwiseRefused) {
    mlx5dv_pd dvpd{};
    mlx5dv_obj obj{};
    obj.pd.in = pd_;
    obj.pd.out = &dvpd;
    ASSERT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD), 0);
    constexpr uint32_t kDctc = 0x80;
    auto create_dct = [&](uint32_t pdn, uint32_t srqn, uint32_t cqn) {
        Box in(0x110);
        in.set(0x00, 16, 0x710);
        in.set(kDctc + 0x48, 24, cqn);
        in.set(kDctc + 0x6C, 1, 1);   // rre
        in.set(kDctc + 0x6D, 1, 1);   // rwe
        in.set(kDctc + 0xA8, 24, srqn);
        in.set(kDctc + 0xC8, 24, pdn);
        in.set(kDctc + 0x120, 32, 0x5623CEAF);   // dc_access_key, low half
        in.set(kDctc + 0x145, 3, 5);
        in.set(kDctc + 0x148, 8, 1);
        Box out(16);
        errno = 0;
        mlx5dv_devx_obj* o = mlx5dv_devx_obj_create(ctx_, in.b.data(), in.b.size(), out.b.data(), out.b.size());
        return std::pair{o, out.get(0x48, 24)};
    };
    auto [dct, dctn] = create_dct(dvpd.pdn, 0, 0);
    ASSERT_NE(dct, nullptr) << std::strerror(errno);
    EXPECT_NE(dctn, 0u);
    EXPECT_NE(dctn, qp_->qp_num);   // QP numbers and DCT numbers come from one space

    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 16;
    sa.attr.max_sge = 1;
    ibv_srq* srq = ibv_create_srq(pd_, &sa);
    ASSERT_NE(srq, nullptr);
    mlx5dv_srq dvsrq{};
    dvsrq.comp_mask = MLX5DV_SRQ_MASK_SRQN;
    mlx5dv_cq dvcq{};
    mlx5dv_obj o2{};
    o2.srq.in = srq;
    o2.srq.out = &dvsrq;
    o2.cq.in = cq_;
    o2.cq.out = &dvcq;
    ASSERT_EQ(mlx5dv_init_obj(&o2, MLX5DV_OBJ_SRQ | MLX5DV_OBJ_CQ), 0);
    auto [on_srq, n1] = create_dct(dvpd.pdn, dvsrq.srqn, dvcq.cqn);
    ASSERT_NE(on_srq, nullptr) << std::strerror(errno);
    EXPECT_NE(n1, dctn);
    auto [unknown_srq, n2] = create_dct(dvpd.pdn, dvsrq.srqn + 1000, dvcq.cqn);
    EXPECT_EQ(unknown_srq, nullptr);
    EXPECT_EQ(errno, EINVAL);
    auto [unknown_cq, n3] = create_dct(dvpd.pdn, dvsrq.srqn, dvcq.cqn + 1000);
    EXPECT_EQ(unknown_cq, nullptr);
    EXPECT_EQ(errno, EINVAL);
    auto [bad_pd, n4] = create_dct(dvpd.pdn + 1000, 0, 0);
    EXPECT_EQ(bad_pd, nullptr);
    EXPECT_EQ(errno, EINVAL);
    // The SRQ is held while a DCT receives into it.
    EXPECT_EQ(ibv_destroy_srq(srq), EBUSY);
    EXPECT_EQ(mlx5dv_devx_obj_destroy(on_srq), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
    EXPECT_EQ(mlx5dv_devx_obj_destroy(dct), 0);
}

TEST_F(DevxCommands, EventChannelsAreQuiet) {
    mlx5dv_devx_event_channel* ch =
        mlx5dv_devx_create_event_channel(ctx_, MLX5DV_DEVX_CREATE_EVENT_CHANNEL_FLAGS_OMIT_EV_DATA);
    ASSERT_NE(ch, nullptr) << std::strerror(errno);
    EXPECT_GE(ch->fd, 0);
    pollfd p{ch->fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 10), 0);  // never readable
    mlx5dv_devx_async_event_hdr hdr{};
    errno = 0;
    EXPECT_EQ(mlx5dv_devx_get_event(ch, &hdr, sizeof hdr), -1);
    EXPECT_EQ(errno, EAGAIN);
    uint16_t event = 0x13;  // SRQ_LAST_WQE, what UCX subscribes its DevX QPs to
    EXPECT_EQ(mlx5dv_devx_subscribe_devx_event(ch, nullptr, sizeof event, &event, 1), 0);  // unaffiliated
    EXPECT_EQ(mlx5dv_devx_subscribe_devx_event(ch, nullptr, 0, &event, 1), EINVAL);         // no event
    EXPECT_EQ(poll(&p, 1, 10), 0);
    mlx5dv_devx_destroy_event_channel(ch);
    errno = 0;
    EXPECT_EQ(mlx5dv_devx_create_event_channel(ctx_, static_cast<mlx5dv_devx_create_event_channel_flags>(0x80)),
              nullptr);
    EXPECT_EQ(errno, EINVAL);
}

}  // namespace
