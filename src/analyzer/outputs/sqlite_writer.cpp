#include "analyzer/outputs/sqlite_writer.h"

#include <fmt/core.h>

#include <filesystem>
#include <system_error>
#include <vector>

#include "analyzer/outputs/report_builder.h"
#include "analyzer/outputs/json_text.h"

namespace sigmatrace::analyzer {

namespace {

using nlohmann::json;

// The outcome as the ops table stores it (docs/sqlite.md): a key, where the timelines write a label.
const char* outcome_key(OpOutcome o) {
    switch (o) {
    case OpOutcome::Completed: return "completed";
    case OpOutcome::Failed: return "failed";
    case OpOutcome::Flushed: return "flushed";
    case OpOutcome::InFlight: return "in_flight";
    case OpOutcome::Observed: return "observed";
    case OpOutcome::Lost: return "lost";
    case OpOutcome::Unconfirmed: return "unconfirmed";
    case OpOutcome::FlushedAtTeardown: return "flushed_at_teardown";
    }
    return "unknown";
}

// The schema (docs/sqlite.md). StringIds first: every *_id column naming a string refers to it.
constexpr const char* kSchema = R"sql(
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL UNIQUE);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE processes (id INTEGER PRIMARY KEY, pid INTEGER, rank INTEGER, node INTEGER REFERENCES StringIds(id),
  procname INTEGER REFERENCES StringIds(id), job_id INTEGER REFERENCES StringIds(id), events INTEGER, ops INTEGER,
  bytes INTEGER, errors INTEGER, in_flight_at_end INTEGER, unconfirmed INTEGER, duration_ns INTEGER,
  latency_p50_ns INTEGER, latency_p99_ns INTEGER);
CREATE TABLE qps (id INTEGER PRIMARY KEY, pid INTEGER, rank INTEGER, node INTEGER REFERENCES StringIds(id),
  device INTEGER REFERENCES StringIds(id), qp_num INTEGER, type INTEGER, poster INTEGER REFERENCES StringIds(id),
  gpu INTEGER, ops INTEGER, bytes INTEGER, errors INTEGER, in_flight INTEGER, unconfirmed INTEGER,
  latency_p50_ns INTEGER, latency_p99_ns INTEGER, latency_max_ns INTEGER, peer_node INTEGER REFERENCES StringIds(id),
  peer_device INTEGER REFERENCES StringIds(id), peer_pid INTEGER, peer_rank INTEGER, peer_qp_num INTEGER);
CREATE TABLE operations (id INTEGER PRIMARY KEY, qp_id INTEGER NOT NULL, opcode INTEGER REFERENCES StringIds(id),
  poster INTEGER REFERENCES StringIds(id), outcome INTEGER REFERENCES StringIds(id), wc_status INTEGER,
  signaled INTEGER, implied INTEGER, start_ns INTEGER, end_ns INTEGER, bytes INTEGER, wr_id INTEGER,
  raddr INTEGER, rkey INTEGER, peer_qp_id INTEGER);
CREATE TABLE windows (id INTEGER PRIMARY KEY, start_ns INTEGER, end_ns INTEGER);
CREATE TABLE links (id INTEGER PRIMARY KEY, window_id INTEGER REFERENCES windows(id),
  src_node INTEGER REFERENCES StringIds(id), src_device INTEGER REFERENCES StringIds(id),
  dst_node INTEGER REFERENCES StringIds(id), dst_device INTEGER REFERENCES StringIds(id), ops INTEGER,
  bytes INTEGER, busy_ns INTEGER, bytes_per_s INTEGER, latency_count INTEGER, latency_p50_ns INTEGER,
  latency_p99_ns INTEGER);
CREATE TABLE window_qps (id INTEGER PRIMARY KEY, window_id INTEGER REFERENCES windows(id),
  node INTEGER REFERENCES StringIds(id), pid INTEGER, rank INTEGER, qp_num INTEGER, max_wrs INTEGER,
  max_bytes INTEGER, p99_bytes INTEGER, recv_max_posted INTEGER, recv_min_posted INTEGER, rnr_events INTEGER,
  mean_wrs REAL, mean_bytes REAL);
CREATE TABLE window_peers (id INTEGER PRIMARY KEY, window_id INTEGER REFERENCES windows(id),
  src_node INTEGER REFERENCES StringIds(id), src_pid INTEGER, src_rank INTEGER,
  dst_node INTEGER REFERENCES StringIds(id), dst_pid INTEGER, dst_rank INTEGER, qps INTEGER, mean_wrs REAL,
  mean_bytes REAL, max_wrs_sum INTEGER, max_bytes_sum INTEGER, rnr_events INTEGER, recv_min_posted INTEGER);
CREATE TABLE phases (id INTEGER PRIMARY KEY, start_ns INTEGER, end_ns INTEGER, bytes INTEGER,
  lower_bound_ns INTEGER, efficiency REAL, binding_port INTEGER REFERENCES StringIds(id));
CREATE TABLE findings (id INTEGER PRIMARY KEY, kind INTEGER REFERENCES StringIds(id),
  severity INTEGER REFERENCES StringIds(id), summary TEXT, evidence TEXT);
)sql";

