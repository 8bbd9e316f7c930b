// A small verbs toolkit for the fabric's semantic tests: an Endpoint (device, PD, buffer + MR, CQ, QP) in this
// process, and a Peer: a forked child process that owns another Endpoint and obeys commands over a socket
// (post receives, poll its CQ, report its QP state, read its memory, send). Tests run under
// `sigmatrace fabric --node 0 --rails 2`: the test process uses sfab_0, peers use sfab_1, so every operation
// crosses processes and NICs through the real provider.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/verbs/rc_setup.h"

namespace sftest {

inline constexpr int kFullAccess = sigmatrace::verbs::kFullAccess;

struct ConnectOptions {
    uint8_t timeout = 14;
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;
    uint8_t min_rnr_timer = 12;
    int qp_access = kFullAccess;
};

// What one side tells the other to connect (and to address its memory).
struct Wire {
    uint16_t lid = 0;
    uint32_t qpn = 0;
    uint64_t addr = 0;
    uint32_t rkey = 0;
    uint32_t size = 0;
    ibv_gid gid{};
};

struct EndpointOptions {
    std::string device = "sfab_0";
    ibv_qp_type type = IBV_QPT_RC;
    size_t buffer = 1 << 20;
    int mr_access = kFullAccess;
    bool channel = false;
    bool srq = false;
    uint32_t depth = 256;
    bool completion_timestamps = false;  // an extended CQ whose completions carry the CQE timestamp
};

class Endpoint {
public:
    explicit Endpoint(const EndpointOptions& o);  // aborts the test process with a message on failure
    ~Endpoint();
    Endpoint(const Endpoint&) = delete;
    Endpoint& operator=(const Endpoint&) = delete;

    Wire wire() const;
    // RESET -> INIT -> RTR -> RTS (RC/UC: towards `remote`; UD: qkey 0x11111111). Returns the failing errno.
    int connect(const Wire& remote, const ConnectOptions& o = {});
    ibv_qp_state state();
    int post_recv(uint64_t wr_id, uint64_t offset, uint32_t length);
    // Polls one completion, spinning up to `timeout_s`; false on timeout.
    bool poll(ibv_wc& wc, double timeout_s = 5.0);
    // The same, with the completion's CQE timestamp (ns, CLOCK_MONOTONIC on the fabric); needs
    // EndpointOptions::completion_timestamps. Only wr_id, status and opcode of `wc` are filled.
    bool poll(ibv_wc& wc, uint64_t* completion_ts, double timeout_s = 5.0);
    int post(ibv_send_wr& wr);
    // Convenience work requests on the local buffer.
    int write(uint64_t wr_id, uint64_t offset, uint32_t length, uint64_t raddr, uint32_t rkey, bool signaled = true);
    int read(uint64_t wr_id, uint64_t offset, uint32_t length, uint64_t raddr, uint32_t rkey);
    int send(uint64_t wr_id, uint64_t offset, uint32_t length, bool signaled = true, uint32_t imm = 0,
             bool with_imm = false);
    ibv_ah* make_ah(const Wire& remote, bool global);

    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_comp_channel* channel = nullptr;
    ibv_cq* cq = nullptr;
    ibv_cq_ex* cq_ex = nullptr;  // with completion_timestamps: the extended CQ `cq` belongs to
    ibv_srq* srq = nullptr;
    ibv_qp* qp = nullptr;
    ibv_mr* mr = nullptr;
    unsigned char* buf = nullptr;
    size_t size = 0;
    ibv_port_attr port{};
    ibv_gid gid{};
    ibv_qp_type type;
};

struct WcRecord {
    uint64_t wr_id;
    uint32_t status;
    uint32_t opcode;
    uint32_t byte_len;
    uint32_t imm;
    uint32_t src_qp;
    uint32_t wc_flags;
    uint32_t slid;
    uint32_t pad;
};

class Peer {
public:
    // Forks a child that opens `o` and waits for commands.
    explicit Peer(const EndpointOptions& o);
    ~Peer();  // tells the child to exit and reaps it
    Peer(const Peer&) = delete;
    Peer& operator=(const Peer&) = delete;

    const Wire& wire() const { return wire_; }
    int connect(const Wire& remote, const ConnectOptions& o = {});
    int post_recv(uint32_t count, uint32_t length);
    std::vector<WcRecord> poll(uint32_t count, double timeout_s);
    ibv_qp_state qp_state();
    std::vector<unsigned char> read(uint64_t offset, uint32_t length);
    void fill(uint64_t offset, uint32_t length, unsigned char byte);
    int send(uint32_t length, bool ud_global = false);  // SEND of `length` bytes from its buffer
    void kill();  // SIGKILL, and reap: the peer dies without cleaning anything up
    int pid() const { return pid_; }

private:
    struct Reply;
    Reply call(uint32_t op, uint64_t a = 0, uint64_t b = 0, const void* extra = nullptr, uint32_t extra_len = 0);
    int pid_ = -1;
    int sock_ = -1;
    Wire wire_;
};

double now_s();

}  // namespace sftest
