// Object-life events and the state kept for each object: what the set-up wrappers do around the real calls.
#include <cstring>
#include <vector>

#include "interpose/state/object_state.h"
#include "support/shim_fixture.h"

namespace sigmatrace::testing {
namespace {

class LifecycleTest : public ShimTest {};

TEST_F(LifecycleTest, DeviceOpenReportsTheDeviceItsPortAndGidsInUse) {
    FakeDevice dev("mlx5_3");
    open(dev);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.device_open.size(), 1u);
    const cap_device_open& d = ev.device_open[0];
    EXPECT_EQ(d.ctx, reinterpret_cast<uint64_t>(dev.ctx()));
    EXPECT_EQ(d.device, "mlx5_3");
    EXPECT_EQ(d.node_guid, kFakeNodeGuid);
    EXPECT_EQ(d.vendor_id, 0x15b3u);
    EXPECT_EQ(d.vendor_part_id, 4119u);
    EXPECT_EQ(d.phys_port_cnt, 1u);
    EXPECT_EQ(d.via, 0u);
    // GID table of 4 with entries at 0 and 2: index 1 and 3 are empty and not reported.
    ASSERT_EQ(ev.port_info.size(), 2u);
    EXPECT_EQ(ev.port_info[0].port, 1u);
    EXPECT_EQ(ev.port_info[0].gid_index, 0u);
    EXPECT_EQ(ev.port_info[0].gid_prefix, kFakeGid0Prefix);
    EXPECT_EQ(ev.port_info[0].gid_iid, kFakeGid0Iid);
    EXPECT_EQ(ev.port_info[0].lid, 7u);
    EXPECT_EQ(ev.port_info[0].state, static_cast<uint32_t>(IBV_PORT_ACTIVE));
    EXPECT_EQ(ev.port_info[0].link_layer, static_cast<uint32_t>(IBV_LINK_LAYER_INFINIBAND));
    EXPECT_EQ(ev.port_info[0].active_mtu, static_cast<uint32_t>(IBV_MTU_4096));
    EXPECT_EQ(ev.port_info[1].gid_index, 2u);
    EXPECT_EQ(ev.port_info[1].gid_iid, kFakeGid2Iid);
    // The process identified itself before its first device.
    ASSERT_FALSE(ev.order.empty());
    EXPECT_EQ(ev.order.front(), EventId::process_info);
}

TEST_F(LifecycleTest, AContextFirstSeenThroughAnObjectIsWrappedAndReported) {
    FakeDevice dev;
    FakeCq* cq = dev.make_cq(8);
    clear_events();
    // No open was seen; a QP of the context arrives.
    FakeQp* q = create_qp(dev, cq, cq);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.device_open.size(), 1u);
    EXPECT_EQ(ev.device_open[0].via, 3u);
    ASSERT_EQ(ev.qp_create.size(), 1u);
    EXPECT_EQ(ev.qp_create[0].qp, reinterpret_cast<uint64_t>(q->qp()));
    ibv_send_wr w{};
    w.wr_id = 1;
    w.opcode = IBV_WR_SEND;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(q->qp(), &w, &bad), 0);
    EXPECT_EQ(events().post_send.size(), 1u) << "the lazily wrapped context is traced";
}

