// A hand-made verbs provider for unit tests of the shim: real libibverbs structures (verbs_context with
// ibv_context, ibv_qp_ex, ibv_cq_ex) whose function pointers are fakes, so that the inline ibv_post_send,
// ibv_poll_cq, ibv_create_qp_ex, ibv_wr_*, ibv_start_poll ... of <infiniband/verbs.h> run exactly as in an
// application and reach the shim's wrappers, then these fakes.
//
// The fakes behave like a loopback device: a signaled send WR produces a send completion on the QP's send CQ;
// tests add receive completions themselves. Everything is guarded by one mutex per CQ/QP so the multi-thread
// tests can run them under ThreadSanitizer.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "interpose/state/lifecycle.h"

namespace sigmatrace::testing {

struct FakeCompletion {
    uint64_t wr_id = 0;
    ibv_wc_status status = IBV_WC_SUCCESS;
    ibv_wc_opcode opcode = IBV_WC_SEND;
    uint32_t byte_len = 0;
    uint32_t qp_num = 0;
    uint32_t src_qp = 0;
    uint32_t wc_flags = 0;
    uint32_t imm = 0;
    uint32_t vendor_err = 0;
};

struct FakeCq {
    ibv_cq_ex cqx{};  // first member: ibv_cq* and ibv_cq_ex* of this CQ are the same address
    std::mutex mutex;
    std::deque<FakeCompletion> queue;
    FakeCompletion current;  // the completion an extended poll pass stands on
    std::atomic<int> optional_reads{0};  // calls of read_* accessors the CQ was not created with

    ibv_cq* cq() { return reinterpret_cast<ibv_cq*>(&cqx); }
    void push(const FakeCompletion& c);
};

struct FakeWr {
    uint64_t wr_id;
    unsigned flags;
    int opcode;
    uint32_t length;
};

struct FakeQp {
    ibv_qp_ex qpx{};  // first member: qp_base is the ibv_qp
    FakeCq* send_cq = nullptr;
    FakeCq* recv_cq = nullptr;
    bool sq_sig_all = false;
    std::mutex mutex;
    std::vector<uint64_t> posted_send_ids;  // what the "hardware" accepted
    std::vector<uint64_t> posted_recv_ids;
    std::vector<FakeWr> building;           // ibv_wr_* list in progress
    int fail_post_at = -1;                  // next post_send/post_recv fails at this chain index
    bool fail_complete = false;             // next wr_complete fails
    std::function<void()> during_complete;  // run inside wr_complete, between the doorbell and its return

    ibv_qp* qp() { return &qpx.qp_base; }
};

// errno the fakes leave behind on success and on failure: the shim must hand them to the caller unchanged.
inline constexpr int kFakeSuccessErrno = 4242;
inline constexpr int kFakeFailureErrno = EINVAL;

class FakeDevice {
public:
    // `variant` selects one of two sets of provider functions (distinct addresses), to test provider slots.
    explicit FakeDevice(const char* name = "fake0", int variant = 0);
    ~FakeDevice();
    FakeDevice(const FakeDevice&) = delete;
    FakeDevice& operator=(const FakeDevice&) = delete;

    ibv_context* ctx() { return &vctx_.context; }
    verbs_context* vctx() { return &vctx_; }
    ibv_pd* pd() { return &pd_; }

    // Objects made directly by the "provider" (as ibv_create_qp/ibv_create_cq would return them).
    FakeCq* make_cq(int cqe);
    FakeQp* make_qp(FakeCq* send_cq, FakeCq* recv_cq, ibv_qp_type type = IBV_QPT_RC, bool sq_sig_all = false);

    static FakeDevice* of(ibv_context* ctx);

private:
    friend struct FakeFunctions;
    verbs_context vctx_{};
    ibv_device device_{};
    ibv_pd pd_{};
    std::mutex mutex_;
    std::vector<std::unique_ptr<FakeQp>> qps_;
    std::vector<std::unique_ptr<FakeCq>> cqs_;
    uint32_t next_qpn_ = 0x100;
};

FakeQp* fake_qp(ibv_qp* qp);
FakeCq* fake_cq(ibv_cq* cq);

// Simulates the provider replacing a wr_* pointer during ibv_modify_qp (mlx5 sets wr_complete on RTS).
void fake_provider_rewrites_wr_complete(ibv_qp_ex* qpx);
// Whether qpx->wr_complete currently leads to the "RTS" variant installed above.
int fake_rts_complete_calls();

// Destroy functions to hand to interpose::destroy_qp / destroy_cq (the memory stays with the FakeDevice).
int fake_destroy_qp(ibv_qp* qp);
int fake_destroy_cq(ibv_cq* cq);

// VerbsQueries answering for FakeDevice contexts: vendor 0x15b3 part 4119, 1 port, LID 7, ACTIVE, GIDs at
// index 0 and 2 (index 1 empty).
const interpose::VerbsQueries* fake_verbs_queries();
inline constexpr uint64_t kFakeNodeGuid = 0x0002c90300a1b2c3ull;
inline constexpr uint64_t kFakeGid0Prefix = 0xfe80000000000000ull;
inline constexpr uint64_t kFakeGid0Iid = 0x0002c90300a1b2c3ull;
inline constexpr uint64_t kFakeGid2Iid = 0x00000000ffff0a00ull;

}  // namespace sigmatrace::testing
