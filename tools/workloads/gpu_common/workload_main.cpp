#include "gpu_common/workload_main.h"

#include <mpi.h>

#include <stdexcept>

namespace sigmatrace::workloads {

PeIdentity start_pe(int* argc, char*** argv) {
    MPI_Init(argc, argv);
    PeIdentity p;
    MPI_Comm_rank(MPI_COMM_WORLD, &p.me);
    MPI_Comm_size(MPI_COMM_WORLD, &p.npes);
    return p;
}

WorkloadOptions& WorkloadOptions::add(const char* flag, const char* metavar, size_t& value) {
    options_.push_back({flag, metavar, [&value](const std::string& v) { value = std::stoul(v); }});
    return *this;
}
WorkloadOptions& WorkloadOptions::add(const char* flag, const char* metavar, int& value) {
    options_.push_back({flag, metavar, [&value](const std::string& v) { value = std::stoi(v); }});
    return *this;
}
WorkloadOptions& WorkloadOptions::add(const char* flag, const char* metavar, uint32_t& value) {
    options_.push_back({flag, metavar, [&value](const std::string& v) { value = static_cast<uint32_t>(std::stoul(v)); }});
    return *this;
}
WorkloadOptions& WorkloadOptions::add(const char* flag, const char* metavar, double& value) {
    options_.push_back({flag, metavar, [&value](const std::string& v) { value = std::stod(v); }});
    return *this;
}
WorkloadOptions& WorkloadOptions::add(const char* flag, const char* metavar, std::string& value) {
    options_.push_back({flag, metavar, [&value](const std::string& v) { value = v; }});
    return *this;
}

std::string WorkloadOptions::usage() const {
    std::string u = "usage: " + program_ + " [--device D] [--truth DIR]";
    for (const Option& o : options_) u += std::string(" [") + o.flag + " " + o.metavar + "]";
    return u;
}

CommonOptions WorkloadOptions::parse(int argc, char** argv) const {
    CommonOptions common;
    for (int i = 1; i < argc; ++i) {
        if (common_option(common, i, argc, argv)) continue;
        const std::string a = argv[i];
        const Option* match = nullptr;
        for (const Option& o : options_)
            if (a == o.flag) match = &o;
        if (!match || i + 1 >= argc) die(usage());
        try {
            match->set(argv[++i]);
        } catch (const std::exception&) {  // std::stoul and friends: not a number, or out of range
            die(a + ": cannot use \"" + argv[i] + "\"\n" + usage());
        }
    }
    return common;
}

void write_truth(const CommonOptions& common, const TruthLog& truth, int me) {
    if (!common.truth_dir.empty() && !truth.write(common.truth_dir + "/truth-" + std::to_string(me) + ".txt"))
        die("Cannot write the ground truth into " + common.truth_dir);
}

int job_exit_status(int bad) {
    int all_bad = 0;
    MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return all_bad ? 1 : 0;
}

}  // namespace sigmatrace::workloads
