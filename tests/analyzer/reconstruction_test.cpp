// Operation reconstruction, statistics, traffic and barriers on events written as the tracer writes them
// (record structs fed through RecordFeeder), with exact expectations.
#include <gtest/gtest.h>

#include <set>
#include <span>
#include <string>
#include <vector>

#include "analyzer/analyses/analysis.h"
#include "record_feeder.h"

namespace sigmatrace::analyzer {
namespace {

using nlohmann::json;
using test::RecordFeeder;

constexpr uint64_t kPrefix = 0xfe80000000000000ULL;

// Two processes (rank 0 on nodeA, rank 1 on nodeB), each with device mlx0 and an RC QP to the other.
struct World {
    Analysis analysis;
    RecordFeeder feed{analysis};
    int64_t t = 1000000;
    uint32_t mode = 0;   // process_info.mode: 1 = counters mode

    explicit World(AnalysisOptions o = {}) : analysis(o) {}

    static uint64_t qp(int rank) { return 0x1000 + static_cast<uint64_t>(rank); }
    static uint32_t qpn(int rank) { return 100 + static_cast<uint32_t>(rank); }
    static int64_t vpid(int rank) { return 500 + rank; }

    void process(int rank, const char* host) {
        st_process_info_rec pi{};
        pi.schema_version = SIGMATRACE_SCHEMA_VERSION;
        pi.pid = static_cast<int32_t>(vpid(rank));
        pi.rank = rank;
        pi.world_size = 2;
        pi.mode = mode;
        pi.hostname = host;
        pi.job_id = "";
        feed.emit(t++, vpid(rank), pi);
        st_device_open_rec d{};
        d.ctx = 0xc0;
        d.device = "mlx0";
        feed.emit(t++, vpid(rank), d);
        st_port_info_rec p{};
        p.ctx = 0xc0;
        p.port = 1;
        p.gid_prefix = kPrefix;
        p.gid_iid = 0x10 + static_cast<uint64_t>(rank);
        feed.emit(t++, vpid(rank), p);
        st_cq_create_rec c{};
        c.ctx = 0xc0;
        c.cq = 0xcc;
        feed.emit(t++, vpid(rank), c);
    }
    void connect(int rank, int peer, uint64_t srq = 0, uint32_t sig_all = 0) {
        st_qp_create_rec q{};
        q.ctx = 0xc0;
        q.qp = qp(rank);
        q.qp_num = qpn(rank);
        q.qp_type = 2;
        q.send_cq = q.recv_cq = 0xcc;
        q.srq = srq;
        q.max_send_wr = 16;
        q.max_recv_wr = 16;
        q.sq_sig_all = sig_all;
        feed.emit(t++, vpid(rank), q);
        st_qp_modify_rec m{};
        m.qp = qp(rank);
        m.qp_num = qpn(rank);
        m.qp_state = 2;
        m.dest_qp_num = qpn(peer);
        m.is_global = 1;
        m.dgid_prefix = kPrefix;
        m.dgid_iid = 0x10 + static_cast<uint64_t>(peer);
        feed.emit(t++, vpid(rank), m);
    }
    void two_nodes() {
        process(0, "nodeA");
        process(1, "nodeB");
        connect(0, 1);
        connect(1, 0);
    }

    // One post_send event with n WRs (immediate mode: every WR at the event's time).
    void post(int rank, std::vector<uint64_t> wr_ids, uint8_t opcode, uint32_t bytes, std::vector<bool> signaled,
              int32_t ret = 0, int32_t bad = -1, uint64_t raddr = 0, uint32_t rkey = 0) {
        test::PostSendBatch b(std::move(wr_ids), bytes);
        for (uint32_t i = 0; i < b.n; ++i) {
            b.opcode[i] = opcode;
            b.send_flags[i] = signaled[i] ? 2u : 0u;
            b.raddr[i] = raddr;
            b.rkey[i] = rkey;
        }
        b.rec.qp = qp(rank);
        b.rec.qp_num = qpn(rank);
        b.rec.ret = ret;
        b.rec.bad_index = bad;
        feed.emit(t, vpid(rank), b.rec);
    }
    void poll(int rank, std::vector<uint64_t> wr_ids, std::vector<uint8_t> status, uint8_t wc_opcode, uint32_t byte_len = 0) {
        test::PollBatch b(std::move(wr_ids), qpn(rank));
        b.status = std::move(status);
        for (uint32_t i = 0; i < b.n; ++i) {
            b.opcode[i] = wc_opcode;
            b.byte_len[i] = byte_len;
        }
        b.point();
        feed.emit(t, vpid(rank), b.rec);
    }
    // A shared receive queue 0x5 of `rank`, and receives posted to it (`bytes` each, one SGE, at time t++).
    void srq(int rank, uint32_t max_wr) {
        st_srq_create_rec s{};
        s.ctx = 0xc0;
        s.srq = 0x5;
        s.max_wr = max_wr;
        feed.emit(t++, vpid(rank), s);
    }
    void post_srq_recv(int rank, std::vector<uint64_t> ids, uint32_t bytes) {
        test::RecvBatch<st_post_srq_recv_rec> b(std::move(ids), bytes);
        b.rec.srq = 0x5;
        feed.emit(t++, vpid(rank), b.rec);
    }
    // ibv_modify_qp(IBV_QP_STATE) by the QP's owner, and ibv_destroy_qp.
    void state(int rank, int32_t qp_state) {
        st_qp_modify_rec m{};
        m.qp = qp(rank);
        m.qp_num = qpn(rank);
        m.qp_state = qp_state;
        feed.emit(t++, vpid(rank), m);
    }
    void destroy(int rank) {
        st_qp_destroy_rec d{};
        d.qp = qp(rank);
        d.qp_num = qpn(rank);
        feed.emit(t++, vpid(rank), d);
    }
    void post_recv(int rank, std::vector<uint64_t> ids, uint32_t bytes) {
        test::RecvBatch<st_post_recv_rec> b(std::move(ids), bytes);
        b.rec.qp = qp(rank);
        b.rec.qp_num = qpn(rank);
        feed.emit(t, vpid(rank), b.rec);
    }
    json finish() { return analysis.finish(); }
};

bool has_finding(const json& doc, const std::string& kind) {
    for (const auto& f : doc["findings"])
        if (f["kind"] == kind) return true;
    return false;
}

TEST(Reconstruction, UnsignaledWrsCompleteWithTheNextSignaledCompletion) {
    World w;
    w.two_nodes();
    w.t = 2000000;
    w.post(0, {1, 2, 3, 4}, 0, 4096, {false, false, false, true});
    w.t = 2005000;
    w.poll(0, {4}, {0}, 1);
    json doc = w.finish();
    const json& op = doc["ops"]["by_opcode"]["RDMA_WRITE"];
    EXPECT_EQ(op["count"], 4);
    EXPECT_EQ(op["bytes"], 4 * 4096);
    EXPECT_EQ(op["implied"], 3);
    EXPECT_EQ(op["completed"], 4);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
    EXPECT_EQ(op["latency_ns"]["max"], 5000);
    EXPECT_EQ(op["latency_ns"]["p50"], 5000);
    ASSERT_EQ(doc["traffic"]["node_matrix"].size(), 1u);
    EXPECT_EQ(doc["traffic"]["node_matrix"][0]["src"], "nodeA");
    EXPECT_EQ(doc["traffic"]["node_matrix"][0]["dst"], "nodeB");
    EXPECT_EQ(doc["traffic"]["node_matrix"][0]["bytes"], 4 * 4096);
}

// What reconstruction hands over, call by call.
struct Runs : OpListener {
    void on_operation(const Operation& op) override { runs.push_back({op}); }
    void on_operations(std::span<const Operation> ops) override { runs.emplace_back(ops.begin(), ops.end()); }
    std::vector<std::vector<Operation>> runs;
};

// A QP connected to an address nothing in the trace has yet: its operations' peer is resolved again once the
// address's device appears, and once the remote QP does; not in between.
TEST(Reconstruction, APeerUnknownAtFirstIsResolvedOnceItsDeviceAndQpAppear) {
    World w;
    Runs runs;
    w.analysis.add_listener(&runs);
    w.process(0, "nodeA");
    w.connect(0, 1);
    const auto write = [&](uint64_t id) {
        w.post(0, {id}, 0, 64, {true});
        w.t += 1000;
        w.poll(0, {id}, {0}, 1);
        w.t += 1000;
    };
    write(1);
    // Rank 1 opens its device: not yet the GID's.
    st_process_info_rec pi{};
    pi.schema_version = SIGMATRACE_SCHEMA_VERSION;
    pi.pid = static_cast<int32_t>(World::vpid(1));
    pi.rank = 1;
    pi.world_size = 2;
    pi.hostname = "nodeB";
    pi.job_id = "";
    w.feed.emit(w.t++, World::vpid(1), pi);
    st_device_open_rec d{};
    d.ctx = 0xc0;
    d.device = "mlx0";
    w.feed.emit(w.t++, World::vpid(1), d);
    write(2);
    st_port_info_rec port{};   // now the GID's: node and device known, its QP not yet
    port.ctx = 0xc0;
    port.port = 1;
    port.gid_prefix = kPrefix;
    port.gid_iid = 0x11;
    w.feed.emit(w.t++, World::vpid(1), port);
    write(3);
    write(4);
    w.connect(1, 0);           // the remote QP
    write(5);
    w.finish();
    ASSERT_EQ(runs.runs.size(), 5u);
    for (int i : {0, 1}) {
        EXPECT_EQ(runs.runs[i][0].peer.node, kNoId) << i;
        EXPECT_EQ(runs.runs[i][0].peer.qp, kNoId) << i;
    }
    for (int i : {2, 3}) {
        EXPECT_NE(runs.runs[i][0].peer.node, kNoId) << i;
        EXPECT_NE(runs.runs[i][0].peer.dev, kNoId) << i;
        EXPECT_EQ(runs.runs[i][0].peer.qp, kNoId) << i;
    }
    const Peer& last = runs.runs[4][0].peer;
    EXPECT_EQ(last.node, runs.runs[2][0].peer.node);
    ASSERT_NE(last.qp, kNoId);
    EXPECT_NE(last.qp, runs.runs[4][0].qp);
    EXPECT_NE(last.proc, runs.runs[4][0].proc);
    EXPECT_NE(last.proc, kNoId);
}

TEST(Reconstruction, ACompletionHandsOverTheWrsItRetiresAsOneRunInPostOrder) {
    World w;
    Runs runs;
    w.analysis.add_listener(&runs);
    w.two_nodes();
    w.t = 2000000;
    w.post(0, {1, 2}, 0, 4096, {false, false});
    w.t = 2000100;
    w.post(0, {3}, 0, 100, {true});
    w.t = 2000200;
    w.post(0, {4}, 0, 100, {false});
    w.t = 2005000;
    w.poll(0, {3}, {0}, 0);
    w.finish();
    ASSERT_EQ(runs.runs.size(), 2u);
    const std::vector<Operation>& run = runs.runs[0];
    ASSERT_EQ(run.size(), 3u);
    EXPECT_EQ(run[0].wr_id, 1u);
    EXPECT_EQ(run[1].wr_id, 2u);
    EXPECT_EQ(run[2].wr_id, 3u);
    EXPECT_TRUE(run[0].implied);
    EXPECT_TRUE(run[1].implied);
    EXPECT_FALSE(run[2].implied);
    EXPECT_EQ(run[1].bytes, 4096u);
    EXPECT_EQ(run[2].bytes, 100u);
    for (const Operation& op : run) {
        EXPECT_EQ(op.outcome, OpOutcome::Completed);
        EXPECT_EQ(op.done_ts, 2005000);
        EXPECT_EQ(op.qp, run[2].qp);
        EXPECT_EQ(op.peer.proc, run[2].peer.proc);
        EXPECT_NE(op.peer.proc, kNoId);
    }
    // The WR still waiting at the end: on its own.
    ASSERT_EQ(runs.runs[1].size(), 1u);
    EXPECT_EQ(runs.runs[1][0].wr_id, 4u);
    EXPECT_EQ(runs.runs[1][0].outcome, OpOutcome::InFlight);
}

// Forwards every operation one at a time (OpListener's own on_operations) to another analysis.
struct OneByOne : OpListener {
    explicit OneByOne(Analysis& target) : to(target) {}
    void on_operation(const Operation& op) override { to.on_operation(op); }
    Analysis& to;
};

TEST(Reconstruction, AnalysesTakeARunAsTheyTakeItsOperationsOneByOne) {
    // Runs with what the run paths take apart: implied WRs of two sizes, posters and opcodes, a failed
    // completion with flushes after it, and a later success on the other side.
    World runs;
    World single;
    single.two_nodes();
    OneByOne forward(single.analysis);
    runs.analysis.add_listener(&forward);
    runs.two_nodes();
    runs.t = 2000000;
    runs.post(0, {1, 1, 1}, 0, 64, {false, false, false}, 0, -1, 0x9000, 7);
    runs.t += 300;
    runs.post(0, {1, 1}, 3, 8192, {false, true});
    runs.t += 5000;
    runs.poll(0, {1}, {0}, 3);
    runs.post(0, {2, 3, 4}, 0, 512, {false, true, true}, 0, -1, 0x9000, 7);
    runs.t += 70;
    runs.poll(0, {3, 4}, {12, 5}, 0);   // RETRY_EXC_ERR retiring 2 and 3, then a flush
    runs.post(1, {9, 9}, 2, 32, {false, true});
    runs.t += 900;
    runs.poll(1, {9}, {0}, 2);
    // Uniform runs (one opcode and link, all completed at one instant): the windows and phases take them whole.
    for (int k = 0; k < 3; ++k) {
        runs.post(0, {5, 5, 5, 5}, 0, 256, {false, false, false, true});
        runs.t += 400;
        runs.poll(0, {5}, {0}, 0);
    }
    const json a = runs.finish();
    const json b = single.finish();
    EXPECT_EQ(a["ops"]["total"], 22);
    EXPECT_EQ(a["ops"]["implied"], 15);
    EXPECT_EQ(a["ops"], b["ops"]);
    EXPECT_EQ(a["traffic"], b["traffic"]);
    EXPECT_EQ(a["qps"], b["qps"]);
    EXPECT_EQ(a["barriers"], b["barriers"]);
    EXPECT_EQ(a["findings"], b["findings"]);
    EXPECT_EQ(a["timeline"], b["timeline"]);
    EXPECT_EQ(a["phases"], b["phases"]);
    EXPECT_EQ(a["links"], b["links"]);
}

TEST(Reconstruction, SameWrIdForEveryWrLikePerftest) {
    // perftest gives all WRs of a QP the same wr_id and signals every cq_mod-th one.
    World w;
    w.two_nodes();
    for (int batch = 0; batch < 3; ++batch) {
        w.t += 1000;
        w.post(0, {7, 7, 7, 7, 7}, 0, 65536, {false, false, false, false, true});
        w.t += 1000;
        w.poll(0, {7}, {0}, 1);
    }
    json doc = w.finish();
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["count"], 15);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["completed"], 15);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
    EXPECT_TRUE(doc["warnings"].empty()) << doc["warnings"].dump();
}

