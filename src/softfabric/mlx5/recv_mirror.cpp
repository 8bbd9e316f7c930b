#include "mlx5/recv_mirror.h"

#include <cerrno>

#include "mlx5_format/mlx5_layout.h"

namespace softfabric::mlx5 {
namespace layout = sigmatrace::gpumem::mlx5;

namespace {
constexpr uint32_t kSrqNextSegBytes = 16;  // struct mlx5_wqe_srq_next_seg
constexpr uint32_t kDataSegBytes = 16;
}  // namespace

RecvMirror::RecvMirror(Kind kind, uint8_t* buf, uint32_t wqe_cnt, uint32_t stride, const uint32_t* dbrec,
                       Target target)
    : kind_(kind), buf_(buf), wqe_cnt_(wqe_cnt), stride_(stride), dbrec_(dbrec), target_(target) {}

bool RecvMirror::post(uint32_t slot) {
    const uint8_t* wqe = buf_ + size_t{slot} * stride_;
    const uint32_t skip = kind_ == Kind::Srq ? kSrqNextSegBytes : 0;
    ibv_sge sges[engine::kMaxSge];
    uint32_t n = 0;
    for (uint32_t off = skip; off + kDataSegBytes <= stride_ && n < engine::kMaxSge; off += kDataSegBytes) {
        const uint8_t* seg = wqe + off;
        const uint32_t lkey = layout::load_be32(seg + 4);
        if (lkey == layout::kInvalidLkey) break;
        sges[n++] = {layout::load_be64(seg + 8), layout::load_be32(seg), lkey};
    }
    const uint64_t wr_id = kind_ == Kind::Rq ? posted_ : slot;
    int err;
    if (kind_ == Kind::Rq) {
        err = target_.qp->post_receive(wr_id, sges, n);
    } else {
        std::lock_guard lk(*target_.lock);
        err = engine::post_to_ring(target_.ring, wr_id, sges, n);
    }
    if (err == ENOMEM) return false;  // the fabric queue is full: copied on a later pass
    if (err) ++dropped_;
    return true;
}

void RecvMirror::reset() {
    seen16_ = 0;
    pending_ = 0;
    posted_ = 0;
    have_last_ = false;
    last_slot_ = 0;
}

bool RecvMirror::pump() {
    const uint32_t raw = __atomic_load_n(dbrec_, __ATOMIC_ACQUIRE);  // pairs with the driver's store after its WQEs
    const auto counter = static_cast<uint16_t>(__builtin_bswap32(raw));
    pending_ += static_cast<uint16_t>(counter - seen16_);
    seen16_ = counter;
    bool did = false;
    while (pending_) {
        uint32_t slot;
        if (kind_ == Kind::Rq) {
            slot = static_cast<uint32_t>(posted_ & (wqe_cnt_ - 1));
        } else {
            slot = have_last_ ? layout::load_be16(buf_ + size_t{last_slot_} * stride_ + 2) & (wqe_cnt_ - 1) : 0;
        }
        if (!post(slot)) break;
        ++posted_;
        have_last_ = true;
        last_slot_ = slot;
        --pending_;
        did = true;
    }
    return did;
}

}  // namespace softfabric::mlx5
