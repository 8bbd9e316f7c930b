// The verbs bring-up that the project's workloads, test programs and benchmarks share: owners of the verbs
// objects, and an RC QP taken from RESET to RTS towards a peer (in another process, or in the same one).
// Every step that fails throws SetupError, which names the step and its errno.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sigmatrace::verbs {

inline constexpr int kReadWrite = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
inline constexpr int kFullAccess = kReadWrite | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// A step of a bring-up failed: `what()` is "<step> failed (errno N: text)".
class SetupError : public std::runtime_error {
public:
    SetupError(std::string step, int err);
    const std::string& step() const { return step_; }
    int err() const { return err_; }

private:
    std::string step_;
    int err_;
};

struct CloseDevice {
    void operator()(ibv_context* c) const { ibv_close_device(c); }
};
struct DeallocPd {
    void operator()(ibv_pd* p) const { ibv_dealloc_pd(p); }
};
struct DestroyCq {
    void operator()(ibv_cq* c) const { ibv_destroy_cq(c); }
};
struct DestroyQp {
    void operator()(ibv_qp* q) const { ibv_destroy_qp(q); }
};
struct DeregMr {
    void operator()(ibv_mr* m) const { ibv_dereg_mr(m); }
};
using Context = std::unique_ptr<ibv_context, CloseDevice>;
using Pd = std::unique_ptr<ibv_pd, DeallocPd>;
using Cq = std::unique_ptr<ibv_cq, DestroyCq>;
using Qp = std::unique_ptr<ibv_qp, DestroyQp>;
using Mr = std::unique_ptr<ibv_mr, DeregMr>;

// The device named `name` (empty: the first one), opened; empty when there is no such device (the caller says
// what to do, usually "run under `sigmatrace fabric`"). Throws when the device exists but does not open.
Context open_device(std::string_view name = {});
ibv_port_attr query_port(ibv_context* ctx, uint8_t port = 1);
Pd alloc_pd(ibv_context* ctx);
Cq create_cq(ibv_context* ctx, int cqe);
Mr reg_mr(ibv_pd* pd, void* addr, size_t length, int access);

struct RcCaps {
    uint32_t send_wr = 16;
    uint32_t recv_wr = 1;
    uint32_t send_sge = 1;
    uint32_t recv_sge = 1;
    uint32_t inline_data = 0;
};
Qp create_rc_qp(ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq, const RcCaps& caps);

// The far end of an RC connection, as the two sides exchange it.
struct RcRemote {
    uint32_t qpn = 0;
    uint16_t lid = 0;
    const uint8_t* gid = nullptr;  // 16 bytes: addressed with a GRH (hop limit 1); nullptr: by LID alone
};

// What differs between the programs' RC QPs; the defaults are perftest's. Both PSNs are 0.
struct RcOptions {
    int access = kReadWrite;
    ibv_mtu mtu = IBV_MTU_4096;
    uint8_t rd_atomic = 1;  // max_rd_atomic and max_dest_rd_atomic
    uint8_t timeout = 14;
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;
    uint8_t min_rnr_timer = 12;
    uint8_t port = 1;
};

struct QpTransition {
    const char* step;  // "modify to INIT", "modify to RTR", "modify to RTS"
    ibv_qp_attr attr;
    int mask;
};

// The three ibv_modify_qp calls that bring an RC QP from RESET to RTS. Inline and free of libibverbs calls so
// that a program which looks verbs up by handle (tests/interpose/programs/dlopen_verbs) applies the same steps.
inline std::array<QpTransition, 3> rc_transitions(const RcRemote& remote, const RcOptions& o) {
    std::array<QpTransition, 3> t{};
    t[0].step = "modify to INIT";
    t[0].attr.qp_state = IBV_QPS_INIT;
    t[0].attr.pkey_index = 0;
    t[0].attr.port_num = o.port;
    t[0].attr.qp_access_flags = static_cast<unsigned>(o.access);
    t[0].mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;

    t[1].step = "modify to RTR";
    ibv_qp_attr& rtr = t[1].attr;
    rtr.qp_state = IBV_QPS_RTR;
    rtr.path_mtu = o.mtu;
    rtr.dest_qp_num = remote.qpn;
    rtr.rq_psn = 0;
    rtr.max_dest_rd_atomic = o.rd_atomic;
    rtr.min_rnr_timer = o.min_rnr_timer;
    rtr.ah_attr.dlid = remote.lid;
    rtr.ah_attr.port_num = o.port;
    if (remote.gid != nullptr) {
        rtr.ah_attr.is_global = 1;
        for (size_t i = 0; i < sizeof rtr.ah_attr.grh.dgid.raw; ++i) rtr.ah_attr.grh.dgid.raw[i] = remote.gid[i];
        rtr.ah_attr.grh.hop_limit = 1;
    }
    t[1].mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;

    t[2].step = "modify to RTS";
    ibv_qp_attr& rts = t[2].attr;
    rts.qp_state = IBV_QPS_RTS;
    rts.timeout = o.timeout;
    rts.retry_cnt = o.retry_cnt;
    rts.rnr_retry = o.rnr_retry;
    rts.sq_psn = 0;
    rts.max_rd_atomic = o.rd_atomic;
    t[2].mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                IBV_QP_MAX_QP_RD_ATOMIC;
    return t;
}

// Brings `qp` from RESET to RTS towards `remote`.
void connect_rc(ibv_qp* qp, const RcRemote& remote, const RcOptions& o = {});

}  // namespace sigmatrace::verbs
