// st-linkload: timed phases of large RDMA WRITE streams between the ranks of an MPI job on the software fabric, so
// that the analyzer's link-level findings have a ground truth (tests/analyzer/linkload_test.cpp):
//   ring      every rank streams to rank+1                       (one sender per receiver: no incast)
//   incast    every rank but 0 streams to rank 0                 (many-to-one: incast of degree N-1 on rank 0)
//   alltoall  every rank streams to every other rank             (balanced fan-in: no incast)
//   idle      nothing
// Each rank opens every RDMA device of its node (all rails, as NCCL does) and spreads its streams over the first
// --rails-used of them (1: deliberately on one rail). A stream keeps --depth signaled WRITEs of --size bytes in
// flight on its QP. Phases follow one absolute schedule (CLOCK_MONOTONIC, shared by the ranks of one machine), which
// --start-at-fabric aligns with the fabric's own clock so that a fault schedule (`slow ... from T1 to T2` in the
// fabric's --config, times counted from the fabric's start) falls inside a chosen phase. The fabric's start is read
// from `sigmatrace fabric --stats --json` (its uptime) before MPI starts.
//
// MPI (over shared memory, never RDMA: run it with --mca btl self,vader) only exchanges the connection data.
// Rank 0 writes the ground truth (--truth FILE, JSON): the phases in Unix time, the fabric's start, and the bytes
// every rank wrote per destination and rail, in all and by the phase the WRITEs were posted in. Exit 0 when every
// WRITE completed successfully.
//
//   mpirun -np 4 --mca btl self,vader --mca pml ob1 sigmatrace fabric --node rank --rails 2 --config gray.conf --
//       st-linkload --start-at-fabric 1000 --phase ring:1400 --phase incast:500 --rails-used 1 --truth truth.json
#include <infiniband/verbs.h>
#include <mpi.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <sigmatrace/launcher_env.h>

#include "common/verbs/rc_setup.h"