TEST_F(LifecycleTest, QpCreateModifyDestroy) {
    FakeDevice dev;
    open(dev);
    FakeCq* scq = dev.make_cq(8);
    FakeCq* rcq = dev.make_cq(8);
    clear_events();
    FakeQp* q = create_qp(dev, scq, rcq, IBV_QPT_RC, /*sig_all=*/true);
    ibv_qp* qp = q->qp();
    ASSERT_NE(interpose::Registry::instance().qp_by_pointer(qp), nullptr);
    ASSERT_NE(interpose::Registry::instance().qp_by_number(dev.ctx(), qp->qp_num), nullptr);

    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.dest_qp_num = 0xabcd;
    attr.ah_attr.dlid = 12;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.port_num = 1;
    attr.ah_attr.grh.sgid_index = 3;
    for (int i = 0; i < 16; ++i) attr.ah_attr.grh.dgid.raw[i] = static_cast<uint8_t>(i + 1);
    interpose::on_qp_modified(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN, 0);
    attr = ibv_qp_attr{};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 6;
    interpose::on_qp_modified(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY, 0);
    EXPECT_EQ(interpose::destroy_qp(qp, &fake_destroy_qp), 0);
    EXPECT_EQ(interpose::Registry::instance().qp_by_pointer(qp), nullptr);

    const CapturedEvents ev = events();
    ASSERT_EQ(ev.qp_create.size(), 1u);
    EXPECT_EQ(ev.qp_create[0].qp_type, static_cast<uint32_t>(IBV_QPT_RC));
    EXPECT_EQ(ev.qp_create[0].send_cq, reinterpret_cast<uint64_t>(scq->cq()));
    EXPECT_EQ(ev.qp_create[0].recv_cq, reinterpret_cast<uint64_t>(rcq->cq()));
    EXPECT_EQ(ev.qp_create[0].sq_sig_all, 1u);
    EXPECT_EQ(ev.qp_create[0].kind, 0u);
    ASSERT_EQ(ev.qp_modify.size(), 2u);
    const cap_qp_modify& rtr = ev.qp_modify[0];
    EXPECT_EQ(rtr.qp_state, IBV_QPS_RTR);
    EXPECT_EQ(rtr.dest_qp_num, 0xabcdu);
    EXPECT_EQ(rtr.dlid, 12u);
    EXPECT_EQ(rtr.is_global, 1u);
    EXPECT_EQ(rtr.dgid_prefix, 0x0102030405060708ull);
    EXPECT_EQ(rtr.dgid_iid, 0x090a0b0c0d0e0f10ull);
    EXPECT_EQ(rtr.sgid_index, 3u);
    EXPECT_EQ(rtr.port_num, 1u);
    const cap_qp_modify& rts = ev.qp_modify[1];
    EXPECT_EQ(rts.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(rts.dest_qp_num, 0u);
    EXPECT_EQ(rts.timeout, 14u);
    EXPECT_EQ(rts.retry_cnt, 7u);
    EXPECT_EQ(rts.rnr_retry, 6u);
    ASSERT_EQ(ev.qp_destroy.size(), 1u);
    EXPECT_EQ(ev.qp_destroy[0].qp_num, q->qp()->qp_num);
    EXPECT_EQ(ev.qp_destroy[0].err, 0);
}

TEST_F(LifecycleTest, FailedCreationsAreRecordedWithTheirError) {
    FakeDevice dev;
    open(dev);
    clear_events();
    ibv_qp_init_attr attr{};
    attr.qp_type = IBV_QPT_UD;
    interpose::on_qp_created(dev.ctx(), nullptr, &attr, interpose::CreateKind::verbs, ENOMEM);
    interpose::on_cq_created(dev.ctx(), nullptr, 99, nullptr, EINVAL);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.qp_create.size(), 1u);
    EXPECT_EQ(ev.qp_create[0].qp, 0u);
    EXPECT_EQ(ev.qp_create[0].qp_type, static_cast<uint32_t>(IBV_QPT_UD));
    EXPECT_EQ(ev.qp_create[0].err, ENOMEM);
    ASSERT_EQ(ev.cq_create.size(), 1u);
    EXPECT_EQ(ev.cq_create[0].cqe, 99u) << "the requested size when the provider granted none";
    EXPECT_EQ(ev.cq_create[0].err, EINVAL);
}

