// A trace analysed in shares (analysis.h, merge_share): analyses that each read every set-up event and the data
// events of their own processes, merged, give what one analysis of the whole trace gives, for what merges so far.
#include <gtest/gtest.h>

#include <sigmatrace/schema.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/data_element.h"
#include "record_feeder.h"

namespace sigmatrace::analyzer {
namespace {

using nlohmann::json;

constexpr uint64_t kPrefix = 0xfe80000000000000ULL;
constexpr int kRanks = 4;

// Hands every event to each of its sinks, a data event only to the sink whose share holds its process (an empty
// share: every process, the analysis of the whole trace).
class Shares final : public EventSink {
public:
    void add(EventSink& sink, std::set<int64_t> vpids) { sinks_.push_back({&sink, std::move(vpids)}); }
    void on_event(const DecodedEvent& ev) override {
        for (auto& [sink, share] : sinks_)
            if (!is_data_event(ev.id) || share.empty() || share.count(ev.vpid)) sink->on_event(ev);
    }
    void on_element(const DataElement& e) override {
        for (auto& [sink, share] : sinks_)
            if (share.empty() || share.count(e.origin->vpid)) sink->on_element(e);
    }

private:
    std::vector<std::pair<EventSink*, std::set<int64_t>>> sinks_;
};

// Four processes, ranks 0 and 1 on nodeA, 2 and 3 on nodeB; rank r has one RC QP to rank r ^ 2 (the other node)
// and one to rank r ^ 1 (its own node).
struct Job {
    explicit Job(EventSink& sink) : feed(sink) {}
    test::RecordFeeder feed;
    int64_t t = 1'000'000;

    static int64_t vpid(int rank) { return 700 + rank; }
    static uint64_t qp(int rank, int peer) { return 0x1000 + static_cast<uint64_t>(rank * 16 + peer); }
    static uint32_t qpn(int rank, int peer) { return 100 + static_cast<uint32_t>(rank * 16 + peer); }