namespace {

namespace verbs = sigmatrace::verbs;
namespace launcher = sigmatrace::launcher;

constexpr int kMaxRanks = 16;
constexpr int kMaxRails = 8;
constexpr int kPort = 1;
constexpr int64_t kIdleSleepNs = 100'000;   // nothing to post or poll: yield the CPU (2-core CI machines)

enum class Pattern { Ring, Incast, AllToAll, Idle };

struct Phase {
    Pattern pattern;
    int64_t ms;
    const char* name;
};

struct Options {
    std::vector<Phase> phases;
    uint32_t size = 262144;
    uint32_t depth = 16;
    int rails_used = 0;              // 0: every device opened
    int64_t start_at_fabric_ms = -1; // -1: start 50 ms after everyone is connected
    std::string truth;
    std::string stats_cmd;           // default: <prefix>/bin/sigmatrace fabric --stats --json
};

struct DevInfo {
    uint16_t lid;
    uint8_t gid[16];
    uint64_t recv_addr;
    uint32_t recv_rkey;
};

// What each rank publishes with MPI_Allgather.
struct Info {
    DevInfo dev[kMaxRails];
    uint32_t qpn[kMaxRanks][kMaxRails];   // qpn[p][u]: this rank's QP to rank p on rail u
    char node[32];
};

int64_t now_ns(clockid_t clock = CLOCK_MONOTONIC) {
    timespec ts{};
    clock_gettime(clock, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void sleep_until(int64_t mono_ns) {
    timespec ts{static_cast<time_t>(mono_ns / 1'000'000'000), static_cast<long>(mono_ns % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
}

[[noreturn]] void fail(int rank, const char* what) {
    std::fprintf(stderr, "st-linkload: rank %d: %s failed (errno %d: %s)\n", rank, what, errno, std::strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
}

[[noreturn]] void fail(int rank, const verbs::SetupError& e) {
    std::fprintf(stderr, "st-linkload: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
}

bool parse_u64(const char* s, uint64_t& v) {
    const char* end = s + std::strlen(s);
    auto [p, ec] = std::from_chars(s, end, v);
    return ec == std::errc() && p == end;
}

bool parse(int argc, char** argv, Options& o, std::string& err) {
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (i + 1 >= argc) {
            err = "option " + std::string(a) + " needs a value";
            return false;
        }
        const char* v = argv[++i];
        uint64_t n = 0;
        if (a == "--phase") {
            const std::string_view s = v;
            const auto colon = s.find(':');
            if (colon == std::string_view::npos || !parse_u64(v + colon + 1, n)) {
                err = "--phase needs PATTERN:MS, got " + std::string(s);
                return false;
            }
            const std::string_view p = s.substr(0, colon);
            Phase ph{};
            ph.ms = static_cast<int64_t>(n);
            if (p == "ring") ph = {Pattern::Ring, ph.ms, "ring"};
            else if (p == "incast") ph = {Pattern::Incast, ph.ms, "incast"};
            else if (p == "alltoall") ph = {Pattern::AllToAll, ph.ms, "alltoall"};
            else if (p == "idle") ph = {Pattern::Idle, ph.ms, "idle"};
            else {
                err = "unknown phase pattern " + std::string(p) + " (ring, incast, alltoall, idle)";
                return false;
            }
            o.phases.push_back(ph);
        } else if (a == "--truth") {
            o.truth = v;
        } else if (a == "--stats-cmd") {
            o.stats_cmd = v;
        } else if (!parse_u64(v, n)) {
            err = "option " + std::string(a) + " needs a number, got " + v;
            return false;
        } else if (a == "--size") {
            o.size = static_cast<uint32_t>(n);
        } else if (a == "--depth") {
            o.depth = static_cast<uint32_t>(std::max<uint64_t>(n, 1));
        } else if (a == "--rails-used") {
            o.rails_used = static_cast<int>(n);
        } else if (a == "--start-at-fabric") {
            o.start_at_fabric_ms = static_cast<int64_t>(n);
        } else {
            err = "unknown option " + std::string(a);
            return false;
        }
    }
    if (o.phases.empty()) {
        err = "no --phase given";
        return false;
    }
    return true;
}

// The fabric's start on CLOCK_MONOTONIC, from the uptime `sigmatrace fabric --stats --json` reports (the fabric's
// clock is CLOCK_MONOTONIC too). The command is spawned directly (no shell) and untraced (without LD_PRELOAD: a
// traced process registers with the session daemon, which takes long and is not part of the workload), so it
// takes a few ms. Returns false when it fails; `uncertainty` = how long it took (the uptime was read somewhere
// inside that interval; the midpoint is used).
bool fabric_start(const Options& o, int64_t& start, int64_t& uncertainty) {
    std::vector<std::string> args;
    if (!o.stats_cmd.empty()) {
        args = {"/bin/sh", "-c", o.stats_cmd};
    } else {
        char exe[4096];
        const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return false;
        std::string path(exe, static_cast<size_t>(n));
        // <prefix>/libexec/sigmatrace/st-linkload -> <prefix>/bin/sigmatrace
        for (int up = 0; up < 3; ++up) path = path.substr(0, path.rfind('/'));
        args = {path + "/bin/sigmatrace", "fabric", "--stats", "--json"};
        if (const char* name = std::getenv("SOFTFABRIC_NAME")) args.insert(args.end(), {"--name", name});
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e)
        if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) envp.push_back(*e);
    envp.push_back(nullptr);
    int fds[2];
    if (pipe(fds) != 0) return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    const int64_t before = now_ns();
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    std::string out;
    char buf[4096];
    ssize_t got;
    while (rc == 0 && (got = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(got));
    close(fds[0]);
    int status = -1;
    if (rc == 0) waitpid(pid, &status, 0);
    const int64_t after = now_ns();
    const auto key = out.find("\"uptime_ns\":");
    if (rc != 0 || status != 0 || key == std::string::npos) return false;
    size_t i = key + 12;
    while (i < out.size() && out[i] == ' ') ++i;
    uint64_t uptime = 0;
    auto [end, ec] = std::from_chars(out.data() + i, out.data() + out.size(), uptime);
    if (ec != std::errc()) return false;
    start = (before + after) / 2 - static_cast<int64_t>(uptime);
    uncertainty = after - before;
    return true;
}

int rank_from_environment() {
    return std::max(0, launcher::first_index(std::getenv, launcher::kRankVars));
}

class Rank {
public:
    Rank(int rank, int size, const Options& o) : rank_(rank), size_(size), o_(o) {}

    void setup() {
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        std::vector<ibv_device*> devs(list, list + (list ? n : 0));
        std::sort(devs.begin(), devs.end(),
                  [](ibv_device* a, ibv_device* b) { return std::strcmp(ibv_get_device_name(a), ibv_get_device_name(b)) < 0; });
        if (devs.empty()) fail(rank_, "finding an RDMA device (run it under `sigmatrace fabric`)");
        rails_ = std::min<int>(static_cast<int>(devs.size()), kMaxRails);
        used_ = o_.rails_used > 0 ? std::min(o_.rails_used, rails_) : rails_;
        recv_.assign(static_cast<size_t>(size_) * o_.size, 0);
        send_.assign(o_.size, static_cast<uint8_t>(rank_ + 1));
        try {
            for (int u = 0; u < rails_; ++u) {
                Rail r;
                errno = 0;
                r.ctx.reset(ibv_open_device(devs[static_cast<size_t>(u)]));
                if (!r.ctx) fail(rank_, "ibv_open_device");
                mine_.dev[u].lid = verbs::query_port(r.ctx.get(), kPort).lid;
                ibv_gid gid{};
                if (ibv_query_gid(r.ctx.get(), kPort, 0, &gid) == 0) std::memcpy(mine_.dev[u].gid, gid.raw, 16);
                r.pd = verbs::alloc_pd(r.ctx.get());
                r.cq = verbs::create_cq(r.ctx.get(), 4096);
                r.recv_mr = verbs::reg_mr(r.pd.get(), recv_.data(), recv_.size(), verbs::kReadWrite);
                r.send_mr = verbs::reg_mr(r.pd.get(), send_.data(), send_.size(), IBV_ACCESS_LOCAL_WRITE);
                mine_.dev[u].recv_addr = reinterpret_cast<uint64_t>(recv_.data());
                mine_.dev[u].recv_rkey = r.recv_mr->rkey;
                nics_.push_back(std::move(r));
            }
            if (list) ibv_free_device_list(list);
            // One QP per (peer, used rail); streams[p * used + u].
            streams_.resize(static_cast<size_t>(size_ * used_));
            for (Stream& s : streams_) s.phase_bytes.assign(o_.phases.size(), 0);
            for (int p = 0; p < size_; ++p) {
                if (p == rank_) continue;
                for (int u = 0; u < used_; ++u) {
                    Stream& s = stream(p, u);
                    s.peer = p;
                    s.rail = u;
                    const Rail& r = nics_[static_cast<size_t>(u)];
                    s.qp = verbs::create_rc_qp(r.pd.get(), r.cq.get(), r.cq.get(), {.send_wr = o_.depth});
                    mine_.qpn[p][u] = s.qp->qp_num;
                }
            }
            const char* node = std::getenv("SOFTFABRIC_NODE");
            std::snprintf(mine_.node, sizeof mine_.node, "%s", node ? node : "?");
            all_.resize(static_cast<size_t>(size_));
            MPI_Allgather(&mine_, sizeof mine_, MPI_BYTE, all_.data(), sizeof mine_, MPI_BYTE, MPI_COMM_WORLD);
            for (Stream& s : streams_)
                if (s.qp) connect(s);
        } catch (const verbs::SetupError& e) {
            fail(rank_, e);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }

    // Runs every phase from `t0` (CLOCK_MONOTONIC), then waits for every WRITE to complete.
    void run(int64_t t0) {
        std::vector<int64_t> ends;
        int64_t t = t0;
        for (const Phase& ph : o_.phases) ends.push_back(t += ph.ms * 1'000'000);
        sleep_until(t0);
        size_t phase = 0;
        uint64_t outstanding = 0;
        std::vector<size_t> active;
        size_t active_phase = SIZE_MAX;
        for (;;) {
            const int64_t now = now_ns();
            while (phase < ends.size() && now >= ends[phase]) ++phase;
            if (phase == ends.size() && outstanding == 0) break;
            if (phase != active_phase) {
                active = targets(phase < ends.size() ? o_.phases[phase].pattern : Pattern::Idle);
                active_phase = phase;
            }
            bool busy = false;
            for (size_t i : active) {
                Stream& s = streams_[i];
                while (s.outstanding < o_.depth) {
                    post(s, i, phase);
                    ++outstanding;
                    busy = true;
                }
            }
            ibv_wc wc[32];
            for (Rail& r : nics_) {
                const int got = ibv_poll_cq(r.cq.get(), 32, wc);
                if (got < 0) fail(rank_, "ibv_poll_cq");
                for (int k = 0; k < got; ++k) {
                    if (wc[k].status != IBV_WC_SUCCESS) {
                        std::fprintf(stderr, "st-linkload: rank %d: completion error %s\n", rank_, ibv_wc_status_str(wc[k].status));
                        MPI_Abort(MPI_COMM_WORLD, 1);
                    }
                    // wr_id: the stream's index, the phase it was posted in above bit 32.
                    Stream& s = streams_[wc[k].wr_id & 0xffffffffu];
                    --s.outstanding;
                    --outstanding;
                    s.bytes += o_.size;
                    s.phase_bytes[wc[k].wr_id >> 32] += o_.size;
                    ++s.ops;
                    busy = true;
                }
            }
            if (!busy) {
                int64_t wake = now + kIdleSleepNs;
                if (phase < ends.size()) wake = std::min(wake, ends[phase]);
                sleep_until(wake);
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }

    // Rank 0: the ground truth, with everyone's per-stream bytes.
    void write_truth(int64_t t0, int64_t fabric_start_mono, int64_t uncertainty) {
        // Per (peer, rail): bytes, ops, then the bytes posted in each phase.
        const size_t phases = o_.phases.size(), stride = 2 + phases;
        std::vector<uint64_t> mine(static_cast<size_t>(kMaxRanks * kMaxRails) * stride, 0);
        for (const Stream& s : streams_)
            if (s.qp) {
                const size_t at = static_cast<size_t>(s.peer * kMaxRails + s.rail) * stride;
                mine[at] = s.bytes;
                mine[at + 1] = s.ops;
                for (size_t k = 0; k < phases; ++k) mine[at + 2 + k] = s.phase_bytes[k];
            }
        std::vector<uint64_t> all(rank_ == 0 ? mine.size() * static_cast<size_t>(size_) : 0);
        MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T, all.data(), static_cast<int>(mine.size()),
                   MPI_UINT64_T, 0, MPI_COMM_WORLD);
        if (rank_ != 0 || o_.truth.empty()) return;
        // CLOCK_MONOTONIC -> Unix time (what the trace's timestamps are).
        const int64_t offset = now_ns(CLOCK_REALTIME) - now_ns();
        FILE* f = std::fopen(o_.truth.c_str(), "w");
        if (!f) fail(rank_, "opening the --truth file");
        std::fprintf(f, "{\"ranks\": %d, \"rails_opened\": %d, \"rails_used\": %d, \"size\": %u, \"depth\": %u,\n", size_,
                     rails_, used_, o_.size, o_.depth);
        if (fabric_start_mono > 0)
            std::fprintf(f, " \"fabric_start_unix_ns\": %lld, \"fabric_start_uncertainty_ns\": %lld,\n",
                         static_cast<long long>(fabric_start_mono + offset), static_cast<long long>(uncertainty));
        else
            std::fprintf(f, " \"fabric_start_unix_ns\": null, \"fabric_start_uncertainty_ns\": null,\n");
        std::fprintf(f, " \"phases\": [");
        int64_t t = t0;
        for (size_t k = 0; k < o_.phases.size(); ++k) {
            std::fprintf(f, "%s\n  {\"pattern\": \"%s\", \"begin_unix_ns\": %lld, \"end_unix_ns\": %lld}", k ? "," : "",
                         o_.phases[k].name, static_cast<long long>(t + offset),
                         static_cast<long long>(t + o_.phases[k].ms * 1'000'000 + offset));
            t += o_.phases[k].ms * 1'000'000;
        }
        std::fprintf(f, "],\n \"transfers\": [");
        bool first = true;
        for (int src = 0; src < size_; ++src)
            for (int dst = 0; dst < size_; ++dst)
                for (int u = 0; u < used_; ++u) {
                    const size_t at = mine.size() * static_cast<size_t>(src) + static_cast<size_t>(dst * kMaxRails + u) * stride;
                    if (all[at + 1] == 0) continue;
                    std::fprintf(f, "%s\n  {\"src\": \"%s\", \"dst\": \"%s\", \"device\": \"sfab_%d\", \"bytes\": %llu, \"ops\": %llu, "
                                    "\"bytes_by_phase\": [",
                                 first ? "" : ",", all_[static_cast<size_t>(src)].node, all_[static_cast<size_t>(dst)].node, u,
                                 static_cast<unsigned long long>(all[at]), static_cast<unsigned long long>(all[at + 1]));
                    for (size_t k = 0; k < phases; ++k)
                        std::fprintf(f, "%s%llu", k ? ", " : "", static_cast<unsigned long long>(all[at + 2 + k]));
                    std::fprintf(f, "]}");
                    first = false;
                }
        std::fprintf(f, "]}\n");
        std::fclose(f);
    }

    void report() const {
        uint64_t bytes = 0, ops = 0;
        for (const Stream& s : streams_) {
            bytes += s.bytes;
            ops += s.ops;
        }
        std::printf("rank %d on %s: %llu WRITEs, %llu bytes, over %d of %d rail(s)\n", rank_, mine_.node,
                    static_cast<unsigned long long>(ops), static_cast<unsigned long long>(bytes), used_, rails_);
        std::fflush(stdout);
    }

    // In dependency order: every QP, then each rail's MRs, CQ, PD and device.
    void teardown() {
        for (Stream& s : streams_) s.qp.reset();
        for (Rail& r : nics_) {
            r.recv_mr.reset();
            r.send_mr.reset();
            r.cq.reset();
            r.pd.reset();
            r.ctx.reset();
        }
    }

private:
    struct Rail {
        // Declared so that they are destroyed in dependency order.
        verbs::Context ctx;
        verbs::Pd pd;
        verbs::Cq cq;
        verbs::Mr recv_mr;
        verbs::Mr send_mr;
    };
    struct Stream {
        int peer = -1;
        int rail = 0;
        verbs::Qp qp;
        uint32_t outstanding = 0;
        uint64_t bytes = 0;
        uint64_t ops = 0;
        std::vector<uint64_t> phase_bytes;   // completed bytes by the phase they were posted in
    };

    Stream& stream(int peer, int rail) { return streams_[static_cast<size_t>(peer * used_ + rail)]; }

    // The streams this rank feeds in a phase of `pattern`.
    std::vector<size_t> targets(Pattern pattern) const {
        std::vector<int> peers;
        switch (pattern) {
        case Pattern::Ring: peers.push_back((rank_ + 1) % size_); break;
        case Pattern::Incast:
            if (rank_ != 0) peers.push_back(0);
            break;
        case Pattern::AllToAll:
            for (int k = 1; k < size_; ++k) peers.push_back((rank_ + k) % size_);
            break;
        case Pattern::Idle: break;
        }
        std::vector<size_t> out;
        for (int p : peers)
            for (int u = 0; u < used_; ++u) out.push_back(static_cast<size_t>(p * used_ + u));
        return out;
    }

    void connect(const Stream& s) {
        const DevInfo& remote = all_[static_cast<size_t>(s.peer)].dev[s.rail];
        verbs::connect_rc(s.qp.get(),
                          {.qpn = all_[static_cast<size_t>(s.peer)].qpn[rank_][s.rail], .lid = remote.lid,
                           .gid = remote.gid},
                          {.port = kPort});
    }

    void post(Stream& s, size_t index, size_t phase) {
        const Rail& r = nics_[static_cast<size_t>(s.rail)];
        const DevInfo& remote = all_[static_cast<size_t>(s.peer)].dev[s.rail];
        ibv_sge sge{reinterpret_cast<uint64_t>(send_.data()), o_.size, r.send_mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = index | static_cast<uint64_t>(phase) << 32;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = remote.recv_addr + static_cast<uint64_t>(rank_) * o_.size;
        wr.wr.rdma.rkey = remote.recv_rkey;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(s.qp.get(), &wr, &bad)) fail(rank_, "ibv_post_send");
        ++s.outstanding;
    }

    int rank_, size_;
    Options o_;
    int rails_ = 0, used_ = 0;
    std::vector<Rail> nics_;
    std::vector<Stream> streams_;
    std::vector<uint8_t> recv_, send_;
    Info mine_{};
    std::vector<Info> all_;
};

}  // namespace

int main(int argc, char** argv) {
    Options o;
    std::string err;
    const bool ok = parse(argc, argv, o, err);
    // The fabric's clock, read before MPI starts (no fork after MPI_Init), by rank 0 only.
    int64_t fabric_start_mono = 0, uncertainty = 0;
    bool have_fabric_clock = false;
    if (ok && o.start_at_fabric_ms >= 0 && rank_from_environment() == 0) {
        // The quickest of a few queries gives the tightest bound (the machine is busy while the ranks start).
        for (int attempt = 0; attempt < 5; ++attempt) {
            int64_t start = 0, within = 0;
            if (!fabric_start(o, start, within)) break;
            if (!have_fabric_clock || within < uncertainty) {
                fabric_start_mono = start;
                uncertainty = within;
            }
            have_fabric_clock = true;
        }
    }

    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!ok || size < 2 || size > kMaxRanks) {
        if (rank == 0)
            std::fprintf(stderr,
                         "st-linkload: %s\nusage: mpirun -np N (2..16) st-linkload --phase ring|incast|alltoall|idle:MS ... "
                         "[--size BYTES] [--depth N] [--rails-used U] [--start-at-fabric MS] [--truth FILE] "
                         "[--stats-cmd CMD]\n",
                         ok ? "2 to 16 ranks needed" : err.c_str());
        MPI_Finalize();
        return 2;
    }
    int clock_ok = have_fabric_clock ? 1 : 0;
    MPI_Bcast(&clock_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (o.start_at_fabric_ms >= 0 && !clock_ok) {
        if (rank == 0)
            std::fprintf(stderr, "st-linkload: cannot read the fabric's uptime (`sigmatrace fabric --stats --json`); "
                                 "run under `sigmatrace fabric`, or give --stats-cmd\n");
        MPI_Finalize();
        return 2;
    }
    Rank r(rank, size, o);
    r.setup();
    // One schedule for everyone: phase 1 starts at t0 on CLOCK_MONOTONIC.
    int64_t t0 = 0;
    if (rank == 0) {
        const int64_t soon = now_ns() + 50'000'000;
        t0 = clock_ok ? std::max(fabric_start_mono + o.start_at_fabric_ms * 1'000'000, soon) : soon;
        if (clock_ok && t0 == soon)
            std::fprintf(stderr, "st-linkload: set-up ended after fabric time %lld ms: phases start late\n",
                         static_cast<long long>(o.start_at_fabric_ms));
    }
    MPI_Bcast(&t0, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    r.run(t0);
    r.write_truth(t0, clock_ok ? fabric_start_mono : 0, uncertainty);
    r.report();
    r.teardown();
    MPI_Finalize();
    return 0;
}
