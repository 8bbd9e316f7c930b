#include "fabric/node_expression.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cstdlib>

#include <sigmatrace/launcher_env.h>

#include "core/identity.h"

namespace sigmatrace::fabric {
namespace {

std::optional<uint32_t> parse_uint(std::string_view s) {
    uint32_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
}

uint32_t rank_from_environment(const std::function<const char*(const char*)>& getenv) {
    for (const char* name : launcher::kRankVars) {
        const char* v = getenv(name);
        if (!v || !*v) continue;
        auto rank = parse_uint(v);
        if (!rank) throw NodeExpressionError(fmt::format("{}='{}' is not a rank number", name, v));
        return *rank;
    }
    throw NodeExpressionError(fmt::format(
        "--node uses 'rank' but no rank variable is set ({}): run it under mpirun/srun, e.g. `mpirun -np 4 "
        "sigmatrace fabric --node rank/2 -- prog`",
        fmt::join(launcher::kRankVars, ", ")));
}

}  // namespace

uint32_t evaluate_node(const std::string& expr, const std::function<const char*(const char*)>& getenv) {
    const std::string usage = fmt::format(
        "Invalid --node '{}': use a node number or name (0, node3), or rank, rank/K, rank%K to derive it from "
        "the MPI rank; nodes are 0..{}",
        expr, softfabric::kMaxNodes - 1);
    uint32_t node = 0;
    if (expr.starts_with("rank")) {
        std::string_view rest(expr);
        rest.remove_prefix(4);
        uint32_t rank = 0;
        if (rest.empty()) {
            rank = rank_from_environment(getenv);
            node = rank;
        } else {
            char op = rest.front();
            auto k = parse_uint(rest.substr(1));
            if ((op != '/' && op != '%') || !k || *k == 0) throw NodeExpressionError(usage);
            rank = rank_from_environment(getenv);
            node = op == '/' ? rank / *k : rank % *k;
        }
    } else {
        auto parsed = softfabric::parse_node_name(expr);
        if (!parsed) throw NodeExpressionError(usage);
        node = *parsed;
    }
    if (node >= softfabric::kMaxNodes)
        throw NodeExpressionError(fmt::format("--node '{}' gives node {}, but the fabric has nodes 0..{}", expr, node,
                                              softfabric::kMaxNodes - 1));
    return node;
}

}  // namespace sigmatrace::fabric