TEST(Reconstruction, ErrorThenFlushedWrs) {
    World w;
    w.two_nodes();
    w.post(0, {1, 2, 3}, 0, 100, {true, false, true});
    w.t += 10;
    w.poll(0, {1, 2, 3}, {10, 5, 5}, 0);  // REM_ACCESS_ERR then WR_FLUSH_ERR (opcode undefined on errors)
    json doc = w.finish();
    EXPECT_EQ(doc["ops"]["errors"], 3);
    EXPECT_EQ(doc["ops"]["failed"], 1);
    EXPECT_EQ(doc["ops"]["flushed"], 2);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["bytes"], 0);
    ASSERT_EQ(doc["findings"].size(), 1u);
    EXPECT_EQ(doc["findings"][0]["kind"], "error_completions");
    EXPECT_EQ(doc["findings"][0]["evidence"]["by_status"]["REM_ACCESS_ERR"], 1);
    EXPECT_EQ(doc["findings"][0]["evidence"]["by_status"]["WR_FLUSH_ERR"], 2);
}

// The advice for discarded events follows the channel that lost them: --channel-size sizes the data channel;
// the set-up channel's size is fixed, so its loss asks for --blocking.
TEST(Reconstruction, DiscardedEventsAdviceFollowsTheChannel) {
    auto discard = [](const char* stream, bool setup_only, uint64_t count, bool packets = false) {
        DiscardRecord d;
        d.trace = "t";
        d.stream = stream;
        d.setup_only = setup_only;
        d.count = count;
        d.packets = packets;
        return d;
    };
    auto finding_of = [](World& w) {
        json doc = w.finish();
        for (const auto& f : doc["findings"])
            if (f["kind"] == "discarded_events") return f;
        return json{};
    };
    {
        World w;
        w.two_nodes();
        w.analysis.on_discarded(discard("t/sigmatrace_0", false, 40));
        const json f = finding_of(w);
        ASSERT_FALSE(f.is_null());
        const std::string summary = f["summary"];
        EXPECT_NE(summary.find("--channel-size"), std::string::npos) << summary;
        EXPECT_EQ(summary.find("--blocking"), std::string::npos) << summary;
        EXPECT_EQ(f["evidence"]["setup_channel_events"], 0);
        EXPECT_EQ(f["evidence"]["streams"][0]["channel"], "data");
    }
    {
        World w;
        w.two_nodes();
        w.analysis.on_discarded(discard("t/sigmatrace_setup_1", true, 7));
        w.analysis.on_discarded(discard("t/sigmatrace_setup_1", true, 2, true));   // packets: not events
        const json f = finding_of(w);
        ASSERT_FALSE(f.is_null());
        const std::string summary = f["summary"];
        EXPECT_EQ(summary.find("--channel-size"), std::string::npos) << summary;
        EXPECT_NE(summary.find("the set-up channel (a fixed size) lost 7 of them: record with --blocking"), std::string::npos)
            << summary;
        EXPECT_EQ(f["evidence"]["discarded_events"], 7);
        EXPECT_EQ(f["evidence"]["setup_channel_events"], 7);
        EXPECT_EQ(f["evidence"]["streams"][1]["channel"], "setup");
    }
    {
        World w;
        w.two_nodes();
        w.analysis.on_discarded(discard("t/sigmatrace_0", false, 40));
        w.analysis.on_discarded(discard("t/sigmatrace_setup_0", true, 3));
        const std::string summary = finding_of(w)["summary"];
        EXPECT_NE(summary.find("The tracer discarded 43 events"), std::string::npos) << summary;
        EXPECT_NE(summary.find("record with a larger --channel-size; the set-up channel (a fixed size) lost 3 of them: "
                               "record with --blocking"),
                  std::string::npos)
            << summary;
    }
    {
        World w;
        w.two_nodes();
        w.analysis.on_discarded(discard("t/sigmatrace_1", false, 3, true));   // packets only
        const std::string summary = finding_of(w)["summary"];
        EXPECT_NE(summary.find("The tracer discarded 3 packets (ring buffers full)"), std::string::npos) << summary;
    }
}

