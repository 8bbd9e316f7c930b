// fabric_pingpong: where a traced message's time goes, across two processes on the software fabric.
//
// perftest's ib_send_lat reports one number per run; the in-process benchmark (interpose_bench) times the
// wrappers in a hot loop, where caches and predictors are warm and no system call runs between two posts. This
// program does what ib_send_lat does (SEND ping-pong, 2 inline bytes, one signaled send in 100, posts through
// the ibv_wr_* API or ibv_post_send) and also times, on the client, the posting call and the doorbell
// (ibv_wr_complete) inside it, so that runs with and without the tracer say which part a traced message pays.
//
//   fabric_pingpong --role 0|1 --dir DIR [--iters N] [--wr]
//
// Role 0 is the server, role 1 the client; the two exchange their QP number and LID through files in DIR (a
// directory both can write). The client prints one line:
//   one_way_ns=<median> post_ns=<median> doorbell_ns=<median>
// one_way_ns: half the time between two consecutive posts of the client (ib_send_lat's "typical" latency);
// post_ns: the client's whole posting call; doorbell_ns: ibv_wr_complete alone (--wr only, else 0).
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "send_lat_qp.h"

namespace {

struct Options {
    int role = -1;
    std::string dir;
    int iters = 100000;
    bool wr_api = false;
};

bool parse(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--wr") o.wr_api = true;
        else if (a == "--role" && i + 1 < argc) o.role = std::atoi(argv[++i]);
        else if (a == "--dir" && i + 1 < argc) o.dir = argv[++i];
        else if (a == "--iters" && i + 1 < argc) o.iters = std::atoi(argv[++i]);
        else return false;
    }
    return (o.role == 0 || o.role == 1) && !o.dir.empty() && o.iters >= 100;
}

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Publishes "qpn lid" as DIR/ROLE (written whole, then renamed) and waits for the peer's.
bool exchange(const Options& o, uint32_t qpn, uint16_t lid, uint32_t& peer_qpn, uint16_t& peer_lid) {
    const std::string mine = o.dir + "/" + std::to_string(o.role);
    std::ofstream(mine + ".tmp") << qpn << ' ' << lid << '\n';
    if (std::rename((mine + ".tmp").c_str(), mine.c_str()) != 0) return false;
    const std::string theirs = o.dir + "/" + std::to_string(1 - o.role);
    for (int tries = 0; tries < 30000; ++tries) {
        std::ifstream in(theirs);
        if (in >> peer_qpn >> peer_lid) return true;
        usleep(1000);
    }
    return false;
}

int64_t median(std::vector<int64_t>& v) {
    if (v.empty()) return 0;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
}

int fail(const char* what) {
    std::fprintf(stderr, "fabric_pingpong: %s\n", what);
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    if (!parse(argc, argv, o)) {
        std::fprintf(stderr, "usage: fabric_pingpong --role 0|1 --dir DIR [--iters N>=100] [--wr]\n");
        return 2;
    }
    SendLatQp c;
    try {
        c.open(o.wr_api);
    } catch (const sigmatrace::verbs::SetupError& e) {
        return fail(e.what());
    }
    ibv_qp* qp = c.qp.get();
    uint32_t peer_qpn = 0;
    uint16_t peer_lid = 0;
    if (!exchange(o, qp->qp_num, c.port.lid, peer_qpn, peer_lid)) return fail("no peer within 30 s");
    try {
        sigmatrace::verbs::connect_rc(qp, {.qpn = peer_qpn, .lid = peer_lid}, {.mtu = IBV_MTU_1024});
    } catch (const sigmatrace::verbs::SetupError& e) {
        return fail(e.what());
    }

    ibv_recv_wr* bad_recv = nullptr;
    for (int i = 0; i < 32; ++i)
        if (ibv_post_recv(qp, &c.recv_wr, &bad_recv) != 0) return fail("ibv_post_recv failed");
    usleep(200000);  // the peer reaches RTS too

    std::vector<int64_t> post_times, post_ns, doorbell_ns;
    post_times.reserve(static_cast<size_t>(o.iters));
    post_ns.reserve(static_cast<size_t>(o.iters));
    doorbell_ns.reserve(static_cast<size_t>(o.iters));
    ibv_wc wc{};
    auto wait_for = [&](ibv_cq* cq) {
        int got = 0;
        while ((got = ibv_poll_cq(cq, 1, &wc)) == 0) {
        }
        return got == 1 && wc.status == IBV_WC_SUCCESS;
    };
    for (int i = 0; i < o.iters; ++i) {
        if (o.role == 0 || i > 0) {
            if (!wait_for(c.recv_cq.get())) return fail("receive failed");
            if (ibv_post_recv(qp, &c.recv_wr, &bad_recv) != 0) return fail("ibv_post_recv failed");
        }
        // As ib_send_lat: one signaled send in 100, whose completion is waited for right away.
        const bool signaled = (i + 1) % 100 == 0;
        const unsigned flags = signaled ? (IBV_SEND_INLINE | IBV_SEND_SIGNALED) : static_cast<unsigned>(IBV_SEND_INLINE);
        const int64_t t0 = now_ns();
        int64_t doorbell = 0;  // timed on both sides, so that both do the same work before their doorbell
        const int ret = c.post_send(static_cast<uint64_t>(i), flags, &doorbell);
        if (o.role == 1 && c.qpx != nullptr) doorbell_ns.push_back(doorbell);
        if (o.role == 1) {
            post_ns.push_back(now_ns() - t0);
            post_times.push_back(t0);
        }
        if (ret != 0) return fail("posting the send failed");
        if (signaled && !wait_for(c.send_cq.get())) return fail("send failed");
    }
    if (o.role == 1) {
        std::vector<int64_t> gaps;
        gaps.reserve(post_times.size());
        for (size_t k = 1; k < post_times.size(); ++k) gaps.push_back(post_times[k] - post_times[k - 1]);
        std::printf("one_way_ns=%lld post_ns=%lld doorbell_ns=%lld\n", static_cast<long long>(median(gaps) / 2),
                    static_cast<long long>(median(post_ns)), static_cast<long long>(median(doorbell_ns)));
    }
    return 0;
}
