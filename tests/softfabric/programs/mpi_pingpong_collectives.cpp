// An MPI program whose results can be checked exactly, for running MPI's own transports on the fabric (Open MPI's
// pml ucx over rc_mlx5 / dc_mlx5): rank 0 ping-pongs a 1 MiB message with every other rank (each byte a function
// of the iteration, the round trip and the peer), then MPI_Allreduce sums rank-dependent vectors, then MPI_Barrier.
// Prints one line per check; exit status 1 when any value is wrong.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kMessageBytes = 1 << 20;
constexpr int kIterations = 4;
constexpr int kReduceCount = 4096;

uint8_t pattern(int iteration, int peer, int direction, size_t i) {
    return static_cast<uint8_t>(i * 31 + static_cast<size_t>(iteration) * 7 + static_cast<size_t>(peer) * 13 +
                                static_cast<size_t>(direction) * 101);
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int bad = 0;

    std::vector<uint8_t> buf(kMessageBytes);
    for (int peer = 1; peer < size; ++peer) {
        if (rank != 0 && rank != peer) continue;
        int wrong = 0;
        for (int it = 0; it < kIterations; ++it) {
            if (rank == 0) {
                for (size_t i = 0; i < buf.size(); ++i) buf[i] = pattern(it, peer, 0, i);
                MPI_Send(buf.data(), kMessageBytes, MPI_BYTE, peer, it, MPI_COMM_WORLD);
                MPI_Recv(buf.data(), kMessageBytes, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (size_t i = 0; i < buf.size(); ++i) wrong += buf[i] != pattern(it, peer, 1, i);
            } else {
                MPI_Recv(buf.data(), kMessageBytes, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (size_t i = 0; i < buf.size(); ++i) wrong += buf[i] != pattern(it, peer, 0, i);
                for (size_t i = 0; i < buf.size(); ++i) buf[i] = pattern(it, peer, 1, i);
                MPI_Send(buf.data(), kMessageBytes, MPI_BYTE, 0, it, MPI_COMM_WORLD);
            }
        }
        std::printf("rank %d: pingpong with %d: %d x %d bytes, %d wrong\n", rank, rank == 0 ? peer : 0, kIterations,
                    kMessageBytes, wrong);
        bad |= wrong != 0;
    }

    // Element i of rank r contributes (r + 1) * (i + 1): the sum is (i + 1) * size * (size + 1) / 2.
    std::vector<int64_t> in(kReduceCount), out(kReduceCount, -1);
    for (int i = 0; i < kReduceCount; ++i) in[static_cast<size_t>(i)] = int64_t{rank + 1} * (i + 1);
    MPI_Allreduce(in.data(), out.data(), kReduceCount, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    int wrong = 0;
    for (int i = 0; i < kReduceCount; ++i) wrong += out[static_cast<size_t>(i)] != int64_t{i + 1} * size * (size + 1) / 2;
    std::printf("rank %d: allreduce of %d int64: %d wrong\n", rank, kReduceCount, wrong);
    bad |= wrong != 0;

    MPI_Barrier(MPI_COMM_WORLD);
    std::printf("rank %d: barrier passed\n", rank);
    MPI_Finalize();
    return bad;
}
