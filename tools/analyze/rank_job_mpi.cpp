// RankJob over MPI (rank_job.h): orders are broadcast from rank 0, shares come back as point-to-point messages
// of any length (sent in pieces below MPI's int count).
// The C API only: MPI's C++ bindings are deprecated and need a library of their own.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <sigmatrace/launcher_env.h>

#include "analyze/rank_job.h"

namespace sigmatrace::analyzer {
namespace {

constexpr int kShareTag = 7101;
constexpr std::size_t kPiece = std::size_t{1} << 30;

class MpiRankJob final : public RankJob {
public:
    MpiRankJob(int32_t rank, int32_t size) : rank_(rank), size_(size) {}
    ~MpiRankJob() override {
        // Rank 0 leaving early (a bad argument, an unreadable baseline) still lets the others go.
        if (rank_ == 0 && !stopped_) send_order(Order::kStop, {});
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
    int32_t rank() const override { return rank_; }
    int32_t size() const override { return size_; }

    void send_order(Order order, const std::string& payload) override {
        uint32_t o = static_cast<uint32_t>(order);
        stopped_ = order == Order::kStop;
        MPI_Bcast(&o, 1, MPI_UINT32_T, 0, MPI_COMM_WORLD);
        std::string p = payload;
        broadcast_bytes(p);
    }
    Order next_order(std::string* payload) override {
        uint32_t o = 0;
        MPI_Bcast(&o, 1, MPI_UINT32_T, 0, MPI_COMM_WORLD);
        broadcast_bytes(*payload);
        return o <= static_cast<uint32_t>(Order::kRead) ? static_cast<Order>(o) : Order::kStop;
    }

    void send_share(bool ok, const std::string& bytes) override {
        uint64_t head[2] = {ok ? 1u : 0u, bytes.size()};
        MPI_Send(head, 2, MPI_UINT64_T, 0, kShareTag, MPI_COMM_WORLD);
        for (std::size_t at = 0; at < bytes.size(); at += kPiece)
            MPI_Send(bytes.data() + at, static_cast<int>(std::min(kPiece, bytes.size() - at)), MPI_BYTE, 0, kShareTag,
                     MPI_COMM_WORLD);
    }
    bool receive_share(int32_t from, std::string* bytes) override {
        uint64_t head[2] = {0, 0};
        MPI_Recv(head, 2, MPI_UINT64_T, from, kShareTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        bytes->resize(head[1]);
        for (std::size_t at = 0; at < bytes->size(); at += kPiece)
            MPI_Recv(bytes->data() + at, static_cast<int>(std::min(kPiece, bytes->size() - at)), MPI_BYTE, from,
                     kShareTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        return head[0] == 1;
    }

private:
    // Rank 0's `bytes` to every rank.
    void broadcast_bytes(std::string& bytes) const {
        uint64_t n = bytes.size();
        MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        bytes.resize(n);
        for (std::size_t at = 0; at < n; at += kPiece)
            MPI_Bcast(bytes.data() + at, static_cast<int>(std::min<std::size_t>(kPiece, n - at)), MPI_BYTE, 0,
                      MPI_COMM_WORLD);
    }

    int32_t rank_;
    int32_t size_;
    bool stopped_ = false;
};

}  // namespace

std::unique_ptr<RankJob> RankJob::join(int32_t ranks) {
    if (launcher::first_string(std::getenv, launcher::kMpiServerVars).empty()) return nullptr;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized && MPI_Init(nullptr, nullptr) != MPI_SUCCESS) return nullptr;
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    // An MPI that did not see the launcher's ranks (each process its own singleton job) cannot share the read.
    if (size != ranks || size < 2) {
        MPI_Finalize();
        return nullptr;
    }
    return std::make_unique<MpiRankJob>(rank, size);
}

}  // namespace sigmatrace::analyzer
