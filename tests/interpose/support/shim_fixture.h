// A GoogleTest fixture for the shim's unit tests: default configuration, fake libibverbs queries, every event
// captured; per-object state is forgotten after each test (its fake objects are gone).
//
// The emission mode comes from SIGMATRACE_TEST_DEFER: unset or 0, every event is emitted inside its call
// (immediate); 1, data-path events are captured into the thread's ring (deferred emission) and events()
// drains the rings first. ctest runs the unit tests once in each mode (tests/interpose/CMakeLists.txt), so
// every field-by-field check holds for both paths.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "interpose/capture/capture_clock.h"
#include "interpose/runtime/config.h"
#include "interpose/capture/deferred_capture.h"
#include "interpose/capture/deferred_rings.h"
#include "interpose/state/lifecycle.h"
#include "interpose/state/process_identity.h"
#include "support/captured_events.h"
#include "support/fake_provider.h"

namespace sigmatrace::testing {

inline bool test_defer_mode() {
    const char* v = std::getenv("SIGMATRACE_TEST_DEFER");
    return v != nullptr && std::strcmp(v, "1") == 0;
}

// The default configuration, in this run's emission mode.
inline interpose::Config test_config() {
    interpose::Config c;
    c.defer = test_defer_mode();
    return c;
}

// Deferred mode: every thread's captured records become events now (a no-op when immediate).
inline void drain_deferred() {
    interpose::deferred::drain_all(interpose::deferred::Wait::yes);
}

class ShimTest : public ::testing::Test {
protected:
    void SetUp() override {
        interpose::capture_clock::calibrate();  // as libsigmatrace.so's constructor: capture times are TSC ticks
        interpose::set_config(test_config());
        interpose::set_verbs_queries(fake_verbs_queries());
        interpose::reset_process_info_after_fork();  // each test sees the process identify itself
        capture_ = std::make_unique<EventCapture>();
    }
    void TearDown() override {
        drain_deferred();  // nothing of this test's left for the next one
        capture_.reset();
        interpose::reset_lifecycle_for_testing();
        interpose::set_verbs_queries(nullptr);
        interpose::set_config(test_config());
    }

    // Opens `dev` as ibv_open_device would have (wraps it, emits device_open).
    ibv_context* open(FakeDevice& dev) {
        interpose::on_context_opened(dev.ctx(), interpose::OpenVia::open_device);
        return dev.ctx();
    }
    // A QP created through the exported ibv_create_qp path.
    FakeQp* create_qp(FakeDevice& dev, FakeCq* scq, FakeCq* rcq, ibv_qp_type type = IBV_QPT_RC, bool sig_all = false) {
        FakeQp* q = dev.make_qp(scq, rcq, type, sig_all);
        ibv_qp_init_attr attr{};
        attr.send_cq = scq->cq();
        attr.recv_cq = rcq->cq();
        attr.qp_type = type;
        attr.sq_sig_all = sig_all;
        attr.cap.max_send_wr = 64;
        attr.cap.max_recv_wr = 64;
        interpose::on_qp_created(dev.ctx(), q->qp(), &attr, interpose::CreateKind::verbs, 0);
        return q;
    }
    // An RC QP made by the application's inline ibv_create_qp_ex with `ops` (IBV_QP_EX_WITH_*), i.e. through our
    // create_qp_ex wrapper; its ibv_qp_ex, whose wr_* pointers are then ours.
    ibv_qp_ex* create_ex_qp(FakeDevice& dev, FakeCq* cq, uint64_t ops, uint32_t depth = 64) {
        ibv_qp_init_attr_ex attr{};
        attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        attr.pd = dev.pd();
        attr.send_cq = cq->cq();
        attr.recv_cq = cq->cq();
        attr.qp_type = IBV_QPT_RC;
        attr.cap.max_send_wr = depth;
        attr.send_ops_flags = ops;
        ibv_qp* qp = ibv_create_qp_ex(dev.ctx(), &attr);
        EXPECT_NE(qp, nullptr);
        return qp != nullptr ? &fake_qp(qp)->qpx : nullptr;
    }
    // Posts one 128-byte receive (wr_id) on `q` through the inline ibv_post_recv.
    static int post_one_recv(FakeQp* q, uint64_t wr_id) {
        ibv_sge sge{0x2000, 128, 0x11};
        ibv_recv_wr wr{};
        wr.wr_id = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        return ibv_post_recv(q->qp(), &wr, &bad);
    }
    CapturedEvents events() const {
        drain_deferred();
        return capture_->snapshot();
    }
    void clear_events() {
        drain_deferred();
        capture_->clear();
    }

    std::unique_ptr<EventCapture> capture_;
};

}  // namespace sigmatrace::testing
