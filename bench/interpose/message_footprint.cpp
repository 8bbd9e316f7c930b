// message_footprint: one process sends itself ib_send_lat's messages, for message_footprint.sh to count, under
// Valgrind, the instructions and distinct cache lines each message's verbs calls execute and touch.
//
// Why: on a shared VM a traced message's extra latency moves by more than the effect of any one change to the
// wrappers from one batch of runs to the next (docs/PERFORMANCE.md). Instructions and lines per message are
// exact and repeatable; they say whether a change shortened the traced path before any timing says so.
//
//   message_footprint [--iters N] [--classic] [--maps FILE]
//
// One RC QP connected to itself on the software fabric: each iteration posts a SEND of 2 inline bytes (through
// ibv_wr_* or, with --classic, ibv_post_send; one signaled in 100 whose completion is polled at once, as
// ib_send_lat does), polls the receive completion (the fabric delivers within the posting call, so the first
// poll returns it), and reposts the receive: the calls a one-way message of ib_send_lat crosses, posting side
// and receiving side. Each iteration first stores its number into `g_message_marker`; the program prints that
// variable's address ("marker=0x...") so that the counting script can cut the memory trace into messages, and
// with --maps writes /proc/self/maps at the end (to attribute instructions to objects).
#include <infiniband/verbs.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "send_lat_qp.h"

// The cut between two messages in the memory trace: a store to this variable (volatile: one store each time).
volatile long g_message_marker = 0;

namespace {

struct Options {
    int iters = 300;
    bool classic = false;
    const char* maps = nullptr;
};

bool parse(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--classic") == 0) o.classic = true;
        else if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) o.iters = std::atoi(argv[++i]);
        else if (std::strcmp(argv[i], "--maps") == 0 && i + 1 < argc) o.maps = argv[++i];
        else return false;
    }
    return o.iters >= 1;
}

int fail(const char* what) {
    std::fprintf(stderr, "message_footprint: %s\n", what);
    return 1;
}

bool copy_maps(const char* path) {
    FILE* in = std::fopen("/proc/self/maps", "r");
    FILE* out = std::fopen(path, "w");
    bool ok = in != nullptr && out != nullptr;
    char line[4096];
    while (ok && std::fgets(line, sizeof line, in) != nullptr) ok = std::fputs(line, out) >= 0;
    if (in != nullptr) std::fclose(in);
    if (out != nullptr && std::fclose(out) != 0) ok = false;
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    if (!parse(argc, argv, o)) {
        std::fprintf(stderr, "usage: message_footprint [--iters N>=1] [--classic] [--maps FILE]\n");
        return 2;
    }
    SendLatQp c;
    try {
        c.open(!o.classic);
        sigmatrace::verbs::connect_rc(c.qp.get(), {.qpn = c.qp->qp_num, .lid = c.port.lid}, {.mtu = IBV_MTU_1024});
    } catch (const sigmatrace::verbs::SetupError& e) {
        return fail(e.what());
    }
    ibv_qp* qp = c.qp.get();
    ibv_recv_wr* bad_recv = nullptr;
    for (int i = 0; i < 32; ++i)
        if (ibv_post_recv(qp, &c.recv_wr, &bad_recv) != 0) return fail("ibv_post_recv failed");
    ibv_wc wc{};
    // The fabric delivers inside the posting call, so a completion is there at the first poll; a bound instead
    // of a hang if it ever is not.
    auto poll_one = [&](ibv_cq* cq) {
        for (int tries = 0; tries < 1000000; ++tries) {
            const int got = ibv_poll_cq(cq, 1, &wc);
            if (got != 0) return got == 1 && wc.status == IBV_WC_SUCCESS;
        }
        return false;
    };
    std::printf("marker=%p\n", static_cast<void*>(const_cast<long*>(&g_message_marker)));
    std::fflush(stdout);
    for (int i = 0; i < o.iters; ++i) {
        g_message_marker = i;
        const bool signaled = (i + 1) % 100 == 0;
        const unsigned flags = signaled ? (IBV_SEND_INLINE | IBV_SEND_SIGNALED) : static_cast<unsigned>(IBV_SEND_INLINE);
        const int ret = c.post_send(static_cast<uint64_t>(i), flags);
        if (ret != 0) return fail("posting the send failed");
        if (!poll_one(c.recv_cq.get())) return fail("no receive completion");
        if (ibv_post_recv(qp, &c.recv_wr, &bad_recv) != 0) return fail("reposting the receive failed");
        if (signaled && !poll_one(c.send_cq.get())) return fail("no send completion");
    }
    g_message_marker = -1;
    if (o.maps != nullptr && !copy_maps(o.maps)) return fail("cannot write the maps file");
    return 0;
}