TEST(Reconstruction, ErrorStormAboveThreshold) {
    AnalysisOptions o;
    o.error_storm_threshold = 4;
    World w(o);
    w.two_nodes();
    w.post(0, {1, 2, 3, 4}, 0, 100, {true, true, true, true});
    w.poll(0, {1, 2, 3, 4}, {12, 5, 5, 5}, 0);
    json doc = w.finish();
    ASSERT_FALSE(doc["findings"].empty());
    EXPECT_EQ(doc["findings"][0]["kind"], "error_storm");
    EXPECT_EQ(doc["findings"][0]["severity"], "error");
}

// Live (--live): each finding once, as soon as the analysis knows it: the error storm at the completion that
// reached the threshold, a stalled queue once a later event shows nothing completed for --stall-after; nothing
// again on the next call.
TEST(LiveFindings, EachFindingOnceWhenItBecomesKnown) {
    AnalysisOptions o;
    o.error_storm_threshold = 3;
    o.stall_after_ns = 1'000'000;
    World w(o);
    w.two_nodes();
    EXPECT_TRUE(w.analysis.new_live_findings().empty());
    w.post(0, {1, 2}, 0, 100, {true, true});
    w.poll(0, {1, 2}, {12, 5}, 0);
    EXPECT_TRUE(w.analysis.new_live_findings().empty()) << "2 errors, threshold 3";
    w.post(0, {3}, 0, 100, {true});
    const int64_t third = w.t;
    w.poll(0, {3}, {5}, 0);
    std::vector<LiveFinding> f = w.analysis.new_live_findings();
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].finding["kind"], "error_storm");
    EXPECT_EQ(f[0].finding["evidence"]["errors"], 3);
    EXPECT_GE(f[0].event_ns, third);
    EXPECT_TRUE(w.analysis.new_live_findings().empty()) << "reported once";

    // Rank 1 posts and nothing completes; 2 ms later (an event of its) the queue is stalled.
    w.post(1, {7}, 0, 100, {true});
    const int64_t posted = w.t;
    EXPECT_TRUE(w.analysis.new_live_findings().empty());
    w.t += 2'000'000;
    w.post(1, {8}, 0, 100, {false});
    f = w.analysis.new_live_findings();
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].finding["kind"], "stalled_queue");
    EXPECT_NEAR(static_cast<double>(f[0].event_ns), static_cast<double>(posted + 1'000'000), 10.0);
    EXPECT_TRUE(w.analysis.new_live_findings().empty()) << "reported once";
}

TEST(Reconstruction, PostErrorsPostNothingFromBadWrOn) {
    World w;
    w.two_nodes();
    w.post(0, {1, 2, 3}, 0, 10, {true, true, true}, /*ret=*/12, /*bad=*/1);
    w.poll(0, {1}, {0}, 1);
    json doc = w.finish();
    EXPECT_EQ(doc["ops"]["total"], 1);
    ASSERT_EQ(doc["warnings"].size(), 1u);
    EXPECT_NE(doc["warnings"][0].get<std::string>().find("2 work requests were rejected"), std::string::npos);
}

TEST(Reconstruction, InFlightAtEndIsReportedPerProcess) {
    World w;
    w.two_nodes();
    w.post(1, {1, 2}, 0, 10, {true, true});
    json doc = w.finish();
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 2);
    bool found = false;
    for (const auto& f : doc["findings"]) found |= f["kind"] == "in_flight_at_end";
    EXPECT_TRUE(found);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["latency_ns"]["p99"], nullptr);
}

TEST(Reconstruction, ReceivesAndReadDirection) {
    World w;
    w.two_nodes();
    // rank 1 pre-posts receives; rank 0 sends 2 x 64 bytes and reads 1000 bytes from rank 1.
    w.post_recv(1, {50, 51, 52}, 4096);
    ++w.t;
    w.post(0, {1, 2}, 2, 64, {true, true});
    w.post(0, {3}, 4, 1000, {true});
    w.t += 100;
    w.poll(1, {50, 51}, {0, 0}, 128, 64);
    w.poll(0, {1, 2}, {0, 0}, 0);
    w.poll(0, {3}, {0}, 2, 1000);
    json doc = w.finish();
    EXPECT_EQ(doc["ops"]["by_opcode"]["RECV"]["count"], 2);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RECV"]["bytes"], 128);
    EXPECT_EQ(doc["ops"]["unconsumed_receives"], 1);
    std::map<std::pair<std::string, std::string>, uint64_t> m;
    for (const auto& c : doc["traffic"]["node_matrix"]) m[{c["src"], c["dst"]}] = c["bytes"];
    EXPECT_EQ((m[{"nodeA", "nodeB"}]), 128u);   // the SENDs (their RECVs are not counted again)
    EXPECT_EQ((m[{"nodeB", "nodeA"}]), 1000u);  // the READ: data moves from B to A
    ASSERT_EQ(doc["peers"].size(), 1u);
    EXPECT_EQ(doc["peers"][0]["src"]["rank"], 0);
    EXPECT_EQ(doc["peers"][0]["dst"]["rank"], 1);
    EXPECT_EQ(doc["peers"][0]["count"], 3);
}

TEST(Reconstruction, SharedReceiveQueue) {
    World w;
    w.process(0, "nodeA");
    w.process(1, "nodeB");
    w.srq(1, 4);
    w.connect(1, 0, 0x5);
    w.connect(0, 1);
    w.post_srq_recv(1, {9, 10}, 256);
    w.poll(1, {10, 9}, {0, 0}, 128, 32);
    json doc = w.finish();
    EXPECT_EQ(doc["ops"]["by_opcode"]["RECV"]["count"], 2);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RECV"]["bytes"], 64);
    EXPECT_TRUE(doc["warnings"].empty()) << doc["warnings"].dump();
}

TEST(Reconstruction, GpuWqesCompleteByWqeCounterOrStayObserved) {
    World w;
    w.two_nodes();
    for (int rank = 0; rank < 2; ++rank) {
        st_gpu_qp_create_rec c{};
        c.ctx = 0xc0;
        c.qpn = 900 + static_cast<uint32_t>(rank);
        c.sq_wqebb = 64;
        w.feed.emit(w.t++, World::vpid(rank), c);
        st_gpu_qp_modify_rec m{};
        m.ctx = 0xc0;
        m.qpn = c.qpn;
        m.command = 0x503;
        m.remote_qpn = 901 - static_cast<uint32_t>(rank);
        m.rgid_prefix = kPrefix;
        m.rgid_iid = 0x10 + static_cast<uint64_t>(1 - rank);
        w.feed.emit(w.t++, World::vpid(rank), m);
    }
    // Rank 0: 3 writes (last signaled) + a NOP; a CQE for index 2. Rank 1: 2 writes, no CQE visible.
    auto wqes = [&](int rank, std::vector<uint16_t> idx, std::vector<uint8_t> op, std::vector<uint8_t> fm) {
        const auto n = static_cast<uint32_t>(idx.size());
        std::vector<uint8_t> opmod(n);
        std::vector<uint32_t> bytes(n, 512), rkey(n), imm(n);
        std::vector<uint64_t> raddr(n), arg(n);
        st_gpu_wqe_rec r{};
        r.qpn = 900 + static_cast<uint32_t>(rank);
        r.n = n;
        r.wqe_index = idx.data();
        r.opcode = op.data();
        r.opmod = opmod.data();
        r.fm_ce_se = fm.data();
        r.bytes = bytes.data();
        r.raddr = raddr.data();
        r.rkey = rkey.data();
        r.imm = imm.data();
        r.atomic_arg = arg.data();
        w.feed.emit(w.t, World::vpid(rank), r);
    };
    wqes(0, {0, 1, 2, 3}, {0x08, 0x08, 0x08, 0x00}, {0, 0, 0x08, 0});
    wqes(1, {0, 1}, {0x08, 0x0a}, {0, 0x08});
    w.t += 700;
    {
        std::vector<uint16_t> ctr = {2};
        std::vector<uint8_t> op = {0}, syn = {0};
        std::vector<uint32_t> bc = {0}, qpn = {900};
        std::vector<uint64_t> ts = {0};
        st_gpu_cqe_rec c{};
        c.cqn = 1;
        c.n = 1;
        c.wqe_counter = ctr.data();
        c.opcode = op.data();
        c.syndrome = syn.data();
        c.byte_cnt = bc.data();
        c.qpn = qpn.data();
        c.hw_ts = ts.data();
        w.feed.emit(w.t, World::vpid(0), c);
    }
    json doc = w.finish();
    EXPECT_EQ(doc["ops"]["gpu"], 5);
    EXPECT_EQ(doc["ops"]["observed_without_completion"], 2);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["count"], 4);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["completed"], 3);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["latency_ns"]["max"], 700);
    EXPECT_EQ(doc["ops"]["by_opcode"]["SEND"]["count"], 1);
    std::map<std::pair<std::string, std::string>, uint64_t> m;
    for (const auto& c : doc["traffic"]["node_matrix"]) m[{c["src"], c["dst"]}] = c["bytes"];
    EXPECT_EQ((m[{"nodeA", "nodeB"}]), 3u * 512);
    EXPECT_EQ((m[{"nodeB", "nodeA"}]), 2u * 512);  // observed without CQE: still moved data
}

