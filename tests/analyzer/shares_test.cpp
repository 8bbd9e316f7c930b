// A trace analysed in shares (analysis.h, merge_share): analyses that each read every set-up event and the data
// events of their own processes, merged, give what one analysis of the whole trace gives, for what merges so far.
#include <gtest/gtest.h>

#include <sigmatrace/schema.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <tuple>
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

// Hands every event to each of its analyses, a data event only to those whose share holds its host (the reader
// of a share skips the data events of the others).
class Shares final : public EventSink {
public:
    // `hosts`: the hosts of the share, by trace index (trace t is host "node<t>"); none: the whole trace.
    void add(Analysis& a, std::vector<uint32_t> hosts) {
        std::vector<std::string> names;
        for (uint32_t h : hosts) names.push_back("node" + std::to_string(h));
        if (!hosts.empty()) a.set_share(names);
        sinks_.push_back({&a, std::move(names)});
    }
    void on_event(const DecodedEvent& ev) override {
        for (auto& [a, hosts] : sinks_)
            if (!is_data_event(ev.id) || holds(hosts, ev.trace_hostname)) a->on_event(ev);
    }
    void on_element(const DataElement& e) override {
        for (auto& [a, hosts] : sinks_)
            if (holds(hosts, e.origin->trace_hostname)) a->on_element(e);
    }

private:
    static bool holds(const std::vector<std::string>& hosts, std::string_view h) {
        return hosts.empty() || std::find(hosts.begin(), hosts.end(), h) != hosts.end();
    }
    std::vector<std::pair<Analysis*, std::vector<std::string>>> sinks_;
};

// Four processes, `per_host` on each host (trace index rank / per_host, node "node<index>"); rank r has one RC QP to
// rank r ^ 2 and one to rank r ^ 1 (with 2 per host: one to the other node, for SENDs, one within its own, for
// WRITEs).
struct Job {
    explicit Job(EventSink& sink, int ranks_per_host = 2) : feed(sink), per_host(ranks_per_host) {
        feed.set_trace_hostnames({names[0], names[1], names[2], names[3]});
    }
    test::RecordFeeder feed;
    int per_host;
    int64_t t = 1'000'000;
    int64_t round_gap = 0;   // ns between rounds
    int tail_rounds = 0;     // rounds after the others in which only ranks 0 and 1 write to each other
    int incast_rounds = 0;   // rounds of 500 us after those in which ranks 1, 2 and 3 each write 64 KiB to rank 0
    int barrier_rounds = 0;  // rounds after those in which ranks 1, 2 and 3 signal a word of rank 0 (rank 3 last)
    static constexpr uint64_t kBarrierWord = 0xb000;
    static constexpr uint32_t kBarrierRkey = 0x77;
    std::string names[kRanks] = {"node0", "node1", "node2", "node3"};

    static int64_t vpid(int rank) { return 700 + rank; }
    uint32_t host(int rank) const { return static_cast<uint32_t>(rank / per_host); }
    static uint64_t qp(int rank, int peer) { return 0x1000 + static_cast<uint64_t>(rank * 16 + peer); }
    static uint32_t qpn(int rank, int peer) { return 100 + static_cast<uint32_t>(rank * 16 + peer); }

