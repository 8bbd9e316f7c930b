// `--node` values: a node number or name ("3", "node3"), or an expression over the MPI rank for launches where
// one mpirun starts every rank on this machine: "rank", "rank/K" (K consecutive ranks per node), "rank%K"
// (round robin over K nodes). The rank is read from OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK or SLURM_PROCID.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace sigmatrace::fabric {

class NodeExpressionError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Evaluates `expr`; `getenv` is injectable for tests. Throws NodeExpressionError with a message saying what
// is accepted.
uint32_t evaluate_node(const std::string& expr,
                       const std::function<const char*(const char*)>& getenv = [](const char* n) {
                           return std::getenv(n);
                       });

}  // namespace sigmatrace::fabric
