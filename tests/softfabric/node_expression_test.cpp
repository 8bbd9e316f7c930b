// `--node` expressions for MPI launches (one mpirun, each rank on its own fabric node).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "fabric/node_expression.h"

namespace sigmatrace::fabric {
namespace {

auto env(std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
    };
}

TEST(NodeExpression, NumbersAndNames) {
    EXPECT_EQ(evaluate_node("0", env({})), 0u);
    EXPECT_EQ(evaluate_node("node5", env({})), 5u);
    EXPECT_THROW(evaluate_node("node64", env({})), NodeExpressionError);
    EXPECT_THROW(evaluate_node("five", env({})), NodeExpressionError);
}

TEST(NodeExpression, RankDividedOrModulo) {
    EXPECT_EQ(evaluate_node("rank/2", env({{"OMPI_COMM_WORLD_RANK", "5"}})), 2u);
    EXPECT_EQ(evaluate_node("rank%3", env({{"PMI_RANK", "7"}})), 1u);
    EXPECT_EQ(evaluate_node("rank", env({{"SLURM_PROCID", "4"}})), 4u);
    // Open MPI's variable wins over the others.
    EXPECT_EQ(evaluate_node("rank", env({{"OMPI_COMM_WORLD_RANK", "1"}, {"PMIX_RANK", "9"}})), 1u);
}

TEST(NodeExpression, ErrorsSayWhatIsMissing) {
    try {
        evaluate_node("rank/2", env({}));
        FAIL();
    } catch (const NodeExpressionError& e) {
        EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_RANK"), std::string::npos);
    }
    EXPECT_THROW(evaluate_node("rank/0", env({{"PMI_RANK", "1"}})), NodeExpressionError);
    EXPECT_THROW(evaluate_node("rank*2", env({{"PMI_RANK", "1"}})), NodeExpressionError);
    EXPECT_THROW(evaluate_node("rank", env({{"PMI_RANK", "x"}})), NodeExpressionError);
    EXPECT_THROW(evaluate_node("rank", env({{"PMI_RANK", "200"}})), NodeExpressionError);
}

}  // namespace
}  // namespace sigmatrace::fabric
