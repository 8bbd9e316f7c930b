#include "support/fake_provider.h"

#include <endian.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace sigmatrace::testing {

namespace {
std::atomic<int> g_rts_complete_calls{0};

ibv_wc_opcode wc_opcode_of(int wr_opcode) {
    switch (wr_opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    default: return IBV_WC_SEND;
    }
}

void complete_send(FakeQp* q, uint64_t wr_id, int opcode, uint32_t length) {
    FakeCompletion c;
    c.wr_id = wr_id;
    c.opcode = wc_opcode_of(opcode);
    c.byte_len = length;
    c.qp_num = q->qpx.qp_base.qp_num;
    q->send_cq->push(c);
}
}  // namespace

void FakeCq::push(const FakeCompletion& c) {
    std::lock_guard<std::mutex> lock(mutex);
    queue.push_back(c);
}

// The verbs structure is the first member of each fake object, so the addresses coincide.
FakeQp* fake_qp(ibv_qp* qp) {
    return reinterpret_cast<FakeQp*>(qp);
}
FakeCq* fake_cq(ibv_cq* cq) {
    return reinterpret_cast<FakeCq*>(cq);
}

// The provider functions. Templates on the variant: variant 1's functions have different addresses.
struct FakeFunctions {
    template <int V> static int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
        FakeQp* q = fake_qp(qp);
        std::lock_guard<std::mutex> lock(q->mutex);
        int index = 0;
        for (ibv_send_wr* w = wr; w != nullptr; w = w->next, ++index) {
            if (index == q->fail_post_at) {
                q->fail_post_at = -1;
                *bad_wr = w;
                errno = kFakeFailureErrno;
                return EINVAL;
            }
            q->posted_send_ids.push_back(w->wr_id);
            uint32_t len = 0;
            for (int i = 0; i < w->num_sge; ++i) len += w->sg_list[i].length;
            if (q->sq_sig_all || (w->send_flags & IBV_SEND_SIGNALED)) complete_send(q, w->wr_id, w->opcode, len);
        }
        errno = kFakeSuccessErrno;
        return 0;
    }

    template <int V> static int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
        FakeQp* q = fake_qp(qp);
        std::lock_guard<std::mutex> lock(q->mutex);
        int index = 0;
        for (ibv_recv_wr* w = wr; w != nullptr; w = w->next, ++index) {
            if (index == q->fail_post_at) {
                q->fail_post_at = -1;
                *bad_wr = w;
                errno = kFakeFailureErrno;
                return ENOMEM;
            }
            q->posted_recv_ids.push_back(w->wr_id);
        }
        errno = kFakeSuccessErrno;
        return 0;
    }

    template <int V> static int post_srq_recv(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**) {
        errno = kFakeSuccessErrno;
        return 0;
    }

    template <int V> static int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
        FakeCq* c = fake_cq(cq);
        std::lock_guard<std::mutex> lock(c->mutex);
        int got = 0;
        while (got < n && !c->queue.empty()) {
            const FakeCompletion& f = c->queue.front();
            ibv_wc& w = wc[got++];
            std::memset(&w, 0, sizeof w);
            w.wr_id = f.wr_id;
            w.status = f.status;
            w.opcode = f.opcode;
            w.byte_len = f.byte_len;
            w.qp_num = f.qp_num;
            w.src_qp = f.src_qp;
            w.wc_flags = f.wc_flags;
            w.imm_data = f.imm;
            w.vendor_err = f.vendor_err;
            c->queue.pop_front();
        }
        errno = kFakeSuccessErrno;
        return got;
    }

    template <int V> static int req_notify_cq(ibv_cq*, int solicited_only) {
        return solicited_only ? 0 : 0;
    }

    // --- ibv_qp_ex builders
    static void wr_start(ibv_qp_ex* qpx) {
        FakeQp* q = fake_qp(&qpx->qp_base);
        q->mutex.lock();  // held until wr_complete/wr_abort, like mlx5's send-queue lock
        q->building.clear();
    }
    static void begin(ibv_qp_ex* qpx, int opcode) {
        fake_qp(&qpx->qp_base)->building.push_back(FakeWr{qpx->wr_id, qpx->wr_flags, opcode, 0});
    }
    static void wr_send(ibv_qp_ex* qpx) { begin(qpx, IBV_WR_SEND); }
    static void wr_send_imm(ibv_qp_ex* qpx, __be32) { begin(qpx, IBV_WR_SEND_WITH_IMM); }
    static void wr_rdma_write(ibv_qp_ex* qpx, uint32_t, uint64_t) { begin(qpx, IBV_WR_RDMA_WRITE); }
    static void wr_rdma_write_imm(ibv_qp_ex* qpx, uint32_t, uint64_t, __be32) { begin(qpx, IBV_WR_RDMA_WRITE_WITH_IMM); }
    static void wr_rdma_read(ibv_qp_ex* qpx, uint32_t, uint64_t) { begin(qpx, IBV_WR_RDMA_READ); }
    static void wr_atomic_cmp_swp(ibv_qp_ex* qpx, uint32_t, uint64_t, uint64_t, uint64_t) { begin(qpx, IBV_WR_ATOMIC_CMP_AND_SWP); }
    static void wr_atomic_fetch_add(ibv_qp_ex* qpx, uint32_t, uint64_t, uint64_t) { begin(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD); }
    static void wr_set_sge(ibv_qp_ex* qpx, uint32_t, uint64_t, uint32_t length) {
        fake_qp(&qpx->qp_base)->building.back().length = length;
    }
    static void wr_set_sge_list(ibv_qp_ex* qpx, size_t n, const ibv_sge* sgl) {
        uint32_t len = 0;
        for (size_t i = 0; i < n; ++i) len += sgl[i].length;
        fake_qp(&qpx->qp_base)->building.back().length = len;
    }
    static void wr_set_inline_data(ibv_qp_ex* qpx, void*, size_t length) {
        fake_qp(&qpx->qp_base)->building.back().length = static_cast<uint32_t>(length);
    }
    static void wr_set_ud_addr(ibv_qp_ex*, ibv_ah*, uint32_t, uint32_t) {}
    static int finish(ibv_qp_ex* qpx) {
        FakeQp* q = fake_qp(&qpx->qp_base);
        if (q->during_complete) q->during_complete();
        int ret = 0;
        if (q->fail_complete) {
            q->fail_complete = false;
            ret = EINVAL;
        } else {
            for (const FakeWr& w : q->building) {
                q->posted_send_ids.push_back(w.wr_id);
                if (q->sq_sig_all || (w.flags & IBV_SEND_SIGNALED)) complete_send(q, w.wr_id, w.opcode, w.length);
            }
        }
        q->building.clear();
        q->mutex.unlock();
        errno = ret != 0 ? kFakeFailureErrno : kFakeSuccessErrno;
        return ret;
    }
    static int wr_complete(ibv_qp_ex* qpx) { return finish(qpx); }
    static int wr_complete_rts(ibv_qp_ex* qpx) {
        g_rts_complete_calls.fetch_add(1);
        return finish(qpx);
    }
    static void wr_abort(ibv_qp_ex* qpx) {
        FakeQp* q = fake_qp(&qpx->qp_base);
        q->building.clear();
        q->mutex.unlock();
    }

    // --- ibv_cq_ex poll pass
    static int load_next(FakeCq* c) {
        // Called with c->mutex held (taken by start_poll, released by end_poll or an empty start).
        if (c->queue.empty()) return ENOENT;
        c->current = c->queue.front();
        c->queue.pop_front();
        c->cqx.wr_id = c->current.wr_id;
        c->cqx.status = c->current.status;
        return 0;
    }
    static int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr*) {
        FakeCq* c = fake_cq(reinterpret_cast<ibv_cq*>(cq));
        c->mutex.lock();
        const int ret = load_next(c);
        if (ret != 0) c->mutex.unlock();  // verbs: no end_poll after an empty start_poll
        return ret;
    }
    static int next_poll(ibv_cq_ex* cq) { return load_next(fake_cq(reinterpret_cast<ibv_cq*>(cq))); }
    static void end_poll(ibv_cq_ex* cq) { fake_cq(reinterpret_cast<ibv_cq*>(cq))->mutex.unlock(); }
    static FakeCq* self(ibv_cq_ex* cq) { return fake_cq(reinterpret_cast<ibv_cq*>(cq)); }
    static ibv_wc_opcode read_opcode(ibv_cq_ex* cq) { return self(cq)->current.opcode; }
    static uint32_t read_vendor_err(ibv_cq_ex* cq) { return self(cq)->current.vendor_err; }
    static unsigned int read_wc_flags(ibv_cq_ex* cq) { return self(cq)->current.wc_flags; }
    static uint32_t read_byte_len(ibv_cq_ex* cq) { return self(cq)->current.byte_len; }
    static uint32_t read_qp_num(ibv_cq_ex* cq) { return self(cq)->current.qp_num; }
    static __be32 read_imm_data(ibv_cq_ex* cq) { return self(cq)->current.imm; }
    // Present but not requested at creation: calling it is a shim bug the tests detect.
    static uint32_t read_src_qp_unrequested(ibv_cq_ex* cq) {
        self(cq)->optional_reads.fetch_add(1);
        return 0;
    }

    // --- verbs_context entries
    template <int V> static ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
        FakeDevice* d = FakeDevice::of(ctx);
        FakeQp* q = d->make_qp(fake_cq(attr->send_cq), fake_cq(attr->recv_cq), attr->qp_type, attr->sq_sig_all != 0);
        if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
            ibv_qp_ex& x = q->qpx;
            x.wr_start = &wr_start;
            x.wr_complete = &wr_complete;
            x.wr_abort = &wr_abort;
            x.wr_set_sge = &wr_set_sge;
            x.wr_set_sge_list = &wr_set_sge_list;
            x.wr_set_inline_data = &wr_set_inline_data;
            x.wr_set_ud_addr = &wr_set_ud_addr;
            const uint64_t ops = attr->send_ops_flags;
            if (ops & IBV_QP_EX_WITH_SEND) x.wr_send = &wr_send;
            if (ops & IBV_QP_EX_WITH_SEND_WITH_IMM) x.wr_send_imm = &wr_send_imm;
            if (ops & IBV_QP_EX_WITH_RDMA_WRITE) x.wr_rdma_write = &wr_rdma_write;
            if (ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) x.wr_rdma_write_imm = &wr_rdma_write_imm;
            if (ops & IBV_QP_EX_WITH_RDMA_READ) x.wr_rdma_read = &wr_rdma_read;
            if (ops & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP) x.wr_atomic_cmp_swp = &wr_atomic_cmp_swp;
            if (ops & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) x.wr_atomic_fetch_add = &wr_atomic_fetch_add;
        }
        attr->cap.max_send_wr = attr->cap.max_send_wr == 0 ? 64 : attr->cap.max_send_wr;  // "granted"
        return q->qp();
    }

    template <int V> static ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
        FakeCq* c = FakeDevice::of(ctx)->make_cq(static_cast<int>(attr->cqe));
        ibv_cq_ex& x = c->cqx;
        x.start_poll = &start_poll;
        x.next_poll = &next_poll;
        x.end_poll = &end_poll;
        x.read_opcode = &read_opcode;
        x.read_vendor_err = &read_vendor_err;
        x.read_wc_flags = &read_wc_flags;
        if (attr->wc_flags & IBV_WC_EX_WITH_BYTE_LEN) x.read_byte_len = &read_byte_len;
        if (attr->wc_flags & IBV_WC_EX_WITH_QP_NUM) x.read_qp_num = &read_qp_num;
        if (attr->wc_flags & IBV_WC_EX_WITH_IMM) x.read_imm_data = &read_imm_data;
        // A provider may leave accessors set that were not requested; the shim must not call them.
        if (!(attr->wc_flags & IBV_WC_EX_WITH_SRC_QP)) x.read_src_qp = &read_src_qp_unrequested;
        return &c->cqx;
    }

    template <int V> static ibv_srq* create_srq_ex(ibv_context*, ibv_srq_init_attr_ex*) { return nullptr; }

    static int query_port(ibv_context*, uint8_t port, ibv_port_attr* attr, size_t) {
        if (port != 1) return EINVAL;
        attr->state = IBV_PORT_ACTIVE;
        attr->lid = 7;
        attr->gid_tbl_len = 4;
        attr->link_layer = IBV_LINK_LAYER_INFINIBAND;
        attr->active_mtu = IBV_MTU_4096;
        return 0;
    }
};

