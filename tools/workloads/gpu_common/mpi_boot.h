// MPI bootstrap shared by the GPU-style workloads (NVSHMEM and DeepEP bootstrap the same way): rank = PE,
// QP numbers and heap keys exchanged with MPI_Allgather, failures abort the whole job with a message.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_common/ibgda_setup.h"

namespace sigmatrace::workloads {

[[noreturn]] inline void die(const std::string& what) {
    std::fprintf(stderr, "%s\n", what.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
}

// Opens the transport, creates the QPs and connects every PE to every PE (itself included, on a loopback QP).
inline std::vector<PeInfo> connect_all(IbgdaTransport& t, const std::string& device, int npes, int me,
                                       uint32_t log_sq_size, size_t heap_bytes, const QpFlavor& flavor = {}) {
    std::string err;
    if (!t.open(device, npes, me, log_sq_size, heap_bytes, err, flavor) || !t.create_qps(err))
        die("PE " + std::to_string(me) + ": " + err);
    PeInfo mine = t.local_info();
    std::vector<PeInfo> all(static_cast<size_t>(npes));
    MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
    for (int pe = 0; pe < npes; ++pe)
        if (!t.connect(pe, all[static_cast<size_t>(pe)], err)) die("PE " + std::to_string(me) + ": " + err);
    MPI_Barrier(MPI_COMM_WORLD);
    return all;
}

// Common options: --device NAME (default sfab_0), --truth DIR (ground truth files; none by default).
struct CommonOptions {
    std::string device = "sfab_0";
    std::string truth_dir;
};
inline bool common_option(CommonOptions& o, int& i, int argc, char** argv) {
    std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) return o.device = argv[++i], true;
    if (a == "--truth" && i + 1 < argc) return o.truth_dir = argv[++i], true;
    return false;
}

}  // namespace sigmatrace::workloads