TEST_F(LifecycleTest, MemoryRegionsAndTheirRedaction) {
    FakeDevice dev;
    open(dev);
    ibv_mr mr{};
    mr.context = dev.ctx();
    mr.lkey = 0x111;
    mr.rkey = 0x222;
    clear_events();
    interpose::on_mr_registered(dev.pd(), &mr, 0x7f0000001000, 1 << 20, 0x7f0000001000, IBV_ACCESS_REMOTE_WRITE,
                                interpose::MrKind::reg_mr, 0);
    interpose::Config c = test_config();
    c.redact = interpose::kRedactAddresses | interpose::kRedactKeys;
    interpose::set_config(c);
    interpose::on_mr_registered(dev.pd(), &mr, 0x7f0000001000, 4096, 0x5000, 0, interpose::MrKind::reg_mr_iova2, 0);
    interpose::on_mr_deregistered(&mr, 0);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.mr_reg.size(), 2u);
    EXPECT_EQ(ev.mr_reg[0].ctx, reinterpret_cast<uint64_t>(dev.ctx()));
    EXPECT_EQ(ev.mr_reg[0].addr, 0x7f0000001000u);
    EXPECT_EQ(ev.mr_reg[0].length, 1u << 20);
    EXPECT_EQ(ev.mr_reg[0].lkey, 0x111u);
    EXPECT_EQ(ev.mr_reg[0].rkey, 0x222u);
    EXPECT_EQ(ev.mr_reg[0].access, static_cast<uint32_t>(IBV_ACCESS_REMOTE_WRITE));
    EXPECT_EQ(ev.mr_reg[1].addr, 0u);
    EXPECT_EQ(ev.mr_reg[1].iova, 0u);
    EXPECT_EQ(ev.mr_reg[1].lkey, 0u);
    EXPECT_EQ(ev.mr_reg[1].rkey, 0u);
    EXPECT_EQ(ev.mr_reg[1].length, 4096u);
    EXPECT_EQ(ev.mr_reg[1].kind, 2u);
    ASSERT_EQ(ev.mr_dereg.size(), 1u);
    EXPECT_EQ(ev.mr_dereg[0].mr, reinterpret_cast<uint64_t>(&mr));
}

TEST_F(LifecycleTest, AddressHandlesSrqsAndCompletionEvents) {
    FakeDevice dev;
    open(dev);
    clear_events();
    ibv_ah_attr a{};
    a.dlid = 5;
    a.port_num = 1;
    a.is_global = 1;
    a.grh.dgid.raw[15] = 9;
    ibv_ah ah{};
    interpose::on_ah_created(dev.pd(), &ah, &a, 0);
    ibv_srq srq{};
    interpose::on_srq_created(dev.ctx(), &srq, 256, 0);
    interpose::on_srq_destroyed(&srq, 0);
    ibv_comp_channel ch{};
    ibv_cq cq{};
    interpose::on_cq_event(&ch, &cq, 0);
    interpose::on_cq_event(&ch, &cq, -1);
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.ah_create.size(), 1u);
    EXPECT_EQ(ev.ah_create[0].dlid, 5u);
    EXPECT_EQ(ev.ah_create[0].dgid_iid, 9u);
    ASSERT_EQ(ev.srq_create.size(), 1u);
    EXPECT_EQ(ev.srq_create[0].max_wr, 256u);
    ASSERT_EQ(ev.srq_destroy.size(), 1u);
    ASSERT_EQ(ev.cq_event.size(), 2u);
    EXPECT_EQ(ev.cq_event[0].cq, reinterpret_cast<uint64_t>(&cq));
    EXPECT_EQ(ev.cq_event[1].cq, 0u);
    EXPECT_EQ(ev.cq_event[1].ret, -1);
}

TEST_F(LifecycleTest, CloseForgetsTheContext) {
    FakeDevice dev;
    open(dev);
    clear_events();
    interpose::on_context_closed(dev.ctx(), 0);
    ASSERT_EQ(events().device_close.size(), 1u);
    EXPECT_EQ(events().device_close[0].ctx, reinterpret_cast<uint64_t>(dev.ctx()));
}

}  // namespace
}  // namespace sigmatrace::testing
