// The host-wide job file through which the ranks of one job share a recording session (tools/record/job_session.h).
#include "record/job_session.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace {

namespace fs = std::filesystem;
using namespace sigmatrace::record;

TEST(JobKey, EachLauncherNamesItsJobAndANonRankHasNone) {
    EXPECT_EQ(job_key({"OMPI_COMM_WORLD_RANK=3", "OMPI_MCA_ess_base_jobid=3010789377"}), "ompi-3010789377");
    EXPECT_EQ(job_key({"PMIX_RANK=0", "PMIX_NAMESPACE=prterun-h0-41@1"}), "pmix-prterun-h0-41_1");
    EXPECT_EQ(job_key({"SLURM_PROCID=5", "SLURM_JOB_ID=812", "SLURM_STEP_ID=2"}), "slurm-812-2");
    EXPECT_EQ(job_key({"SLURM_PROCID=5", "SLURM_JOB_ID=812"}), "slurm-812");
    // A job id alone (a batch script around mpirun) is no rank: record then traces the whole command itself.
    EXPECT_EQ(job_key({"SLURM_JOB_ID=812"}), std::nullopt);
    EXPECT_EQ(job_key({"OMPI_MCA_ess_base_jobid=1"}), std::nullopt);
    EXPECT_EQ(job_key({}), std::nullopt);
}

TEST(JobMembers, TextRoundTripsAndDamagedTextIsEmpty) {
    JobMembers m{"/traces/run/h0", {101, 205, 309}};
    const JobMembers back = JobMembers::parse(m.text());
    EXPECT_EQ(back.output, "/traces/run/h0");
    EXPECT_EQ(back.members, (std::vector<pid_t>{101, 205, 309}));
    EXPECT_EQ(JobMembers::parse("/o\n12 x4\n").members, std::vector<pid_t>{});
    EXPECT_EQ(JobMembers::parse("/o\n-4\n").output, "");
    EXPECT_EQ(JobMembers::parse("only one line").output, "");
    EXPECT_EQ(JobMembers::parse("").members.size(), 0u);
}

TEST(JobMembers, PruneDropsOnlyTheDead) {
    JobMembers m{"", {10, 11, 12, 13}};
    m.prune([](pid_t p) { return p % 2 == 1; });
    EXPECT_EQ(m.members, (std::vector<pid_t>{11, 13}));
    EXPECT_TRUE(process_alive(getpid()));
}

class JobFileTest : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/job-session-test.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string dir_;
};

TEST_F(JobFileTest, MembersPersistAndTheLastLeaverRemovesTheFile) {
    std::string error;
    {
        auto f = LockedJobFile::open(dir_, "ompi-1", &error);
        ASSERT_TRUE(f) << error;
        EXPECT_TRUE(f->read().members.empty());
        EXPECT_EQ(f->write(JobMembers{"/traces/h0", {getpid(), 42}}), "");
    }
    {
        auto f = LockedJobFile::open(dir_, "ompi-1", &error);
        ASSERT_TRUE(f) << error;
        JobMembers m = f->read();
        EXPECT_EQ(m.output, "/traces/h0");
        EXPECT_EQ(m.members, (std::vector<pid_t>{getpid(), 42}));
        m.members.clear();
        EXPECT_EQ(f->write(m), "");
    }
    EXPECT_FALSE(fs::exists(fs::path(dir_) / "sigmatrace-job-ompi-1"));
    EXPECT_FALSE(LockedJobFile::open(dir_ + "/missing", "x", &error));
    EXPECT_NE(error.find("path=" + dir_ + "/missing/sigmatrace-job-x"), std::string::npos) << error;
}

// Two "ranks" arriving at once: the lock makes exactly one of them the creator, and a file removed while the other
// waited for it is not the one it ends up holding.
TEST_F(JobFileTest, ConcurrentJoinsSeeOneCreatorAndEveryMember) {
    constexpr int kRanks = 8, kRounds = 50;
    for (int round = 0; round < kRounds; ++round) {
        std::atomic<int> creators{0};
        std::vector<std::thread> threads;
        for (int r = 0; r < kRanks; ++r)
            threads.emplace_back([&, r] {
                std::string error;
                auto f = LockedJobFile::open(dir_, "race", &error);
                ASSERT_TRUE(f) << error;
                JobMembers m = f->read();
                if (m.members.empty()) ++creators;
                m.members.push_back(1000 + r);
                ASSERT_EQ(f->write(m), "");
            });
        for (auto& t : threads) t.join();
        EXPECT_EQ(creators.load(), 1);
        std::string error;
        auto f = LockedJobFile::open(dir_, "race", &error);
        ASSERT_TRUE(f) << error;
        EXPECT_EQ(f->read().members.size(), static_cast<size_t>(kRanks));
        ASSERT_EQ(f->write(JobMembers{}), "");   // the last leaver: the file goes
    }
}

}  // namespace
