// Feeding runs of sends (data_link.h SendRun) to a link analysis two ways, for tests that compare them: `whole`
// takes each run whole where it says it can (takes_run, add_run) and one operation at a time otherwise,
// `single` takes every operation one at a time (`add_one(analysis, op)`).
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "analyzer/analyses/data_link.h"

namespace sigmatrace::analyzer {

// Which runs `whole` took whole, in order.
template <typename Analysis, typename AddOne>
std::vector<bool> feed_runs(Analysis& whole, Analysis& single, DataLink link,
                            const std::vector<std::vector<Operation>>& runs, AddOne add_one) {
    std::vector<bool> taken;
    for (const std::vector<Operation>& ops : runs) {
        SendRun r;
        EXPECT_TRUE(send_run_of(ops, r));
        const bool took = ops.size() > 1 && whole.takes_run(r, link);
        taken.push_back(took);
        if (took)
            whole.add_run(r);
        else
            for (const Operation& op : ops) add_one(whole, op);
        for (const Operation& op : ops) add_one(single, op);
    }
    return taken;
}

}  // namespace sigmatrace::analyzer
