#include "gpumem/init_obj_observer.h"

#include <infiniband/mlx5dv.h>

#include "gpumem/setup_observer.h"

namespace sigmatrace::gpumem {

void observe_init_obj(SetupObserver& observer, const mlx5dv_obj* obj, uint64_t obj_type) {
    if (!obj) return;
    // CQs first: a QP names its send CQ's number when that CQ was exported in the same call.
    if ((obj_type & MLX5DV_OBJ_CQ) && obj->cq.in && obj->cq.out) {
        const ibv_cq* cq = obj->cq.in;
        const mlx5dv_cq* out = obj->cq.out;
        ExportedCq e;
        e.ctx = reinterpret_cast<uint64_t>(cq->context);
        e.cq = reinterpret_cast<uint64_t>(cq);
        e.cqn = out->cqn;
        e.buf = reinterpret_cast<uint64_t>(out->buf);
        e.dbrec = reinterpret_cast<uint64_t>(out->dbrec);
        e.cqe_cnt = out->cqe_cnt;
        e.cqe_size = out->cqe_size;
        observer.verbs_cq_exported(e);
    }
    if ((obj_type & MLX5DV_OBJ_QP) && obj->qp.in && obj->qp.out) {
        const ibv_qp* qp = obj->qp.in;
        const mlx5dv_qp* out = obj->qp.out;
        ExportedQp e;
        e.ctx = reinterpret_cast<uint64_t>(qp->context);
        e.qp = reinterpret_cast<uint64_t>(qp);
        e.qpn = qp->qp_num;
        e.qp_type = qp->qp_type;
        e.send_cq = reinterpret_cast<uint64_t>(qp->send_cq);
        e.dbrec = reinterpret_cast<uint64_t>(out->dbrec);
        e.sq_buf = reinterpret_cast<uint64_t>(out->sq.buf);
        e.sq_wqe_cnt = out->sq.wqe_cnt;
        e.sq_stride = out->sq.stride;
        e.bf_reg = reinterpret_cast<uint64_t>(out->bf.reg);
        observer.verbs_qp_exported(e);
    }
}

}  // namespace sigmatrace::gpumem
