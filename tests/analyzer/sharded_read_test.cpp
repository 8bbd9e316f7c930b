// A trace of two hosts read in shares on threads (decode/sharded_read.h, sigmatrace-analyze --jobs): the merged
// analysis gives the document one read gives. Two committed traces stand for the hosts (the mixed trace as host
// "vm", the records trace as host "h1"). Labelled tsan too: the shares' readers and analyses run at once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/sharded_read.h"
#include "analyzer/decode/trace_reader.h"

namespace sigmatrace::analyzer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ReadInShares : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("sigmatrace-sharded-" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        fs::copy(fs::path(DATA_DIR) / "mixed", dir_ / "h0", fs::copy_options::recursive);
        fs::copy(fs::path(DATA_DIR) / "records", dir_ / "h1", fs::copy_options::recursive);
        // The records trace was recorded on the same machine: its metadata's hostname makes it another host.
        const fs::path meta = dir_ / "h1" / "metadata";
        std::ifstream in(meta, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        in.close();
        const std::string from = "hostname = \"vm\";", to = "hostname = \"h1\";";
        const std::size_t at = bytes.find(from);
        ASSERT_NE(at, std::string::npos);
        bytes.replace(at, from.size(), to);
        std::ofstream(meta, std::ios::binary | std::ios::trunc) << bytes;
    }
    void TearDown() override { fs::remove_all(dir_); }

    json whole() const {
        PlannedRead planned = plan_read(dir_);
        Analysis a;
        const ReadSummary read = read_planned(dir_, planned, a, nullptr, nullptr);
        EXPECT_FALSE(read.fatal);
        return a.finish();
    }

    fs::path dir_;
};

TEST_F(ReadInShares, TwoSharesGiveTheDocumentOfOneRead) {
    json want = whole();
    ASSERT_EQ(want["clock"]["hosts"].size(), 2u) << want["clock"];
    ASSERT_EQ(want["trace"]["processes"].get<uint64_t>(), 6u) << want["trace"];
    const uint64_t ops = want["ops"]["total"].get<uint64_t>();
    ASSERT_GT(ops, 165u);   // the mixed trace's 165 and the records trace's

    PlannedRead planned = plan_read(dir_);
    ASSERT_EQ(why_not_sharded(planned), "");
    for (std::size_t shares : {2u, 3u}) {   // 3: one share holds no trace's data
        ShardedRead r = read_sharded(dir_, planned, AnalysisOptions{}, shares, nullptr);
        ASSERT_TRUE(r.analysis) << r.not_merged;
        EXPECT_FALSE(r.summary.fatal);
        json got = r.analysis->finish();
        EXPECT_EQ(got["ops"]["total"].get<uint64_t>(), ops);
        got.erase("analyzer");
        json w = want;
        w.erase("analyzer");
        EXPECT_EQ(got, w) << "shares " << shares << ": " << json::diff(got, w).dump(1);
    }
}

TEST_F(ReadInShares, AOneHostTraceIsReadWhole) {
    const PlannedRead planned = plan_read(dir_ / "h0");
    EXPECT_NE(why_not_sharded(planned).find("one host"), std::string::npos) << why_not_sharded(planned);
}

}  // namespace
}  // namespace sigmatrace::analyzer