// What the GPU watcher could not put in the trace (gpu_watch_stats, gpu_cq_stats) is summed over queues and
// processes and said in the warnings: without it, a lossy GPU trace reads like a complete one.
TEST(Reconstruction, GpuWatcherLossesAreWarnedWithTheirTotals) {
    World w;
    w.two_nodes();
    json doc = w.finish();
    for (const auto& warning : doc["warnings"])
        EXPECT_EQ(warning.get<std::string>().find("GPU"), std::string::npos) << "nothing lost, nothing said";

    World lossy;
    lossy.two_nodes();
    st_gpu_watch_stats_rec a{900, 5, 0, 100000};
    st_gpu_watch_stats_rec b{901, 7, 2, 5000};
    st_gpu_watch_stats_rec c{900, 0, 1, 5000};
    lossy.feed.emit(lossy.t++, World::vpid(0), a);
    lossy.feed.emit(lossy.t++, World::vpid(1), b);
    lossy.feed.emit(lossy.t++, World::vpid(0), c);
    st_gpu_cq_stats_rec m1{0x78, 150, 5000};
    st_gpu_cq_stats_rec m2{0x79, 3, 5000};
    lossy.feed.emit(lossy.t++, World::vpid(0), m1);
    lossy.feed.emit(lossy.t++, World::vpid(1), m2);
    doc = lossy.finish();
    std::string all;
    for (const auto& warning : doc["warnings"]) all += warning.get<std::string>() + "\n";
    EXPECT_NE(all.find("12 WQEs of directly driven queues (GPU or CPU-direct) were overwritten in their ring before the watcher read them"), std::string::npos)
        << all;
    EXPECT_NE(all.find("3 WQEs of directly driven queues did not decode and were skipped"), std::string::npos) << all;
    EXPECT_NE(all.find("153 completions of directly driven queues were consumed by the application before the watcher read them"),
              std::string::npos) << all;
}

TEST(Reconstruction, MalformedSequencesAreCountedNotTrusted) {
    World w;
    w.two_nodes();
    // n says 5 but the sequences hold 2 elements.
    std::vector<uint64_t> ids = {1, 2}, zero64 = {0, 0};
    std::vector<uint8_t> op = {0, 0};
    std::vector<uint32_t> flags = {2, 2}, len = {8, 8}, zero32 = {0, 0};
    std::vector<uint16_t> sge = {1, 1};
    st_post_send_rec r{};
    r.qp = World::qp(0);
    r.qp_num = World::qpn(0);
    r.n = 2;
    r.bad_index = -1;
    r.wr_id = ids.data();
    r.opcode = op.data();
    r.send_flags = flags.data();
    r.num_sge = sge.data();
    r.bytes = len.data();
    r.raddr = zero64.data();
    r.rkey = zero32.data();
    r.imm = zero32.data();
    r.remote_qpn = zero32.data();
    r.ah = zero64.data();
    r.ts = zero64.data();
    struct Capture : OpListener {
        void on_operation(const Operation&) override { ++n; }
        int n = 0;
    } capture;
    w.analysis.add_listener(&capture);
    w.feed.emit_with(w.t, World::vpid(0), r, [](DecodedEvent& ev) {
        ev.f[fields::post_send::n].u = 5;          // n claims 5 WRs
        ev.f[fields::post_send::bytes].seq_len = 1; // and one sequence is shorter than the others
    });
    EXPECT_EQ(capture.n, 0);
    json doc = w.finish();
    EXPECT_EQ(capture.n, 2);  // the WRs the longest sequence holds, in flight at end
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 2);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["count"], 2);
    ASSERT_FALSE(doc["warnings"].empty());
    EXPECT_NE(doc["warnings"][0].get<std::string>().find("1 malformed events"), std::string::npos);
}

TEST(Reconstruction, UnknownQpIsAdoptedAndWarned) {
    World w;
    w.process(0, "nodeA");
    w.post(0, {1}, 0, 8, {true});  // no qp_create for it in the trace
    w.poll(0, {1}, {0}, 1);
    json doc = w.finish();
    EXPECT_EQ(doc["ops"]["total"], 1);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["completed"], 1);
    EXPECT_EQ(doc["traffic"]["unresolved_ops"], 1);
    EXPECT_FALSE(doc["warnings"].empty());
}

TEST(Barriers, DetectsEpochsSpreadAndStraggler) {
    World w;
    // Three ranks signal rank 0's word (rank 0 through a loopback QP); rank 2 is 3 us late every round. Ops are
    // reconstructed in an interleaved order to show that the detector does not need per-epoch ordering.
    w.process(0, "nodeA");
    w.process(1, "nodeB");
    w.process(2, "nodeC");
    {
        st_port_info_rec p{};  // rank 2's GID
        p.ctx = 0xc0;
        p.gid_prefix = kPrefix;
        p.gid_iid = 0x12;
        w.feed.emit(w.t++, World::vpid(2), p);
    }
    w.connect(0, 0);
    w.connect(1, 0);
    w.connect(2, 0);
    for (int e = 0; e < 12; ++e) {
        const int64_t base = 10000000 + e * 100000;
        for (int r : {0, 1, 2}) {
            w.t = base + (r == 2 ? 3000 : r * 100);
            w.post(r, {static_cast<uint64_t>(e)}, 6, 8, {true}, 0, -1, 0xabc0, 0x77);
        }
        for (int r : {2, 1, 0}) {
            w.t = base + 5000;
            w.poll(r, {static_cast<uint64_t>(e)}, {0}, 4, 8);
        }
    }
    json doc = w.finish();
    const json& b = doc["barriers"];
    EXPECT_EQ(b["epochs"], 12);
    EXPECT_EQ(b["spread_ns"]["max"], 3000);
    EXPECT_NEAR(b["spread_ns"]["p50"].get<double>(), 3000, 30);
    ASSERT_FALSE(b["stragglers"].empty());
    EXPECT_EQ(b["stragglers"][0]["rank"], 2);
    EXPECT_EQ(b["stragglers"][0]["times_last"], 12);
    ASSERT_EQ(b["words"].size(), 1u);
    EXPECT_EQ(b["words"][0]["raddr"], "0xabc0");
    EXPECT_EQ(b["words"][0]["node"], "nodeA");
    bool straggler = false;
    for (const auto& f : doc["findings"]) straggler |= f["kind"] == "barrier_straggler" && f["evidence"]["rank"] == 2;
    EXPECT_TRUE(straggler);
}

TEST(Barriers, OneParticipantPerWordIsNotABarrier) {
    World w;
    w.two_nodes();
    for (int e = 0; e < 20; ++e) {
        w.t += 1000;
        w.post(0, {static_cast<uint64_t>(e)}, 0, 8, {true}, 0, -1, 0x100, 1);
        w.post(1, {static_cast<uint64_t>(e)}, 0, 8, {true}, 0, -1, 0x200, 1);
        w.poll(0, {static_cast<uint64_t>(e)}, {0}, 1);
        w.poll(1, {static_cast<uint64_t>(e)}, {0}, 1);
    }
    json doc = w.finish();
    EXPECT_EQ(doc["barriers"]["epochs"], 0);
}

// A bit of everything the data events carry: SRQ receives, SENDs (some unsignaled), WRITEs, READs,
// atomics, and error and flushed completions.
json analyse_mixed_workload(bool scramble_unread, uint64_t* scrambled = nullptr) {
    World w;
    if (scramble_unread) w.feed.scramble_unread_sequences();
    w.process(0, "nodeA");
    w.process(1, "nodeB");
    w.srq(1, 8);
    w.connect(0, 1);
    w.connect(1, 0, 0x5);
    for (uint64_t e = 0; e < 12; ++e) {
        w.t += 10000;
        w.post_srq_recv(1, {90 + e, 190 + e}, 256);
        w.post(0, {100 + e, 200 + e}, 2, 64, {false, true});                  // two SENDs, the first unsignaled
        w.post(0, {300 + e}, 0, 4096, {true}, 0, -1, 0x7000 + 64 * e, 0x33);  // a WRITE
        w.post(1, {400 + e}, 4, 1000, {true}, 0, -1, 0x9000, 0x44);           // a READ
        for (int rank : {0, 1}) w.post(rank, {500 + e}, 6, 8, {true}, 0, -1, 0xabc0, 0x77);  // atomics
        w.t += 3000;
        w.poll(1, {90 + e, 190 + e}, {0, 0}, 128, 64);
        w.poll(0, {200 + e, 300 + e, 500 + e}, {0, 0, 0}, 1);
        w.poll(1, {400 + e, 500 + e}, {0, 0}, 2, 1000);
    }
    w.post(0, {7, 8}, 0, 100, {true, true});
    w.poll(0, {7, 8}, {10, 5}, 0);  // REM_ACCESS_ERR, then WR_FLUSH_ERR
    if (scrambled) *scrambled = w.feed.scrambled_elements();
    return w.finish();
}

TEST(UnreadFields, TheAnalysisDoesNotDependOnThem) {
    // The Babeltrace2 consumer hands the sequences of unread_fields.h over as zeros. If this fails, an analysis
    // reads one of them: take it out of kUnreadSequences.
    uint64_t scrambled = 0;
    const json plain = analyse_mixed_workload(false);
    const json scrambled_doc = analyse_mixed_workload(true, &scrambled);
    EXPECT_GT(scrambled, 100u);  // the garbage did reach the analysis
    EXPECT_EQ(plain["ops"]["total"], 98);  // 12 rounds of 8 operations, 2 failed WRITEs
    EXPECT_TRUE(plain["warnings"].empty()) << plain["warnings"].dump();
    const json patch = json::diff(plain, scrambled_doc);
    EXPECT_TRUE(patch.empty()) << "the analysis reads a sequence of unread_fields.h; what changed: " << patch.dump();
}