FakeDevice::FakeDevice(const char* name, int variant) {
    std::strncpy(device_.name, name, sizeof device_.name - 1);
    vctx_.sz = sizeof(verbs_context);
    ibv_context& c = vctx_.context;
    c.device = &device_;
    c.abi_compat = __VERBS_ABI_IS_EXTENDED;
    if (variant == 0) {
        c.ops.post_send = &FakeFunctions::post_send<0>;
        c.ops.post_recv = &FakeFunctions::post_recv<0>;
        c.ops.post_srq_recv = &FakeFunctions::post_srq_recv<0>;
        c.ops.poll_cq = &FakeFunctions::poll_cq<0>;
        c.ops.req_notify_cq = &FakeFunctions::req_notify_cq<0>;
        vctx_.create_qp_ex = &FakeFunctions::create_qp_ex<0>;
        vctx_.create_cq_ex = &FakeFunctions::create_cq_ex<0>;
        vctx_.create_srq_ex = &FakeFunctions::create_srq_ex<0>;
    } else {
        c.ops.post_send = &FakeFunctions::post_send<1>;
        c.ops.post_recv = &FakeFunctions::post_recv<1>;
        c.ops.post_srq_recv = &FakeFunctions::post_srq_recv<1>;
        c.ops.poll_cq = &FakeFunctions::poll_cq<1>;
        c.ops.req_notify_cq = &FakeFunctions::req_notify_cq<1>;
        vctx_.create_qp_ex = &FakeFunctions::create_qp_ex<1>;
        vctx_.create_cq_ex = &FakeFunctions::create_cq_ex<1>;
        vctx_.create_srq_ex = &FakeFunctions::create_srq_ex<1>;
    }
    vctx_.query_port = &FakeFunctions::query_port;
    pd_.context = &c;
}

