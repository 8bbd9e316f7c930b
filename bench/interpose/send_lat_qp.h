// The verbs objects of ib_send_lat's one connection, for the benchmark programs that do what it does
// (fabric_pingpong across two processes, message_footprint within one): the first device, a PD, a send and a
// receive CQ, an RC QP (posting through ibv_wr_* unless classic), a 64-byte registered buffer and the WRs
// (2-byte inline SENDs from its start, 2-byte receives into its second half).
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>

class SendLatQp {
public:
    SendLatQp() = default;
    SendLatQp(const SendLatQp&) = delete;  // the WRs point into the object
    SendLatQp& operator=(const SendLatQp&) = delete;
    ~SendLatQp() {
        if (qp != nullptr) ibv_destroy_qp(qp);
        if (mr_ != nullptr) ibv_dereg_mr(mr_);
        if (send_cq != nullptr) ibv_destroy_cq(send_cq);
        if (recv_cq != nullptr) ibv_destroy_cq(recv_cq);
        if (pd_ != nullptr) ibv_dealloc_pd(pd_);
        if (ctx_ != nullptr) ibv_close_device(ctx_);
    }

    // nullptr when every object exists, else what could not be had.
    const char* open(bool wr_api) {
        int n = 0;
        ibv_device** devices = ibv_get_device_list(&n);
        if (devices == nullptr || n == 0) return "no RDMA device (run under `sigmatrace fabric`)";
        ctx_ = ibv_open_device(devices[0]);
        ibv_free_device_list(devices);
        if (ctx_ == nullptr) return "ibv_open_device failed";
        pd_ = ibv_alloc_pd(ctx_);
        send_cq = ibv_create_cq(ctx_, 64, nullptr, nullptr, 0);
        recv_cq = ibv_create_cq(ctx_, 64, nullptr, nullptr, 0);
        if (pd_ == nullptr || send_cq == nullptr || recv_cq == nullptr) return "cannot create the PD or CQs";

        ibv_qp_init_attr_ex attr{};
        attr.send_cq = send_cq;
        attr.recv_cq = recv_cq;
        attr.qp_type = IBV_QPT_RC;
        attr.cap.max_send_wr = 64;
        attr.cap.max_recv_wr = 64;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        attr.cap.max_inline_data = 64;
        attr.pd = pd_;
        attr.comp_mask = IBV_QP_INIT_ATTR_PD;
        if (wr_api) {
            attr.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
            attr.send_ops_flags = IBV_QP_EX_WITH_SEND;
        }
        qp = ibv_create_qp_ex(ctx_, &attr);
        if (qp == nullptr) return "ibv_create_qp_ex failed";
        qpx = wr_api ? ibv_qp_to_qp_ex(qp) : nullptr;
        if (ibv_query_port(ctx_, 1, &port) != 0) return "ibv_query_port failed";

        mr_ = ibv_reg_mr(pd_, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
        if (mr_ == nullptr) return "ibv_reg_mr failed";
        recv_sge_ = ibv_sge{reinterpret_cast<uint64_t>(buf + 32), 2, mr_->lkey};
        recv_wr.sg_list = &recv_sge_;
        recv_wr.num_sge = 1;
        send_sge_ = ibv_sge{reinterpret_cast<uint64_t>(buf), 2, mr_->lkey};
        send_wr.sg_list = &send_sge_;
        send_wr.num_sge = 1;
        send_wr.opcode = IBV_WR_SEND;
        return nullptr;
    }

    // Posts one 2-byte inline SEND as ib_send_lat does (ibv_wr_* or ibv_post_send); returns the call's result.
    // `doorbell_ns`, when given and posting through ibv_wr_*, receives how long ibv_wr_complete took.
    int post_send(uint64_t wr_id, unsigned flags, int64_t* doorbell_ns = nullptr) {
        if (qpx == nullptr) {
            send_wr.wr_id = wr_id;
            send_wr.send_flags = flags;
            ibv_send_wr* bad = nullptr;
            return ibv_post_send(qp, &send_wr, &bad);
        }
        ibv_wr_start(qpx);
        qpx->wr_id = wr_id;
        qpx->wr_flags = flags;
        ibv_wr_send(qpx);
        ibv_wr_set_inline_data(qpx, buf, 2);
        if (doorbell_ns == nullptr) return ibv_wr_complete(qpx);
        const auto t0 = std::chrono::steady_clock::now();
        const int ret = ibv_wr_complete(qpx);
        *doorbell_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
        return ret;
    }

    ibv_cq* send_cq = nullptr;
    ibv_cq* recv_cq = nullptr;
    ibv_qp* qp = nullptr;
    ibv_qp_ex* qpx = nullptr;  // ibv_wr_* posting only
    ibv_port_attr port{};
    ibv_recv_wr recv_wr{};
    char buf[64] = {};

private:
    ibv_send_wr send_wr{};
    ibv_context* ctx_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_mr* mr_ = nullptr;
    ibv_sge recv_sge_{};
    ibv_sge send_sge_{};
};