// Three ranks whose signals all go to rank 0's word 0xabc0 (rank 0 through a loopback QP).
void three_ranks_on_one_word(World& w) {
    w.process(0, "nodeA");
    w.process(1, "nodeB");
    w.process(2, "nodeC");
    w.connect(0, 0);
    w.connect(1, 0);
    w.connect(2, 0);
}
// One round: each of `ranks` signals the word (an 8-byte fetch-and-add) and polls its completion.
void signal_round(World& w, std::initializer_list<int> ranks, uint64_t round) {
    w.t += 100000;
    for (int r : ranks) w.post(r, {round}, 6, 8, {true}, 0, -1, 0xabc0, 0x77);
    w.t += 5000;
    for (int r : ranks) w.poll(r, {round}, {0}, 4, 8);
}
// Rank 0 signals the word alone for `alone` rounds, then ranks 0, 1 and 2 together for 50: the document.
json alone_then_together(int alone) {
    World w;
    three_ranks_on_one_word(w);
    uint64_t round = 0;
    for (int i = 0; i < alone; ++i) signal_round(w, {0}, round++);
    for (int i = 0; i < 50; ++i) signal_round(w, {0, 1, 2}, round++);
    return w.finish();
}

TEST(Barriers, AWordJoinedWithinTheCloseLagIsStillABarrier) {
    // Rank 0 signals alone 5 times (no epoch closes before the busiest participant is kCloseLag = 8 rounds
    // ahead), then ranks 1 and 2 join and all three signal 50 rounds. Each rank's k-th signal is epoch k, so
    // epochs 0..49 are complete and rank 0's last 5 are not: 50 of 55, within the 10% a barrier may miss.
    json doc = alone_then_together(5);
    EXPECT_EQ(doc["barriers"]["epochs"], 50);
    ASSERT_EQ(doc["barriers"]["words"].size(), 1u);
    EXPECT_EQ(doc["barriers"]["words"][0]["raddr"], "0xabc0");
}

TEST(Barriers, AWordSignalledAloneUntilItsEpochsCloseNeverBecomesABarrier) {
    // Rank 0 signals alone 10 times: its first epochs close with one participant. Ranks 1 and 2 then join
    // and the three signal in perfect rounds, but a participant that appears after epochs closed without it
    // is not the barrier pattern: the word stays a candidate, never a barrier.
    json doc = alone_then_together(10);
    EXPECT_EQ(doc["barriers"]["epochs"], 0);
    EXPECT_TRUE(doc["barriers"]["words"].empty());
    EXPECT_EQ(doc["barriers"]["candidate_words"], 1);
}

TEST(Barriers, AWordThatDiedOnOneTargetDoesNotHideTheSameAddressOnAnother) {
    // Rank 3 signals nodeA's word 0xabc0 alone until the word can no longer be a barrier; its QP is then
    // connected to nodeB, where it and rank 2 signal the same address and rkey in rounds: a barrier of its own,
    // which the detector must not answer from the dead word's slot.
    World w;
    w.process(0, "nodeA");
    w.process(1, "nodeB");
    w.process(2, "nodeC");
    w.process(3, "nodeD");
    w.connect(3, 0);
    uint64_t round = 0;
    for (int i = 0; i < 20; ++i) signal_round(w, {3}, round++);
    st_qp_modify_rec m{};   // rank 3's QP, to nodeB
    m.qp = World::qp(3);
    m.qp_num = World::qpn(3);
    m.qp_state = 2;
    m.dest_qp_num = World::qpn(1);
    m.is_global = 1;
    m.dgid_prefix = kPrefix;
    m.dgid_iid = 0x11;
    w.feed.emit(w.t++, World::vpid(3), m);
    w.connect(2, 1);
    for (int i = 0; i < 30; ++i) signal_round(w, {2, 3}, round++);
    json doc = w.finish();
    EXPECT_EQ(doc["barriers"]["candidate_words"], 2);
    EXPECT_EQ(doc["barriers"]["epochs"], 30);
    ASSERT_EQ(doc["barriers"]["words"].size(), 1u);
    EXPECT_EQ(doc["barriers"]["words"][0]["raddr"], "0xabc0");
    EXPECT_EQ(doc["barriers"]["words"][0]["node"], "nodeB");
}

st_process_info_rec identity(int64_t pid, int32_t rank, const char* host) {
    st_process_info_rec pi{};
    pi.schema_version = SIGMATRACE_SCHEMA_VERSION;
    pi.pid = static_cast<int32_t>(pid);
    pi.rank = rank;
    pi.world_size = 2;
    pi.hostname = host;
    pi.job_id = "";
    return pi;
}

// rank 0 (nodeA) writes 3 x 1000 bytes to rank 1 (nodeB), rank 1 writes 1000 bytes back: inbound skew over the two
// nodes is 3000 / 2000 = 1.5 (it would be 3000 / 1333 = 2.25 if a third node without RDMA entered the mean).
void unequal_exchange(World& w) {
    w.post(0, {1, 2, 3}, 0, 1000, {true, true, true});
    w.post(1, {9}, 0, 1000, {true});
    w.t += 100;
    w.poll(0, {1, 2, 3}, {0, 0, 0}, 1);
    w.poll(1, {9}, {0}, 1);
}

void expect_two_nodes_only(const json& doc) {
    EXPECT_EQ(doc["trace"]["processes"], 2);
    EXPECT_EQ(doc["trace"]["nodes"], 2);
    ASSERT_EQ(doc["processes"].size(), 2u);
    EXPECT_EQ(doc["processes"][0]["rank"], 0);
    EXPECT_EQ(doc["processes"][0]["node"], "nodeA");
    EXPECT_EQ(doc["processes"][1]["node"], "nodeB");
    std::set<std::string> nodes;
    for (const auto& c : doc["traffic"]["node_matrix"]) nodes.insert({c["src"].get<std::string>(), c["dst"].get<std::string>()});
    EXPECT_EQ(nodes, (std::set<std::string>{"nodeA", "nodeB"}));
    ASSERT_EQ(doc["traffic"]["nodes"].size(), 2u);
    EXPECT_DOUBLE_EQ(doc["traffic"]["inbound_skew"].get<double>(), 1.5);
    EXPECT_DOUBLE_EQ(doc["traffic"]["outbound_skew"].get<double>(), 1.5);
}

// Eager identity (the tracer reports every preloaded process at start): mpirun reports itself on the machine's
// hostname and never touches verbs; `sigmatrace fabric` reports itself, then exec()s the workload, which reports
// again with the same vpid and the fabric node name. Neither the launcher nor the pre-exec identity is a process or
// a node; the exec'd process is one process, shown with its final identity.
TEST(Processes, LaunchersAndThePreExecIdentityAreNotProcessesOrNodes) {
    World w;
    w.feed.emit_with(w.t++, 400, identity(400, -1, "vm"), [](DecodedEvent& e) { e.procname = "mpirun"; });
    w.feed.emit_with(w.t++, World::vpid(0), identity(World::vpid(0), 0, "vm"), [](DecodedEvent& e) { e.procname = "sigmatrace"; });
    w.feed.emit_with(w.t++, World::vpid(1), identity(World::vpid(1), 1, "vm"), [](DecodedEvent& e) { e.procname = "sigmatrace"; });
    w.two_nodes();  // the exec'd workloads: process_info again (nodeA / nodeB), then devices and QPs
    unequal_exchange(w);
    const json doc = w.finish();
    expect_two_nodes_only(doc);
    EXPECT_EQ(doc["trace"]["processes_without_rdma"], 1);  // mpirun
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
    EXPECT_TRUE(doc["warnings"].empty()) << doc["warnings"].dump();
}

// Lazy identity (the tracer reports a process at its first verbs call): launchers leave no event at all, and a
// launcher that does leave events other than process_info (a fork child, a non-verbs event) still is no process.
TEST(Processes, LazyIdentityAndEventsBeforeItGiveTheSameCounts) {
    World w;
    st_mr_dereg_rec stray{};  // not RDMA activity: no device, no QP
    w.feed.emit(w.t++, 401, stray);
    w.two_nodes();
    unequal_exchange(w);
    const json doc = w.finish();
    expect_two_nodes_only(doc);
    EXPECT_EQ(doc["trace"]["processes_without_rdma"], 1);
}

// A process that used verbs, exec()s and uses verbs again is two incarnations: the first one's posted work ends in
// flight at the exec, and both count (each did RDMA).
TEST(Processes, ExecAfterRdmaWorkIsANewIncarnation) {
    World w;
    w.two_nodes();
    w.post(0, {1}, 0, 8, {true});
    w.feed.emit_with(w.t++, World::vpid(0), identity(World::vpid(0), 0, "nodeA"), [](DecodedEvent& e) { e.procname = "second"; });
    st_device_open_rec d{};
    d.ctx = 0xc1;
    d.device = "mlx0";
    w.feed.emit(w.t++, World::vpid(0), d);
    const json doc = w.finish();
    EXPECT_EQ(doc["trace"]["processes"], 3);
    EXPECT_EQ(doc["trace"]["nodes"], 2);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 1);
}