    void process(int rank) {
        st_process_info_rec pi{};
        pi.schema_version = SIGMATRACE_SCHEMA_VERSION;
        pi.pid = static_cast<int32_t>(vpid(rank));
        pi.rank = rank;
        pi.world_size = kRanks;
        pi.hostname = names[host(rank)].c_str();
        pi.job_id = "";
        feed.emit(t++, vpid(rank), pi, host(rank));
        st_device_open_rec d{};
        d.ctx = 0xc0;
        d.device = "mlx0";
        feed.emit(t++, vpid(rank), d, host(rank));
        st_port_info_rec p{};
        p.ctx = 0xc0;
        p.port = 1;
        p.gid_prefix = kPrefix;
        p.gid_iid = 0x10 + static_cast<uint64_t>(rank);
        feed.emit(t++, vpid(rank), p, host(rank));
        st_cq_create_rec c{};
        c.ctx = 0xc0;
        c.cq = 0xcc;
        feed.emit(t++, vpid(rank), c, host(rank));
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
        feed.emit(t++, vpid(rank), q, host(rank));
        st_qp_modify_rec m{};
        m.qp = qp(rank, peer);
        m.qp_num = qpn(rank, peer);
        m.qp_state = 2;
        m.dest_qp_num = qpn(peer, rank);
        m.is_global = 1;
        m.dgid_prefix = kPrefix;
        m.dgid_iid = 0x10 + static_cast<uint64_t>(peer);
        feed.emit(t++, vpid(rank), m, host(rank));
    }
    // WRs `first`.. on rank's QP to peer: `bytes` each, signaled as `signaled` says, opcode `opcode`, to remote
    // address `raddr` with `rkey`.
    void post(int rank, int peer, uint64_t first, std::vector<bool> signaled, uint8_t opcode, uint32_t bytes,
              uint64_t raddr = 0, uint32_t rkey = 0) {
        std::vector<uint64_t> ids;
        for (std::size_t i = 0; i < signaled.size(); ++i) ids.push_back(first + i);
        test::PostSendBatch b(ids, bytes);
        for (uint32_t i = 0; i < b.n; ++i) {
            b.opcode[i] = opcode;
            b.send_flags[i] = signaled[i] ? 2u : 0u;
            b.raddr[i] = raddr;
            b.rkey[i] = rkey;
        }
        b.rec.qp = qp(rank, peer);
        b.rec.qp_num = qpn(rank, peer);
        feed.emit(t++, vpid(rank), b.rec, host(rank));
    }
    void post_recv(int rank, int peer, std::vector<uint64_t> ids, uint32_t bytes) {
        test::RecvBatch<st_post_recv_rec> b(std::move(ids), bytes);
        b.rec.qp = qp(rank, peer);
        b.rec.qp_num = qpn(rank, peer);
        feed.emit(t++, vpid(rank), b.rec, host(rank));
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
        feed.emit(t, vpid(rank), b.rec, host(rank));
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
        if (incast_rounds > 0 || barrier_rounds > 0) connect(3, 0);
        constexpr uint8_t kWrite = 0, kSend = 2;                    // ibv_wr_opcode
        constexpr uint8_t kWcWrite = 1, kWcSend = 0, kWcRecv = 128;  // ibv_wc_opcode
        for (int round = 0; round < 20; ++round) {
            for (int r = 0; r < kRanks; ++r) {
                const uint64_t base = static_cast<uint64_t>(round) * 100;
                const auto size = static_cast<uint32_t>(512u << (r + round % 3));
                post(r, r ^ 1, base, {false, false, true}, kWrite, size);
                post_recv(r ^ 2, r, {base + 50}, 8192);
                post(r, r ^ 2, base + 50, {true}, kSend, 256u * static_cast<uint32_t>(r + 1));
            }
            for (int r = 0; r < kRanks; ++r) {
                const uint64_t base = static_cast<uint64_t>(round) * 100;
                poll(r, r ^ 1, {base + 2}, {0}, kWcWrite);
                poll(r, r ^ 2, {base + 50}, {0}, kWcSend);
                poll(r ^ 2, r, {base + 50}, {0}, kWcRecv, 256u * static_cast<uint32_t>(r + 1));
            }
            t += round_gap;
        }
        // Rank 3: a remote access error and the WR it flushes; rank 1: two WRITEs never completed.
        post(3, 1, 5000, {true, true}, kWrite, 4096);
        poll(3, 1, {5000, 5001}, {10, 5}, kWcWrite);   // IBV_WC_REM_ACCESS_ERR, IBV_WC_WR_FLUSH_ERR
        st_qp_modify_rec err{};                          // and its owner moves the QP to ERR
        err.qp = qp(3, 1);
        err.qp_num = qpn(3, 1);
        err.qp_state = 6;
        feed.emit(t++, vpid(3), err, host(3));
        post(1, 3, 6000, {true, true}, kWrite, 65536);
        post_recv(2, 0, {7000, 7001}, 1024);           // never consumed
        poll(2, 0, {9999}, {0}, kWcWrite);              // a completion of no posted WR: a warning
        for (int round = 20; round < 20 + tail_rounds; ++round) {
            const uint64_t base = static_cast<uint64_t>(round) * 100;
            for (int r = 0; r < 2; ++r) post(r, r ^ 1, base + 60, {false, true}, kWrite, 65536);
            t += round_gap / 2;
            for (int r = 0; r < 2; ++r) poll(r, r ^ 1, {base + 61}, {0}, kWcWrite);
            t += round_gap / 2;
        }
        for (int round = 0; round < incast_rounds; ++round) {
            const uint64_t id = 8000 + static_cast<uint64_t>(round);
            for (int r = 1; r < kRanks; ++r) post(r, 0, id, {true}, kWrite, 65536);
            t += 500'000;
            for (int r = 1; r < kRanks; ++r) poll(r, 0, {id}, {0}, kWcWrite);
        }
        for (int round = 0; round < barrier_rounds; ++round) {
            const uint64_t id = 9000 + static_cast<uint64_t>(round);
            for (int r = 1; r < kRanks; ++r) {
                post(r, 0, id, {true}, kWrite, 8, kBarrierWord, kBarrierRkey);
                t += 1000 * r;
            }
            for (int r = 1; r < kRanks; ++r) poll(r, 0, {id}, {0}, kWcWrite);
            t += 10'000;
        }
    }
};

