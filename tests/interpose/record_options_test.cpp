// `sigmatrace record`: its command line and the environment it gives the recorded command.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "record/lttng_control.h"
#include "record/process_report.h"
#include "record/rank_forwarding.h"
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

TEST(TracedEnvironment, ModeBlockingAndTheVariablesRanksNeed) {
    TraceSetup s;
    s.preload_library = "/p/lib/libsigmatrace.so";
    s.sanitizer_runtime = "";
    s.mode = "counters";
    s.blocking = true;
    const Environment env =
        traced_environment({"SIGMATRACE_REDACT=keys", "LTTNG_HOME=/tmp/private", "OMPI_MCA_mca_base_env_list=FOO"}, s);
    EXPECT_EQ(value(env, "SIGMATRACE_MODE"), "counters");
    EXPECT_EQ(value(env, "LTTNG_UST_ALLOW_BLOCKING"), "1");
    EXPECT_EQ(value(env, "OMPI_MCA_mca_base_env_list"), "FOO") << "left to rank_forwarding.h";
    EXPECT_EQ(value(env, "SIGMATRACE_RECORD_REPORT"), "<unset>");
    const std::vector<std::string> expected = {"LD_PRELOAD",
                                               "LTTNG_UST_REGISTER_TIMEOUT",
                                               "LTTNG_UST_WITHOUT_BADDR_STATEDUMP",
                                               "LTTNG_UST_WITHOUT_PROCNAME_STATEDUMP",
                                               "LTTNG_UST_ALLOW_BLOCKING",
                                               "SIGMATRACE_REDACT",
                                               "SIGMATRACE_MODE"};
    EXPECT_EQ(rank_variables(env), expected) << "never LTTNG_HOME: a private one exists on this node only";
}

TEST(TracedEnvironment, TheReportFileIsThisRecordingsOwn) {
    TraceSetup s;
    s.preload_library = "/p/lib/libsigmatrace.so";
    s.sanitizer_runtime = "";
    s.report_file = "/tmp/sigmatrace-record.abc/processes";
    const Environment env = traced_environment({"SIGMATRACE_RECORD_REPORT=/tmp/outer/processes"}, s);
    EXPECT_EQ(value(env, "SIGMATRACE_RECORD_REPORT"), "/tmp/sigmatrace-record.abc/processes");
    const std::vector<std::string> names = rank_variables(env);
    EXPECT_NE(std::find(names.begin(), names.end(), "SIGMATRACE_RECORD_REPORT"), names.end());
}

// Open MPI 4.1 refuses -x together with OMPI_MCA_mca_base_env_list (schizo_ompi.c, "orterun:conflict-env-set"):
// the names go where the user's own forwarding is, and only one way is ever used.
TEST(RankForwarding, OpenMpiGetsDashXUnlessAnEnvListIsInForce) {
    const std::vector<std::string> names = {"LD_PRELOAD", "SIGMATRACE_MODE"};
    const std::vector<std::string> cmd = {"mpirun", "-np", "2", "-x", "FOO=bar", "ib_write_bw", "-x", "3"};

    LaunchPlan p = forward_to_ranks(cmd, {"PATH=/bin"}, names, Launcher::open_mpi, "");
    EXPECT_EQ(p.command, (std::vector<std::string>{"mpirun", "-x", "LD_PRELOAD", "-x", "SIGMATRACE_MODE", "-np", "2",
                                                   "-x", "FOO=bar", "ib_write_bw", "-x", "3"}));
    EXPECT_EQ(value(p.env, "OMPI_MCA_mca_base_env_list"), "<unset>");

    p = forward_to_ranks({"mpirun", "-np", "2", "a.out"}, {"OMPI_MCA_mca_base_env_list=BAZ=qux;LD_PRELOAD"}, names,
                         Launcher::open_mpi, "");
    EXPECT_EQ(p.command, (std::vector<std::string>{"mpirun", "-np", "2", "a.out"})) << "no -x beside an env list";
    EXPECT_EQ(value(p.env, "OMPI_MCA_mca_base_env_list"), "BAZ=qux;LD_PRELOAD;SIGMATRACE_MODE") << "never twice";

    p = forward_to_ranks({"mpirun", "--mca", "mca_base_env_list", "BAZ", "-np", "2", "a.out"},
                         {"OMPI_MCA_mca_base_env_list=IGNORED"}, names, Launcher::open_mpi, "");
    EXPECT_EQ(p.command, (std::vector<std::string>{"mpirun", "--mca", "mca_base_env_list",
                                                   "BAZ;LD_PRELOAD;SIGMATRACE_MODE", "-np", "2", "a.out"}))
        << "the command line's value is the one in force";
    EXPECT_EQ(value(p.env, "OMPI_MCA_mca_base_env_list"), "IGNORED");

    p = forward_to_ranks({"mpirun", "a.out"}, {}, names, Launcher::open_mpi, "FROM_FILE=1");
    EXPECT_EQ(p.command, (std::vector<std::string>{"mpirun", "a.out"}));
    EXPECT_EQ(value(p.env, "OMPI_MCA_mca_base_env_list"), "FROM_FILE=1;LD_PRELOAD;SIGMATRACE_MODE");

    p = forward_to_ranks({"./job.sh"}, {}, names, Launcher::other, "");
    EXPECT_EQ(p.command, (std::vector<std::string>{"./job.sh"}));
    EXPECT_EQ(value(p.env, "OMPI_MCA_mca_base_env_list"), "LD_PRELOAD;SIGMATRACE_MODE");
}

