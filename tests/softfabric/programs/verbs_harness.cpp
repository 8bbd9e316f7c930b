#include "verbs_harness.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "common/verbs/rc_setup.h"

namespace sftest {
namespace {

[[noreturn]] void die(const char* what, int err) {
    std::fprintf(stderr, "verbs_harness: %s failed: %s\n", what, std::strerror(err));
    std::_Exit(3);
}

enum Op : uint32_t { kConnect = 1, kPostRecv, kPoll, kState, kRead, kFill, kSend, kExit };

struct Command {
    uint32_t op;
    uint32_t extra_len;
    uint64_t a;
    uint64_t b;
};

// Reads or writes all `n` bytes (`io` is ::read or ::write), through EINTR; false on EOF or an error.
template <typename Byte, typename Io> bool io_all(Io io, int fd, Byte* c, size_t n) {
    while (n) {
        ssize_t r = io(fd, c, n);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return false;
        }
        c += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

bool read_all(int fd, void* p, size_t n) { return io_all(::read, fd, static_cast<char*>(p), n); }
bool write_all(int fd, const void* p, size_t n) { return io_all(::write, fd, static_cast<const char*>(p), n); }

}  // namespace

double now_s() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

Endpoint::Endpoint(const EndpointOptions& o) : type(o.type) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list) die("ibv_get_device_list (run under `sigmatrace fabric --rails 2`)", errno);
    for (int i = 0; i < n && !ctx; ++i)
        if (o.device == ibv_get_device_name(list[i])) ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (!ctx) die(("ibv_open_device " + o.device).c_str(), errno ? errno : ENODEV);
    if (ibv_query_port(ctx, 1, &port)) die("ibv_query_port", errno);
    if (ibv_query_gid(ctx, 1, 0, &gid)) die("ibv_query_gid", errno);
    pd = ibv_alloc_pd(ctx);
    if (!pd) die("ibv_alloc_pd", errno);
    size = o.buffer;
    buf = static_cast<unsigned char*>(aligned_alloc(4096, size));
    std::memset(buf, 0, size);
    mr = ibv_reg_mr(pd, buf, size, o.mr_access);
    if (!mr) die("ibv_reg_mr", errno);
    if (o.channel) {
        channel = ibv_create_comp_channel(ctx);
        if (!channel) die("ibv_create_comp_channel", errno);
    }
    if (o.completion_timestamps) {
        ibv_cq_init_attr_ex ca{};
        ca.cqe = o.depth * 4;
        ca.channel = channel;
        ca.wc_flags = uint64_t{IBV_WC_STANDARD_FLAGS} | uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
        cq_ex = ibv_create_cq_ex(ctx, &ca);
        if (!cq_ex) die("ibv_create_cq_ex", errno);
        cq = ibv_cq_ex_to_cq(cq_ex);
    } else {
        cq = ibv_create_cq(ctx, static_cast<int>(o.depth * 4), nullptr, channel, 0);
    }
    if (!cq) die("ibv_create_cq", errno);
    if (o.srq) {
        ibv_srq_init_attr sa{};
        sa.attr.max_wr = o.depth;
        sa.attr.max_sge = 1;
        srq = ibv_create_srq(pd, &sa);
        if (!srq) die("ibv_create_srq", errno);
    }
    ibv_qp_init_attr qa{};
    qa.send_cq = cq;
    qa.recv_cq = cq;
    qa.srq = srq;
    qa.qp_type = o.type;
    qa.cap.max_send_wr = o.depth * 2;
    qa.cap.max_recv_wr = o.depth;
    qa.cap.max_send_sge = 2;
    qa.cap.max_recv_sge = 2;
    qa.cap.max_inline_data = 64;
    qp = ibv_create_qp(pd, &qa);
    if (!qp) die("ibv_create_qp", errno);
}

Endpoint::~Endpoint() {
    if (qp) ibv_destroy_qp(qp);
    if (srq) ibv_destroy_srq(srq);
    if (cq) ibv_destroy_cq(cq);
    if (channel) ibv_destroy_comp_channel(channel);
    if (mr) ibv_dereg_mr(mr);
    if (pd) ibv_dealloc_pd(pd);
    if (ctx) ibv_close_device(ctx);
    std::free(buf);
}

Wire Endpoint::wire() const {
    Wire w;
    w.lid = port.lid;
    w.qpn = qp->qp_num;
    w.addr = reinterpret_cast<uint64_t>(buf);
    w.rkey = mr->rkey;
    w.size = static_cast<uint32_t>(size);
    w.gid = gid;
    return w;
}

