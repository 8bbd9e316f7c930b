// sigmatrace-analyze --sqlite (docs/sqlite.md) on the committed golden traces: the database holds what the JSON
// document of the same run says (row counts, per-QP and per-opcode totals), known operations of the trace field by
// field (as `--events -` shows their post and completion), references that resolve, the indices, replacing an
// existing file, and a path it cannot write.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "analyzer/analyses/topology.h"
#include "analyzer/outputs/sqlite_writer.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int run(const std::string& cmd) {
    const int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

class Db {
public:
    explicit Db(const fs::path& p) {
        if (sqlite3_open_v2(p.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) ADD_FAILURE() << p;
    }
    ~Db() { sqlite3_close(db_); }
    Db(const Db&) = delete;
    Db& operator=(const Db&) = delete;
    // The first column of the first row as an integer (-1 when no row).
    int64_t integer(const std::string& sql) const {
        sqlite3_stmt* s = nullptr;
        EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(db_);
        int64_t v = -1;
        if (s && sqlite3_step(s) == SQLITE_ROW) v = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
        return v;
    }
    std::string text(const std::string& sql) const {
        sqlite3_stmt* s = nullptr;
        EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(db_);
        std::string v = "<no row>";
        if (s && sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
            v = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
        sqlite3_finalize(s);
        return v;
    }

private:
    sqlite3* db_ = nullptr;
};

// What holds on every trace: counts equal the JSON's, references resolve, indices exist.
void check_consistent(const Db& db, const json& d) {
    EXPECT_EQ(db.integer("SELECT count(*) FROM operations"), d["ops"]["total"].get<int64_t>());
    EXPECT_EQ(db.integer("SELECT count(*) FROM qps"), static_cast<int64_t>(d["qps"].size()));
    EXPECT_EQ(db.integer("SELECT count(*) FROM processes"), static_cast<int64_t>(d["processes"].size()));
    EXPECT_EQ(db.integer("SELECT count(*) FROM findings"), static_cast<int64_t>(d["findings"].size()));
    const json windows = d.contains("timeline") ? d["timeline"]["windows"] : json::array();
    EXPECT_EQ(db.integer("SELECT count(*) FROM windows"), static_cast<int64_t>(windows.size()));
    std::size_t links = 0;
    for (const json& w : windows) links += w["links"].size();
    EXPECT_EQ(db.integer("SELECT count(*) FROM links"), static_cast<int64_t>(links));
    std::size_t window_qps = 0;
    int64_t max_bytes_sum = 0;
    for (const json& w : windows)
        for (const json& q : w.value("qps", json::array())) {
            ++window_qps;
            max_bytes_sum += q.value("max_bytes", int64_t{0});
        }
    EXPECT_EQ(db.integer("SELECT count(*) FROM window_qps"), static_cast<int64_t>(window_qps));
    EXPECT_EQ(db.integer("SELECT coalesce(sum(max_bytes), 0) FROM window_qps"), max_bytes_sum);
    std::size_t window_peers = 0;
    int64_t max_wrs_sum = 0;
    for (const json& w : windows)
        for (const json& p : w.value("peers", json::array())) {
            ++window_peers;
            max_wrs_sum += p["max_wrs_sum"].get<int64_t>();
        }
    EXPECT_EQ(db.integer("SELECT count(*) FROM window_peers"), static_cast<int64_t>(window_peers));
    EXPECT_EQ(db.integer("SELECT coalesce(sum(max_wrs_sum), 0) FROM window_peers"), max_wrs_sum);
    EXPECT_EQ(db.integer("SELECT count(*) FROM window_peers WHERE window_id NOT IN (SELECT id FROM windows)"), 0);
    EXPECT_EQ(db.integer("SELECT count(*) FROM phases"),
              d.contains("phases") ? static_cast<int64_t>(d["phases"].size()) : 0);

    // Every reference resolves.
    EXPECT_EQ(db.integer("SELECT count(*) FROM operations WHERE qp_id NOT IN (SELECT id FROM qps)"), 0);
    EXPECT_EQ(db.integer("SELECT count(*) FROM links WHERE window_id NOT IN (SELECT id FROM windows)"), 0);
    for (const char* ref : {"operations.opcode", "operations.poster", "operations.outcome", "qps.node", "qps.device",
                            "processes.node", "findings.kind", "findings.severity", "links.src_node"}) {
        const std::string r(ref), table = r.substr(0, r.find('.')), column = r.substr(r.find('.') + 1);
        EXPECT_EQ(db.integer("SELECT count(*) FROM " + table + " WHERE " + column + " IS NOT NULL AND " + column +
                             " NOT IN (SELECT id FROM StringIds)"),
                  0)
            << ref;
    }

    // Each QP's operations are the ones the document counts for it (the same QP, by its number and process).
    for (const json& q : d["qps"]) {
        EXPECT_EQ(db.integer("SELECT count(*) FROM operations o JOIN qps q ON q.id = o.qp_id WHERE q.qp_num = " +
                             std::to_string(q["qp_num"].get<int64_t>()) + " AND q.pid = " +
                             std::to_string(q["pid"].get<int64_t>())),
                  q["count"].get<int64_t>())
            << q.dump();
    }
    // Per opcode: count and posted bytes.
    for (const auto& [name, o] : d["ops"]["by_opcode"].items()) {
        const std::string where = " FROM operations o JOIN StringIds s ON s.id = o.opcode WHERE s.value = '" + name + "'";
        EXPECT_EQ(db.integer("SELECT count(*)" + where), o["count"].get<int64_t>()) << name;
        EXPECT_EQ(db.integer("SELECT total(bytes)" + where), o["posted_bytes"].get<int64_t>()) << name;
    }
    // Findings: kinds in order, evidence as JSON text.
    int64_t i = 1;
    for (const json& f : d["findings"]) {
        const std::string row = " FROM findings WHERE id = " + std::to_string(i++);
        EXPECT_EQ(db.text("SELECT s.value FROM findings f JOIN StringIds s ON s.id = f.kind WHERE f.id = " +
                          std::to_string(i - 1)),
                  f["kind"].get<std::string>());
        EXPECT_EQ(json::parse(db.text("SELECT evidence" + row)), f["evidence"]);
    }

    for (const char* index : {"operations_qp", "operations_start", "links_window", "window_qps_window", "window_peers_window"})
        EXPECT_EQ(db.integer(std::string("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = '") + index +
                             "'"),
                  1)
            << index;
    EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'schema_version'"), "1");
    EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'tool_version'"), d["analyzer"]["version"].get<std::string>());
}

}  // namespace

class SqliteOutput : public ::testing::Test {
protected:
    void SetUp() override {
        tmp_ = fs::temp_directory_path() / ("sigmatrace_sqlite_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(tmp_);
        fs::create_directories(tmp_);
    }
    void TearDown() override { fs::remove_all(tmp_); }
    // Analyzes a committed trace with --json and --sqlite; the exit status.
    int analyze(const std::string& trace, const fs::path& db) {
        return run(std::string(ANALYZER) + " " + DATA_DIR + "/" + trace + " --quiet --json " + (tmp_ / "a.json").string() +
                   " --sqlite " + db.string() + " 2>" + (tmp_ / "stderr").string());
    }
    json doc() const {
        std::ifstream f(tmp_ / "a.json");
        return json::parse(f);
    }
    std::string stderr_text() const {
        std::ifstream f(tmp_ / "stderr");
        return {std::istreambuf_iterator<char>(f), {}};
    }
    fs::path tmp_;
};

TEST_F(SqliteOutput, MixedTraceMatchesTheJsonAndKnownOperations) {
    const fs::path path = tmp_ / "mixed.db";
    ASSERT_EQ(analyze("mixed", path), 0) << stderr_text();
    EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
    const Db db(path);
    const json d = doc();
    ASSERT_GT(d["ops"]["total"].get<int64_t>(), 100);
    ASSERT_GT(d["timeline"]["windows"].size(), 0u);
    ASSERT_GT(d["findings"].size(), 0u);
    check_consistent(db, d);
    EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'trace_path'"), std::string(DATA_DIR) + "/mixed");

    // rank 0 (pid 16366) posts four RDMA WRITEs of 4096 B on QP 257 (wr_id 0x100000..0x100003, only the last
    // signaled) at 08:52:00.676073818 and polls the completion of 0x100003 at .676074620; the first three complete
    // with it (implied).
    const std::string qp257 = "SELECT %s FROM operations o JOIN qps q ON q.id = o.qp_id WHERE q.qp_num = 257 AND "
                              "q.pid = 16366 AND o.wr_id = 1048579 AND o.start_ns < 1796028720700000000";
    auto field = [&](const std::string& what) {
        std::string sql = qp257;
        sql.replace(sql.find("%s"), 2, what);
        return sql;
    };
    EXPECT_EQ(db.integer(field("count(*)")), 1);
    EXPECT_EQ(db.text(field("(SELECT value FROM StringIds WHERE id = o.opcode)")), "RDMA_WRITE");
    EXPECT_EQ(db.text(field("(SELECT value FROM StringIds WHERE id = o.outcome)")), "completed");
    EXPECT_EQ(db.integer(field("o.bytes")), 4096);
    EXPECT_EQ(db.integer(field("o.wc_status")), 0);
    EXPECT_EQ(db.integer(field("o.start_ns")), 1796028720676073818);
    EXPECT_EQ(db.integer(field("o.end_ns")), 1796028720676074620);
    EXPECT_EQ(db.integer(field("o.raddr")), 0x20003000);
    EXPECT_EQ(db.integer(field("o.rkey")), 0x1234);
    EXPECT_EQ(db.integer(field("o.signaled")), 1);
    EXPECT_EQ(db.integer(field("o.implied")), 0);
    EXPECT_EQ(db.integer("SELECT count(*) FROM operations o JOIN qps q ON q.id = o.qp_id WHERE q.qp_num = 257 AND "
                         "o.wr_id BETWEEN 1048576 AND 1048578 AND o.implied = 1 AND o.end_ns = 1796028720676074620"),
              3);

    // Later, rank 0 polls six error completions on QP 257 at .980956144 (wr_id 0xe000: status 10, REM_ACCESS_ERR;
    // 0xe001..0xe005: status 5, WR_FLUSH_ERR).
    EXPECT_EQ(db.integer("SELECT wc_status FROM operations o JOIN qps q ON q.id = o.qp_id WHERE q.qp_num = 257 AND "
                         "o.wr_id = 57344 AND o.end_ns = 1796028720980956144"),
              10);
    EXPECT_EQ(db.integer("SELECT count(*) FROM operations o JOIN qps q ON q.id = o.qp_id JOIN StringIds s ON "
                         "s.id = o.outcome WHERE q.qp_num = 257 AND o.wr_id BETWEEN 57345 AND 57349 AND "
                         "o.wc_status = 5 AND s.value = 'flushed' AND o.end_ns = 1796028720980956144"),
              5);
}

TEST_F(SqliteOutput, EveryGoldenTraceIsConsistent) {
    for (const char* trace : {"discarded", "crash", "records"}) {
        if (!fs::exists(fs::path(DATA_DIR) / trace)) continue;
        const fs::path path = tmp_ / (std::string(trace) + ".db");
        const int rc = analyze(trace, path);
        ASSERT_TRUE(rc == 0 || rc == 1 || rc == 3) << trace << ": " << rc << " " << stderr_text();
        const Db db(path);
        SCOPED_TRACE(trace);
        check_consistent(db, doc());
    }
}

TEST_F(SqliteOutput, ReplacesAnExistingFile) {
    const fs::path path = tmp_ / "old.db";
    std::ofstream(path) << "not a database";
    ASSERT_EQ(analyze("mixed", path), 0) << stderr_text();
    const Db db(path);
    EXPECT_EQ(db.integer("SELECT count(*) FROM operations"), doc()["ops"]["total"].get<int64_t>());
}

TEST_F(SqliteOutput, UnwritablePathFailsButOtherOutputsAreWritten) {
    const fs::path path = tmp_ / "missing_dir" / "x.db";
    EXPECT_EQ(analyze("mixed", path), 2);
    EXPECT_NE(stderr_text().find("Cannot write the SQLite database: path=" + path.string()), std::string::npos)
        << stderr_text();
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
    EXPECT_GT(doc()["ops"]["total"].get<int64_t>(), 100);  // the JSON document was still written in full
}

// phases[] (when the document has it): one row per phase with its columns; the table exists, empty, without it.
TEST_F(SqliteOutput, PhasesFromTheDocument) {
    using sigmatrace::analyzer::SqliteWriter;
    sigmatrace::analyzer::Topology topo;
    const json phases = json::array(
        {{{"start_ns", 1000}, {"end_ns", 5000}, {"bytes", 1 << 20}, {"lower_bound_ns", 2000}, {"efficiency", 0.5},
          {"binding_port", "node1/sfab0"}},
         {{"start_ns", 6000}, {"end_ns", 7000}, {"bytes", 4096}, {"lower_bound_ns", 700}, {"efficiency", 0.7},
          {"binding_port", nullptr}}});
    {
        SqliteWriter w(topo);
        ASSERT_TRUE(w.open((tmp_ / "phases.db").string())) << w.error();
        ASSERT_TRUE(w.close(json{{"phases", phases}}, "T")) << w.error();
    }
    const Db db(tmp_ / "phases.db");
    EXPECT_EQ(db.integer("SELECT count(*) FROM phases"), 2);
    EXPECT_EQ(db.integer("SELECT end_ns - start_ns FROM phases WHERE id = 1"), 4000);
    EXPECT_EQ(db.integer("SELECT bytes FROM phases WHERE id = 1"), 1 << 20);
    EXPECT_EQ(db.integer("SELECT lower_bound_ns FROM phases WHERE id = 2"), 700);
    EXPECT_EQ(db.text("SELECT efficiency FROM phases WHERE id = 2"), "0.7");
    EXPECT_EQ(db.text("SELECT s.value FROM phases p JOIN StringIds s ON s.id = p.binding_port WHERE p.id = 1"),
              "node1/sfab0");
    EXPECT_EQ(db.integer("SELECT count(*) FROM phases WHERE id = 2 AND binding_port IS NULL"), 1);
    EXPECT_EQ(db.text("SELECT value FROM meta WHERE key = 'trace_path'"), "T");

    {
        SqliteWriter w(topo);
        ASSERT_TRUE(w.open((tmp_ / "none.db").string())) << w.error();
        ASSERT_TRUE(w.close(json::object(), "T")) << w.error();
    }
    EXPECT_EQ(Db(tmp_ / "none.db").integer("SELECT count(*) FROM phases"), 0);
}

// A writer dropped before close (a run that failed on the way) leaves neither FILE nor FILE.tmp.
TEST_F(SqliteOutput, AnAbandonedWriterLeavesNoFile) {
    sigmatrace::analyzer::Topology topo;
    {
        sigmatrace::analyzer::SqliteWriter w(topo);
        ASSERT_TRUE(w.open((tmp_ / "x.db").string())) << w.error();
        EXPECT_TRUE(fs::exists(tmp_ / "x.db.tmp"));
    }
    EXPECT_FALSE(fs::exists(tmp_ / "x.db"));
    EXPECT_FALSE(fs::exists(tmp_ / "x.db.tmp"));
}
