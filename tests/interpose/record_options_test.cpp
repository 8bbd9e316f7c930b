// `sigmatrace record`: its command line and the environment it gives the recorded command.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "record/process_report.h"
#include "record/record_options.h"
#include "record/traced_environment.h"

namespace sigmatrace::testing {
namespace {

using namespace sigmatrace::record;

std::string parse(std::vector<std::string_view> args, RecordOptions* o) {
    return parse_record_args(args, o);
}

std::string value(const Environment& env, const std::string& name) {
    const std::string* e = find_variable(env, name);
    return e == nullptr ? "<unset>" : e->substr(name.size() + 1);
}

TEST(RecordOptions, CommandAfterOptionsOrDoubleDash) {
    RecordOptions o;
    ASSERT_EQ(parse({"-o", "out", "--channel-size", "128M", "--mode", "counters", "--blocking", "--", "mpirun", "-np",
                     "2", "./a"},
                    &o),
              "");
    EXPECT_EQ(o.output, "out");
    EXPECT_EQ(o.channel_size, 128ull << 20);
    EXPECT_EQ(o.mode, "counters");
    EXPECT_TRUE(o.blocking);
    EXPECT_EQ(o.command, (std::vector<std::string>{"mpirun", "-np", "2", "./a"}));
    RecordOptions p;
    ASSERT_EQ(parse({"ib_write_bw", "-d", "x"}, &p), "") << "the command may start without --";
    EXPECT_EQ(p.command, (std::vector<std::string>{"ib_write_bw", "-d", "x"}));
    EXPECT_EQ(p.channel_size, kDefaultChannelSize);
    EXPECT_EQ(p.mode, "");
}

TEST(RecordOptions, ErrorsNameTheProblem) {
    RecordOptions o;
    EXPECT_NE(parse({}, &o).find("no command"), std::string::npos);
    EXPECT_NE(parse({"-o"}, &o).find("-o needs a value"), std::string::npos);
    EXPECT_NE(parse({"--channel-size", "12Q", "x"}, &o).find("--channel-size 12Q"), std::string::npos);
    EXPECT_NE(parse({"--channel-size", "1K", "x"}, &o).find("at least 32K"), std::string::npos);
    EXPECT_NE(parse({"--mode", "fast", "x"}, &o).find("expected ops or counters"), std::string::npos);
    EXPECT_NE(parse({"--bogus", "x"}, &o).find("unknown option --bogus"), std::string::npos);
    EXPECT_NE(parse({"-o", "d", "--relay", "net://h", "x"}, &o).find("exclusive"), std::string::npos);
    EXPECT_EQ(parse({"--help"}, &o), "");
    EXPECT_TRUE(o.help);
}

TEST(RecordOptions, SizesAndSubBuffers) {
    EXPECT_EQ(parse_size("64M"), 64ull << 20);
    EXPECT_EQ(parse_size("512k"), 512ull << 10);
    EXPECT_EQ(parse_size("1G"), 1ull << 30);
    EXPECT_EQ(parse_size("4096"), 4096u);
    EXPECT_FALSE(parse_size(""));
    EXPECT_FALSE(parse_size("M"));
    EXPECT_FALSE(parse_size("0"));
    EXPECT_FALSE(parse_size("-5M"));
    EXPECT_EQ(subbuffer_size(64ull << 20), 8ull << 20);
    EXPECT_EQ(subbuffer_size(100ull << 20), 16ull << 20) << "rounded up to a power of two";
    EXPECT_EQ(subbuffer_size(1024), 4096u) << "never below lttng's minimum";
}

TEST(TracedEnvironment, PreloadsTheTracerAfterAnExistingPreload) {
    TraceSetup s;
    s.preload_library = "/p/lib/libsigmatrace.so";
    s.sanitizer_runtime = "";
    Environment env = traced_environment({"PATH=/bin"}, s);
    EXPECT_EQ(value(env, "LD_PRELOAD"), "/p/lib/libsigmatrace.so");
    EXPECT_EQ(value(env, "LTTNG_UST_REGISTER_TIMEOUT"), kRegisterTimeoutMs);
    EXPECT_EQ(value(env, "LTTNG_UST_WITHOUT_BADDR_STATEDUMP"), "1");
    EXPECT_EQ(value(env, "LTTNG_UST_ALLOW_BLOCKING"), "<unset>");
    EXPECT_EQ(value(env, "SIGMATRACE_MODE"), "<unset>");
    EXPECT_EQ(value(env, "PATH"), "/bin");

    env = traced_environment({"LD_PRELOAD=/usr/lib/libasan.so.8", "LTTNG_UST_REGISTER_TIMEOUT=-1"}, s);
    EXPECT_EQ(value(env, "LD_PRELOAD"), "/usr/lib/libasan.so.8:/p/lib/libsigmatrace.so") << "the sanitizer runtime stays first";
    EXPECT_EQ(value(env, "LTTNG_UST_REGISTER_TIMEOUT"), "-1") << "the caller's choice is kept";
    env = traced_environment(env, s);
    EXPECT_EQ(value(env, "LD_PRELOAD"), "/usr/lib/libasan.so.8:/p/lib/libsigmatrace.so") << "never twice";
}

TEST(TracedEnvironment, SanitizerBuildsPreloadTheirRuntimeFirst) {
    TraceSetup s;
    s.preload_library = "/p/lib/libsigmatrace.so";
    s.sanitizer_runtime = "/gcc/libasan.so";
    Environment env = traced_environment({"LD_PRELOAD=/x/libfoo.so"}, s);
    EXPECT_EQ(value(env, "LD_PRELOAD"), "/gcc/libasan.so:/x/libfoo.so:/p/lib/libsigmatrace.so");
    EXPECT_EQ(value(env, "ASAN_OPTIONS"), "detect_leaks=0");
    env = traced_environment({"LD_PRELOAD=/gcc/libasan.so", "ASAN_OPTIONS=detect_leaks=1"}, s);
    EXPECT_EQ(value(env, "LD_PRELOAD"), "/gcc/libasan.so:/p/lib/libsigmatrace.so") << "not added twice";
    EXPECT_EQ(value(env, "ASAN_OPTIONS"), "detect_leaks=1") << "the caller's choice is kept";
}

TEST(TracedEnvironment, ModeBlockingAndOpenMpiForwarding) {
    TraceSetup s;
    s.preload_library = "/p/lib/libsigmatrace.so";
    s.sanitizer_runtime = "";
    s.mode = "counters";
    s.blocking = true;
    const Environment env =
        traced_environment({"SIGMATRACE_REDACT=keys", "OMPI_MCA_mca_base_env_list=FOO;BAR=1"}, s);
    EXPECT_EQ(value(env, "SIGMATRACE_MODE"), "counters");
    EXPECT_EQ(value(env, "LTTNG_UST_ALLOW_BLOCKING"), "1");
    const std::string list = value(env, "OMPI_MCA_mca_base_env_list");
    EXPECT_EQ(list.rfind("FOO;BAR=1;", 0), 0u) << list;
    for (const char* v : {"LD_PRELOAD", "LTTNG_UST_REGISTER_TIMEOUT", "LTTNG_UST_ALLOW_BLOCKING", "SIGMATRACE_MODE",
                          "SIGMATRACE_REDACT"})
        EXPECT_NE(list.find(v), std::string::npos) << v << " not forwarded: " << list;
    EXPECT_EQ(list.find("LTTNG_HOME"), std::string::npos) << "a private LTTNG_HOME exists on this node only";
    EXPECT_EQ(value(env, "SIGMATRACE_RECORD_REPORT"), "<unset>");
}

TEST(TracedEnvironment, TheReportFileIsThisRecordingsOwn) {
    TraceSetup s;
    s.preload_library = "/p/lib/libsigmatrace.so";
    s.sanitizer_runtime = "";
    s.report_file = "/tmp/sigmatrace-record.abc/processes";
    const Environment env = traced_environment({"SIGMATRACE_RECORD_REPORT=/tmp/outer/processes"}, s);
    EXPECT_EQ(value(env, "SIGMATRACE_RECORD_REPORT"), "/tmp/sigmatrace-record.abc/processes");
    EXPECT_NE(value(env, "OMPI_MCA_mca_base_env_list").find("SIGMATRACE_RECORD_REPORT"), std::string::npos);
}

TEST(ProcessReport, CountsTracedAndListsTheOthers) {
    const ProcessReport r = parse_process_report(
        "traced pid=10 comm=ib_write_bw\n"
        "not-traced pid=11 comm=ib_write_bw reason=provider: dlopen(/x.so): gone\n"
        "traced pid=12 comm=ib_write_bw\n"
        "some future line\n"
        "partial pid=14 comm=rank reason=registration with the session daemon not complete after 30.0 s\n"
        "not-traced pid=13 comm=a.out reason=no recording session reached this process");
    EXPECT_EQ(r.traced, 2) << "a partly traced process is not counted as traced";
    ASSERT_EQ(r.partial.size(), 1u);
    EXPECT_EQ(r.partial[0], "pid=14 comm=rank reason=registration with the session daemon not complete after 30.0 s");
    ASSERT_EQ(r.not_traced.size(), 2u);
    EXPECT_EQ(r.not_traced[0], "pid=11 comm=ib_write_bw reason=provider: dlopen(/x.so): gone");
    EXPECT_EQ(r.not_traced[1], "pid=13 comm=a.out reason=no recording session reached this process");
    EXPECT_EQ(parse_process_report("").traced, 0);
}

TEST(ProcessReport, TheFileIsCreatedEmptyWritableAndRemoved) {
    std::string dir;
    {
        const ReportFile f;
        ASSERT_TRUE(f.error().empty()) << f.error();
        ASSERT_FALSE(f.path().empty());
        dir = f.path().substr(0, f.path().rfind('/'));
        EXPECT_EQ(f.read().traced, 0);
        {
            std::ofstream out(f.path(), std::ios::app);
            out << "traced pid=1 comm=x\n";
        }
        EXPECT_EQ(f.read().traced, 1);
    }
    EXPECT_FALSE(std::filesystem::exists(dir)) << "removed with the recording";
}

}  // namespace
}  // namespace sigmatrace::testing