    void process(int rank) {
        st_process_info_rec pi{};
        pi.schema_version = SIGMATRACE_SCHEMA_VERSION;
        pi.pid = static_cast<int32_t>(vpid(rank));
        pi.rank = rank;
        pi.world_size = kRanks;
        pi.hostname = rank < 2 ? "nodeA" : "nodeB";
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
    void connect(int rank, int peer) {
        st_qp_create_rec q{};
        q.ctx = 0xc0;
        q.qp = qp(rank, peer);
        q.qp_num = qpn(rank, peer);
        q.qp_type = 2;
        q.send_cq = q.recv_cq = 0xcc;
        q.max_send_wr = 64;
        q.max_recv_wr = 64;
        feed.emit(t++, vpid(rank), q);
        st_qp_modify_rec m{};
        m.qp = qp(rank, peer);
        m.qp_num = qpn(rank, peer);
        m.qp_state = 2;
        m.dest_qp_num = qpn(peer, rank);
        m.is_global = 1;
        m.dgid_prefix = kPrefix;
        m.dgid_iid = 0x10 + static_cast<uint64_t>(peer);
        feed.emit(t++, vpid(rank), m);
    }
    // WRs `first`.. on rank's QP to peer: `bytes` each, signaled as `signaled` says, opcode `opcode`.
    void post(int rank, int peer, uint64_t first, std::vector<bool> signaled, uint8_t opcode, uint32_t bytes) {
        std::vector<uint64_t> ids;
        for (std::size_t i = 0; i < signaled.size(); ++i) ids.push_back(first + i);
        test::PostSendBatch b(ids, bytes);
        for (uint32_t i = 0; i < b.n; ++i) {
            b.opcode[i] = opcode;
            b.send_flags[i] = signaled[i] ? 2u : 0u;
        }
        b.rec.qp = qp(rank, peer);
        b.rec.qp_num = qpn(rank, peer);
        feed.emit(t++, vpid(rank), b.rec);
    }
    void post_recv(int rank, int peer, std::vector<uint64_t> ids, uint32_t bytes) {
        const auto n = static_cast<uint32_t>(ids.size());
        std::vector<uint16_t> sge(n, 1);
        std::vector<uint32_t> len(n, bytes);
        std::vector<uint64_t> no_ts(n, 0);
        st_post_recv_rec r{};
        r.qp = qp(rank, peer);
        r.qp_num = qpn(rank, peer);
        r.bad_index = -1;
        r.n = n;
        r.wr_id = ids.data();
        r.num_sge = sge.data();
        r.bytes = len.data();
        r.ts = no_ts.data();
        feed.emit(t++, vpid(rank), r);
    }
    // Completions on rank's CQ of WRs of its QP to peer: `status` per id, wc opcode `wc_opcode`.
    void poll(int rank, int peer, std::vector<uint64_t> ids, std::vector<uint8_t> status, uint8_t wc_opcode,
              uint32_t byte_len = 0) {
        test::PollBatch b(std::move(ids), qpn(rank, peer));
        b.status = std::move(status);
        for (uint32_t i = 0; i < b.n; ++i) {
            b.opcode[i] = wc_opcode;
            b.byte_len[i] = byte_len;
        }
        b.point();
        feed.emit(t, vpid(rank), b.rec);
        t += 3;
    }

    // Set-up, then rounds of traffic that differ per rank: unsignaled WRITEs retired by a signaled one, SENDs
    // with their receives, an error and what it flushes, and WRs still in flight at the end.
    void run() {
        for (int r = 0; r < kRanks; ++r) process(r);
        for (int r = 0; r < kRanks; ++r) {
            connect(r, r ^ 2);
            connect(r, r ^ 1);
        }
        constexpr uint8_t kWrite = 0, kSend = 2;                    // ibv_wr_opcode
        constexpr uint8_t kWcWrite = 1, kWcSend = 0, kWcRecv = 128;  // ibv_wc_opcode
        for (int round = 0; round < 20; ++round) {
            for (int r = 0; r < kRanks; ++r) {
                const uint64_t base = static_cast<uint64_t>(round) * 100;
                const auto size = static_cast<uint32_t>(512u << (r + round % 3));
                post(r, r ^ 2, base, {false, false, true}, kWrite, size);
                post_recv(r ^ 1, r, {base + 50}, 8192);
                post(r, r ^ 1, base + 50, {true}, kSend, 256u * static_cast<uint32_t>(r + 1));
            }
            for (int r = 0; r < kRanks; ++r) {
                const uint64_t base = static_cast<uint64_t>(round) * 100;
                poll(r, r ^ 2, {base + 2}, {0}, kWcWrite);
                poll(r, r ^ 1, {base + 50}, {0}, kWcSend);
                poll(r ^ 1, r, {base + 50}, {0}, kWcRecv, 256u * static_cast<uint32_t>(r + 1));
            }
        }
        // Rank 3: a remote access error and the WR it flushes; rank 1: two WRITEs never completed.
        post(3, 1, 5000, {true, true}, kWrite, 4096);
        poll(3, 1, {5000, 5001}, {10, 5}, kWcWrite);   // IBV_WC_REM_ACCESS_ERR, IBV_WC_WR_FLUSH_ERR
        post(1, 3, 6000, {true, true}, kWrite, 65536);
        post_recv(2, 0, {7000, 7001}, 1024);           // never consumed
    }
};

// What merges so far: the operations (totals, per opcode with their latency and size distributions), the process
// pairs, the traffic matrix and skew, the rails.
json merged_sections(const json& doc) {
    return json{{"ops", doc["ops"]}, {"peers", doc["peers"]}, {"traffic", doc["traffic"]}, {"rails", doc["rails"]}};
}

TEST(Shares, TwoHostsSharesMergedGiveTheWholeTracesStatisticsAndTraffic) {
    Analysis whole, a, b;
    Shares shares;
    shares.add(whole, {});
    shares.add(a, {Job::vpid(0), Job::vpid(1)});
    shares.add(b, {Job::vpid(2), Job::vpid(3)});
    Job(shares).run();

    a.finish_share();
    b.finish_share();
    a.merge_share(b);
    const json want = merged_sections(whole.finish());
    const json got = merged_sections(a.finish());
    // The case exercises what the merge must add up: sends, receives, implied WRITEs, errors, in-flight WRs,
    // receives left posted (not operations), traffic both within and across nodes.
    ASSERT_EQ(want["ops"]["total"].get<uint64_t>(), 20u * 4 * 5 + 2 + 2);
    EXPECT_EQ(want["ops"]["errors"].get<uint64_t>(), 2u);
    EXPECT_EQ(want["ops"]["in_flight_at_end"].get<uint64_t>(), 2u);
    EXPECT_EQ(want["ops"]["implied"].get<uint64_t>(), 20u * 4 * 2);
    EXPECT_EQ(want["ops"]["unconsumed_receives"].get<uint64_t>(), 2u);
    EXPECT_EQ(want["peers"].size(), 8u);
    EXPECT_EQ(want["traffic"]["node_matrix"].size(), 4u);
    EXPECT_EQ(got, want) << "merged:\n" << got.dump(1) << "\nwhole:\n" << want.dump(1);
}

TEST(Shares, EachShareAloneHoldsOnlyItsOwnProcessesOperations) {
    Analysis whole, a;
    Shares shares;
    shares.add(whole, {});
    shares.add(a, {Job::vpid(0), Job::vpid(1)});
    Job(shares).run();
    const json w = whole.finish(), mine = a.finish();
    // Ranks 0 and 1: 20 rounds of 5 operations each, rank 1's two WRITEs in flight; no error (rank 3's).
    EXPECT_EQ(mine["ops"]["total"].get<uint64_t>(), 20u * 2 * 5 + 2);
    EXPECT_EQ(mine["ops"]["errors"].get<uint64_t>(), 0u);
    EXPECT_NE(merged_sections(mine), merged_sections(w));
}

// Shares merge in any order into any of them: the sums do not depend on it.
TEST(Shares, TheMergeOrderDoesNotMatter) {
    Analysis whole, s0, s1, s2, s3;
    Shares shares;
    shares.add(whole, {});
    Analysis* parts[] = {&s0, &s1, &s2, &s3};
    for (int r = 0; r < kRanks; ++r) shares.add(*parts[r], {Job::vpid(r)});
    Job(shares).run();
    for (Analysis* p : parts) p->finish_share();
    s2.merge_share(s0);
    s2.merge_share(s3);
    s2.merge_share(s1);
    EXPECT_EQ(merged_sections(s2.finish()), merged_sections(whole.finish()));
}

}  // namespace
}  // namespace sigmatrace::analyzer
