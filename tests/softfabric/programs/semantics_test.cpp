// The fabric's verbs semantics, provoked one by one and checked against what hardware does: exact completion
// status, QP state, flushes, RNR and transport retries, dead peers, ordering, atomics, completion channels,
// UD addressing, SRQ, the ibv_wr_* API and extended CQs.
//
// Run under `sigmatrace fabric --node 0 --rails 2` (tests/softfabric/CMakeLists.txt): this process uses
// sfab_0, each test's peer process uses sfab_1.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/stats.h"
#include "verbs_harness.h"

namespace sftest {
namespace {

EndpointOptions on(const char* dev, ibv_qp_type type = IBV_QPT_RC) {
    EndpointOptions o;
    o.device = dev;
    o.type = type;
    return o;
}

// A connected RC pair: `peer` (sfab_1, another process) and `me` (sfab_0).
struct RcPair {
    explicit RcPair(ConnectOptions mine = {}, ConnectOptions theirs = {}, EndpointOptions peer_opts = on("sfab_1"),
                    EndpointOptions my_opts = on("sfab_0"))
        : peer(peer_opts), me(my_opts) {
        EXPECT_EQ(me.connect(peer.wire(), mine), 0);
        EXPECT_EQ(peer.connect(me.wire(), theirs), 0);
    }
    Peer peer;
    Endpoint me;
};

TEST(StateMachine, PostingInTheWrongStateFailsAsOnHardware) {
    Peer peer(on("sfab_1"));
    Endpoint me(on("sfab_0"));
    EXPECT_EQ(me.state(), IBV_QPS_RESET);
    EXPECT_EQ(me.send(1, 0, 8), EINVAL);
    EXPECT_EQ(me.post_recv(1, 0, 8), EINVAL);
    // RESET -> RTR skips INIT.
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    EXPECT_EQ(ibv_modify_qp(me.qp, &a, IBV_QP_STATE), EINVAL);
    // RESET -> INIT without the access flags it requires.
    a = {};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    EXPECT_EQ(ibv_modify_qp(me.qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX), EINVAL);
    a.qp_access_flags = kFullAccess;
    ASSERT_EQ(ibv_modify_qp(me.qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS), 0);
    EXPECT_EQ(me.state(), IBV_QPS_INIT);
    EXPECT_EQ(me.post_recv(1, 0, 8), 0);  // receives may be posted from INIT on
    EXPECT_EQ(me.send(1, 0, 8), EINVAL);  // sends need RTS
    // A port that does not exist.
    a = {};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 2;
    EXPECT_EQ(ibv_modify_qp(me.qp, &a, IBV_QP_STATE | IBV_QP_PORT), EINVAL);
    // To RESET: the posted receive is dropped without a completion.
    a = {};
    a.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(me.qp, &a, IBV_QP_STATE), 0);
    ibv_wc wc{};
    EXPECT_FALSE(me.poll(wc, 0.05));
}

TEST(DataPath, WriteReadSendAndImmediateCrossProcesses) {
    RcPair p;
    for (uint32_t i = 0; i < 4096; ++i) p.me.buf[i] = static_cast<unsigned char>(i * 7);
    ASSERT_EQ(p.me.write(1, 0, 4096, p.peer.wire().addr + 100, p.peer.wire().rkey), 0);
    ibv_wc wc{};
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(wc.wr_id, 1u);
    auto remote = p.peer.read(100, 4096);
    ASSERT_EQ(remote.size(), 4096u);
    EXPECT_EQ(std::memcmp(remote.data(), p.me.buf, 4096), 0);

    p.peer.fill(8192, 512, 0xab);
    ASSERT_EQ(p.me.read(2, 65536, 512, p.peer.wire().addr + 8192, p.peer.wire().rkey), 0);
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
    EXPECT_EQ(wc.byte_len, 512u);
    EXPECT_EQ(p.me.buf[65536], 0xab);
    EXPECT_EQ(p.me.buf[65536 + 511], 0xab);

    ASSERT_EQ(p.peer.post_recv(2, 4096), 0);
    ASSERT_EQ(p.me.send(3, 0, 300, true, htonl(0xc0ffee), true), 0);
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_SEND);
    auto recv = p.peer.poll(1, 5);
    ASSERT_EQ(recv.size(), 1u);
    EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(recv[0].opcode, IBV_WC_RECV);
    EXPECT_EQ(recv[0].byte_len, 300u);
    EXPECT_EQ(recv[0].imm, htonl(0xc0ffee));
    EXPECT_TRUE(recv[0].wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(recv[0].src_qp, p.me.qp->qp_num);
    EXPECT_EQ(recv[0].slid, p.me.port.lid);
    EXPECT_EQ(p.peer.read(0, 300), std::vector<unsigned char>(p.me.buf, p.me.buf + 300));

    // RDMA WRITE with immediate: the data lands at the address, the immediate consumes a receive.
    ibv_sge sge{reinterpret_cast<uint64_t>(p.me.buf), 64, p.me.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 4;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(77);
    wr.wr.rdma.remote_addr = p.peer.wire().addr + 200'000;
    wr.wr.rdma.rkey = p.peer.wire().rkey;
    ASSERT_EQ(p.me.post(wr), 0);
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    recv = p.peer.poll(1, 5);
    ASSERT_EQ(recv.size(), 1u);
    EXPECT_EQ(recv[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(recv[0].imm, htonl(77));
    EXPECT_EQ(recv[0].byte_len, 64u);
    EXPECT_EQ(p.peer.read(200'000, 64), std::vector<unsigned char>(p.me.buf, p.me.buf + 64));
}

// After a remote access error: the failing WR completes with it, the QP is in ERROR, every later WR (posted
// before or after the error, signaled or not) completes with WR_FLUSH_ERR, in order.
void expect_error_then_flush(RcPair& p, ibv_wc_status expected) {
    ibv_wc wc{};
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.wr_id, 10u);
    EXPECT_EQ(wc.status, expected) << ibv_wc_status_str(wc.status);
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.wr_id, 11u);
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(p.me.state(), IBV_QPS_ERR);
    EXPECT_EQ(p.me.write(12, 0, 8, p.peer.wire().addr, p.peer.wire().rkey, /*signaled=*/false), 0);
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.wr_id, 12u);
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_FALSE(p.me.poll(wc, 0.05));
}

TEST(Errors, BadRkeyIsRemoteAccessErrorThenFlush) {
    RcPair p;
    ASSERT_EQ(p.me.write(10, 0, 64, p.peer.wire().addr, p.peer.wire().rkey + 0x100), 0);
    ASSERT_EQ(p.me.write(11, 0, 64, p.peer.wire().addr, p.peer.wire().rkey, /*signaled=*/false), 0);
    expect_error_then_flush(p, IBV_WC_REM_ACCESS_ERR);
}

TEST(Errors, OutOfBoundsIsRemoteAccessError) {
    RcPair p;
    const Wire& w = p.peer.wire();
    ASSERT_EQ(p.me.write(10, 0, 4096, w.addr + w.size - 100, w.rkey), 0);
    ASSERT_EQ(p.me.write(11, 0, 64, w.addr, w.rkey), 0);
    expect_error_then_flush(p, IBV_WC_REM_ACCESS_ERR);
}

TEST(Errors, MissingRemoteAccessRightIsRemoteAccessError) {
    EndpointOptions read_only = on("sfab_1");
    read_only.mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    RcPair p({}, {}, read_only);
    ibv_wc wc{};
    ASSERT_EQ(p.me.read(1, 0, 64, p.peer.wire().addr, p.peer.wire().rkey), 0);  // allowed
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(p.me.write(10, 0, 64, p.peer.wire().addr, p.peer.wire().rkey), 0);  // not allowed
    ASSERT_EQ(p.me.write(11, 0, 64, p.peer.wire().addr, p.peer.wire().rkey), 0);
    expect_error_then_flush(p, IBV_WC_REM_ACCESS_ERR);
}

TEST(Errors, QpAccessFlagsAreCheckedToo) {
    ConnectOptions no_remote_read;
    no_remote_read.qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    RcPair p({}, no_remote_read);
    ASSERT_EQ(p.me.read(10, 0, 64, p.peer.wire().addr, p.peer.wire().rkey), 0);
    ASSERT_EQ(p.me.write(11, 0, 64, p.peer.wire().addr, p.peer.wire().rkey), 0);
    expect_error_then_flush(p, IBV_WC_REM_ACCESS_ERR);
}

TEST(Errors, BadLkeyIsLocalProtectionError) {
    RcPair p;
    ibv_sge sge{reinterpret_cast<uint64_t>(p.me.buf), 64, p.me.mr->lkey ^ 0x5500};
    ibv_send_wr wr{};
    wr.wr_id = 10;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = p.peer.wire().addr;
    wr.wr.rdma.rkey = p.peer.wire().rkey;
    ASSERT_EQ(p.me.post(wr), 0);
    ASSERT_EQ(p.me.write(11, 0, 64, p.peer.wire().addr, p.peer.wire().rkey), 0);
    expect_error_then_flush(p, IBV_WC_LOC_PROT_ERR);
}

TEST(Errors, ReceiveBufferTooSmall) {
    RcPair p;
    ASSERT_EQ(p.peer.post_recv(3, 128), 0);
    ASSERT_EQ(p.me.send(10, 0, 1000), 0);
    ASSERT_EQ(p.me.send(11, 0, 8), 0);
    expect_error_then_flush(p, IBV_WC_REM_INV_REQ_ERR);
    // The receiver: local length error on the consumed receive, its QP in ERROR, the rest flushed.
    auto recv = p.peer.poll(3, 5);
    ASSERT_EQ(recv.size(), 3u);
    EXPECT_EQ(recv[0].wr_id, 0u);
    EXPECT_EQ(recv[0].status, IBV_WC_LOC_LEN_ERR);
    EXPECT_EQ(recv[1].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(recv[2].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(p.peer.qp_state(), IBV_QPS_ERR);
}

TEST(Errors, RnrRetriesThenRnrRetryExceeded) {
    ConnectOptions mine;
    mine.rnr_retry = 2;
    ConnectOptions theirs;
    theirs.min_rnr_timer = 14;  // 1.28 ms
    RcPair p(mine, theirs);
    double t0 = now_s();
    ASSERT_EQ(p.me.send(10, 0, 64), 0);  // the peer posted no receive
    ASSERT_EQ(p.me.send(11, 0, 64), 0);
    ibv_wc wc{};
    ASSERT_TRUE(p.me.poll(wc));
    double elapsed = now_s() - t0;
    EXPECT_EQ(wc.wr_id, 10u);
    EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR) << ibv_wc_status_str(wc.status);
    // First attempt plus 2 retries, each after the responder's 1.28 ms RNR timer.
    EXPECT_GE(elapsed, 2 * 1.28e-3);
    EXPECT_LT(elapsed, 1.0);
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(p.me.state(), IBV_QPS_ERR);
}

TEST(Errors, RnrRetriesUntilAReceiveIsPosted) {
    ConnectOptions theirs;
    theirs.min_rnr_timer = 1;  // 10 us
    RcPair p({}, theirs);      // rnr_retry 7: forever
    ASSERT_EQ(p.me.send(1, 0, 64), 0);
    usleep(30'000);
    ibv_wc wc{};
    EXPECT_FALSE(p.me.poll(wc, 0.0));  // still waiting for a receive
    ASSERT_EQ(p.peer.post_recv(1, 4096), 0);
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    auto recv = p.peer.poll(1, 5);
    ASSERT_EQ(recv.size(), 1u);
    EXPECT_EQ(recv[0].byte_len, 64u);
}

TEST(Errors, DeadPeerFailsWithRetryExceededWithinTheTransportTimeout) {
    ConnectOptions mine;
    mine.timeout = 12;  // 16.8 ms
    mine.retry_cnt = 3;
    RcPair p(mine);
    ibv_wc wc{};
    ASSERT_EQ(p.me.write(1, 0, 64, p.peer.wire().addr, p.peer.wire().rkey), 0);
    ASSERT_TRUE(p.me.poll(wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    p.peer.kill();
    usleep(5'000);  // the fabric notices a dead peer within a millisecond
    double t0 = now_s();
    ASSERT_EQ(p.me.write(10, 0, 64, p.peer.wire().addr, p.peer.wire().rkey), 0);
    ASSERT_EQ(p.me.write(11, 0, 64, p.peer.wire().addr, p.peer.wire().rkey), 0);
    ASSERT_TRUE(p.me.poll(wc, 10));
    double elapsed = now_s() - t0;
    EXPECT_EQ(wc.wr_id, 10u);
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(wc.status);
    // (retry_cnt + 1) attempts, 16.8 ms apart: about 50..67 ms, never a hang.
    EXPECT_GE(elapsed, 3 * 0.0168 * 0.95);
    EXPECT_LT(elapsed, 2.0);
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(p.me.state(), IBV_QPS_ERR);
}

TEST(Ordering, RcExecutesAndCompletesInOrder) {
    RcPair p;
    ASSERT_EQ(p.peer.post_recv(1, 64), 0);
    // 200 writes of increasing values to one place, then a send: when the receive completes the last value
    // must be there, and the completions come back in posting order.
    auto* value = reinterpret_cast<uint64_t*>(p.me.buf);
    for (uint64_t i = 1; i <= 200; ++i) {
        value[i] = i;
        ibv_sge sge{reinterpret_cast<uint64_t>(&value[i]), 8, p.me.mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = p.peer.wire().addr + 4096;
        wr.wr.rdma.rkey = p.peer.wire().rkey;
        ASSERT_EQ(p.me.post(wr), 0) << i;
    }
    ASSERT_EQ(p.me.send(201, 0, 8), 0);
    auto recv = p.peer.poll(1, 5);
    ASSERT_EQ(recv.size(), 1u);
    auto last = p.peer.read(4096, 8);
    uint64_t v = 0;
    std::memcpy(&v, last.data(), 8);
    EXPECT_EQ(v, 200u);
    for (uint64_t i = 1; i <= 201; ++i) {
        ibv_wc wc{};
        ASSERT_TRUE(p.me.poll(wc));
        EXPECT_EQ(wc.wr_id, i);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    }
}

TEST(Unsignaled, OnlySignaledWorkRequestsComplete) {
    RcPair p;
    for (int i = 0; i < 10; ++i) ASSERT_EQ(p.me.write(i, 0, 64, p.peer.wire().addr, p.peer.wire().rkey, false), 0);
    ASSERT_EQ(p.me.write(99, 0, 64, p.peer.wire().addr, p.peer.wire().rkey, true), 0);
    ibv_wc wc{};
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.wr_id, 99u);
    EXPECT_FALSE(p.me.poll(wc, 0.05));
}

TEST(Atomics, FetchAddAndCompareSwapReturnTheOriginalValue) {
    RcPair p;
    const Wire& w = p.peer.wire();
    auto* out = reinterpret_cast<uint64_t*>(p.me.buf + 1024);
    auto post_atomic = [&](ibv_wr_opcode op, uint64_t id, uint64_t cmp_add, uint64_t swap) {
        ibv_sge sge{reinterpret_cast<uint64_t>(out), 8, p.me.mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = op;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.atomic.remote_addr = w.addr + 512;
        wr.wr.atomic.rkey = w.rkey;
        wr.wr.atomic.compare_add = cmp_add;
        wr.wr.atomic.swap = swap;
        return p.me.post(wr);
    };
    ibv_wc wc{};
    for (uint64_t i = 0; i < 50; ++i) {
        ASSERT_EQ(post_atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, i, 3, 0), 0);
        ASSERT_TRUE(p.me.poll(wc));
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.opcode, IBV_WC_FETCH_ADD);
        EXPECT_EQ(*out, 3 * i);
    }
    ASSERT_EQ(post_atomic(IBV_WR_ATOMIC_CMP_AND_SWP, 100, 7, 1), 0);  // mismatch: no swap
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP);
    EXPECT_EQ(*out, 150u);
    ASSERT_EQ(post_atomic(IBV_WR_ATOMIC_CMP_AND_SWP, 101, 150, 42), 0);  // match: swap
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(*out, 150u);
    auto remote = p.peer.read(512, 8);
    uint64_t v = 0;
    std::memcpy(&v, remote.data(), 8);
    EXPECT_EQ(v, 42u);
    // A misaligned target is an invalid request.
    ibv_sge sge{reinterpret_cast<uint64_t>(out), 8, p.me.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 10;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = w.addr + 513;
    wr.wr.atomic.rkey = w.rkey;
    ASSERT_EQ(p.me.post(wr), 0);
    ASSERT_EQ(post_atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, 11, 1, 0), 0);
    expect_error_then_flush(p, IBV_WC_REM_INV_REQ_ERR);
}

TEST(CompletionChannel, EventArrivesOnAPollableFdFromAnotherProcess) {
    EndpointOptions mine = on("sfab_0");
    mine.channel = true;
    RcPair p({}, {}, on("sfab_1"), mine);
    ASSERT_NE(p.me.channel, nullptr);
    ASSERT_GE(p.me.channel->fd, 0);
    ASSERT_EQ(ibv_req_notify_cq(p.me.cq, 0), 0);
    ASSERT_EQ(p.me.post_recv(5, 0, 4096), 0);
    pollfd pf{p.me.channel->fd, POLLIN, 0};
    EXPECT_EQ(poll(&pf, 1, 0), 0);  // nothing yet
    ASSERT_EQ(p.peer.send(256), IBV_WC_SUCCESS);
    ASSERT_EQ(poll(&pf, 1, 5000), 1) << "no completion event within 5 s";
    ibv_cq* cq = nullptr;
    void* cq_ctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(p.me.channel, &cq, &cq_ctx), 0);
    EXPECT_EQ(cq, p.me.cq);
    ibv_ack_cq_events(cq, 1);
    ibv_wc wc{};
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.wr_id, 5u);
    EXPECT_EQ(wc.byte_len, 256u);
    // Not re-armed: the next completion raises no event.
    ASSERT_EQ(p.me.post_recv(6, 0, 4096), 0);
    ASSERT_EQ(p.peer.send(16), IBV_WC_SUCCESS);
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(poll(&pf, 1, 50), 0);
}

TEST(UnreliableDatagram, AddressingAndGrh) {
    Peer peer(on("sfab_1", IBV_QPT_UD));
    Endpoint me(on("sfab_0", IBV_QPT_UD));
    ASSERT_EQ(me.connect(peer.wire()), 0);
    ASSERT_EQ(peer.connect(me.wire()), 0);
    ASSERT_EQ(me.post_recv(1, 0, 4096), 0);
    ASSERT_EQ(me.post_recv(2, 4096, 4096), 0);
    ASSERT_EQ(peer.send(1000, /*ud_global=*/false), IBV_WC_SUCCESS);
    ibv_wc wc{};
    ASSERT_TRUE(me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 1040u);  // the payload behind the 40-byte GRH room
    EXPECT_EQ(wc.src_qp, peer.wire().qpn);
    EXPECT_EQ(wc.slid, peer.wire().lid);
    EXPECT_FALSE(wc.wc_flags & IBV_WC_GRH);
    ASSERT_EQ(peer.send(200, /*ud_global=*/true), IBV_WC_SUCCESS);
    ASSERT_TRUE(me.poll(wc));
    EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
    EXPECT_EQ(std::memcmp(me.buf + 4096 + 8, peer.wire().gid.raw, 16), 0);  // GRH source GID
    EXPECT_EQ(std::memcmp(me.buf + 4096 + 24, me.gid.raw, 16), 0);          // GRH destination GID
    // UD has no RNR: a datagram without a receive is dropped, the sender completes successfully.
    ASSERT_EQ(peer.send(64), IBV_WC_SUCCESS);
    EXPECT_FALSE(me.poll(wc, 0.05));
}

TEST(UnreliableConnected, WritesAndSendsAndSilentDrops) {
    Peer peer(on("sfab_1", IBV_QPT_UC));
    Endpoint me(on("sfab_0", IBV_QPT_UC));
    ASSERT_EQ(me.connect(peer.wire()), 0);
    ASSERT_EQ(peer.connect(me.wire()), 0);
    std::memset(me.buf, 0x5a, 256);
    ibv_wc wc{};
    ASSERT_EQ(me.write(1, 0, 256, peer.wire().addr, peer.wire().rkey), 0);
    ASSERT_TRUE(me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(peer.read(0, 256), std::vector<unsigned char>(256, 0x5a));
    // No NAK on UC: a bad rkey or a missing receive drops the message, the sender completes successfully and
    // its QP stays usable.
    std::memset(me.buf, 0x77, 256);
    ASSERT_EQ(me.write(2, 0, 256, peer.wire().addr, peer.wire().rkey ^ 0x100), 0);
    ASSERT_TRUE(me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(me.send(3, 0, 64), 0);
    ASSERT_TRUE(me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(me.state(), IBV_QPS_RTS);
    EXPECT_EQ(peer.read(0, 256), std::vector<unsigned char>(256, 0x5a));
    // RDMA READ does not exist on UC.
    EXPECT_EQ(me.read(4, 0, 8, peer.wire().addr, peer.wire().rkey), EINVAL);
}

TEST(SharedReceiveQueue, TwoQpsConsumeOneSrq) {
    EndpointOptions srq_side = on("sfab_0");
    srq_side.srq = true;
    Endpoint me(srq_side);
    Peer a(on("sfab_1"));
    // A second QP on the same SRQ and CQ.
    ibv_qp_init_attr qa{};
    qa.send_cq = me.cq;
    qa.recv_cq = me.cq;
    qa.srq = me.srq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 16;
    qa.cap.max_send_sge = 1;
    ibv_qp* second = ibv_create_qp(me.pd, &qa);
    ASSERT_NE(second, nullptr);
    Peer b(on("sfab_1"));
    ASSERT_EQ(me.connect(a.wire()), 0);
    ASSERT_EQ(a.connect(me.wire()), 0);
    Endpoint* second_ep = &me;  // connect `second` to b by hand
    ibv_qp* saved = second_ep->qp;
    second_ep->qp = second;
    ASSERT_EQ(second_ep->connect(b.wire()), 0);
    Wire second_wire = second_ep->wire();
    second_ep->qp = saved;
    ASSERT_EQ(b.connect(second_wire), 0);

    ASSERT_EQ(me.post_recv(1, 0, 4096), 0);
    ASSERT_EQ(me.post_recv(2, 4096, 4096), 0);
    ASSERT_EQ(a.send(100), IBV_WC_SUCCESS);
    ASSERT_EQ(b.send(200), IBV_WC_SUCCESS);
    ibv_wc w1{}, w2{};
    ASSERT_TRUE(me.poll(w1));
    ASSERT_TRUE(me.poll(w2));
    EXPECT_EQ(w1.wr_id, 1u);  // SRQ entries are consumed in order
    EXPECT_EQ(w2.wr_id, 2u);
    EXPECT_EQ(w1.qp_num, me.qp->qp_num);
    EXPECT_EQ(w2.qp_num, second->qp_num);
    EXPECT_EQ(w1.byte_len + w2.byte_len, 300u);
    // Empty SRQ: RNR for RC senders (a's rnr_retry is 7, so it waits), until a receive is posted.
    ibv_destroy_qp(second);
}

TEST(ExtendedApi, WrApiAndExtendedCq) {
    RcPair p;
    ibv_qp_ex* qpx = ibv_qp_to_qp_ex(p.me.qp);
    ASSERT_NE(qpx, nullptr) << "fabric QPs are verbs_qp with VERBS_QP_EX";
    for (int i = 0; i < 64; ++i) p.me.buf[i] = static_cast<unsigned char>(0x40 + i);
    ibv_wr_start(qpx);
    qpx->wr_id = 7;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qpx, p.peer.wire().rkey, p.peer.wire().addr + 300);
    ibv_wr_set_sge(qpx, p.me.mr->lkey, reinterpret_cast<uint64_t>(p.me.buf), 64);
    qpx->wr_id = 8;
    ibv_wr_rdma_write(qpx, p.peer.wire().rkey, p.peer.wire().addr + 400);
    ibv_wr_set_inline_data(qpx, p.me.buf, 16);
    ASSERT_EQ(ibv_wr_complete(qpx), 0);
    ibv_wc wc{};
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.wr_id, 7u);
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.wr_id, 8u);
    EXPECT_EQ(p.peer.read(300, 64), std::vector<unsigned char>(p.me.buf, p.me.buf + 64));
    EXPECT_EQ(p.peer.read(400, 16), std::vector<unsigned char>(p.me.buf, p.me.buf + 16));
    // An error inside a batch fails ibv_wr_complete and posts nothing.
    ibv_wr_start(qpx);
    qpx->wr_id = 9;
    ibv_wr_rdma_write(qpx, p.peer.wire().rkey, p.peer.wire().addr);
    ibv_wr_set_inline_data(qpx, p.me.buf, 100'000);  // beyond max_inline_data
    EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
    EXPECT_FALSE(p.me.poll(wc, 0.05));

    // Extended CQ with completion timestamps.
    ibv_cq_init_attr_ex ca{};
    ca.cqe = 16;
    ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_QP_NUM;
    ibv_cq_ex* cqx = ibv_create_cq_ex(p.me.ctx, &ca);
    ASSERT_NE(cqx, nullptr);
    ibv_poll_cq_attr pa{};
    EXPECT_EQ(ibv_start_poll(cqx, &pa), ENOENT);
    EXPECT_NE(cqx->read_completion_ts, nullptr);
    EXPECT_EQ(cqx->read_src_qp, nullptr);  // not requested
    ASSERT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
}

// Loss on a link that is down (run with a fault configuration: SOFTFABRIC_TEST_LINK_DOWN=1).
TEST(Faults, DownLinkExhaustsRetries) {
    if (!std::getenv("SOFTFABRIC_TEST_LINK_DOWN")) GTEST_SKIP() << "needs the fabric configuration 'down ...'";
    ConnectOptions mine;
    mine.timeout = 10;  // 4.2 ms
    mine.retry_cnt = 2;
    RcPair p(mine);
    double t0 = now_s();
    ASSERT_EQ(p.me.write(10, 0, 64, p.peer.wire().addr, p.peer.wire().rkey), 0);
    ASSERT_EQ(p.me.write(11, 0, 64, p.peer.wire().addr, p.peer.wire().rkey), 0);
    ibv_wc wc{};
    ASSERT_TRUE(p.me.poll(wc, 10));
    double elapsed = now_s() - t0;
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(wc.status);
    EXPECT_GE(elapsed, 2 * 0.0042 * 0.95);  // three attempts, two timeouts apart
    ASSERT_TRUE(p.me.poll(wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(p.me.state(), IBV_QPS_ERR);
}

// A lossy link (run with 'loss node0/0 -> node0/1 probability 0.2': SOFTFABRIC_TEST_LOSSY=1): lost attempts are
// retransmitted after the timeout, every write arrives, in order, and the fabric counts the losses.
TEST(Faults, LossyLinkRetransmitsUntilDelivered) {
    if (!std::getenv("SOFTFABRIC_TEST_LOSSY")) GTEST_SKIP() << "needs the fabric configuration 'loss ...'";
    ConnectOptions mine;
    mine.timeout = 8;  // 1 ms
    mine.retry_cnt = 7;
    RcPair p(mine);
    const char* name = std::getenv("SOFTFABRIC_NAME");
    uint64_t lost_before = softfabric::read_stats(name ? name : "default").links.empty()
                               ? 0
                               : softfabric::read_stats(name ? name : "default").links[0].lost;
    auto* v = reinterpret_cast<uint64_t*>(p.me.buf);
    double t0 = now_s();
    for (uint64_t i = 0; i < 200; ++i) {
        v[i] = i * 3 + 1;
        ASSERT_EQ(p.me.write(i, i * 8, 8, p.peer.wire().addr + i * 8, p.peer.wire().rkey), 0);
    }
    for (uint64_t i = 0; i < 200; ++i) {
        ibv_wc wc{};
        ASSERT_TRUE(p.me.poll(wc, 10));
        EXPECT_EQ(wc.wr_id, i);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    }
    double elapsed = now_s() - t0;
    auto remote = p.peer.read(0, 200 * 8);
    EXPECT_EQ(std::memcmp(remote.data(), p.me.buf, 200 * 8), 0);
    uint64_t lost = 0;
    for (const auto& l : softfabric::read_stats(name ? name : "default").links)
        if (l.from.rail == 0 && l.to.rail == 1) lost = l.lost;
    // About 20% of 200 first attempts are lost (binomial: 40 +- 6); a lost attempt is retransmitted one 1 ms
    // timeout after it was sent (the writes' timers run concurrently), so the batch takes at least that long.
    EXPECT_GT(lost - lost_before, 15u);
    EXPECT_LT(lost - lost_before, 80u);
    EXPECT_GE(elapsed, 0.001);
}

}  // namespace
}  // namespace sftest