int Endpoint::connect(const Wire& remote, const ConnectOptions& o) {
    if (type == IBV_QPT_RC) {
        try {
            sigmatrace::verbs::connect_rc(qp, {.qpn = remote.qpn, .lid = remote.lid},
                                          {.access = o.qp_access,
                                           .rd_atomic = 16,
                                           .timeout = o.timeout,
                                           .retry_cnt = o.retry_cnt,
                                           .rnr_retry = o.rnr_retry,
                                           .min_rnr_timer = o.min_rnr_timer});
            return 0;
        } catch (const sigmatrace::verbs::SetupError& e) {
            return e.err();
        }
    }
    // UC and UD have their own attribute sets (no read depth, retries or RNR timer; UD: no path, a qkey).
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (type == IBV_QPT_UD) {
        a.qkey = 0x11111111;
        mask |= IBV_QP_QKEY;
    } else {
        a.qp_access_flags = o.qp_access;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    if (int e = ibv_modify_qp(qp, &a, mask)) return e;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    mask = IBV_QP_STATE;
    if (type != IBV_QPT_UD) {
        a.path_mtu = IBV_MTU_4096;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = 0;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.port_num = 1;
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    }
    if (int e = ibv_modify_qp(qp, &a, mask)) return e;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

ibv_qp_state Endpoint::state() {
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
    return a.qp_state;
}

int Endpoint::post_recv(uint64_t wr_id, uint64_t offset, uint32_t length) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf + offset), length, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad);
}

bool Endpoint::poll(ibv_wc& wc, double timeout_s) {
    double end = now_s() + timeout_s;
    do {
        int n = ibv_poll_cq(cq, 1, &wc);
        if (n > 0) return true;
        if (n < 0) return false;
    } while (now_s() < end);
    return false;
}

bool Endpoint::poll(ibv_wc& wc, uint64_t* completion_ts, double timeout_s) {
    if (!cq_ex) die("Endpoint::poll with a timestamp needs EndpointOptions::completion_timestamps", EINVAL);
    double end = now_s() + timeout_s;
    ibv_poll_cq_attr attr{};
    do {
        int err = ibv_start_poll(cq_ex, &attr);
        if (err == ENOENT) continue;
        if (err != 0) return false;
        wc = ibv_wc{};
        wc.wr_id = cq_ex->wr_id;
        wc.status = cq_ex->status;
        wc.opcode = ibv_wc_read_opcode(cq_ex);
        *completion_ts = ibv_wc_read_completion_ts(cq_ex);
        ibv_end_poll(cq_ex);
        return true;
    } while (now_s() < end);
    return false;
}

int Endpoint::post(ibv_send_wr& wr) {
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &wr, &bad);
}

int Endpoint::write(uint64_t wr_id, uint64_t offset, uint32_t length, uint64_t raddr, uint32_t rkey,
                    bool signaled) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf + offset), length, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return post(wr);
}

int Endpoint::read(uint64_t wr_id, uint64_t offset, uint32_t length, uint64_t raddr, uint32_t rkey) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf + offset), length, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return post(wr);
}

int Endpoint::send(uint64_t wr_id, uint64_t offset, uint32_t length, bool signaled, uint32_t imm, bool with_imm) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf + offset), length, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    wr.imm_data = imm;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    return post(wr);
}

ibv_ah* Endpoint::make_ah(const Wire& remote, bool global) {
    ibv_ah_attr a{};
    a.dlid = remote.lid;
    a.port_num = 1;
    a.is_global = global;
    a.grh.dgid = remote.gid;
    a.grh.hop_limit = 1;
    return ibv_create_ah(pd, &a);
}

// ---------------------------------------------------------------------------------------------------- Peer

struct Peer::Reply {
    int32_t status = 0;
    uint32_t len = 0;
    std::vector<unsigned char> data;
};

