// What the watcher saw in watched rings, on the one path of every data-path call: ring_post records (WQEs) and
// poll_cq records of api kApiRingCompletion (CQEs) in `deferred_records` events, decoded by the element decoder
// into DataElements and reconstructed like verbs posts and polls: who posted each operation (verbs, CPU-direct,
// GPU), peers through the exported verbs QP's qp_modify or the WQE's address vector, and one operation for a WR
// seen both by the verbs wrappers and in the ring. Exact counts, bytes and fields throughout.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <sigmatrace/deferred_records.h>
#include <sigmatrace/deferred_records_wire.h>

#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/element_decoder.h"
#include "analyzer/decode/reorder_stage.h"
#include "record_feeder.h"
#include "support/records_words.h"

namespace sigmatrace::analyzer {
namespace {

using nlohmann::json;
using records::Poster;
using test::RecordFeeder;
using testing::TestRecord;

constexpr uint64_t kPrefix = 0xfe80000000000000ULL;
constexpr uint64_t kCq = 0xcc;
constexpr uint8_t kWrite = 0, kSend = 2;  // ibv_wr_opcode

struct Ops : OpListener {
    void on_operation(const Operation& op) override { ops.push_back(op); }
    std::vector<Operation> ops;
};

records::RingWqeEntry write_wqe(uint64_t pi, uint32_t bytes, bool signaled, uint64_t raddr = 0x7000, uint32_t rkey = 0x55) {
    records::RingWqeEntry e{};
    e.pi = pi;
    e.raddr = raddr;
    e.bytes = bytes;
    e.rkey = rkey;
    e.ctrl = 0x08 | (signaled ? 0x08u << 16 : 0);  // mlx5 RDMA_WRITE, CQ update
    e.opcode = kWrite;
    e.send_flags = signaled ? records::kRingSignaled : 0;
    return e;
}
TestRecord ring_post(uint64_t queue, uint32_t qpn, Poster poster, const std::vector<records::RingWqeEntry>& e) {
    return TestRecord::make(records::RecordKind::ring_post, 0, records::RingPostFixed{queue, qpn, static_cast<uint8_t>(poster), {}}, e);
}
records::CompletionEntry cqe(uint16_t counter, uint32_t qpn, uint8_t status = 0) {
    records::CompletionEntry c{};
    c.wr_id = counter;
    c.qp_num = qpn;
    c.opcode = 1;  // IBV_WC_RDMA_WRITE
    c.status = status;
    return c;
}
TestRecord ring_completions(const std::vector<records::CompletionEntry>& c) {
    return TestRecord::poll(0, records::PollFixed{kCq, static_cast<int32_t>(c.size()), records::kApiRingCompletion}, c);
}

// Two processes, rank 0 on nodeA and rank 1 on nodeB, each with device mlx0 (GID kPrefix:0x10+rank), CQ kCq and an
// RC QP connected to the other's (handle 0x1000+rank, QPN 100+rank), fed through the element decoder and the
// reordering stage as the Babeltrace2 consumer feeds them.
struct World {
    Analysis analysis;
    ReorderStage stage{analysis};
    ElementDecoder decoder{stage};
    RecordFeeder feed{decoder};
    Ops ops;
    int64_t t = 1'000'000;

    World() { analysis.add_listener(&ops); }
    static int64_t vpid(int rank) { return 500 + rank; }
    static uint64_t gid_iid(int rank) { return 0x10 + static_cast<uint64_t>(rank); }

