// --sqlite FILE: the analysis as an SQLite database for ad-hoc SQL (docs/sqlite.md), laid out like Nsight Systems'
// and rocpd's exports: times in ns, one table per kind, repeated strings in a string table (StringIds) referenced
// by id. Operations are inserted as they are reconstructed, through prepared statements in batched transactions
// into a file on disk (never an in-memory database): memory stays bounded whatever the trace length. The other
// tables (processes, qps, windows and their links, phases, findings, meta) come from the analysis document at the
// end. The database is built as FILE.tmp and renamed over FILE only when complete, so a failed run never leaves a
// half database under the final name.
#pragma once

#include <sqlite3.h>

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "analyzer/analyses/op_reconstruction.h"
#include "analyzer/analyses/topology.h"

namespace sigmatrace::analyzer {

inline constexpr int kSqliteSchemaVersion = 1;

class SqliteWriter : public OpListener {
public:
    explicit SqliteWriter(const Topology& topo) : topo_(topo) {}
    ~SqliteWriter() override;
    SqliteWriter(const SqliteWriter&) = delete;
    SqliteWriter& operator=(const SqliteWriter&) = delete;

    // Creates PATH.tmp with the schema; false (and a reason in error()) when it cannot.
    bool open(const std::string& path);
    void on_operation(const Operation& op) override;
    // Writes the tables of the document and the indices, commits and renames PATH.tmp to PATH; false (and a
    // reason in error()) on any failure, and then PATH is left as it was.
    bool close(const nlohmann::json& doc, const std::string& trace_path);

    const std::string& error() const { return error_; }
    uint64_t operations() const { return operations_; }

private:
    bool exec(const char* sql);
    sqlite3_stmt* prepare(const char* sql);
    bool step(sqlite3_stmt* s);
    bool fail(std::string_view what);
    int64_t string_id(std::string_view value);
    int64_t json_string_id(const nlohmann::json& j, const char* key);
    void abandon();
    bool write_document(const nlohmann::json& doc, const std::string& trace_path);

    // Rows per transaction: large enough that commits cost little, small enough to bound SQLite's page cache
    // of uncommitted pages.
    static constexpr uint64_t kRowsPerTransaction = 100000;

    const Topology& topo_;
    std::string path_, tmp_path_, error_;
    sqlite3* db_ = nullptr;
    sqlite3_stmt* insert_op_ = nullptr;
    sqlite3_stmt* insert_string_ = nullptr;
    bool failed_ = false;
    uint64_t operations_ = 0;
    uint64_t in_transaction_ = 0;
    // Interned strings (opcodes, outcomes, node and device names...): a few hundred at most.
    std::unordered_map<std::string, int64_t> strings_;
    // The ids of the per-operation strings, by code (-1: not interned yet): no string is built per operation.
    std::array<int64_t, 256> opcode_ids_{}, poster_ids_{}, outcome_ids_{};
    // QPs that had an operation: the document's qps[] lists exactly these, in this order (by QP id).
    std::set<QpId> qps_seen_;
};

}  // namespace sigmatrace::analyzer
