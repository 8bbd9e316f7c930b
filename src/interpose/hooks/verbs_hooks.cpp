// The libibverbs functions libsigmatrace.so exports in place of the real ones (versions in libsigmatrace.map).
//
// Each one calls the real function, then — from the outermost wrapper only (hook_scope.h) — lets lifecycle.cpp
// wrap the new object and emit its event. Return values and errno are the real function's: errno is saved
// right after the real call and restored before returning.
//
// Not wrapped, on purpose: the IBVERBS_1.0 compatibility entry points (they take the pre-2006 structure
// layouts; their callers are bound to them by version and stay untraced), and calls that create no object
// the data path touches (ibv_alloc_pd, ibv_create_comp_channel, ibv_ack_cq_events, ibv_destroy_ah, ...).
#include <infiniband/verbs.h>

#include <cerrno>

#include "interpose/runtime/activation.h"
#include "interpose/hooks/export.h"
#include "interpose/state/hook_scope.h"
#include "interpose/state/lifecycle.h"

// verbs.h turns these into inline selectors; the exported functions are what we replace.
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace sigmatrace::interpose;

namespace {

ibv_context* context_of(ibv_pd* pd) {
    return pd != nullptr ? pd->context : nullptr;
}

}  // namespace

// ------------------------------------------------------------------ devices

// Listing devices is the first thing an RDMA program does: tracing starts here (activation.h), so that the
// provider's registration with the session daemon happens before the program opens anything.
ST_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
    auto real = ST_REAL_IBVERBS(ibv_get_device_list, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<ibv_device**>("ibv_get_device_list", "IBVERBS_1.1", ENOSYS);
    HookScope scope;
    ibv_device** list = real(num_devices);
    if (scope.outermost()) {
        KeepErrno keep;
        activate_tracing();
    }
    return list;
}

ST_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
    auto real = ST_REAL_IBVERBS(ibv_open_device, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<ibv_context*>("ibv_open_device", "IBVERBS_1.1", ENOSYS);
    return call_and_record(
        real,
        [&](ibv_context* ctx, int) {
            on_context_opened(ctx, OpenVia::open_device);
        },
        device);
}

ST_EXPORT ibv_context* ibv_import_device(int cmd_fd) {
    auto real = ST_REAL_IBVERBS(ibv_import_device, "IBVERBS_1.10");
    if (real == nullptr) return missing_real_errno<ibv_context*>("ibv_import_device", "IBVERBS_1.10", ENOSYS);
    return call_and_record(
        real,
        [&](ibv_context* ctx, int) {
            on_context_opened(ctx, OpenVia::import_device);
        },
        cmd_fd);
}

ST_EXPORT int ibv_close_device(ibv_context* ctx) {
    auto real = ST_REAL_IBVERBS(ibv_close_device, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<int>("ibv_close_device", "IBVERBS_1.1", ENOSYS, -1);
    HookScope scope;
    if (scope.outermost()) before_blocking();  // this thread's records precede the device's close
    const int ret = real(ctx);
    if (scope.outermost()) {
        KeepErrno keep;
        on_context_closed(ctx, ret);
    }
    return ret;
}

// ------------------------------------------------------------------ queue pairs

ST_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
    auto real = ST_REAL_IBVERBS(ibv_create_qp, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<ibv_qp*>("ibv_create_qp", "IBVERBS_1.1", ENOSYS);
    return call_and_record(
        real,
        [&](ibv_qp* qp, int err) {
            on_qp_created(context_of(pd), qp, attr, CreateKind::verbs, qp == nullptr ? err : 0);
        },
        pd, attr);
}

ST_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
    auto real = ST_REAL_IBVERBS(ibv_modify_qp, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<int>("ibv_modify_qp", "IBVERBS_1.1", ENOSYS, ENOSYS);
    return call_and_record(
        real,
        [&](int ret, int) {
            on_qp_modified(qp, attr, attr_mask, ret);
        },
        qp, attr, attr_mask);
}

ST_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
    auto real = ST_REAL_IBVERBS(ibv_destroy_qp, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<int>("ibv_destroy_qp", "IBVERBS_1.1", ENOSYS, ENOSYS);
    HookScope scope;
    if (!scope.outermost()) return real(qp);
    return destroy_qp(qp, real);
}

ST_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
    auto real = ST_REAL_IBVERBS(ibv_qp_to_qp_ex, "IBVERBS_1.6");
    if (real == nullptr) return missing_real_errno<ibv_qp_ex*>("ibv_qp_to_qp_ex", "IBVERBS_1.6", ENOSYS);
    return call_and_record(
        real,
        [&](ibv_qp_ex* qpx, int) {
            on_qp_ex_obtained(qp, qpx);
        },
        qp);
}

// ------------------------------------------------------------------ completion queues