TEST(RankForwarding, SrunExportListsGetTheNames) {
    const std::vector<std::string> names = {"LD_PRELOAD", "SIGMATRACE_MODE"};
    LaunchPlan p = forward_to_ranks({"srun", "-n", "2", "a.out"}, {}, names, Launcher::slurm, "");
    EXPECT_EQ(p.command, (std::vector<std::string>{"srun", "-n", "2", "a.out"})) << "srun exports everything by default";
    p = forward_to_ranks({"srun", "--export=PATH,LD_PRELOAD", "a.out"}, {}, names, Launcher::slurm, "");
    EXPECT_EQ(p.command, (std::vector<std::string>{"srun", "--export=PATH,LD_PRELOAD,SIGMATRACE_MODE", "a.out"}));
    p = forward_to_ranks({"srun", "--export", "NONE", "a.out"}, {}, names, Launcher::slurm, "");
    EXPECT_EQ(p.command, (std::vector<std::string>{"srun", "--export", "LD_PRELOAD,SIGMATRACE_MODE", "a.out"}));
    p = forward_to_ranks({"srun", "--export=ALL,FOO=1", "a.out"}, {}, names, Launcher::slurm, "");
    EXPECT_EQ(p.command[1], "--export=ALL,FOO=1");
    p = forward_to_ranks({"srun", "a.out"}, {"SLURM_EXPORT_ENV=NONE"}, names, Launcher::slurm, "");
    EXPECT_EQ(value(p.env, "SLURM_EXPORT_ENV"), "LD_PRELOAD,SIGMATRACE_MODE");
    p = forward_to_ranks({"srun", "--export=FOO", "a.out"}, {"SLURM_EXPORT_ENV=NONE"}, names, Launcher::slurm, "");
    EXPECT_EQ(p.command[1], "--export=FOO,LD_PRELOAD,SIGMATRACE_MODE") << "the command line overrides the variable";
    EXPECT_EQ(value(p.env, "SLURM_EXPORT_ENV"), "NONE");
}