TEST(Processes, ASecondProcessInfoStartsANewIncarnation) {
    World w;
    w.two_nodes();
    w.post(0, {1}, 0, 8, {true});
    st_process_info_rec pi{};
    pi.schema_version = SIGMATRACE_SCHEMA_VERSION;
    pi.pid = static_cast<int32_t>(World::vpid(0));
    pi.rank = 5;
    pi.hostname = "nodeA";
    pi.job_id = "";
    w.feed.emit(w.t++, World::vpid(0), pi);  // the pid is reused by a new process
    json doc = w.finish();
    EXPECT_EQ(doc["trace"]["processes"], 2);               // the new incarnation has done no RDMA yet
    EXPECT_EQ(doc["trace"]["processes_without_rdma"], 1);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 1);
}

// ------------------------------------------------------------------ teardown, latency and bytes by outcome

// UCX's shape: sends posted unsignaled after the last signaled one, then the owner destroys its QP. The tail is
// unconfirmed (no completion says so, the run was normal), not in flight, and raises no finding.
TEST(Teardown, UnsignaledTailOfADestroyedQpIsUnconfirmedNotInFlight) {
    World w;
    w.two_nodes();
    w.post(0, {1, 2, 3}, 0, 1000, {false, false, true});
    w.t += 4000;
    w.poll(0, {3}, {0}, 1);
    w.t += 1000;
    w.post(0, {4, 5}, 0, 300, {false, false});   // the tail: never signaled
    w.t += 1000;
    w.destroy(0);
    const json doc = w.finish();
    const json& op = doc["ops"]["by_opcode"]["RDMA_WRITE"];
    EXPECT_EQ(op["count"], 5);
    EXPECT_EQ(op["completed"], 3);
    EXPECT_EQ(op["unconfirmed"], 2);
    EXPECT_EQ(op["in_flight"], 0);
    EXPECT_EQ(op["posted_bytes"], 3600);
    EXPECT_EQ(op["completed_bytes"], 3000);
    EXPECT_EQ(op["unconfirmed_bytes"], 600);
    EXPECT_EQ(op["in_flight_bytes"], 0);
    EXPECT_EQ(op["bytes"], 3600);   // moved data: the unconfirmed tail is in the matrix too
    ASSERT_EQ(doc["traffic"]["node_matrix"].size(), 1u);
    EXPECT_EQ(doc["traffic"]["node_matrix"][0]["bytes"], 3600);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
    EXPECT_EQ(doc["ops"]["unconfirmed"], 2);
    EXPECT_EQ(doc["ops"]["unconfirmed_bytes"], 600);
    EXPECT_TRUE(doc["findings"].empty()) << doc["findings"].dump();
}

// RESET discards the QP's WQEs: what waited is unconfirmed at once; the QP can be brought back and used again.
TEST(Teardown, ResetEndsTheQueueAndAReusedQpStartsClean) {
    World w;
    w.two_nodes();
    w.post(0, {1}, 0, 100, {false});
    w.state(0, 0);   // RESET
    w.state(0, 1);   // INIT: reused
    w.post(0, {2}, 0, 100, {true});
    const json doc = w.finish();   // the trace ends with the reused QP alive and WR 2 outstanding
    EXPECT_EQ(doc["ops"]["unconfirmed"], 1);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 1);
    EXPECT_TRUE(has_finding(doc, "in_flight_at_end"));
}

// Really in flight: the QP was never destroyed nor reset (the process died, or the trace stopped): warned.
TEST(Teardown, ALiveQpAtTheEndIsInFlight) {
    World w;
    w.two_nodes();
    w.post(0, {1, 2}, 0, 700, {false, true});
    const json doc = w.finish();
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 2);
    EXPECT_EQ(doc["ops"]["in_flight_bytes"], 1400);
    EXPECT_EQ(doc["ops"]["unconfirmed"], 0);
    ASSERT_TRUE(has_finding(doc, "in_flight_at_end"));
    for (const auto& f : doc["findings"])
        if (f["kind"] == "in_flight_at_end") {
            EXPECT_EQ(f["evidence"]["operations"], 2);
            EXPECT_EQ(f["severity"], "warning");
        }
}

// Open MPI openib's teardown: the owner moves its QP to ERR and polls the flushes of its pre-posted receives.
// Those are not errors (no error_storm), and an error before the teardown still is one.
TEST(Teardown, FlushesAfterTheOwnersErrTransitionAreNotErrors) {
    AnalysisOptions o;
    o.error_storm_threshold = 4;
    World w(o);
    w.two_nodes();
    std::vector<uint64_t> ids;
    for (uint64_t i = 0; i < 32; ++i) ids.push_back(100 + i);
    w.post_recv(1, ids, 4096);
    w.post(0, {1}, 2, 64, {true});
    w.t += 500;
    w.poll(1, {100}, {0}, 128, 64);
    w.poll(0, {1}, {0}, 0);
    // Before the teardown: a flush there is an error (something else failed the QP).
    w.post(0, {2, 3}, 0, 64, {true, true});
    w.t += 500;
    w.poll(0, {2, 3}, {12, 5}, 0);   // RETRY_EXC_ERR, then its flush
    w.state(1, 6);                   // ERR, by its owner
    w.t += 100;
    std::vector<uint64_t> flushed(ids.begin() + 1, ids.end());
    w.poll(1, flushed, std::vector<uint8_t>(flushed.size(), 5), 0);
    w.destroy(1);
    const json doc = w.finish();
    EXPECT_EQ(doc["ops"]["errors"], 2);
    EXPECT_EQ(doc["ops"]["failed"], 1);
    EXPECT_EQ(doc["ops"]["flushed"], 1);
    EXPECT_EQ(doc["ops"]["flushed_at_teardown"], 31);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RECV"]["flushed_at_teardown"], 31);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RECV"]["errors"], 0);
    EXPECT_FALSE(has_finding(doc, "error_storm"));
    ASSERT_TRUE(has_finding(doc, "error_completions"));
    for (const auto& f : doc["findings"])
        if (f["kind"] == "error_completions") { EXPECT_EQ(f["evidence"]["errors"], 2); }
}

// Latency distributions hold only operations whose own completion was seen; implied ones are apart; a
// receive's post -> completion is the time it sat posted, not a latency.
TEST(Latency, ObservedImpliedAndTimePostedAreApart) {
    World w;
    w.two_nodes();
    w.t = 2000000;
    w.post(0, {1, 2, 3, 4}, 2, 64, {false, false, false, true});   // SENDs, one signaled
    w.post_recv(1, {50, 51, 52, 53}, 64);
    w.t = 2300000;
    w.poll(1, {50, 51, 52, 53}, {0, 0, 0, 0}, 128, 64);
    w.t = 2003000;
    w.poll(0, {4}, {0}, 0);
    const json doc = w.finish();
    const json& send = doc["ops"]["by_opcode"]["SEND"];
    EXPECT_EQ(send["completed"], 4);
    EXPECT_EQ(send["implied"], 3);
    EXPECT_EQ(send["latency_ns"]["count"], 1);
    EXPECT_EQ(send["latency_ns"]["p50"], 3000);
    EXPECT_EQ(send["latency_ns"]["max"], 3000);
    EXPECT_EQ(send["implied_latency_ns"]["count"], 3);
    EXPECT_EQ(send["implied_latency_ns"]["max"], 3000);
    EXPECT_FALSE(send.contains("time_posted_ns"));
    const json& recv = doc["ops"]["by_opcode"]["RECV"];
    EXPECT_EQ(recv["latency_ns"]["count"], 0);
    EXPECT_EQ(recv["latency_ns"]["p50"], nullptr);
    EXPECT_EQ(recv["time_posted_ns"]["count"], 4);
    EXPECT_EQ(recv["time_posted_ns"]["max"], 300000);
    // Per process: latency of rank 1 (receives only) is not a measurement; rank 0 has its one signaled SEND.
    for (const auto& p : doc["processes"]) {
        if (p["rank"] == 1) { EXPECT_EQ(p["latency_ns"]["p50"], nullptr); }
        if (p["rank"] == 0) { EXPECT_EQ(p["latency_ns"]["max"], 3000); }
    }
}

// ------------------------------------------------------------------ traffic skew only where meaningful

// Two nodes, one flow: 2.00x by construction, silent. Three nodes with two flows and enough bytes: reported.
TEST(Skew, SilentOnTwoNodesOrOneFlowReportedOnThreeNodes) {
    {
        World w;
        w.two_nodes();
        w.post(0, {1, 2, 3}, 0, 1 << 20, {false, false, true});
        w.poll(0, {3}, {0}, 1);
        const json doc = w.finish();
        EXPECT_DOUBLE_EQ(doc["traffic"]["outbound_skew"].get<double>(), 2.0);
        EXPECT_FALSE(doc["traffic"]["skew_meaningful"].get<bool>());
        EXPECT_TRUE(doc["findings"].empty()) << doc["findings"].dump();
    }
    // Three nodes: A and B each send to C (two flows). Inbound: C gets all of it (3.00x).
    auto three = [](uint32_t bytes_each) {
        World w;
        w.process(0, "nodeA");
        w.process(1, "nodeB");
        w.process(2, "nodeC");
        w.connect(0, 2);
        w.connect(1, 2);
        w.post(0, {1}, 0, bytes_each, {true});
        w.post(1, {1}, 0, bytes_each, {true});
        w.poll(0, {1}, {0}, 1);
        w.poll(1, {1}, {0}, 1);
        return w.finish();
    };
    const json doc = three(64 * 1024);
    EXPECT_TRUE(doc["traffic"]["skew_meaningful"].get<bool>());
    EXPECT_DOUBLE_EQ(doc["traffic"]["inbound_skew"].get<double>(), 3.0);
    ASSERT_TRUE(has_finding(doc, "traffic_skew"));
    for (const auto& f : doc["findings"])
        if (f["kind"] == "traffic_skew" && f["evidence"]["direction"] == "inbound") {
            EXPECT_EQ(f["evidence"]["flows"], 2);
            EXPECT_EQ(f["evidence"]["nodes_with_traffic"], 3);
            EXPECT_EQ(f["evidence"]["inter_node_bytes"], 128 * 1024);
        }
    // The same shape with 2 x 16 KiB (32 KiB < 64 KiB): set-up traffic, silent.
    const json small = three(16 * 1024);
    EXPECT_FALSE(small["traffic"]["skew_meaningful"].get<bool>());
    EXPECT_FALSE(has_finding(small, "traffic_skew"));
}

