// SIGMATRACE_* parsing and process identity from launcher variables.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <sigmatrace/launcher_env.h>

#include "interpose/runtime/config.h"
#include "interpose/state/process_identity.h"

namespace sigmatrace::testing {
namespace {

using interpose::parse_config;

// A fake environment for the parsers (they take a getenv-like function).
std::map<std::string, std::string> g_env;
const char* fake_getenv(const char* name) {
    auto it = g_env.find(name);
    return it == g_env.end() ? nullptr : it->second.c_str();
}

class EnvTest : public ::testing::Test {
protected:
    void SetUp() override { g_env.clear(); }
};

TEST_F(EnvTest, DefaultsWhenNothingIsSet) {
    std::string errors;
    const interpose::Config c = parse_config(&fake_getenv, &errors);
    EXPECT_EQ(c.mode, interpose::Mode::ops);
    EXPECT_EQ(c.categories, static_cast<uint32_t>(interpose::kCategoryAll));
    EXPECT_EQ(c.redact, 0u);
    EXPECT_EQ(c.counters_interval_ms, 1000u);
    EXPECT_FALSE(c.debug);
    EXPECT_EQ(c.register_timeout_ms, 3000) << "lttng-ust's default wait for the session daemon";
    EXPECT_TRUE(errors.empty());
}

// Deferred emission has one format, records: SIGMATRACE_DEFER_FORMAT=records is accepted, any other value
// (the removed `events` included) is ignored with a line that says what to use instead.
TEST_F(EnvTest, TheDeferFormatIsRecordsOnly) {
    std::string errors;
    g_env["SIGMATRACE_DEFER_FORMAT"] = "records";
    EXPECT_TRUE(parse_config(&fake_getenv, &errors).defer);
    EXPECT_TRUE(errors.empty());
    g_env["SIGMATRACE_DEFER_FORMAT"] = "events";
    EXPECT_TRUE(parse_config(&fake_getenv, &errors).defer);
    EXPECT_EQ(errors, "sigmatrace: Ignoring SIGMATRACE_DEFER_FORMAT=events: expected records (the only format; "
                      "babeltrace2's filter.sigmatrace.expand prints records as one event per call)\n");
}

// LTTNG_UST_REGISTER_TIMEOUT is lttng-ust's: read as it reads it (strtol; every negative value is -1).
TEST_F(EnvTest, TheRegistrationTimeoutIsReadAsLttngUstReadsIt) {
    const std::pair<const char*, long> cases[] = {{"30000", 30000}, {"-1", -1}, {"-7", -1}, {"0", 0},
                                                  {"250ms", 250},   {"x", 0}};
    for (const auto& [text, ms] : cases) {
        g_env = {{"LTTNG_UST_REGISTER_TIMEOUT", text}};
        std::string errors;
        EXPECT_EQ(parse_config(&fake_getenv, &errors).register_timeout_ms, ms) << text;
        EXPECT_TRUE(errors.empty()) << errors;
    }
}

TEST_F(EnvTest, EveryKnobIsParsed) {
    g_env = {{"SIGMATRACE_MODE", "counters"},
             {"SIGMATRACE_EVENTS", "send, poll"},
             {"SIGMATRACE_REDACT", "keys"},
             {"SIGMATRACE_COUNTERS_INTERVAL_MS", "250"},
             {"SIGMATRACE_DEBUG", "1"},
             {"SIGMATRACE_PROVIDER", "/opt/p.so"},
             {"SIGMATRACE_RECORD_REPORT", "/tmp/r/processes"}};
    std::string errors;
    const interpose::Config c = parse_config(&fake_getenv, &errors);
    EXPECT_EQ(c.provider_path, "/opt/p.so");
    EXPECT_EQ(c.record_report, "/tmp/r/processes");
    EXPECT_EQ(c.mode, interpose::Mode::counters);
    EXPECT_EQ(c.categories, static_cast<uint32_t>(interpose::kCategorySend | interpose::kCategoryPoll));
    EXPECT_EQ(c.redact, static_cast<uint32_t>(interpose::kRedactKeys));
    EXPECT_EQ(c.counters_interval_ms, 250u);
    EXPECT_TRUE(c.debug);
    EXPECT_TRUE(errors.empty()) << errors;
    g_env = {{"SIGMATRACE_REDACT", "all"}, {"SIGMATRACE_MODE", "off"}};
    const interpose::Config d = parse_config(&fake_getenv, &errors);
    EXPECT_EQ(d.redact, static_cast<uint32_t>(interpose::kRedactAddresses | interpose::kRedactKeys));
    EXPECT_EQ(d.mode, interpose::Mode::off);
}

TEST_F(EnvTest, BadValuesKeepTheDefaultAndSayWhy) {
    g_env = {{"SIGMATRACE_MODE", "fast"},
             {"SIGMATRACE_EVENTS", "send,bogus"},
             {"SIGMATRACE_COUNTERS_INTERVAL_MS", "0"}};
    std::string errors;
    const interpose::Config c = parse_config(&fake_getenv, &errors);
    EXPECT_EQ(c.mode, interpose::Mode::ops);
    EXPECT_EQ(c.categories, static_cast<uint32_t>(interpose::kCategoryAll));
    EXPECT_EQ(c.counters_interval_ms, 1000u);
    EXPECT_NE(errors.find("SIGMATRACE_MODE=fast"), std::string::npos) << errors;
    EXPECT_NE(errors.find("SIGMATRACE_EVENTS=send,bogus"), std::string::npos) << errors;
    EXPECT_NE(errors.find("SIGMATRACE_COUNTERS_INTERVAL_MS=0"), std::string::npos) << errors;
}

TEST_F(EnvTest, IdentityFromOpenMpi) {
    g_env = {{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "8"},
             {"SLURM_PROCID", "99"}, {"SLURM_JOB_ID", "4242"}, {"SOFTFABRIC_NODE", "node3"}};
    const interpose::ProcessIdentity id = interpose::read_process_identity(&fake_getenv);
    EXPECT_EQ(id.rank, 5) << "Open MPI's own variables win over the scheduler's";
    EXPECT_EQ(id.local_rank, 1);
    EXPECT_EQ(id.world_size, 8);
    EXPECT_EQ(id.job_id, "4242");
    EXPECT_EQ(id.hostname, "node3");
    EXPECT_EQ(id.pid, static_cast<int32_t>(getpid()));
    EXPECT_EQ(id.ppid, static_cast<int32_t>(getppid()));
}

TEST_F(EnvTest, IdentityFromPmiAndSlurmAndNone) {
    g_env = {{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}};
    interpose::ProcessIdentity id = interpose::read_process_identity(&fake_getenv);
    EXPECT_EQ(id.rank, 3);
    EXPECT_EQ(id.world_size, 4);
    EXPECT_EQ(id.local_rank, 0);
    g_env = {{"SLURM_PROCID", "12"}, {"SLURM_LOCALID", "2"}, {"SLURM_NTASKS", "16"}, {"PMIX_RANK", "bad"}};
    id = interpose::read_process_identity(&fake_getenv);
    EXPECT_EQ(id.rank, 12) << "a malformed value is skipped";
    EXPECT_EQ(id.local_rank, 2);
    EXPECT_EQ(id.world_size, 16);
    g_env.clear();
    id = interpose::read_process_identity(&fake_getenv);
    EXPECT_EQ(id.rank, -1);
    EXPECT_EQ(id.local_rank, -1);
    EXPECT_EQ(id.world_size, -1);
    EXPECT_FALSE(id.hostname.empty()) << "gethostname() when the fabric does not name the node";
    EXPECT_TRUE(id.job_id.empty());
}

// What sigmatrace-analyze reads to learn whether it was started as one of several ranks.
TEST_F(EnvTest, PlaceInJobNeedsALaunchersRankAndSizeTogether) {
    g_env = {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}};
    std::optional<launcher::Place> p = launcher::place_in_job(&fake_getenv);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->rank, 2);
    EXPECT_EQ(p->size, 4);
    EXPECT_STREQ(p->rank_var, "OMPI_COMM_WORLD_RANK");
    // Slurm's batch step passes SLURM_PROCID to every program of the script: without SLURM_NTASKS it says nothing.
    g_env = {{"SLURM_PROCID", "3"}};
    EXPECT_FALSE(launcher::place_in_job(&fake_getenv));
    g_env = {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}};
    p = launcher::place_in_job(&fake_getenv);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->rank, 3);
    EXPECT_EQ(p->size, 8);
    // A pair that does not hold together is skipped for the next launcher's.
    g_env = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "x"}, {"PMI_RANK", "5"}, {"PMI_SIZE", "4"},
             {"MV2_COMM_WORLD_RANK", "0"}, {"MV2_COMM_WORLD_SIZE", "2"}};
    p = launcher::place_in_job(&fake_getenv);
    ASSERT_TRUE(p);
    EXPECT_STREQ(p->rank_var, "MV2_COMM_WORLD_RANK");
    EXPECT_EQ(p->size, 2);
    // torchrun's generic RANK/WORLD_SIZE do not make a job of the analyzer.
    g_env = {{"RANK", "1"}, {"WORLD_SIZE", "2"}};
    EXPECT_FALSE(launcher::place_in_job(&fake_getenv));
    EXPECT_EQ(launcher::parse_index("+3"), std::nullopt);
    EXPECT_EQ(launcher::parse_index("07"), 7);
    EXPECT_EQ(launcher::parse_index("2147483648"), std::nullopt);
    EXPECT_EQ(launcher::parse_index(""), std::nullopt);
}

}  // namespace
}  // namespace sigmatrace::testing
