#include "common/verbs/rc_setup.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace sigmatrace::verbs {
namespace {

// libibverbs sets errno on a NULL return but not always (a provider may forget): never report "errno 0".
int last_errno(int fallback) { return errno != 0 ? errno : fallback; }

}  // namespace

SetupError::SetupError(std::string step, int err)
    : std::runtime_error(fmt::format("{} failed (errno {}: {})", step, err, std::strerror(err))),
      step_(std::move(step)),
      err_(err) {}

Context open_device(std::string_view name) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ibv_device* found = nullptr;
    for (int i = 0; list != nullptr && i < n && found == nullptr; ++i)
        if (name.empty() || name == ibv_get_device_name(list[i])) found = list[i];
    Context ctx;
    int err = 0;
    if (found != nullptr) {
        errno = 0;
        ctx.reset(ibv_open_device(found));
        err = last_errno(ENODEV);
    }
    if (list != nullptr) ibv_free_device_list(list);
    if (found != nullptr && !ctx)
        throw SetupError(fmt::format("ibv_open_device {}", name.empty() ? "(the first device)" : name), err);
    return ctx;
}

ibv_port_attr query_port(ibv_context* ctx, uint8_t port) {
    ibv_port_attr attr{};
    if (int err = ibv_query_port(ctx, port, &attr)) throw SetupError("ibv_query_port", err);
    return attr;
}

Pd alloc_pd(ibv_context* ctx) {
    errno = 0;
    Pd pd(ibv_alloc_pd(ctx));
    if (!pd) throw SetupError("ibv_alloc_pd", last_errno(ENOMEM));
    return pd;
}

Cq create_cq(ibv_context* ctx, int cqe) {
    errno = 0;
    Cq cq(ibv_create_cq(ctx, cqe, nullptr, nullptr, 0));
    if (!cq) throw SetupError(fmt::format("ibv_create_cq cqe={}", cqe), last_errno(ENOMEM));
    return cq;
}

Mr reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
    errno = 0;
    Mr mr(ibv_reg_mr(pd, addr, length, access));
    if (!mr) throw SetupError(fmt::format("ibv_reg_mr length={} access={:#x}", length, access), last_errno(ENOMEM));
    return mr;
}

Qp create_rc_qp(ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq, const RcCaps& caps) {
    ibv_qp_init_attr qa{};
    qa.send_cq = send_cq;
    qa.recv_cq = recv_cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = caps.send_wr;
    qa.cap.max_recv_wr = caps.recv_wr;
    qa.cap.max_send_sge = caps.send_sge;
    qa.cap.max_recv_sge = caps.recv_sge;
    qa.cap.max_inline_data = caps.inline_data;
    errno = 0;
    Qp qp(ibv_create_qp(pd, &qa));
    if (!qp) throw SetupError(fmt::format("ibv_create_qp max_send_wr={}", caps.send_wr), last_errno(ENOMEM));
    return qp;
}

void connect_rc(ibv_qp* qp, const RcRemote& remote, const RcOptions& o) {
    for (QpTransition& t : rc_transitions(remote, o))
        if (int err = ibv_modify_qp(qp, &t.attr, t.mask))
            throw SetupError(fmt::format("{} (QP {:#x} to QP {:#x}, LID {})", t.step, qp->qp_num, remote.qpn,
                                         remote.lid),
                             err);
}

}  // namespace sigmatrace::verbs