ST_EXPORT ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel,
                                int comp_vector) {
    auto real = ST_REAL_IBVERBS(ibv_create_cq, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<ibv_cq*>("ibv_create_cq", "IBVERBS_1.1", ENOSYS);
    HookScope scope;
    ibv_cq* cq = real(ctx, cqe, cq_context, channel, comp_vector);
    if (scope.outermost()) {
        KeepErrno keep;
        on_cq_created(ctx, cq, cqe, channel, cq == nullptr ? keep.value() : 0);
    }
    return cq;
}

ST_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
    auto real = ST_REAL_IBVERBS(ibv_destroy_cq, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<int>("ibv_destroy_cq", "IBVERBS_1.1", ENOSYS, ENOSYS);
    HookScope scope;
    if (!scope.outermost()) return real(cq);
    return destroy_cq(cq, real);
}

ST_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
    auto real = ST_REAL_IBVERBS(ibv_get_cq_event, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<int>("ibv_get_cq_event", "IBVERBS_1.1", ENOSYS, -1);
    HookScope scope;
    // The thread is about to block until a completion event: its captured records become events first.
    if (scope.outermost()) before_blocking();
    const int ret = real(channel, cq, cq_context);
    if (scope.outermost()) {
        KeepErrno keep;
        on_cq_event(channel, (ret == 0 && cq != nullptr) ? *cq : nullptr, ret);
    }
    return ret;
}

// ------------------------------------------------------------------ shared receive queues

ST_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
    auto real = ST_REAL_IBVERBS(ibv_create_srq, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<ibv_srq*>("ibv_create_srq", "IBVERBS_1.1", ENOSYS);
    return call_and_record(
        real,
        [&](ibv_srq* srq, int err) {
            on_srq_created(context_of(pd), srq, attr != nullptr ? attr->attr.max_wr : 0, srq == nullptr ? err : 0);
        },
        pd, attr);
}

ST_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
    auto real = ST_REAL_IBVERBS(ibv_destroy_srq, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<int>("ibv_destroy_srq", "IBVERBS_1.1", ENOSYS, ENOSYS);
    return call_and_record(
        real,
        [&](int ret, int) {
            on_srq_destroyed(srq, ret);
        },
        srq);
}

// ------------------------------------------------------------------ memory regions

ST_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
    auto real = ST_REAL_IBVERBS(ibv_reg_mr, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<ibv_mr*>("ibv_reg_mr", "IBVERBS_1.1", ENOSYS);
    return call_and_record(
        real,
        [&](ibv_mr* mr, int err) {
            const auto a = reinterpret_cast<uint64_t>(addr);
            on_mr_registered(pd, mr, a, length, a, static_cast<uint32_t>(access), MrKind::reg_mr,
                             mr == nullptr ? err : 0);
        },
        pd, addr, length, access);
}

ST_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
    auto real = ST_REAL_IBVERBS(ibv_reg_mr_iova, "IBVERBS_1.7");
    if (real == nullptr) return missing_real_errno<ibv_mr*>("ibv_reg_mr_iova", "IBVERBS_1.7", ENOSYS);
    return call_and_record(
        real,
        [&](ibv_mr* mr, int err) {
            on_mr_registered(pd, mr, reinterpret_cast<uint64_t>(addr), length, iova, static_cast<uint32_t>(access),
                             MrKind::reg_mr_iova, mr == nullptr ? err : 0);
        },
        pd, addr, length, iova, access);
}

ST_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
    auto real = ST_REAL_IBVERBS(ibv_reg_mr_iova2, "IBVERBS_1.8");
    if (real == nullptr) return missing_real_errno<ibv_mr*>("ibv_reg_mr_iova2", "IBVERBS_1.8", ENOSYS);
    return call_and_record(
        real,
        [&](ibv_mr* mr, int err) {
            on_mr_registered(pd, mr, reinterpret_cast<uint64_t>(addr), length, iova, access, MrKind::reg_mr_iova2,
                             mr == nullptr ? err : 0);
        },
        pd, addr, length, iova, access);
}

ST_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) {
    auto real = ST_REAL_IBVERBS(ibv_reg_dmabuf_mr, "IBVERBS_1.12");
    if (real == nullptr) return missing_real_errno<ibv_mr*>("ibv_reg_dmabuf_mr", "IBVERBS_1.12", ENOSYS);
    return call_and_record(
        real,
        [&](ibv_mr* mr, int err) {
            // A dmabuf region has no virtual address in this process: addr is 0, the offset is not recorded.
            on_mr_registered(pd, mr, 0, length, iova, static_cast<uint32_t>(access), MrKind::reg_dmabuf_mr,
                             mr == nullptr ? err : 0);
        },
        pd, offset, length, iova, fd, access);
}

ST_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
    auto real = ST_REAL_IBVERBS(ibv_dereg_mr, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<int>("ibv_dereg_mr", "IBVERBS_1.1", ENOSYS, ENOSYS);
    return call_and_record(
        real,
        [&](int ret, int) {
            on_mr_deregistered(mr, ret);
        },
        mr);
}

// ------------------------------------------------------------------ address handles

ST_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
    auto real = ST_REAL_IBVERBS(ibv_create_ah, "IBVERBS_1.1");
    if (real == nullptr) return missing_real_errno<ibv_ah*>("ibv_create_ah", "IBVERBS_1.1", ENOSYS);
    return call_and_record(
        real,
        [&](ibv_ah* ah, int err) {
            on_ah_created(pd, ah, attr, ah == nullptr ? err : 0);
        },
        pd, attr);
}