constexpr const char* kIndices = R"sql(
CREATE INDEX operations_qp ON operations(qp_id);
CREATE INDEX operations_start ON operations(start_ns);
CREATE INDEX links_window ON links(window_id);
CREATE INDEX window_qps_window ON window_qps(window_id);
CREATE INDEX window_peers_window ON window_peers(window_id);
CREATE INDEX qps_pid ON qps(pid);
)sql";

// A JSON value as an SQL value: numbers as integers (or reals), booleans as 0/1, null, anything else as JSON text.
void bind(sqlite3_stmt* s, int i, const json& v) {
    if (v.is_number_unsigned())
        sqlite3_bind_int64(s, i, static_cast<sqlite3_int64>(v.get<uint64_t>()));
    else if (v.is_number_integer())
        sqlite3_bind_int64(s, i, v.get<int64_t>());
    else if (v.is_number_float())
        sqlite3_bind_double(s, i, v.get<double>());
    else if (v.is_boolean())
        sqlite3_bind_int(s, i, v.get<bool>() ? 1 : 0);
    else if (v.is_null())
        sqlite3_bind_null(s, i);
    else {
        const std::string text = v.is_string() ? v.get<std::string>() : json_text(v);
        sqlite3_bind_text(s, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    }
}

// j[key], or null when j is not an object or has no such key.
const json& at(const json& j, const char* key) {
    static const json null_value;
    if (!j.is_object()) return null_value;
    const auto it = j.find(key);
    return it == j.end() ? null_value : *it;
}

void bind_id(sqlite3_stmt* s, int i, int64_t id) {
    if (id < 0)
        sqlite3_bind_null(s, i);
    else
        sqlite3_bind_int64(s, i, id);
}

}  // namespace

SqliteWriter::~SqliteWriter() { abandon(); }

void SqliteWriter::abandon() {
    sqlite3_finalize(insert_op_);
    sqlite3_finalize(insert_string_);
    insert_op_ = insert_string_ = nullptr;
    if (db_) {
        sqlite3_close(db_);
        db_ = nullptr;
        std::error_code ec;
        std::filesystem::remove(tmp_path_, ec);
    }
}

bool SqliteWriter::fail(std::string_view what) {
    if (!failed_) error_ = fmt::format("{}: {}", what, db_ ? sqlite3_errmsg(db_) : "cannot open");
    failed_ = true;
    return false;
}

bool SqliteWriter::exec(const char* sql) {
    if (failed_) return false;
    char* msg = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &msg) == SQLITE_OK) return true;
    if (!failed_) error_ = msg ? msg : "SQL error";
    sqlite3_free(msg);
    failed_ = true;
    return false;
}

sqlite3_stmt* SqliteWriter::prepare(const char* sql) {
    sqlite3_stmt* s = nullptr;
    if (failed_) return nullptr;
    if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK) {
        fail("prepare");
        sqlite3_finalize(s);
        return nullptr;
    }
    return s;
}

bool SqliteWriter::step(sqlite3_stmt* s) {
    if (failed_ || !s) return false;
    const int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (s != insert_op_) sqlite3_clear_bindings(s);  // the operation insert binds every parameter each time
    if (rc != SQLITE_DONE) return fail("insert");
    return true;
}