FakeDevice::~FakeDevice() = default;

FakeDevice* FakeDevice::of(ibv_context* ctx) {
    auto* v = reinterpret_cast<verbs_context*>(reinterpret_cast<char*>(ctx) - offsetof(verbs_context, context));
    return reinterpret_cast<FakeDevice*>(v);  // vctx_ is FakeDevice's first member
}

FakeCq* FakeDevice::make_cq(int cqe) {
    auto c = std::make_unique<FakeCq>();
    c->cqx.context = ctx();
    c->cqx.cqe = cqe;
    FakeCq* raw = c.get();
    std::lock_guard<std::mutex> lock(mutex_);
    cqs_.push_back(std::move(c));
    return raw;
}

FakeQp* FakeDevice::make_qp(FakeCq* send_cq, FakeCq* recv_cq, ibv_qp_type type, bool sq_sig_all) {
    auto q = std::make_unique<FakeQp>();
    FakeQp* raw = q.get();
    std::lock_guard<std::mutex> lock(mutex_);
    ibv_qp& b = q->qpx.qp_base;
    b.context = ctx();
    b.pd = &pd_;
    b.qp_num = next_qpn_++;
    b.qp_type = type;
    b.send_cq = send_cq != nullptr ? send_cq->cq() : nullptr;
    b.recv_cq = recv_cq != nullptr ? recv_cq->cq() : nullptr;
    q->send_cq = send_cq;
    q->recv_cq = recv_cq;
    q->sq_sig_all = sq_sig_all;
    qps_.push_back(std::move(q));
    return raw;
}