// ------------------------------------------------------------------ counters mode

// A counters-mode trace: qp_counters events only. Matrix, rails, per-QP and per-peer totals and rates come
// from the counters; by_opcode stays empty and the document says what needs per-operation events.
TEST(Counters, MatrixRailsAndPerQpTotalsFromQpCounters) {
    World w;
    w.mode = 1;
    w.two_nodes();
    auto counters = [&](int rank, int64_t at, uint64_t interval, uint64_t wrs, uint64_t bytes, uint64_t comps,
                        uint64_t errs) {
        st_qp_counters_rec c{};
        c.qp = World::qp(rank);
        c.qp_num = World::qpn(rank);
        c.interval_ns = interval;
        c.posted_wrs = wrs;
        c.posted_bytes = bytes;
        c.completions = comps;
        c.error_completions = errs;
        w.feed.emit(at, World::vpid(rank), c);
    };
    counters(0, 1'000'000'000, 500'000'000, 30000, 30000 * 4096ull, 300, 0);
    counters(0, 2'000'000'000, 1'000'000'000, 20000, 20000 * 4096ull, 200, 0);
    counters(1, 2'000'000'000, 1'500'000'000, 0, 0, 0, 2);
    const json doc = w.finish();
    EXPECT_EQ(doc["trace"]["mode"], "counters");
    EXPECT_TRUE(doc["ops"]["by_opcode"].empty());
    ASSERT_EQ(doc["traffic"]["node_matrix"].size(), 1u);
    EXPECT_EQ(doc["traffic"]["node_matrix"][0]["src"], "nodeA");
    EXPECT_EQ(doc["traffic"]["node_matrix"][0]["dst"], "nodeB");
    EXPECT_EQ(doc["traffic"]["node_matrix"][0]["bytes"], 50000 * 4096ull);
    EXPECT_EQ(doc["traffic"]["node_matrix"][0]["ops"], 50000);
    for (const auto& r : doc["rails"]) {
        if (r["node"] == "nodeA") { EXPECT_EQ(r["bytes_tx"], 50000 * 4096ull); }
        if (r["node"] == "nodeB") { EXPECT_EQ(r["bytes_rx"], 50000 * 4096ull); }
    }
    const json& c = doc["counters"];
    EXPECT_EQ(c["events"], 3);
    EXPECT_EQ(c["qps"], 2);
    EXPECT_EQ(c["posted_wrs"], 50000);
    EXPECT_EQ(c["error_completions"], 2);
    ASSERT_EQ(c["per_qp"].size(), 2u);
    const json& q0 = c["per_qp"][0];
    EXPECT_EQ(q0["rank"], 0);
    EXPECT_EQ(q0["qp_num"], World::qpn(0));
    EXPECT_EQ(q0["peer"]["rank"], 1);
    EXPECT_EQ(q0["posted_wrs"], 50000);
    EXPECT_EQ(q0["completions"], 500);
    EXPECT_EQ(q0["duration_ns"], 1'500'000'000);   // from the first interval's start to the last event
    EXPECT_EQ(q0["bytes_per_s"], std::llround(50000 * 4096.0 / 1.5));
    ASSERT_EQ(c["per_peer"].size(), 2u);   // rank 1 posted nothing towards rank 0, but its errors count
    EXPECT_EQ(c["per_peer"][0]["src"]["rank"], 0);
    EXPECT_EQ(c["per_peer"][0]["dst"]["rank"], 1);
    EXPECT_EQ(c["per_peer"][0]["posted_bytes"], 50000 * 4096ull);
    EXPECT_EQ(c["per_peer"][1]["src"]["rank"], 1);
    EXPECT_EQ(c["per_peer"][1]["error_completions"], 2);
    EXPECT_FALSE(c["needs_per_operation_events"].empty());
    ASSERT_TRUE(has_finding(doc, "error_completions"));
    for (const auto& f : doc["findings"]) {
        EXPECT_NE(f["kind"], "in_flight_at_end");
        if (f["kind"] == "error_completions") { EXPECT_EQ(f["evidence"]["source"], "counters"); }
    }
}

// Hang diagnosis (queue_progress.h, docs/analyzer.md "Queue progress and stalls"): a signal atomic after an
// acknowledged multi-MiB write fails with RETRY_EXC_ERR, the write queued behind it and a second QP of the same
// process are flushed, and nothing completes on the QP until the trace ends 2 s later.
struct StallWorld : World {
    using World::World;
    int64_t t_write = 0, t_atomic = 0, t_error = 0, t_end = 0;
    static constexpr uint64_t kCompanionQp = 0x2000;
    static constexpr uint32_t kCompanionQpn = 200;

    void companion() {
        st_qp_create_rec q{};
        q.ctx = 0xc0;
        q.qp = kCompanionQp;
        q.qp_num = kCompanionQpn;
        q.qp_type = 2;
        q.send_cq = q.recv_cq = 0xcc;
        q.max_send_wr = 16;
        feed.emit(t++, vpid(0), q);
    }
    void scenario(int64_t tail_ns) {
        two_nodes();
        companion();
        t_write = t;
        post(0, {1}, 0, 4u << 20, {true}, 0, -1, 0x10000, 0x77);
        t += 100;
        poll(0, {1}, {0}, 1);
        t += 10;
        t_atomic = t;
        post(0, {2}, 6, 8, {true}, 0, -1, 0x20000, 0x77);   // IBV_WR_ATOMIC_FETCH_AND_ADD
        post(0, {3}, 0, 64, {true}, 0, -1, 0x30000, 0x77);
        {
            test::PostSendBatch b({9}, 128);
            b.rec.qp = kCompanionQp;
            b.rec.qp_num = kCompanionQpn;
            feed.emit(t, vpid(0), b.rec);
        }
        t += 5000;
        t_error = t;
        {
            test::PollBatch b({2, 3}, qpn(0));
            b.status = {12, 5};          // RETRY_EXC_ERR, then WR_FLUSH_ERR
            b.vendor_err = {0x81, 0x79};
            b.point();
            feed.emit(t, vpid(0), b.rec);
        }
        {
            test::PollBatch b({9}, kCompanionQpn);
            b.status = {5};
            b.point();
            feed.emit(t, vpid(0), b.rec);
        }
        t += tail_ns;
        t_end = t;
        st_cq_create_rec c{};   // anything that moves the end of the trace
        c.ctx = 0xc0;
        c.cq = 0xcd;
        feed.emit(t, vpid(1), c);
    }
};

std::vector<json> findings_of(const json& doc, const std::string& kind) {
    std::vector<json> out;
    for (const auto& f : doc["findings"])
        if (f["kind"] == kind) out.push_back(f);
    return out;
}

TEST(Stall, RetryExceededNamesTheQpTheWrThePeerTheStatusAndTheFlushedCompanion) {
    StallWorld w;
    w.scenario(2'000'000'000);
    const json doc = w.finish();
    const auto stalls = findings_of(doc, "stalled_queue");
    ASSERT_EQ(stalls.size(), 1u) << doc["findings"].dump(1);
    const json& f = stalls[0];
    EXPECT_EQ(f["severity"], "error");
    const json& e = f["evidence"];
    EXPECT_EQ(e["qp_num"], 100);
    EXPECT_EQ(e["node"], "nodeA");
    EXPECT_EQ(e["rank"], 0);
    EXPECT_EQ(e["peer"]["node"], "nodeB");
    EXPECT_EQ(e["peer"]["qp_num"], 101);
    EXPECT_EQ(e["posted"], 3);
    EXPECT_EQ(e["completed"], 1);
    EXPECT_EQ(e["outstanding"], 2);
    const json& wqe = e["first_unacknowledged"];
    EXPECT_EQ(wqe["opcode"], "ATOMIC_FETCH_AND_ADD");
    EXPECT_EQ(wqe["bytes"], 8);
    EXPECT_EQ(wqe["remote_addr"], "0x20000");
    EXPECT_EQ(wqe["rkey"], "0x77");
    EXPECT_EQ(wqe["wr_id"], 2);
    EXPECT_EQ(wqe["completion"], "error");
    EXPECT_EQ(wqe["error"]["status"], "RETRY_EXC_ERR");
    EXPECT_EQ(wqe["error"]["vendor_err"], "0x81");
    EXPECT_EQ(e["last_completed"]["opcode"], "RDMA_WRITE");
    EXPECT_EQ(e["last_completed"]["bytes"], 4u << 20);
    EXPECT_EQ(e["last_completed"]["wr_id"], 1);
    EXPECT_EQ(e["last_error"]["status"], "RETRY_EXC_ERR");
    EXPECT_EQ(e["last_error"]["source"], "verbs");
    EXPECT_EQ(e["stalled_ns"], w.t_end - w.t_atomic);
    EXPECT_EQ(e["threshold_ns"], 1'000'000'000);
    ASSERT_EQ(e["flushed_companions"].size(), 1u);
    EXPECT_EQ(e["flushed_companions"][0]["qp_num"], StallWorld::kCompanionQpn);
    EXPECT_EQ(e["flushed_companions"][0]["flushed"], 1);
    EXPECT_FALSE(e.contains("related"));   // 3 error completions: error_completions, not an error_storm
    EXPECT_NE(f["summary"].get<std::string>().find("QP 100 of rank 0 (nodeA) (peer nodeB QP 101)"), std::string::npos)
        << f["summary"];
    EXPECT_NE(f["summary"].get<std::string>().find("first ATOMIC_FETCH_AND_ADD 8 B to 0x20000 (wr_id 2)"),
              std::string::npos) << f["summary"];

    // The same story per QP, for every QP.
    const json* qp100 = nullptr;
    for (const auto& q : doc["qps"])
        if (q["qp_num"] == 100) qp100 = &q;
    ASSERT_NE(qp100, nullptr);
    const json& p = (*qp100)["progress"];
    EXPECT_EQ(p["posted"], 3);
    EXPECT_EQ(p["completed"], 1);
    EXPECT_EQ(p["failed"], 1);
    EXPECT_EQ(p["flushed"], 1);
    EXPECT_EQ(p["in_flight"], 0);
    EXPECT_EQ(p["unacknowledged"], 2);
    ASSERT_EQ(p["states"].size(), 2u);
    EXPECT_EQ(p["states"][0]["state"], "RTR");
    EXPECT_EQ(p["states"][0]["source"], "modify_qp");
    EXPECT_EQ(p["states"][1]["state"], "ERR");
    EXPECT_EQ(p["states"][1]["source"], "error_completion");
}

TEST(Stall, NoFindingBelowTheThreshold) {
    StallWorld w;
    w.scenario(500'000'000);
    EXPECT_TRUE(findings_of(w.finish(), "stalled_queue").empty());
    AnalysisOptions o;
    o.stall_after_ns = 400'000'000;
    StallWorld w2(o);
    w2.scenario(500'000'000);
    const auto stalls = findings_of(w2.finish(), "stalled_queue");
    ASSERT_EQ(stalls.size(), 1u);
    EXPECT_EQ(stalls[0]["evidence"]["threshold_ns"], 400'000'000);
}

// A completion after the first unacknowledged post restarts the clock: the stall is measured from it.
TEST(Stall, ProgressResetsTheTimer) {
    for (const int64_t threshold : {1'000'000'000LL, 500'000'000LL}) {
        AnalysisOptions o;
        o.stall_after_ns = threshold;
        World w(o);
        w.two_nodes();
        const int64_t t0 = w.t;
        w.post(0, {1, 2}, 0, 4096, {true, true}, 0, -1, 0x1000, 1);
        w.t += 1'500'000'000;
        const int64_t t_progress = w.t;
        w.poll(0, {1}, {0}, 1);
        w.t += 700'000'000;
        st_cq_create_rec c{};
        c.ctx = 0xc0;
        c.cq = 0xcd;
        w.feed.emit(w.t, World::vpid(1), c);
        const json doc = w.finish();
        const auto stalls = findings_of(doc, "stalled_queue");
        if (threshold == 1'000'000'000) {
            EXPECT_TRUE(stalls.empty()) << "stalled 0.7 s since the last completion, not 2.2 s since the post";
            continue;
        }
        ASSERT_EQ(stalls.size(), 1u);
        const json& e = stalls[0]["evidence"];
        EXPECT_EQ(e["stalled_ns"], 700'000'000);
        EXPECT_EQ(e["first_unacknowledged"]["wr_id"], 2);
        EXPECT_EQ(e["first_unacknowledged"]["completion"], nullptr);
        EXPECT_EQ(e["first_unacknowledged"]["posted_ns"].get<int64_t>() + (t_progress - t0),
                  e["since_ns"].get<int64_t>());
        EXPECT_EQ(e["outstanding"], 1);
        EXPECT_EQ(e["last_error"], nullptr);
    }
}

// The owner tore the QP down after the error: handled, not a hang.
TEST(Stall, ATeardownByTheOwnerIsNoStall) {
    StallWorld w;
    w.scenario(10);
    w.state(0, 0);   // RESET
    w.t += 2'000'000'000;
    st_cq_create_rec c{};
    c.ctx = 0xc0;
    c.cq = 0xce;
    w.feed.emit(w.t, World::vpid(1), c);
    EXPECT_TRUE(findings_of(w.finish(), "stalled_queue").empty());
}

// A hung job killed later: its exit destroyed the QP 3 s after the error. The stall lasted until then.
TEST(Stall, ATeardownLongAfterTheStopEndsTheStall) {
    StallWorld w;
    w.scenario(3'000'000'000);
    const int64_t t_destroy = w.t;
    w.destroy(0);
    w.t += 5'000'000'000;
    st_cq_create_rec c{};
    c.ctx = 0xc0;
    c.cq = 0xce;
    w.feed.emit(w.t, World::vpid(1), c);
    const auto stalls = findings_of(w.finish(), "stalled_queue");
    ASSERT_EQ(stalls.size(), 1u);
    EXPECT_EQ(stalls[0]["evidence"]["stalled_ns"], t_destroy - w.t_atomic);
    EXPECT_EQ(stalls[0]["evidence"]["ended_by_owner"], true);
}

// A directly driven queue: the error CQE the watcher read carries the mlx5 syndrome.
TEST(Stall, RingQpErrorCqeReportsTheSyndrome) {
    World w;
    w.two_nodes();
    for (int rank = 0; rank < 2; ++rank) {
        st_gpu_qp_create_rec c{};
        c.ctx = 0xc0;
        c.qpn = 900 + static_cast<uint32_t>(rank);
        c.sq_wqebb = 64;
        w.feed.emit(w.t++, World::vpid(rank), c);
        st_gpu_qp_modify_rec m{};
        m.ctx = 0xc0;
        m.qpn = c.qpn;
        m.command = 0x503;
        m.remote_qpn = 901 - static_cast<uint32_t>(rank);
        m.rgid_prefix = kPrefix;
        m.rgid_iid = 0x10 + static_cast<uint64_t>(1 - rank);
        w.feed.emit(w.t++, World::vpid(rank), m);
    }
    // A signaled WRITE (index 0) and a signaled FETCH_ADD (index 1, mlx5 ATOMIC_FA).
    {
        std::vector<uint16_t> idx = {0, 1};
        std::vector<uint8_t> op = {0x08, 0x12}, fm = {0x08, 0x08}, opmod(2);
        std::vector<uint32_t> bytes = {1u << 20, 8}, rkey = {5, 5}, imm(2);
        std::vector<uint64_t> raddr = {0xa000, 0xb000}, arg(2);
        st_gpu_wqe_rec r{};
        r.qpn = 900;
        r.n = 2;
        r.wqe_index = idx.data();
        r.opcode = op.data();
        r.opmod = opmod.data();
        r.fm_ce_se = fm.data();
        r.bytes = bytes.data();
        r.raddr = raddr.data();
        r.rkey = rkey.data();
        r.imm = imm.data();
        r.atomic_arg = arg.data();
        w.feed.emit(w.t, World::vpid(0), r);
    }
    w.t += 1000;
    {
        std::vector<uint16_t> ctr = {0, 1};
        std::vector<uint8_t> op = {0, 13}, syn = {0, 0x15};   // REQ, then REQ_ERR with transport retry exceeded
        std::vector<uint32_t> bc = {0, 0}, qpn = {900, 900};
        std::vector<uint64_t> ts = {0, 0};
        st_gpu_cqe_rec c{};
        c.cqn = 1;
        c.n = 2;
        c.wqe_counter = ctr.data();
        c.opcode = op.data();
        c.syndrome = syn.data();
        c.byte_cnt = bc.data();
        c.qpn = qpn.data();
        c.hw_ts = ts.data();
        w.feed.emit(w.t, World::vpid(0), c);
    }
    w.t += 3'000'000'000;
    st_cq_create_rec c{};
    c.ctx = 0xc0;
    c.cq = 0xcd;
    w.feed.emit(w.t, World::vpid(1), c);
    const json doc = w.finish();
    const auto stalls = findings_of(doc, "stalled_queue");
    ASSERT_EQ(stalls.size(), 1u) << doc["findings"].dump(1);
    const json& e = stalls[0]["evidence"];
    EXPECT_EQ(e["qp_num"], 900);
    EXPECT_EQ(e["peer"]["qp_num"], 901);
    EXPECT_EQ(e["peer"]["node"], "nodeB");
    EXPECT_EQ(e["first_unacknowledged"]["opcode"], "ATOMIC_FETCH_AND_ADD");
    EXPECT_EQ(e["first_unacknowledged"]["wqe_index"], 1);
    EXPECT_EQ(e["first_unacknowledged"]["remote_addr"], "0xb000");
    EXPECT_EQ(e["last_completed"]["bytes"], 1u << 20);
    EXPECT_EQ(e["last_error"]["status"], "RETRY_EXC_ERR");
    EXPECT_EQ(e["last_error"]["source"], "cqe");
    EXPECT_EQ(e["last_error"]["syndrome"], "0x15");
    EXPECT_EQ(e["last_error"]["syndrome_meaning"], "transport retry counter exceeded");
    EXPECT_EQ(e["stalled_ns"], 3'000'000'000);
}

}  // namespace
}  // namespace sigmatrace::analyzer