    void process(int rank, const char* host) {
        st_process_info_rec pi{};
        pi.schema_version = SIGMATRACE_SCHEMA_VERSION;
        pi.schema_minor = SIGMATRACE_SCHEMA_MINOR;
        pi.pid = static_cast<int32_t>(vpid(rank));
        pi.rank = rank;
        pi.world_size = 2;
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
        p.gid_iid = gid_iid(rank);
        feed.emit(t++, vpid(rank), p);
        st_cq_create_rec c{};
        c.ctx = 0xc0;
        c.cq = kCq;
        feed.emit(t++, vpid(rank), c);
    }
    void verbs_qp(int rank, uint64_t handle, uint32_t qpn, uint32_t type) {
        st_qp_create_rec q{};
        q.ctx = 0xc0;
        q.qp = handle;
        q.qp_num = qpn;
        q.qp_type = type;
        q.send_cq = q.recv_cq = kCq;
        q.max_send_wr = 64;
        q.max_recv_wr = 64;
        q.kind = 2;  // mlx5dv_create_qp, as UCX makes them
        feed.emit(t++, vpid(rank), q);
    }
    void connect(int rank, uint64_t handle, uint32_t qpn, uint32_t dest) {
        st_qp_modify_rec m{};
        m.qp = handle;
        m.qp_num = qpn;
        m.qp_state = 2;
        m.dest_qp_num = dest;
        m.is_global = 1;
        m.dgid_prefix = kPrefix;
        m.dgid_iid = gid_iid(1 - rank);
        feed.emit(t++, vpid(rank), m);
    }
    // mlx5dv_init_obj on the verbs QP: the watcher learns its ring.
    // A learned queue (gpu_qp_create): `source` 1 for mlx5dv_init_obj on a verbs QP (`st` its ibv_qp_type), 0 for
    // DevX (`st` the PRM service type, or kGpuQpStDct for a DCT).
    void learned(int rank, uint32_t qpn, uint32_t st, uint32_t sq_wqebb, uint32_t source) {
        st_gpu_qp_create_rec g{};
        g.ctx = 0xc0;
        g.qpn = qpn;
        g.st = st;
        g.sq_wqebb = sq_wqebb;
        g.source = source;
        feed.emit(t++, vpid(rank), g);
    }
    void exported(int rank, uint32_t qpn, uint32_t type) { learned(rank, qpn, type, 64, 1); }
    void devx(int rank, uint32_t qpn, uint32_t st, uint32_t sq_wqebb) { learned(rank, qpn, st, sq_wqebb, 0); }
    void two_nodes() {
        process(0, "nodeA");
        process(1, "nodeB");
        for (int rank = 0; rank < 2; ++rank) {
            verbs_qp(rank, 0x1000 + static_cast<uint64_t>(rank), 100 + static_cast<uint32_t>(rank), 2);
            connect(rank, 0x1000 + static_cast<uint64_t>(rank), 100 + static_cast<uint32_t>(rank), 101 - static_cast<uint32_t>(rank));
        }
    }
    // One deferred_records event of rank `rank` holding `recs` (capture times as given; 0: the event's time).
    void carrier(int rank, const std::vector<TestRecord>& recs, int64_t at, const records::EncodeOptions& opt = {}) {
        const std::vector<uint64_t> words = testing::encode_words(recs, opt);
        feed.emit_words(at, vpid(rank), words);
    }
    json finish() {
        stage.finish();
        return analysis.finish();
    }
};

uint64_t matrix_bytes(const json& doc, const std::string& src, const std::string& dst) {
    for (const auto& c : doc["traffic"]["node_matrix"])
        if (c["src"] == src && c["dst"] == dst) return c["bytes"].get<uint64_t>();
    return 0;
}
uint64_t rail_tx(const json& doc, const std::string& node) {
    for (const auto& r : doc["rails"])
        if (r["node"] == node) return r["bytes_tx"].get<uint64_t>();
    return 0;
}
bool warns(const json& doc, const std::string& what) {
    for (const auto& w : doc["warnings"])
        if (w.get<std::string>().find(what) != std::string::npos) return true;
    return false;
}

// ------------------------------------------------------------------------------------------ element decoding

struct Seen : EventSink {
    void on_event(const DecodedEvent& ev) override { events.push_back(ev.id); }
    // The extra fields are the carrying event's, valid during the call: kept beside the element.
    void on_element(const DataElement& e) override {
        elements.push_back(e);
        extras.push_back(e.extra());
    }
    std::vector<EventId> events;
    std::vector<DataElement> elements;
    std::vector<ElementExtra> extras;
};

TEST(RingRecords, AWqeRecordAndACompletionRecordBecomeTheirElements) {
    records::RingWqeEntry ud{};
    ud.pi = 0x1'0005;  // the 16-bit counter wrapped once
    ud.bytes = 300;
    ud.ctrl = 0x0a | 0x08u << 16;  // SEND, signaled
    ud.opcode = kSend;
    ud.send_flags = records::kRingSignaled | records::kRingInline;
    ud.dest_qpn = 0x4711;
    ud.dlid = 7;
    ud.dgid_prefix = kPrefix;
    ud.dgid_iid = 0x11;
    records::CompletionEntry err = cqe(5, 0x300, 10);
    err.vendor_err = 0x13;
    const std::vector<uint64_t> words = testing::encode_words(
        {ring_post(0xdc1, 0x300, Poster::gpu, {write_wqe(0x1'0004, 65536, false, 0xabc000, 0x99), ud}),
         ring_completions({cqe(4, 0x300), err})});
    Seen sink;
    ElementDecoder d(sink);
    RecordFeeder feed(d);
    feed.emit_words(9'000, 42, words);

    ASSERT_EQ(sink.elements.size(), 4u);
    const DataElement& w = sink.elements[0];
    EXPECT_EQ(w.kind, ElementKind::send);
    EXPECT_TRUE(w.ring);
    EXPECT_EQ(w.poster, Poster::gpu);
    EXPECT_EQ(w.handle, 0xdc1u);
    EXPECT_EQ(w.qp_num, 0x300u);
    EXPECT_EQ(w.wr_id, 0x1'0004u);
    EXPECT_EQ(w.opcode, kWrite);
    EXPECT_EQ(w.send_flags, 0u);
    EXPECT_EQ(w.bytes, 65536u);
    EXPECT_EQ(w.raddr, 0xabc000u);
    EXPECT_EQ(w.rkey, 0x99u);
    EXPECT_EQ(w.ts_ns, 9'000);  // capture time 0: the event's timestamp
    const DataElement& s = sink.elements[1];
    EXPECT_EQ(s.opcode, kSend);
    EXPECT_EQ(s.send_flags, uint32_t{records::kRingSignaled | records::kRingInline});
    EXPECT_EQ(sink.extras[0], ElementExtra{});   // an RC WRITE carries none
    EXPECT_EQ(w.extra_index, DataElement::kNoExtra);
    EXPECT_EQ(sink.extras[1].remote_qpn, 0x4711u);
    EXPECT_EQ(sink.extras[1].dlid, 7);
    EXPECT_EQ(sink.extras[1].dgid_prefix, kPrefix);
    EXPECT_EQ(sink.extras[1].dgid_iid, 0x11u);
    EXPECT_EQ(sink.extras[1].vendor_err, 0u);
    const DataElement& c = sink.elements[2];
    EXPECT_EQ(c.kind, ElementKind::completion);
    EXPECT_TRUE(c.ring);
    EXPECT_EQ(c.handle, kCq);
    EXPECT_EQ(c.wr_id, 4u);
    EXPECT_EQ(c.qp_num, 0x300u);
    EXPECT_EQ(c.status, 0);
    EXPECT_EQ(sink.extras[2], ElementExtra{});
    EXPECT_EQ(sink.elements[3].status, 10);
    EXPECT_EQ(sink.extras[3].vendor_err, 0x13u);   // an error completion's
    // The carrier itself goes on, once, consistent.
    ASSERT_EQ(sink.events.size(), 1u);
    EXPECT_EQ(sink.events[0], EventId::deferred_records);
}

TEST(RingRecords, RedactionClearsTheRingRecordsAddressesAndKeys) {
    const std::vector<uint64_t> words =
        testing::encode_words({ring_post(0xdc1, 0x300, Poster::cpu_direct, {write_wqe(1, 64, true, 0xabc000, 0x99)})},
                              records::EncodeOptions{true, true});
    Seen sink;
    ElementDecoder d(sink);
    RecordFeeder feed(d);
    feed.emit_words(9'000, 42, words);
    ASSERT_EQ(sink.elements.size(), 1u);
    EXPECT_EQ(sink.elements[0].raddr, 0u);
    EXPECT_EQ(sink.elements[0].rkey, 0u);
    EXPECT_EQ(sink.elements[0].bytes, 64u);
}

// Layout 2 (schema minor 4-5) is read as it was; a ring_post record is of layout 3, which older readers refuse
// whole rather than stop part-way.
TEST(RingRecords, Layout2IsStillReadAndTheLayoutWasBumped) {
    EXPECT_EQ(records::kLayout, 3u);
    EXPECT_TRUE(records::layout_readable(2));
    EXPECT_FALSE(records::layout_readable(4));
    records::SendEntry e{};
    e.wr_id = 5;
    e.bytes = 10;
    const std::vector<uint64_t> words = testing::encode_words({TestRecord::send(0, records::SendFixed{0x1000, 100, 0, -1, 0, 0, 0}, {e})});
    for (uint32_t layout : {2u, 3u}) {
        Seen sink;
        ElementDecoder d(sink);
        RecordFeeder feed(d);
        st_deferred_records_rec r{};
        r.layout = layout;
        r.n = static_cast<uint32_t>(words.size());
        r.words = words.data();
        feed.emit(9'000, 42, r);
        ASSERT_EQ(sink.elements.size(), 1u) << "layout " << layout;
        EXPECT_EQ(sink.elements[0].wr_id, 5u);
        EXPECT_FALSE(sink.elements[0].ring);
    }
}

// ------------------------------------------------------------------------------------------ reconstruction

// UCX rc_mlx5 style: a verbs QP created and connected through verbs, exported with mlx5dv_init_obj, then driven
// by WQEs the CPU writes itself. Its operations are CPU-direct, its peer is the QP its qp_modify named.
TEST(RingRecords, CpuDirectWqesOnAnExportedVerbsQpResolveTheirPeerThroughItsQpModify) {
    World w;
    w.two_nodes();
    w.exported(0, 100, 2);
    w.carrier(0, {ring_post(0x1000, 100, Poster::cpu_direct, {write_wqe(7, 65536, false), write_wqe(8, 65536, false), write_wqe(9, 65536, true)})},
              w.t += 1'000);
    w.carrier(0, {ring_completions({cqe(9, 100)})}, w.t += 5'000);
    const json doc = w.finish();

    ASSERT_EQ(w.ops.ops.size(), 3u);
    for (const Operation& op : w.ops.ops) {
        EXPECT_EQ(op.poster, Poster::cpu_direct);
        EXPECT_EQ(op.outcome, OpOutcome::Completed);
        EXPECT_EQ(op.peer.node, w.analysis.topology().proc(op.peer.proc).node);
        EXPECT_EQ(w.analysis.topology().proc(op.peer.proc).rank, 1);
    }
    EXPECT_TRUE(w.ops.ops[0].implied);
    EXPECT_FALSE(w.ops.ops[2].implied);
    EXPECT_EQ(w.ops.ops[2].done_ts - w.ops.ops[2].post_ts, 5'000);
    EXPECT_EQ(doc["ops"]["total"], 3);
    EXPECT_EQ(doc["ops"]["cpu_direct"], 3);
    EXPECT_EQ(doc["ops"]["gpu"], 0);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["count"], 3);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["bytes"], 3 * 65536);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["cpu_direct"], 3);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["latency_ns"]["max"], 5'000);
    EXPECT_EQ(matrix_bytes(doc, "nodeA", "nodeB"), 3u * 65536);
    EXPECT_EQ(rail_tx(doc, "nodeA"), 3u * 65536);
    ASSERT_EQ(doc["qps"].size(), 1u);
    EXPECT_EQ(doc["qps"][0]["poster"], "cpu_direct");
    EXPECT_EQ(doc["qps"][0]["gpu"], false);
    EXPECT_EQ(doc["qps"][0]["qp_num"], 100);
    EXPECT_EQ(doc["qps"][0]["peer"]["qp_num"], 101);
    EXPECT_FALSE(warns(doc, "matched no posted"));
    EXPECT_EQ(doc["findings"].size(), 0u);
}

// A DevX QP's records read after its gpu_qp_destroy (traces of earlier versions emitted the destroy before the
// QP's final sweep, whose completions came at the CQ's destroy) still belong to it: its peer, not an unknown QP.
TEST(RingRecords, RecordsOfADestroyedDevxQpReadAfterItsDestroyStayWithIt) {
    World w;
    w.two_nodes();
    st_gpu_qp_create_rec g{};
    g.ctx = 0xc0;
    g.qpn = 300;
    g.st = 0;  // PRM RC
    g.sq_wqebb = 64;
    g.source = 0;
    w.feed.emit(w.t++, World::vpid(0), g);
    st_gpu_qp_modify_rec m{};
    m.ctx = 0xc0;
    m.qpn = 300;
    m.command = 0x503;
    m.remote_qpn = 101;
    m.rgid_prefix = kPrefix;
    m.rgid_iid = World::gid_iid(1);
    w.feed.emit(w.t++, World::vpid(0), m);
    w.carrier(0, {ring_post(0x9000, 300, Poster::gpu, {write_wqe(0, 4096, false), write_wqe(1, 4096, true)})}, w.t += 1'000);
    w.carrier(0, {ring_completions({cqe(1, 300)})}, w.t += 1'000);
    st_gpu_qp_destroy_rec d{0xc0, 300};
    w.feed.emit(w.t += 1'000, World::vpid(0), d);
    w.carrier(0, {ring_post(0x9000, 300, Poster::gpu, {write_wqe(2, 4096, true)})}, w.t += 1'000);
    w.carrier(0, {ring_completions({cqe(2, 300)})}, w.t += 1'000);
    const json doc = w.finish();

    ASSERT_EQ(w.ops.ops.size(), 3u);
    for (const Operation& op : w.ops.ops) {
        EXPECT_EQ(op.outcome, OpOutcome::Completed);
        ASSERT_NE(op.peer.proc, kNoId);
        EXPECT_EQ(w.analysis.topology().proc(op.peer.proc).rank, 1);
    }
    EXPECT_EQ(matrix_bytes(doc, "nodeA", "nodeB"), 3u * 4096);
    EXPECT_EQ(doc["qps"].size(), 1u);
    EXPECT_FALSE(warns(doc, "whose creation is not in the trace"));
    EXPECT_FALSE(warns(doc, "matched no posted"));
}

// A QUERY_QP the owner made (gpu_qp_query) is the NIC's word in the QP's progress: its state and counters. A query
// confirming the state adds no state change; one that tells ERR before the watcher read the error CQE does, and
// the error completion is still listed after it (it is the cause).
TEST(RingRecords, AQueryQpAnswerIsTheNicsWordInTheQueuesProgress) {
    World w;
    w.two_nodes();
    for (uint32_t qpn : {300u, 301u}) {
        st_gpu_qp_create_rec g{};
        g.ctx = 0xc0;
        g.qpn = qpn;
        g.sq_wqebb = 64;
        w.feed.emit(w.t++, World::vpid(0), g);
        st_gpu_qp_modify_rec m{};
        m.ctx = 0xc0;
        m.qpn = qpn;
        m.command = 0x503;
        m.remote_qpn = 101;
        m.rgid_prefix = kPrefix;
        m.rgid_iid = World::gid_iid(1);
        w.feed.emit(w.t++, World::vpid(0), m);
    }
    auto query = [&](uint32_t qpn, uint32_t state, uint32_t hw, uint32_t sw, int32_t err = 0) {
        st_gpu_qp_query_rec q{0xc0, qpn, state, hw, sw, err};
        w.feed.emit(w.t += 1'000, World::vpid(0), q);
    };
    constexpr uint8_t kRetryExc = 12;  // IBV_WC_RETRY_EXC_ERR
    // QP 300: the error CQE is read first, then the owner's queries (ERR twice, and one that failed).
    w.carrier(0, {ring_post(0x9000, 300, Poster::gpu, {write_wqe(0, 4096, true), write_wqe(1, 4096, true)})}, w.t += 1'000);
    w.carrier(0, {ring_completions({cqe(0, 300), cqe(1, 300, kRetryExc)})}, w.t += 1'000);
    query(300, 6, 2, 2);
    query(300, 6, 2, 2);
    query(300, 3, 9, 9, EIO);
    // QP 301: the owner's query tells ERR before the watcher reads the error CQE.
    w.carrier(0, {ring_post(0x9100, 301, Poster::gpu, {write_wqe(0, 4096, true)})}, w.t += 1'000);
    query(301, 6, 1, 1);
    w.carrier(0, {ring_completions({cqe(0, 301, kRetryExc)})}, w.t += 1'000);
    const json doc = w.finish();

    auto progress = [&](uint32_t qpn) {
        for (const auto& q : doc["qps"])
            if (q["qp_num"] == qpn) return q["progress"];
        return json();
    };
    const json p300 = progress(300), p301 = progress(301);
    ASSERT_TRUE(p300.is_object());
    ASSERT_TRUE(p301.is_object());
    ASSERT_EQ(p300["states"].size(), 1u);
    EXPECT_EQ(p300["states"][0]["state"], "ERR");
    EXPECT_EQ(p300["states"][0]["source"], "error_completion");
    EXPECT_EQ(p300["nic_query"]["state"], "ERR");
    EXPECT_EQ(p300["nic_query"]["consumed_index"], 2);
    EXPECT_EQ(p300["nic_query"]["producer_index"], 2);
    ASSERT_EQ(p301["states"].size(), 2u);
    EXPECT_EQ(p301["states"][0]["source"], "query_qp");
    EXPECT_EQ(p301["states"][1]["source"], "error_completion");
    EXPECT_EQ(p301["nic_query"]["consumed_index"], 1);
}

// dc_mlx5 / ud_mlx5 style: a DCI (or UD QP) has no connection; each WQE's address vector names the target: the
// DCT number (or QPN) and the remote GID. Rank 1's DCT is a verbs QP of number 201.
TEST(RingRecords, DcAndUdWqesResolveTheirPeerThroughTheirAddressVector) {
    World w;
    w.process(0, "nodeA");
    w.process(1, "nodeB");
    w.verbs_qp(0, 0x2000, 200, 0xff);  // a DCI (IBV_QPT_DRIVER)
    w.verbs_qp(1, 0x2001, 201, 0xff);  // the DCT
    w.exported(0, 200, 0xff);
    records::RingWqeEntry a = write_wqe(0, 65536, true), b = write_wqe(1, 4096, true);
    for (records::RingWqeEntry* e : {&a, &b}) {
        e->dest_qpn = 201;
        e->dgid_prefix = kPrefix;
        e->dgid_iid = World::gid_iid(1);
    }
    b.dgid_iid = 0x99;  // no device has this GID: peer unknown, bytes still counted as moved
    w.carrier(0, {ring_post(0x2000, 200, Poster::cpu_direct, {a, b})}, w.t += 1'000);
    w.carrier(0, {ring_completions({cqe(0, 200), cqe(1, 200)})}, w.t += 2'000);
    const json doc = w.finish();
    ASSERT_EQ(w.ops.ops.size(), 2u);
    EXPECT_EQ(w.analysis.topology().proc(w.ops.ops[0].peer.proc).rank, 1);
    EXPECT_EQ(w.analysis.topology().qp(w.ops.ops[0].peer.qp).qp_num, 201u);
    EXPECT_FALSE(w.ops.ops[1].peer.known());
    EXPECT_EQ(matrix_bytes(doc, "nodeA", "nodeB"), 65536u);
    EXPECT_EQ(doc["ops"]["by_opcode"]["RDMA_WRITE"]["bytes"], 65536 + 4096);
}

// NVSHMEM's DC transport: a DevX DCI (st 0x5) and, in the peer, a DevX DCT (CREATE_DCT: st kGpuQpStDct). The DCT's
// event is what names the peer process of every WQE addressing it; without it only the node would be known.
TEST(RingRecords, DevxDciWqesResolveTheDevxDctTheyNameToItsProcess) {
    World w;
    w.process(0, "nodeA");
    w.process(1, "nodeB");
    w.devx(0, 300, 0x5, 256);
    w.devx(1, 401, kGpuQpStDct, 0);
    records::RingWqeEntry a = write_wqe(0, 4096, true), b = write_wqe(2, 8, true);
    for (records::RingWqeEntry* e : {&a, &b}) {
        e->dest_qpn = 401;
        e->dgid_prefix = kPrefix;
        e->dgid_iid = World::gid_iid(1);
    }
    b.dest_qpn = 402;  // no DCT of that number: the node is still known
    w.carrier(0, {ring_post(0x3000, 300, Poster::gpu, {a, b})}, w.t += 1'000);
    w.carrier(0, {ring_completions({cqe(0, 300), cqe(2, 300)})}, w.t += 2'000);
    const json doc = w.finish();
    ASSERT_EQ(w.ops.ops.size(), 2u);
    const Topology& topo = w.analysis.topology();
    ASSERT_NE(w.ops.ops[0].peer.proc, kNoId);
    EXPECT_EQ(topo.proc(w.ops.ops[0].peer.proc).rank, 1);
    EXPECT_EQ(topo.qp(w.ops.ops[0].peer.qp).qp_num, 401u);
    EXPECT_EQ(w.ops.ops[1].peer.proc, kNoId);
    ASSERT_NE(w.ops.ops[1].peer.node, kNoId);
    EXPECT_EQ(topo.node(w.ops.ops[1].peer.node).name, "nodeB");
    EXPECT_EQ(matrix_bytes(doc, "nodeA", "nodeB"), 4096u + 8u);
}

// A WQE of a ring whose memory set-up classified as GPU-reachable is GPU-posted; the report says so per opcode and
// in total, and only those are called GPU-posted.
TEST(RingRecords, GpuAndCpuDirectPostersAreCountedApart) {
    World w;
    w.two_nodes();
    w.exported(0, 100, 2);
    w.exported(1, 101, 2);
    w.carrier(0, {ring_post(0x1000, 100, Poster::cpu_direct, {write_wqe(0, 100, true)})}, w.t += 1'000);
    w.carrier(1, {ring_post(0x1001, 101, Poster::gpu, {write_wqe(0, 200, true), write_wqe(1, 200, true)})}, w.t += 1'000);
    w.carrier(0, {ring_completions({cqe(0, 100)})}, w.t += 1'000);
    w.carrier(1, {ring_completions({cqe(0, 101), cqe(1, 101)})}, w.t += 1'000);
    const json doc = w.finish();
    EXPECT_EQ(doc["ops"]["total"], 3);
    EXPECT_EQ(doc["ops"]["cpu_direct"], 1);
    EXPECT_EQ(doc["ops"]["gpu"], 2);
    EXPECT_EQ(matrix_bytes(doc, "nodeA", "nodeB"), 100u);
    EXPECT_EQ(matrix_bytes(doc, "nodeB", "nodeA"), 400u);
    std::map<int, std::string> poster;
    for (const auto& q : doc["qps"]) poster[q["qp_num"].get<int>()] = q["poster"].get<std::string>();
    EXPECT_EQ(poster[100], "cpu_direct");
    EXPECT_EQ(poster[101], "gpu");
}

// A verbs ibv_post_send on an exported QP: the provider writes the WQE into the same ring, so the wrappers and the
// watcher both show it, and its completion may be seen by an ibv_poll_cq and in the CQ ring. One operation, the
// verbs post's, completed once; neither second view is an unmatched completion.
TEST(RingRecords, AWrSeenByTheVerbsWrappersAndInTheRingIsOneOperation) {
    World w;
    w.two_nodes();
    w.exported(0, 100, 2);
    records::SendEntry post{};
    post.wr_id = 77;
    post.raddr = 0x7000;
    post.send_flags = 2;  // IBV_SEND_SIGNALED
    post.bytes = 4096;
    post.rkey = 0x55;
    post.num_sge = 1;
    post.opcode = kWrite;
    const int64_t t0 = w.t += 1'000;
    w.carrier(0, {TestRecord::send(static_cast<uint64_t>(t0), records::SendFixed{0x1000, 100, 0, -1, 0, 0, 0}, {post})}, t0 + 10);
    w.carrier(0, {ring_post(0x1000, 100, Poster::cpu_direct, {write_wqe(3, 4096, true)})}, t0 + 500);
    w.carrier(0, {ring_completions({cqe(3, 100)})}, t0 + 2'000);
    records::CompletionEntry polled{};
    polled.wr_id = 77;
    polled.qp_num = 100;
    polled.opcode = 1;
    w.carrier(0, {TestRecord::poll(static_cast<uint64_t>(t0 + 2'100), records::PollFixed{kCq, 1, 0}, {polled})}, t0 + 2'200);
    // And the same again with the ring view read first (the verbs record drained late, captured earlier).
    const int64_t t1 = w.t = t0 + 10'000;
    post.wr_id = 78;
    w.carrier(0, {ring_post(0x1000, 100, Poster::cpu_direct, {write_wqe(4, 4096, true)})}, t1 + 500);
    w.carrier(0, {TestRecord::send(static_cast<uint64_t>(t1), records::SendFixed{0x1000, 100, 0, -1, 0, 0, 0}, {post})}, t1 + 600);
    polled.wr_id = 78;
    w.carrier(0, {TestRecord::poll(static_cast<uint64_t>(t1 + 2'000), records::PollFixed{kCq, 1, 0}, {polled})}, t1 + 2'100);
    w.carrier(0, {ring_completions({cqe(4, 100)})}, t1 + 2'200);
    const json doc = w.finish();

    ASSERT_EQ(w.ops.ops.size(), 2u);
    EXPECT_EQ(w.ops.ops[0].wr_id, 77u);
    EXPECT_EQ(w.ops.ops[1].wr_id, 78u);
    for (const Operation& op : w.ops.ops) {
        EXPECT_EQ(op.poster, Poster::verbs);
        EXPECT_EQ(op.outcome, OpOutcome::Completed);
        EXPECT_EQ(op.bytes, 4096u);
    }
    EXPECT_EQ(w.ops.ops[0].post_ts, t0);
    EXPECT_EQ(w.ops.ops[1].post_ts, t1);
    EXPECT_EQ(doc["ops"]["total"], 2);
    EXPECT_EQ(doc["ops"]["cpu_direct"], 0);
    EXPECT_EQ(doc["ops"]["in_flight_at_end"], 0);
    EXPECT_EQ(matrix_bytes(doc, "nodeA", "nodeB"), 2u * 4096);
    EXPECT_FALSE(warns(doc, "matched no posted"));
}

// Old traces (schema minor 5 and before): the watcher's gpu_wqe and gpu_cqe events go through the adapter into the
// same elements, and give the same operations as the records that replaced them.
TEST(RingRecords, OldGpuWqeAndGpuCqeEventsGiveTheSameOperationsAsTheRecords) {
    auto run = [](bool old) {
        World w;
        w.two_nodes();
        w.exported(0, 100, 2);
        const int64_t at = w.t += 1'000;
        if (old) {
            std::vector<uint16_t> idx = {7, 8, 9};
            std::vector<uint8_t> op = {0x08, 0x08, 0x08}, opmod(3), fm = {0, 0, 0x08};
            std::vector<uint32_t> bytes(3, 65536), rkey(3, 0x55), imm(3);
            std::vector<uint64_t> raddr(3, 0x7000), arg(3);
            st_gpu_wqe_rec r{};
            r.qpn = 100;
            r.pi_old = 7;
            r.pi_new = 10;
            r.n = 3;
            r.wqe_index = idx.data();
            r.opcode = op.data();
            r.opmod = opmod.data();
            r.fm_ce_se = fm.data();
            r.bytes = bytes.data();
            r.raddr = raddr.data();
            r.rkey = rkey.data();
            r.imm = imm.data();
            r.atomic_arg = arg.data();
            w.feed.emit(at, World::vpid(0), r);
            std::vector<uint16_t> ctr = {9};
            std::vector<uint8_t> cop = {0}, syn = {0};
            std::vector<uint32_t> bc = {0}, qpn = {100};
            std::vector<uint64_t> ts = {0};
            st_gpu_cqe_rec c{};
            c.cqn = 1;
            c.n = 1;
            c.wqe_counter = ctr.data();
            c.opcode = cop.data();
            c.syndrome = syn.data();
            c.byte_cnt = bc.data();
            c.qpn = qpn.data();
            c.hw_ts = ts.data();
            w.feed.emit(at + 5'000, World::vpid(0), c);
        } else {
            w.carrier(0, {ring_post(0x1000, 100, Poster::gpu, {write_wqe(7, 65536, false), write_wqe(8, 65536, false), write_wqe(9, 65536, true)})}, at);
            w.carrier(0, {ring_completions({cqe(9, 100)})}, at + 5'000);
        }
        json doc = w.finish();
        return std::make_pair(doc, w.ops.ops);
    };
    const auto [old_doc, old_ops] = run(true);
    const auto [doc, ops] = run(false);
    ASSERT_EQ(old_ops.size(), 3u);
    ASSERT_EQ(ops.size(), 3u);
    for (std::size_t i = 0; i < ops.size(); ++i) {
        EXPECT_EQ(old_ops[i].poster, Poster::gpu);  // all an old trace could say
        EXPECT_EQ(old_ops[i].outcome, ops[i].outcome);
        EXPECT_EQ(old_ops[i].implied, ops[i].implied);
        EXPECT_EQ(old_ops[i].bytes, ops[i].bytes);
        EXPECT_EQ(old_ops[i].post_ts, ops[i].post_ts);
        EXPECT_EQ(old_ops[i].done_ts, ops[i].done_ts);
        EXPECT_EQ(old_ops[i].peer.qp, ops[i].peer.qp);
    }
    EXPECT_EQ(old_doc["ops"], doc["ops"]);
    EXPECT_EQ(old_doc["traffic"]["node_matrix"], doc["traffic"]["node_matrix"]);
    EXPECT_EQ(matrix_bytes(doc, "nodeA", "nodeB"), 3u * 65536);
    // The old trace's events are counted under their own names.
    EXPECT_EQ(old_doc["trace"]["events_by_type"]["gpu_wqe"], 1);
    EXPECT_EQ(old_doc["trace"]["events_by_type"]["gpu_cqe"], 1);
}

}  // namespace
}  // namespace sigmatrace::analyzer