void fake_provider_rewrites_wr_complete(ibv_qp_ex* qpx) {
    qpx->wr_complete = &FakeFunctions::wr_complete_rts;
}

int fake_rts_complete_calls() {
    return g_rts_complete_calls.load();
}

int fake_destroy_qp(ibv_qp*) {
    return 0;
}
int fake_destroy_cq(ibv_cq*) {
    return 0;
}

namespace {
int query_device(ibv_context* ctx, ibv_device_attr* attr) {
    std::memset(attr, 0, sizeof *attr);
    attr->node_guid = htobe64(kFakeNodeGuid);
    attr->vendor_id = 0x15b3;
    attr->vendor_part_id = 4119;
    attr->phys_port_cnt = 1;
    return ctx != nullptr ? 0 : EINVAL;
}
int query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
    std::memset(attr, 0, sizeof *attr);
    return FakeFunctions::query_port(ctx, port, attr, sizeof *attr);
}
int query_gid(ibv_context*, uint8_t port, int index, ibv_gid* gid) {
    std::memset(gid, 0, sizeof *gid);
    if (port != 1) return EINVAL;
    uint64_t prefix = 0, iid = 0;
    if (index == 0) {
        prefix = htobe64(kFakeGid0Prefix);
        iid = htobe64(kFakeGid0Iid);
    } else if (index == 2) {
        prefix = htobe64(0);
        iid = htobe64(kFakeGid2Iid);
    }
    std::memcpy(gid->raw, &prefix, 8);
    std::memcpy(gid->raw + 8, &iid, 8);
    return 0;
}
ibv_qp_ex* qp_to_qp_ex(ibv_qp* qp) {
    return fake_qp(qp)->qpx.wr_start != nullptr ? &fake_qp(qp)->qpx : nullptr;
}
constexpr interpose::VerbsQueries kQueries{&query_device, &query_port, &query_gid, &qp_to_qp_ex};
}  // namespace

const interpose::VerbsQueries* fake_verbs_queries() {
    return &kQueries;
}

}  // namespace sigmatrace::testing