Peer::Peer(const EndpointOptions& o) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair", errno);
    pid_ = fork();
    if (pid_ < 0) die("fork", errno);
    if (pid_ == 0) {
        close(sv[0]);
        int s = sv[1];
        Endpoint ep(o);
        Wire w = ep.wire();
        write_all(s, &w, sizeof w);
        ibv_ah* ah = nullptr;
        Wire remote{};
        for (;;) {
            Command c{};
            if (!read_all(s, &c, sizeof c)) std::_Exit(0);
            std::vector<unsigned char> extra(c.extra_len);
            if (c.extra_len && !read_all(s, extra.data(), c.extra_len)) std::_Exit(0);
            int32_t status = 0;
            std::vector<unsigned char> out;
            switch (c.op) {
                case kConnect: {
                    ConnectOptions co{};
                    std::memcpy(&remote, extra.data(), sizeof remote);
                    std::memcpy(&co, extra.data() + sizeof remote, sizeof co);
                    status = ep.connect(remote, co);
                    if (o.type == IBV_QPT_UD) ah = ep.make_ah(remote, false);
                    break;
                }
                case kPostRecv:
                    for (uint64_t i = 0; i < c.a && !status; ++i) status = ep.post_recv(i, i * c.b, static_cast<uint32_t>(c.b));
                    break;
                case kPoll: {
                    double end = now_s() + static_cast<double>(c.b) / 1000.0;
                    while (out.size() / sizeof(WcRecord) < c.a && now_s() < end) {
                        ibv_wc wc{};
                        if (ibv_poll_cq(ep.cq, 1, &wc) != 1) continue;
                        WcRecord r{wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.imm_data, wc.src_qp,
                                   wc.wc_flags, wc.slid, 0};
                        auto* p = reinterpret_cast<unsigned char*>(&r);
                        out.insert(out.end(), p, p + sizeof r);
                    }
                    break;
                }
                case kState: status = ep.state(); break;
                case kRead: out.assign(ep.buf + c.a, ep.buf + c.a + c.b); break;
                case kFill: std::memset(ep.buf + c.a, extra.empty() ? 0 : extra[0], c.b); break;
                case kSend: {
                    ibv_sge sge{reinterpret_cast<uint64_t>(ep.buf), static_cast<uint32_t>(c.a), ep.mr->lkey};
                    ibv_send_wr wr{};
                    wr.wr_id = 1;
                    wr.sg_list = &sge;
                    wr.num_sge = 1;
                    wr.opcode = IBV_WR_SEND;
                    wr.send_flags = IBV_SEND_SIGNALED;
                    if (o.type == IBV_QPT_UD) {
                        if (c.b) {
                            if (ah) ibv_destroy_ah(ah);
                            ah = ep.make_ah(remote, true);
                        }
                        wr.wr.ud.ah = ah;
                        wr.wr.ud.remote_qpn = remote.qpn;
                        wr.wr.ud.remote_qkey = 0x11111111;
                    }
                    status = ep.post(wr);
                    ibv_wc wc{};
                    if (!status) status = ep.poll(wc) ? static_cast<int32_t>(wc.status) : -1;
                    break;
                }
                case kExit:
                    if (ah) ibv_destroy_ah(ah);
                    write_all(s, &status, sizeof status);
                    std::_Exit(0);
            }
            uint32_t len = static_cast<uint32_t>(out.size());
            write_all(s, &status, sizeof status);
            write_all(s, &len, sizeof len);
            if (len) write_all(s, out.data(), len);
        }
    }
    close(sv[1]);
    sock_ = sv[0];
    if (!read_all(sock_, &wire_, sizeof wire_)) die("peer start (see its message above)", EIO);
}

Peer::~Peer() {
    if (pid_ > 0) {
        Command c{kExit, 0, 0, 0};
        write_all(sock_, &c, sizeof c);
        int32_t st;
        read_all(sock_, &st, sizeof st);
        waitpid(pid_, nullptr, 0);
    }
    if (sock_ >= 0) close(sock_);
}

Peer::Reply Peer::call(uint32_t op, uint64_t a, uint64_t b, const void* extra, uint32_t extra_len) {
    Command c{op, extra_len, a, b};
    Reply r;
    if (!write_all(sock_, &c, sizeof c) || (extra_len && !write_all(sock_, extra, extra_len)) ||
        !read_all(sock_, &r.status, sizeof r.status) || !read_all(sock_, &r.len, sizeof r.len)) {
        r.status = -EPIPE;
        return r;
    }
    r.data.resize(r.len);
    if (r.len) read_all(sock_, r.data.data(), r.len);
    return r;
}

int Peer::connect(const Wire& remote, const ConnectOptions& o) {
    unsigned char extra[sizeof(Wire) + sizeof(ConnectOptions)];
    std::memcpy(extra, &remote, sizeof remote);
    std::memcpy(extra + sizeof remote, &o, sizeof o);
    return call(kConnect, 0, 0, extra, sizeof extra).status;
}

int Peer::post_recv(uint32_t count, uint32_t length) { return call(kPostRecv, count, length).status; }

std::vector<WcRecord> Peer::poll(uint32_t count, double timeout_s) {
    Reply r = call(kPoll, count, static_cast<uint64_t>(timeout_s * 1000));
    std::vector<WcRecord> out(r.data.size() / sizeof(WcRecord));
    if (!out.empty()) std::memcpy(out.data(), r.data.data(), out.size() * sizeof(WcRecord));
    return out;
}

ibv_qp_state Peer::qp_state() { return static_cast<ibv_qp_state>(call(kState).status); }

std::vector<unsigned char> Peer::read(uint64_t offset, uint32_t length) { return call(kRead, offset, length).data; }

void Peer::fill(uint64_t offset, uint32_t length, unsigned char byte) { call(kFill, offset, length, &byte, 1); }

int Peer::send(uint32_t length, bool ud_global) { return call(kSend, length, ud_global ? 1 : 0).status; }

void Peer::kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
}

}  // namespace sftest