bool SqliteWriter::open(const std::string& path) {
    path_ = path;
    tmp_path_ = path + ".tmp";
    opcode_ids_.fill(-1);
    poster_ids_.fill(-1);
    outcome_ids_.fill(-1);
    std::error_code ec;
    std::filesystem::remove(tmp_path_, ec);  // a leftover of an earlier failed run
    if (sqlite3_open_v2(tmp_path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
        fail("open");
        abandon();
        return false;
    }
    // NOMUTEX: one thread uses the connection, so SQLite's per-call locking is pure cost.
    // The file is rebuilt from scratch on failure (and renamed into place only when complete): no journal, no
    // syncs.
    if (!exec("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;") || !exec(kSchema) || !exec("BEGIN")) {
        abandon();
        return false;
    }
    insert_string_ = prepare("INSERT INTO StringIds (id, value) VALUES (?, ?)");
    insert_op_ = prepare(
        "INSERT INTO operations (qp_id, opcode, poster, outcome, wc_status, signaled, implied, start_ns, end_ns, "
        "bytes, wr_id, raddr, rkey, peer_qp_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (failed_) {
        abandon();
        return false;
    }
    return true;
}

int64_t SqliteWriter::string_id(std::string_view value) {
    const auto [it, added] = strings_.try_emplace(std::string(value), static_cast<int64_t>(strings_.size()));
    if (added) {
        sqlite3_bind_int64(insert_string_, 1, it->second);
        sqlite3_bind_text(insert_string_, 2, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
        step(insert_string_);
    }
    return it->second;
}

int64_t SqliteWriter::json_string_id(const json& j, const char* key) {
    const json& v = at(j, key);
    if (v.is_null()) return -1;
    return string_id(v.is_string() ? v.get<std::string>() : json_text(v));
}

void SqliteWriter::on_operation(const Operation& op) {
    if (failed_ || !db_) return;
    qps_seen_.insert(op.qp);
    sqlite3_stmt* s = insert_op_;
    sqlite3_bind_int64(s, 1, op.qp);
    int64_t& opcode = opcode_ids_[op.opcode];
    if (opcode < 0) opcode = string_id(opcode_name(op.opcode));
    int64_t& poster = poster_ids_[static_cast<uint8_t>(op.poster)];
    if (poster < 0) poster = string_id(records::poster_name(op.poster));
    int64_t& outcome = outcome_ids_[static_cast<uint8_t>(op.outcome)];
    if (outcome < 0) outcome = string_id(outcome_key(op.outcome));
    sqlite3_bind_int64(s, 2, opcode);
    sqlite3_bind_int64(s, 3, poster);
    sqlite3_bind_int64(s, 4, outcome);
    sqlite3_bind_int(s, 5, op.wc_status);
    sqlite3_bind_int(s, 6, op.signaled ? 1 : 0);
    sqlite3_bind_int(s, 7, op.implied ? 1 : 0);
    sqlite3_bind_int64(s, 8, op.post_ts);
    sqlite3_bind_int64(s, 9, op.done_ts);
    sqlite3_bind_int64(s, 10, static_cast<sqlite3_int64>(op.bytes));
    sqlite3_bind_int64(s, 11, static_cast<sqlite3_int64>(op.wr_id));
    sqlite3_bind_int64(s, 12, static_cast<sqlite3_int64>(op.raddr));
    sqlite3_bind_int64(s, 13, op.rkey);
    bind_id(s, 14, op.peer.qp == kNoId ? -1 : static_cast<int64_t>(op.peer.qp));
    if (!step(s)) return;
    ++operations_;
    if (++in_transaction_ >= kRowsPerTransaction) {
        in_transaction_ = 0;
        exec("COMMIT; BEGIN");
    }
}

bool SqliteWriter::write_document(const json& doc, const std::string& trace_path) {
    // meta
    if (sqlite3_stmt* s = prepare("INSERT INTO meta (key, value) VALUES (?, ?)")) {
        const std::vector<std::pair<std::string, json>> rows{
            {"schema_version", kSqliteSchemaVersion},
            {"trace_path", trace_path},
            {"tool_version", at(at(doc, "analyzer"), "version")},
            {"analysis_schema", at(doc, "schema")},
            {"time_unit", "ns"},
        };
        for (const auto& [k, v] : rows) {
            sqlite3_bind_text(s, 1, k.data(), static_cast<int>(k.size()), SQLITE_TRANSIENT);
            bind(s, 2, v);
            step(s);
        }
        sqlite3_finalize(s);
    }

    // processes
    if (sqlite3_stmt* s = prepare(
            "INSERT INTO processes (pid, rank, node, procname, job_id, events, ops, bytes, errors, in_flight_at_end, "
            "unconfirmed, duration_ns, latency_p50_ns, latency_p99_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")) {
        for (const json& p : at(doc, "processes").is_array() ? at(doc, "processes") : json::array()) {
            bind(s, 1, at(p, "pid"));
            bind(s, 2, at(p, "rank"));
            bind_id(s, 3, json_string_id(p, "node"));
            bind_id(s, 4, json_string_id(p, "procname"));
            bind_id(s, 5, json_string_id(p, "job_id"));
            bind(s, 6, at(p, "events"));
            bind(s, 7, at(p, "ops"));
            bind(s, 8, at(p, "bytes"));
            bind(s, 9, at(p, "errors"));
            bind(s, 10, at(p, "in_flight_at_end"));
            bind(s, 11, at(p, "unconfirmed"));
            bind(s, 12, at(p, "duration_ns"));
            bind(s, 13, at(at(p, "latency_ns"), "p50"));
            bind(s, 14, at(at(p, "latency_ns"), "p99"));
            step(s);
        }
        sqlite3_finalize(s);
    }

    // qps: the document lists the QPs that had an operation, ordered by QP id, which is the id operations use.
    const json& qps = at(doc, "qps");
    std::vector<QpId> ids(qps_seen_.begin(), qps_seen_.end());
    const bool same = qps.is_array() && ids.size() == qps.size();
    if (sqlite3_stmt* s = prepare(
            "INSERT INTO qps (id, pid, rank, node, device, qp_num, type, poster, gpu, ops, bytes, errors, in_flight, "
            "unconfirmed, latency_p50_ns, latency_p99_ns, latency_max_ns, peer_node, peer_device, peer_pid, peer_rank, "
            "peer_qp_num) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")) {
        int64_t extra = static_cast<int64_t>(topo_.qp_count());
        std::size_t i = 0;
        for (const json& q : qps.is_array() ? qps : json::array()) {
            // A row the operations do not name (cannot happen while the document and the listener see the same
            // operations) gets an id of its own rather than another QP's.
            const bool matches = same && at(q, "qp_num") == json(topo_.qp(ids[i]).qp_num);
            sqlite3_bind_int64(s, 1, matches ? static_cast<int64_t>(ids[i]) : extra++);
            ++i;
            bind(s, 2, at(q, "pid"));
            bind(s, 3, at(q, "rank"));
            bind_id(s, 4, json_string_id(q, "node"));
            bind_id(s, 5, json_string_id(q, "device"));
            bind(s, 6, at(q, "qp_num"));
            bind(s, 7, at(q, "type"));
            bind_id(s, 8, json_string_id(q, "poster"));
            bind(s, 9, at(q, "gpu"));
            bind(s, 10, at(q, "count"));
            bind(s, 11, at(q, "bytes"));
            bind(s, 12, at(q, "errors"));
            bind(s, 13, at(q, "in_flight"));
            bind(s, 14, at(q, "unconfirmed"));
            bind(s, 15, at(at(q, "latency_ns"), "p50"));
            bind(s, 16, at(at(q, "latency_ns"), "p99"));
            bind(s, 17, at(at(q, "latency_ns"), "max"));
            const json& peer = at(q, "peer");
            bind_id(s, 18, json_string_id(peer, "node"));
            bind_id(s, 19, json_string_id(peer, "device"));
            bind(s, 20, at(peer, "pid"));
            bind(s, 21, at(peer, "rank"));
            bind(s, 22, at(peer, "qp_num"));
            step(s);
        }
        sqlite3_finalize(s);
    }

    // windows and their links
    sqlite3_stmt* w = prepare("INSERT INTO windows (id, start_ns, end_ns) VALUES (?, ?, ?)");
    sqlite3_stmt* l = prepare(
        "INSERT INTO links (window_id, src_node, src_device, dst_node, dst_device, ops, bytes, busy_ns, bytes_per_s, "
        "latency_count, latency_p50_ns, latency_p99_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    sqlite3_stmt* wq = prepare(
        "INSERT INTO window_qps (window_id, node, pid, rank, qp_num, max_wrs, max_bytes, p99_bytes, recv_max_posted, "
        "recv_min_posted, rnr_events, mean_wrs, mean_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    sqlite3_stmt* wp = prepare(
        "INSERT INTO window_peers (window_id, src_node, src_pid, src_rank, dst_node, dst_pid, dst_rank, qps, mean_wrs, "
        "mean_bytes, max_wrs_sum, max_bytes_sum, rnr_events, recv_min_posted) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (w && l && wq && wp) {
        const json& windows = at(at(doc, "timeline"), "windows");
        int64_t id = 0;
        for (const json& win : windows.is_array() ? windows : json::array()) {
            ++id;
            sqlite3_bind_int64(w, 1, id);
            bind(w, 2, at(win, "start_ns"));
            bind(w, 3, at(win, "end_ns"));
            step(w);
            const json& links = at(win, "links");
            for (const json& k : links.is_array() ? links : json::array()) {
                sqlite3_bind_int64(l, 1, id);
                bind_id(l, 2, json_string_id(at(k, "src"), "node"));
                bind_id(l, 3, json_string_id(at(k, "src"), "device"));
                bind_id(l, 4, json_string_id(at(k, "dst"), "node"));
                bind_id(l, 5, json_string_id(at(k, "dst"), "device"));
                bind(l, 6, at(k, "ops"));
                bind(l, 7, at(k, "bytes"));
                bind(l, 8, at(k, "busy_ns"));
                bind(l, 9, at(k, "bytes_per_s"));
                bind(l, 10, at(at(k, "latency_ns"), "count"));
                bind(l, 11, at(at(k, "latency_ns"), "p50"));
                bind(l, 12, at(at(k, "latency_ns"), "p99"));
                step(l);
            }
            const json& wqps = at(win, "qps");
            for (const json& q : wqps.is_array() ? wqps : json::array()) {
                sqlite3_bind_int64(wq, 1, id);
                bind_id(wq, 2, json_string_id(q, "node"));
                // The JSON's fields, in the table's column order.
                int column = 3;
                for (const char* field : {"pid", "rank", "qp_num", "max_wrs", "max_bytes", "p99_bytes", "recv_max_posted",
                                          "recv_min_posted", "rnr_events", "mean_wrs", "mean_bytes"})
                    bind(wq, column++, at(q, field));
                step(wq);
            }
            const json& wpeers = at(win, "peers");
            for (const json& p : wpeers.is_array() ? wpeers : json::array()) {
                sqlite3_bind_int64(wp, 1, id);
                int column = 2;
                for (const char* end : {"src", "dst"}) {
                    const json& proc = at(p, end);
                    bind_id(wp, column++, json_string_id(proc, "node"));
                    bind(wp, column++, at(proc, "pid"));
                    bind(wp, column++, at(proc, "rank"));
                }
                for (const char* field : {"qps", "mean_wrs", "mean_bytes", "max_wrs_sum", "max_bytes_sum", "rnr_events",
                                          "recv_min_posted"})
                    bind(wp, column++, at(p, field));
                step(wp);
            }
        }
    }
    sqlite3_finalize(w);
    sqlite3_finalize(l);
    sqlite3_finalize(wq);
    sqlite3_finalize(wp);

    // phases (present when the analysis computed them; the table exists either way)
    if (sqlite3_stmt* s = prepare(
            "INSERT INTO phases (start_ns, end_ns, bytes, lower_bound_ns, efficiency, binding_port) "
            "VALUES (?, ?, ?, ?, ?, ?)")) {
        const json& phases = at(doc, "phases");
        for (const json& p : phases.is_array() ? phases : json::array()) {
            bind(s, 1, at(p, "start_ns"));
            bind(s, 2, at(p, "end_ns"));
            bind(s, 3, at(p, "bytes"));
            bind(s, 4, at(p, "lower_bound_ns"));
            bind(s, 5, at(p, "efficiency"));
            bind_id(s, 6, json_string_id(p, "binding_port"));
            step(s);
        }
        sqlite3_finalize(s);
    }

    // findings, their evidence as JSON text (SQLite's json_extract reads it)
    if (sqlite3_stmt* s = prepare("INSERT INTO findings (kind, severity, summary, evidence) VALUES (?, ?, ?, ?)")) {
        const json& findings = at(doc, "findings");
        for (const json& f : findings.is_array() ? findings : json::array()) {
            bind_id(s, 1, json_string_id(f, "kind"));
            bind_id(s, 2, json_string_id(f, "severity"));
            bind(s, 3, at(f, "summary"));
            const json& ev = at(f, "evidence");
            if (ev.is_null())
                sqlite3_bind_null(s, 4);
            else {
                const std::string text = json_text(ev);
                sqlite3_bind_text(s, 4, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
            }
            step(s);
        }
        sqlite3_finalize(s);
    }
    return !failed_;
}

bool SqliteWriter::close(const json& doc, const std::string& trace_path) {
    if (!db_) return false;
    bool ok = write_document(doc, trace_path) && exec(kIndices) && exec("COMMIT");
    sqlite3_finalize(insert_op_);
    sqlite3_finalize(insert_string_);
    insert_op_ = insert_string_ = nullptr;
    if (ok && sqlite3_close(db_) != SQLITE_OK) ok = fail("close");
    if (!ok) {
        abandon();
        return false;
    }
    db_ = nullptr;
    std::error_code ec;
    std::filesystem::rename(tmp_path_, path_, ec);
    if (ec) {
        error_ = fmt::format("rename {}: {}", tmp_path_, ec.message());
        std::filesystem::remove(tmp_path_, ec);
        return false;
    }
    return true;
}

}  // namespace sigmatrace::analyzer
