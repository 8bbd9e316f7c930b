// When tracing starts: at the first set-up hook, through the loader libsigmatrace.so installs (here a fake one),
// once per process, with process_info after the load; what `sigmatrace record` is told.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "interpose/runtime/activation.h"
#include "support/shim_fixture.h"

namespace sigmatrace::testing {
namespace {

std::atomic<int> g_loads{0};
std::atomic<int> g_events_seen_during_load{-1};
EventCapture* g_capture = nullptr;

interpose::ProviderLoad slow_successful_loader() {
    g_loads.fetch_add(1);
    g_events_seen_during_load.store(static_cast<int>(g_capture->total()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // as a registration with a daemon would
    return {true, {}};
}

interpose::ProviderLoad failing_loader() {
    g_loads.fetch_add(1);
    return {false, "dlopen(/x/libsigmatrace-lttng.so): no such file"};
}

class ActivationTest : public ShimTest {
protected:
    void SetUp() override {
        ShimTest::SetUp();
        interpose::reset_activation_for_testing();
        g_loads = 0;
        g_events_seen_during_load = -1;
        g_capture = capture_.get();
    }
    void TearDown() override {
        interpose::reset_activation_for_testing();
        g_capture = nullptr;
        ShimTest::TearDown();
    }
};

TEST_F(ActivationTest, NothingLoadsBeforeTheFirstRdmaUse) {
    interpose::set_provider_loader(&slow_successful_loader);
    EXPECT_FALSE(interpose::tracing_activated());
    EXPECT_EQ(g_loads.load(), 0);
    EXPECT_TRUE(events().process_info.empty()) << "no identity before RDMA use";
}

TEST_F(ActivationTest, FirstSetUpHookLoadsOnceThenIdentifies) {
    interpose::set_provider_loader(&slow_successful_loader);
    FakeDevice dev("fake_0");
    open(dev);
    EXPECT_TRUE(interpose::tracing_activated());
    EXPECT_EQ(g_loads.load(), 1);
    EXPECT_EQ(g_events_seen_during_load.load(), 0) << "nothing is emitted before the provider is loaded";
    const CapturedEvents ev = events();
    ASSERT_EQ(ev.process_info.size(), 1u);
    ASSERT_GE(ev.order.size(), 2u);
    EXPECT_EQ(ev.order[0], EventId::process_info) << "identity first, then the device";
    EXPECT_EQ(ev.device_open.size(), 1u);
    FakeCq* cq = dev.make_cq(16);
    create_qp(dev, cq, cq);
    interpose::activate_tracing();
    EXPECT_EQ(g_loads.load(), 1) << "loaded once per process";
    EXPECT_EQ(events().process_info.size(), 1u);
}

TEST_F(ActivationTest, ConcurrentFirstUsesWaitForTheOneLoad) {
    interpose::set_provider_loader(&slow_successful_loader);
    std::vector<std::thread> threads;
    std::atomic<int> done_before_load{0};
    for (int i = 0; i < 4; ++i)
        threads.emplace_back([&] {
            interpose::activate_tracing();
            // Whoever returns must find the provider loaded (the loader ran to completion).
            if (g_loads.load() != 1 || !interpose::tracing_activated()) done_before_load.fetch_add(1);
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(g_loads.load(), 1);
    EXPECT_EQ(done_before_load.load(), 0);
    EXPECT_EQ(events().process_info.size(), 1u);
}

TEST_F(ActivationTest, ModeOffLoadsNothing) {
    interpose::Config c;
    c.mode = interpose::Mode::off;
    interpose::set_config(c);
    interpose::set_provider_loader(&slow_successful_loader);
    interpose::activate_tracing();
    EXPECT_EQ(g_loads.load(), 0);
    EXPECT_TRUE(events().process_info.empty());
}

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// The report file `sigmatrace record` hands its processes, in a private directory removed afterwards.
struct RecordReport {
    RecordReport() {
        char templ[] = "/tmp/activation-test.XXXXXX";
        if (mkdtemp(templ) != nullptr) dir = templ;
        path = dir + "/processes";
        clear();
    }
    ~RecordReport() {
        std::remove(path.c_str());
        rmdir(dir.c_str());
    }
    void clear() const { std::ofstream(path, std::ios::trunc).close(); }
    std::string text() const { return slurp(path); }
    std::string dir, path;
};

TEST_F(ActivationTest, RecordIsToldWhetherTheProcessIsTraced) {
    const RecordReport r;
    ASSERT_FALSE(r.dir.empty());
    interpose::Config c;
    c.record_report = r.path;
    interpose::set_config(c);

    // Loaded, and the (callback) session has the events enabled: traced.
    interpose::set_provider_loader(&slow_successful_loader);
    interpose::activate_tracing();
    const std::string me = "pid=" + std::to_string(getpid()) + " comm=";
    EXPECT_EQ(r.text().rfind("traced " + me, 0), 0u) << r.text();

    // The provider cannot be loaded: not traced, and why.
    interpose::reset_activation_for_testing();
    r.clear();
    interpose::set_provider_loader(&failing_loader);
    ::testing::internal::CaptureStderr();
    interpose::activate_tracing();
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("cannot load the LTTng provider: dlopen(/x/libsigmatrace-lttng.so): no such file"),
              std::string::npos) << err;
    EXPECT_NE(err.find("is NOT traced"), std::string::npos) << err;
    const std::string text = r.text();
    EXPECT_EQ(text.rfind("not-traced " + me, 0), 0u) << text;
    EXPECT_NE(text.find("reason=provider: dlopen(/x/libsigmatrace-lttng.so): no such file\n"), std::string::npos) << text;

    // Loaded, but no session enabled the events (registration did not complete): not traced.
    interpose::reset_activation_for_testing();
    r.clear();
    capture_.reset();  // the callback backend: no callback = events disabled
    g_capture = nullptr;
    interpose::set_provider_loader([]() -> interpose::ProviderLoad { return {true, {}}; });
    interpose::activate_tracing();
    EXPECT_NE(r.text().find("reason=no recording session reached this process"), std::string::npos)
        << r.text();
}

// lttng-ust's constructor gives up waiting for the session daemon after LTTNG_UST_REGISTER_TIMEOUT; the session
// may then be only partly set up in the process even though its events are enabled (activation.cpp). A load
// that lasted the whole timeout is reported as such: to record, and on stderr.
TEST_F(ActivationTest, ALoadThatOutlastsTheRegistrationTimeoutIsReportedAsPartial) {
    const RecordReport r;
    ASSERT_FALSE(r.dir.empty());
    interpose::Config c;
    c.record_report = r.path;
    c.register_timeout_ms = 20;  // the loader below takes 50 ms: lttng-ust would have stopped waiting
    interpose::set_config(c);
    interpose::set_provider_loader(&slow_successful_loader);
    ::testing::internal::CaptureStderr();
    interpose::activate_tracing();
    const std::string err = ::testing::internal::GetCapturedStderr();
    const std::string text = r.text();
    const std::string me = "pid=" + std::to_string(getpid()) + " comm=";
    EXPECT_EQ(text.rfind("partial " + me, 0), 0u) << text;
    EXPECT_NE(text.find(" reason=registration with the session daemon not complete after 0."), std::string::npos)
        << text;
    EXPECT_NE(text.find("(LTTNG_UST_REGISTER_TIMEOUT=20 ms); events of this process may be missing from the trace\n"),
              std::string::npos) << text;
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << "one line per process";
    EXPECT_NE(err.find("events of this process may be missing from the trace (pid " + std::to_string(getpid())),
              std::string::npos) << err;
    EXPECT_EQ(events().process_info.size(), 1u) << "the process is still traced, as far as the session lets it";

    // The same load within the timeout, or with lttng-ust told to wait forever (-1) or not at all (0): traced.
    for (const long timeout_ms : {3000L, -1L, 0L}) {
        interpose::reset_activation_for_testing();
        r.clear();
        c.register_timeout_ms = timeout_ms;
        interpose::set_config(c);
        interpose::set_provider_loader(&slow_successful_loader);
        interpose::activate_tracing();
        EXPECT_EQ(r.text().rfind("traced " + me, 0), 0u) << "timeout " << timeout_ms << ": " << r.text();
    }
}

}  // namespace
}  // namespace sigmatrace::testing