// How a share reaches the analysis it is merged into: in-process, or in bytes (Analysis::save_share and
// load_share, as the ranks of sigmatrace-analyze under mpirun send their shares to rank 0).
struct MergeVia {
    bool bytes = false;
    bool operator()(Analysis& into, Analysis& share) const {
        if (!bytes) return into.merge_share(share);
        std::string why;
        const std::unique_ptr<Analysis> loaded = Analysis::load_share(share.save_share(), into, &why);
        return loaded != nullptr && into.merge_share(*loaded);
    }
};

// Every test twice: the shares merged in-process, and sent in bytes.
class Merge : public ::testing::TestWithParam<bool> {
protected:
    MergeVia merge{GetParam()};
};
INSTANTIATE_TEST_SUITE_P(InProcessOrBytes, Merge, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Bytes" : "InProcess"; });

// What merges so far: the trace's counts and span, the processes, the operations (totals, per opcode with their
// latency and size distributions), the QPs but their outstanding work, the process pairs, the traffic matrix and
// skew, the rails, the phases, the hosts' clocks, the barriers, the findings, the warnings.
json merged_sections(const json& doc) {
    json qps = doc["qps"];
    for (json& q : qps) q.erase("outstanding");
    return json{{"trace", doc["trace"]}, {"processes", doc["processes"]}, {"ops", doc["ops"]},
                {"qps", qps},            {"peers", doc["peers"]},         {"traffic", doc["traffic"]},
                {"rails", doc["rails"]}, {"phases", doc.value("phases", json())},
                {"clock", doc.value("clock", json())}, {"barriers", doc["barriers"]},
                {"findings", doc["findings"]}, {"warnings", doc["warnings"]}};
}

// `got` equals `want`, floating-point numbers within a relative 1e-9 (sums of bytes spread over intervals, added
// in another grouping when shares merge).
void expect_near_json(const json& got, const json& want, const std::string& path = "") {
    if (got.is_number_float() || want.is_number_float()) {
        ASSERT_TRUE(got.is_number() && want.is_number()) << path << ": " << got << " vs " << want;
        const double g = got.get<double>(), w = want.get<double>();
        EXPECT_LE(std::abs(g - w), 1e-9 * std::max(std::abs(w), 1.0)) << path << ": " << g << " vs " << w;
    } else if (got.is_object() && want.is_object()) {
        ASSERT_EQ(got.size(), want.size()) << path << ": " << got.dump() << " vs " << want.dump();
        for (const auto& [k, v] : want.items()) {
            ASSERT_TRUE(got.contains(k)) << path << "." << k;
            expect_near_json(got[k], v, path + "." + k);
        }
    } else if (got.is_array() && want.is_array()) {
        ASSERT_EQ(got.size(), want.size()) << path;
        for (std::size_t i = 0; i < want.size(); ++i) expect_near_json(got[i], want[i], path + "[" + std::to_string(i) + "]");
    } else {
        EXPECT_EQ(got, want) << path;
    }
}

TEST_P(Merge, TwoHostsSharesMergedGiveTheWholeTracesStatisticsAndTraffic) {
    Analysis whole, a, b;
    Shares shares;
    shares.add(whole, {});
    shares.add(a, {0});
    shares.add(b, {1});
    Job(shares).run();

    a.finish_share();
    b.finish_share();
    ASSERT_TRUE(merge(a, b));
    const json want = merged_sections(whole.finish());
    const json got = merged_sections(a.finish());
    // The case exercises what the merge must add up: sends, receives, implied WRITEs, errors, in-flight WRs,
    // receives left posted (not operations), a completion of nothing, traffic both within and across nodes.
    ASSERT_EQ(want["ops"]["total"].get<uint64_t>(), 20u * 4 * 5 + 2 + 2);
    EXPECT_EQ(want["ops"]["errors"].get<uint64_t>(), 2u);
    EXPECT_EQ(want["ops"]["in_flight_at_end"].get<uint64_t>(), 2u);
    EXPECT_EQ(want["ops"]["implied"].get<uint64_t>(), 20u * 4 * 2);
    EXPECT_EQ(want["ops"]["unconsumed_receives"].get<uint64_t>(), 2u);
    EXPECT_EQ(want["peers"].size(), 8u);
    // Two hosts that send to each other: node1's clock estimated against node0's.
    ASSERT_EQ(want["clock"]["hosts"].size(), 2u) << want["clock"];
    EXPECT_EQ(want["clock"]["hosts"][1]["status"], "estimated") << want["clock"];
    ASSERT_FALSE(want["phases"].empty());
    EXPECT_EQ(want["traffic"]["node_matrix"].size(), 4u);
    ASSERT_EQ(want["qps"].size(), 8u);
    std::size_t states = 0;
    for (const json& q : want["qps"]) states += q["progress"]["states"].size();
    EXPECT_GE(states, 2u) << want["qps"];   // rank 3's QP to rank 1: the error completion's ERR, its owner's ERR
    ASSERT_EQ(want["warnings"].size(), 1u);
    EXPECT_NE(want["warnings"][0].get<std::string>().find("matched no posted work request"), std::string::npos)
        << want["warnings"];
    EXPECT_EQ(got, want) << "merged:\n" << got.dump(1) << "\nwhole:\n" << want.dump(1);
}

TEST_P(Merge, EachShareAloneHoldsOnlyItsOwnProcessesOperations) {
    Analysis whole, a;
    Shares shares;
    shares.add(whole, {});
    shares.add(a, {0});
    Job(shares).run();
    const json w = whole.finish(), mine = a.finish();
    // Ranks 0 and 1: 20 rounds of 5 operations each, rank 1's two WRITEs in flight; no error (rank 3's), not
    // rank 2's warning; node1's clock not aligned (only one side of the messages between the hosts).
    EXPECT_EQ(mine["ops"]["total"].get<uint64_t>(), 20u * 2 * 5 + 2);
    EXPECT_EQ(mine["ops"]["errors"].get<uint64_t>(), 0u);
    ASSERT_EQ(mine["warnings"].size(), 1u) << mine["warnings"];
    EXPECT_EQ(mine["warnings"][0].get<std::string>().rfind("clock: hosts node1 (unconstrained)", 0), 0u) << mine["warnings"];
    EXPECT_NE(merged_sections(mine), merged_sections(w));
}

// One process per host, a share per host: shares merge in any order into any of them.
TEST_P(Merge, TheMergeOrderDoesNotMatter) {
    Analysis whole, s0, s1, s2, s3;
    Shares shares;
    shares.add(whole, {});
    Analysis* parts[] = {&s0, &s1, &s2, &s3};
    for (uint32_t h = 0; h < 4; ++h) shares.add(*parts[h], {h});
    Job(shares, /*per_host=*/1).run();
    for (Analysis* p : parts) p->finish_share();
    EXPECT_TRUE(merge(s2, s0));
    EXPECT_TRUE(merge(s2, s3));
    EXPECT_TRUE(merge(s2, s1));
    EXPECT_EQ(merged_sections(s2.finish()), merged_sections(whole.finish()));
}

// A WR posted on a QP whose creation is not in the trace makes an implicit QP in the share that reads it, and only
// there: the shares' ids no longer agree, so the merge is refused, leaving both as they were (the trace is then
// analysed whole).
TEST_P(Merge, SharesWhoseObjectsDifferAreNotMerged) {
    Analysis a, b, a_alone;
    Shares shares;
    shares.add(a, {0});
    shares.add(a_alone, {0});
    shares.add(b, {1});
    Job job(shares);
    job.run();
    test::PostSendBatch orphan({1}, 64);
    orphan.rec.qp = 0xdead;
    orphan.rec.qp_num = 999;
    job.feed.emit(job.t++, Job::vpid(0), orphan.rec, 0);
    b.finish_share();
    EXPECT_FALSE(merge(a, b));
    EXPECT_EQ(merged_sections(a.finish()), merged_sections(a_alone.finish()));
}

// One rank per host and one share per host (host 1's also read alone), beside the whole trace's analysis.
struct HostShares {
    Analysis whole, parts[kRanks], s1_alone;
    Shares shares;
    Job job{shares, /*ranks_per_host=*/1};
    HostShares() {
        shares.add(whole, {});
        for (uint32_t h = 0; h < kRanks; ++h) shares.add(parts[h], {h});
        shares.add(s1_alone, {1});
    }
    // Every share merged into host 1's.
    Analysis& merged(const MergeVia& merge) {
        for (int h : {0, 2, 3}) EXPECT_TRUE(merge(parts[1], parts[h])) << "host " << h;
        return parts[1];
    }
};

// Ranks 1, 2 and 3, each on a host of its own, write to rank 0 for 5 ms: an incast of degree 3 that no share
// sees alone (each holds one sender), found once their windows' fans merge.
TEST_P(Merge, IncastMergesFromTheSendersShares) {
    HostShares h;
    h.job.incast_rounds = 10;
    h.job.run();
    const auto incasts = [](const json& doc) {
        json out = json::array();
        for (const json& f : doc["findings"])
            if (f["kind"] == "incast") out.push_back(f);
        return out;
    };
    EXPECT_TRUE(incasts(h.s1_alone.finish()).empty());
    const json got = h.merged(merge).finish(), want = h.whole.finish();
    const json found = incasts(want);
    ASSERT_EQ(found.size(), 1u) << want["findings"].dump(1);
    EXPECT_EQ(found[0]["evidence"]["degree"], 3) << found[0].dump(1);
    expect_near_json(incasts(got), found, "incast");
    expect_near_json(merged_sections(got), merged_sections(want));
}

// A share's incast windows are exact when it holds all the bytes its senders have in flight: rank 1's RDMA READ
// from rank 3 makes node3's NIC a sender in rank 1's share while node3's own share sends too (to node0: another
// link, which the gray-link detector alone would merge), so those two shares are not merged.
TEST_P(Merge, AReadWhoseSenderIsAnotherSharesNicIsNotMerged) {
    Analysis s1, s3;
    Shares shares;
    shares.add(s1, {1});
    shares.add(s3, {3});
    Job job(shares, /*per_host=*/1);
    job.incast_rounds = 2;
    job.run();
    constexpr uint8_t kRead = 4, kWcRead = 2;   // IBV_WR_RDMA_READ, IBV_WC_RDMA_READ
    job.post(1, 3, 9000, {true}, kRead, 65536);
    job.t += 10'000;
    job.poll(1, 3, {9000}, {0}, kWcRead);
    s3.finish_share();
    EXPECT_FALSE(merge(s1, s3));
}

// Ranks 1, 2 and 3, each on a host of its own, signal a word of rank 0 once a round, rank 3 last: a barrier
// that no share sees alone (each holds one participant), found with its epochs, spread and straggler once the
// shares' signal logs merge.
TEST_P(Merge, BarrierEpochsMergeFromTheParticipantsShares) {
    HostShares h;
    h.job.barrier_rounds = 30;
    h.job.run();
    EXPECT_EQ(h.s1_alone.finish()["barriers"]["epochs"].get<uint64_t>(), 0u);
    const json got = h.merged(merge).finish(), want = h.whole.finish();
    EXPECT_EQ(want["barriers"]["epochs"].get<uint64_t>(), 30u) << want["barriers"].dump(1);
    ASSERT_EQ(want["barriers"]["stragglers"].size(), 1u) << want["barriers"].dump(1);
    EXPECT_EQ(want["barriers"]["stragglers"][0]["rank"], 3);
    EXPECT_EQ(got["barriers"], want["barriers"]);
    expect_near_json(merged_sections(got), merged_sections(want));
}

// A word rank 1 writes alone past the log's cap (a bandwidth run's buffer): rank 1's share keeps only its first
// signals. Rank 2 then signals it too, completed after those: one detector has buried the word by then, and the
// shares merge into the same. Had rank 2's signal completed first, the word's fate would need the signals cut:
// not merged.
TEST_P(Merge, AWordCutShortMergesOnlyWhenItsFateIsKnown) {
    for (const bool other_first : {false, true}) {
        HostShares h;
        Job& job = h.job;
        job.run();
        constexpr uint64_t kWord = 0xc000;
        constexpr uint8_t kWrite = 0, kWcWrite = 1;
        if (other_first) {
            job.post(2, 0, 20000, {true}, kWrite, 8, kWord, 5);
            job.poll(2, 0, {20000}, {0}, kWcWrite);
        }
        constexpr uint64_t kBatch = 1000;
        const uint64_t batches = BarrierDetector::kLogCap / kBatch + 2;
        for (uint64_t b = 0; b < batches; ++b) {
            std::vector<bool> signaled(kBatch, false);
            signaled.back() = true;
            job.post(1, 0, 30000 + b * kBatch, signaled, kWrite, 8, kWord, 5);
            job.poll(1, 0, {30000 + b * kBatch + kBatch - 1}, {0}, kWcWrite);
        }
        if (!other_first) {
            job.post(2, 0, 20000, {true}, kWrite, 8, kWord, 5);
            job.poll(2, 0, {20000}, {0}, kWcWrite);
        }
        if (other_first) {
            h.parts[2].finish_share();
            EXPECT_FALSE(merge(h.parts[1], h.parts[2]));
            continue;
        }
        const json got = h.merged(merge).finish(), want = h.whole.finish();
        EXPECT_EQ(want["barriers"]["epochs"].get<uint64_t>(), 0u);
        EXPECT_EQ(got["barriers"], want["barriers"]);
        expect_near_json(merged_sections(got), merged_sections(want));
    }
}

// The time windows (16 at most here, so that they double) and each QP's outstanding work sampled into them: the
// share of host 0, whose ranks write for 40 rounds more, doubles its windows further than the share of host 1;
// merged, they are the whole trace's windows, and each QP's outstanding work its own.
TEST_P(Merge, WindowsAndOutstandingWorkMergeIntoTheWholeTraces) {
    AnalysisOptions o;
    o.windows.max_windows = 16;
    Analysis whole(o), a(o), b(o), a_alone(o), b_alone(o);
    Shares shares;
    shares.add(whole, {});
    shares.add(a, {0});
    shares.add(b, {1});
    shares.add(a_alone, {0});
    shares.add(b_alone, {1});
    Job job(shares);
    job.round_gap = 5000;
    job.tail_rounds = 40;
    job.run();
    EXPECT_GT(a_alone.finish()["timeline"]["window_ns"].get<int64_t>(), b_alone.finish()["timeline"]["window_ns"].get<int64_t>());
    ASSERT_TRUE(merge(a, b));
    const json want = whole.finish(), got = a.finish();
    ASSERT_TRUE(want.contains("timeline"));
    const json& windows = want["timeline"]["windows"];
    EXPECT_GE(windows.size(), 9u) << want["timeline"].dump();   // more than half of max_windows
    EXPECT_LE(windows.size(), 16u);
    std::size_t with_outstanding = 0;
    for (const json& q : want["qps"]) with_outstanding += q.contains("outstanding");
    EXPECT_EQ(with_outstanding, 8u);
    expect_near_json(got["timeline"], want["timeline"], "timeline");
    expect_near_json(got["qps"], want["qps"], "qps");
    expect_near_json(merged_sections(got), merged_sections(want));
}

// A share's bytes cut short, with bytes after them or one changed (found by the checksum before any length in
// them is believed), not a share's, or of another trace's share: refused with the reason, and the analysis they were meant for merges the good bytes afterwards as if nothing had happened.
TEST(ShareBytes, DamagedOrForeignBytesAreRefusedWithTheReason) {
    Analysis whole, a, b, stranger;
    Shares shares;
    shares.add(whole, {});
    shares.add(a, {0});
    shares.add(b, {1});
    Job(shares).run();
    const std::string bytes = b.save_share();
    const auto refusal = [&](const std::string& damaged, const Analysis& like) {
        std::string why;
        EXPECT_EQ(Analysis::load_share(damaged, like, &why), nullptr);
        return why;
    };
    const std::string kDamaged = "a damaged share: its checksum does not match its bytes";
    EXPECT_EQ(refusal(bytes.substr(0, bytes.size() / 2), a), kDamaged);
    EXPECT_EQ(refusal(bytes + "x", a), kDamaged);
    std::string flipped = bytes;
    flipped[bytes.size() / 2] ^= 0x40;   // inside the body: a length, a count or a time
    EXPECT_EQ(refusal(flipped, a), kDamaged);
    std::string renamed = bytes;
    renamed[0] = 'S';   // the magic's first letter
    EXPECT_EQ(refusal(renamed, a), "not a share of an analysis in this format");
    EXPECT_EQ(refusal("", a), "not a share of an analysis in this format");
    EXPECT_EQ(refusal(save_clock_result(ClockResult{}), a), "not a share of an analysis in this format");
    // `stranger` read no event: its topology has none of the objects the share's ids refer to.
    EXPECT_EQ(refusal(bytes, stranger).rfind("the share's topology differs", 0), 0u);
    std::string why;
    const std::unique_ptr<Analysis> loaded = Analysis::load_share(bytes, a, &why);
    ASSERT_NE(loaded, nullptr) << why;
    ASSERT_TRUE(a.merge_share(*loaded));
    EXPECT_EQ(merged_sections(a.finish()), merged_sections(whole.finish()));
}

TEST(ShareBytes, AClockEstimateComesBackWhole) {
    ClockResult c;
    c.reference = "node0";
    c.at_ns = 123456789;
    c.applied = true;
    HostClock h;
    h.host = "node1";
    h.status = HostClock::Status::estimated;
    h.relative_to = "node0";
    h.offset_ns = -2.5e6;
    h.drift_ppm = 49.75;
    h.uncertainty_ns = 812.5;
    h.drift_uncertainty_ppm = 0.125;
    h.bounds = 4242;
    c.hosts = {h};
    const std::optional<ClockResult> back = load_clock_result(save_clock_result(c));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->reference, "node0");
    EXPECT_EQ(back->at_ns, 123456789);
    EXPECT_TRUE(back->applied);
    ASSERT_EQ(back->hosts.size(), 1u);
    const HostClock& g = back->hosts[0];
    EXPECT_EQ(std::tie(g.host, g.status, g.relative_to, g.offset_ns, g.drift_ppm, g.uncertainty_ns,
                       g.drift_uncertainty_ppm, g.bounds),
              std::tie(h.host, h.status, h.relative_to, h.offset_ns, h.drift_ppm, h.uncertainty_ns,
                       h.drift_uncertainty_ppm, h.bounds));
    EXPECT_FALSE(load_clock_result("not a clock estimate").has_value());
    const std::string bytes = save_clock_result(c);
    EXPECT_FALSE(load_clock_result(bytes.substr(0, bytes.size() - 3)).has_value());
}

}  // namespace
}  // namespace sigmatrace::analyzer
