// The verbs objects of ib_send_lat's one connection, for the benchmark programs that do what it does
// (fabric_pingpong across two processes, message_footprint within one): the first device, a PD, a send and a
// receive CQ, an RC QP (posting through ibv_wr_* unless classic), a 64-byte registered buffer and the WRs
// (2-byte inline SENDs from its start, 2-byte receives into its second half).
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <chrono>
#include <cstdint>

#include "common/verbs/rc_setup.h"

class SendLatQp {
public:
    SendLatQp() = default;
    SendLatQp(const SendLatQp&) = delete;  // the WRs point into the object
    SendLatQp& operator=(const SendLatQp&) = delete;

    // Creates every object; throws sigmatrace::verbs::SetupError naming the one that could not be had.
    void open(bool wr_api) {
        namespace verbs = sigmatrace::verbs;
        ctx_ = verbs::open_device();
        if (!ctx_) throw verbs::SetupError("finding an RDMA device (run under `sigmatrace fabric`)", ENODEV);
        pd_ = verbs::alloc_pd(ctx_.get());
        send_cq = verbs::create_cq(ctx_.get(), 64);
        recv_cq = verbs::create_cq(ctx_.get(), 64);

        // ibv_create_qp_ex rather than the shared create_rc_qp: ib_send_lat asks for the ibv_wr_* send ops.
        ibv_qp_init_attr_ex attr{};
        attr.send_cq = send_cq.get();
        attr.recv_cq = recv_cq.get();
        attr.qp_type = IBV_QPT_RC;
        attr.cap.max_send_wr = 64;
        attr.cap.max_recv_wr = 64;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        attr.cap.max_inline_data = 64;
        attr.pd = pd_.get();
        attr.comp_mask = IBV_QP_INIT_ATTR_PD;
        if (wr_api) {
            attr.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
            attr.send_ops_flags = IBV_QP_EX_WITH_SEND;
        }
        errno = 0;
        qp.reset(ibv_create_qp_ex(ctx_.get(), &attr));
        if (!qp) throw verbs::SetupError("ibv_create_qp_ex", errno != 0 ? errno : ENOMEM);
        qpx = wr_api ? ibv_qp_to_qp_ex(qp.get()) : nullptr;
        port = verbs::query_port(ctx_.get());

        mr_ = verbs::reg_mr(pd_.get(), buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
        recv_sge_ = ibv_sge{reinterpret_cast<uint64_t>(buf + 32), 2, mr_->lkey};
        recv_wr.sg_list = &recv_sge_;
        recv_wr.num_sge = 1;
        send_sge_ = ibv_sge{reinterpret_cast<uint64_t>(buf), 2, mr_->lkey};
        send_wr.sg_list = &send_sge_;
        send_wr.num_sge = 1;
        send_wr.opcode = IBV_WR_SEND;
    }

    // Posts one 2-byte inline SEND as ib_send_lat does (ibv_wr_* or ibv_post_send); returns the call's result.
    // `doorbell_ns`, when given and posting through ibv_wr_*, receives how long ibv_wr_complete took.
    int post_send(uint64_t wr_id, unsigned flags, int64_t* doorbell_ns = nullptr) {
        if (qpx == nullptr) {
            send_wr.wr_id = wr_id;
            send_wr.send_flags = flags;
            ibv_send_wr* bad = nullptr;
            return ibv_post_send(qp.get(), &send_wr, &bad);
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

private:
    // First, so that they are destroyed last (after the CQs, the MR and the QP).
    sigmatrace::verbs::Context ctx_;
    sigmatrace::verbs::Pd pd_;

public:
    sigmatrace::verbs::Cq recv_cq;
    sigmatrace::verbs::Cq send_cq;

private:
    sigmatrace::verbs::Mr mr_;

public:
    sigmatrace::verbs::Qp qp;
    ibv_qp_ex* qpx = nullptr;  // ibv_wr_* posting only
    ibv_port_attr port{};
    ibv_recv_wr recv_wr{};
    char buf[64] = {};

private:
    ibv_send_wr send_wr{};
    ibv_sge recv_sge_{};
    ibv_sge send_sge_{};
};