TEST(RankForwarding, LaunchersAreKnownByWhatTheyResolveTo) {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("rank-fwd-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir / "bin");
    std::filesystem::create_directories(dir / "etc");
    { std::ofstream(dir / "bin" / "orterun") << "#!/bin/sh\n"; }
    std::filesystem::permissions(dir / "bin" / "orterun", std::filesystem::perms::owner_all);
    std::filesystem::create_symlink("orterun", dir / "bin" / "mpirun");
    { std::ofstream(dir / "bin" / "mpiexec.hydra") << "#!/bin/sh\n"; }
    std::filesystem::permissions(dir / "bin" / "mpiexec.hydra", std::filesystem::perms::owner_all);
    std::filesystem::create_symlink("mpiexec.hydra", dir / "bin" / "mpiexec");
    const Environment env = {"PATH=/nonexistent:" + (dir / "bin").string(), "HOME=" + (dir / "home").string()};
    std::string resolved;
    EXPECT_EQ(identify_launcher("mpirun", env, &resolved), Launcher::open_mpi);
    EXPECT_EQ(resolved, std::filesystem::canonical(dir / "bin" / "orterun").string());
    EXPECT_EQ(identify_launcher("mpiexec", env, &resolved), Launcher::other) << "MPICH's mpiexec is not Open MPI's";
    EXPECT_EQ(identify_launcher("/opt/slurm/bin/srun", env, &resolved), Launcher::slurm);

    // The installation's parameter file, then the user's, which takes precedence.
    const std::string orterun = std::filesystem::canonical(dir / "bin" / "orterun").string();
    EXPECT_EQ(env_list_from_param_files(env, orterun), "");
    { std::ofstream(dir / "etc" / "openmpi-mca-params.conf") << "# site\nbtl = ^openib\n mca_base_env_list = A;B # x\n"; }
    EXPECT_EQ(env_list_from_param_files(env, orterun), "A;B");
    std::filesystem::create_directories(dir / "home" / ".openmpi");
    { std::ofstream(dir / "home" / ".openmpi" / "mca-params.conf") << "mca_base_env_list=MINE\n"; }
    EXPECT_EQ(env_list_from_param_files(env, orterun), "MINE");
    Environment listed = env;
    listed.push_back("OMPI_MCA_mca_param_files=" + (dir / "etc" / "openmpi-mca-params.conf").string());
    EXPECT_EQ(env_list_from_param_files(listed, orterun), "A;B") << "OMPI_MCA_mca_param_files replaces the defaults";
    std::filesystem::remove_all(dir);
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

// `lttng --mi xml list SESSION` as lttng-tools 2.13 writes it for record's two channels: the totals, and the set-up
// channel's part, which --channel-size does not size.
TEST(SessionLoss, TheSetupChannelsPartIsToldApart) {
    const auto channel = [](const char* name, int events, int packets) {
        return fmt::format("<channel><name>{}</name><enabled>true</enabled><attributes><overwrite_mode>DISCARD"
                           "</overwrite_mode><subbuffer_size>262144</subbuffer_size><discarded_events>{}"
                           "</discarded_events><lost_packets>{}</lost_packets></attributes><events><event><name>"
                           "sigmatrace:qp_create</name></event></events></channel>",
                           name, events, packets);
    };
    const auto session = [](const std::string& channels) {
        return "<?xml version=\"1.0\" encoding=\"UTF-8\"?><command><name>list</name><output><sessions><session>"
               "<name>s</name><domains><domain><type>UST</type><channels>" + channels +
               "</channels></domain></domains></session></sessions></output></command>";
    };
    using Loss = sigmatrace::record::RecordingSession::Loss;
    std::optional<Loss> l = Loss::parse(session(channel("sigmatrace", 120, 3) + channel("sigmatrace_setup", 7, 1)));
    ASSERT_TRUE(l.has_value());
    EXPECT_EQ(l->discarded_events(), 127u);
    EXPECT_EQ(l->data.events, 120u);
    EXPECT_EQ(l->data.packets, 3u);
    EXPECT_EQ(l->setup.events, 7u);
    EXPECT_EQ(l->setup.packets, 1u);

    l = Loss::parse(session(channel("sigmatrace_setup", 0, 0) + channel("sigmatrace", 5, 0)));
    ASSERT_TRUE(l.has_value());
    EXPECT_EQ(l->discarded_events(), 5u);
    EXPECT_EQ(l->data.events, 5u);
    EXPECT_FALSE(l->setup.any());

    // One channel (a trace recorded before the set-up channel existed has none to tell apart).
    l = Loss::parse(session(channel("sigmatrace", 9, 2)));
    ASSERT_TRUE(l.has_value());
    EXPECT_EQ(l->discarded_events(), 9u);
    EXPECT_EQ(l->data.packets, 2u);
    EXPECT_FALSE(l->setup.any());

    EXPECT_FALSE(Loss::parse("Error: No session daemon is available").has_value());
}
