// What every GPU-style workload's main() shares: starting MPI and the PE's identity, the command line (the common
// options --device and --truth plus the workload's own, with the usage line built from them), the ground-truth
// file, and the job-wide verdict. Also used by the CUDA builds (C++17).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gpu_common/gpu_qp.h"
#include "gpu_common/mpi_boot.h"

namespace sigmatrace::workloads {

// MPI_Init, then this PE's rank and the number of PEs.
struct PeIdentity {
    int me = 0;
    int npes = 0;
};
PeIdentity start_pe(int* argc, char*** argv);

// The workload's options, each bound to the variable holding its default.
class WorkloadOptions {
public:
    explicit WorkloadOptions(std::string program) : program_(std::move(program)) {}
    WorkloadOptions& add(const char* flag, const char* metavar, size_t& value);
    WorkloadOptions& add(const char* flag, const char* metavar, int& value);
    WorkloadOptions& add(const char* flag, const char* metavar, uint32_t& value);
    WorkloadOptions& add(const char* flag, const char* metavar, double& value);
    WorkloadOptions& add(const char* flag, const char* metavar, std::string& value);
    // Reads argv: the common options and the added ones. Anything else, a flag without its value or a value that
    // is not a number ends the job with the usage line ("usage: PROGRAM [--device D] [--truth DIR] [--flag META]...").
    CommonOptions parse(int argc, char** argv) const;

private:
    struct Option {
        const char* flag;
        const char* metavar;
        std::function<void(const std::string&)> set;
    };
    std::string usage() const;
    std::string program_;
    std::vector<Option> options_;
};

// Writes DIR/truth-<me>.txt when --truth was given; ends the job if it cannot.
void write_truth(const CommonOptions& common, const TruthLog& truth, int me);

// Sums every PE's count of wrong results, finalizes MPI, and returns the process exit status: 0 when no PE found
// anything wrong, 1 otherwise.
int job_exit_status(int bad);

}  // namespace sigmatrace::workloads
