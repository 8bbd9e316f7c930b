#include "analyze/rank_read.h"

#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include <fmt/core.h>

namespace sigmatrace::analyzer {

ShardedRead read_by_ranks(RankJob& job, const std::filesystem::path& root, PlannedRead& planned,
                          const AnalysisOptions& options) {
    job.send_order(options.clock.constraints_only ? RankJob::Order::kReadConstraints : RankJob::Order::kRead,
                   options.clock.applied ? save_clock_result(*options.clock.applied) : std::string());
    const auto shares = static_cast<std::size_t>(job.size());
    ShardedRead out;
    ShareRead mine = read_share(root, planned, options, 0, shares, nullptr);
    out.summary = std::move(mine.summary);
    bool merging = !out.summary.fatal && !out.summary.retry;
    if (out.summary.fatal)
        out.not_merged = out.summary.problems.empty() ? "rank 0 could not read its share" : out.summary.problems.back();
    // Every rank's answer is taken whatever came before: a rank left waiting would hold the job.
    for (int32_t r = 1; r < job.size(); ++r) {
        std::string bytes;
        const bool sent = job.receive_share(r, &bytes);
        out.share_bytes.push_back(sent ? bytes.size() : 0);
        if (!merging) continue;
        if (!sent) {
            out.not_merged = fmt::format("rank {} could not read its share: {}", r, bytes);
            merging = false;
            continue;
        }
        std::string why;
        const std::unique_ptr<Analysis> share = Analysis::load_share(bytes, *mine.analysis, &why);
        if (!share) {
            out.not_merged = fmt::format("rank {} sent a share that cannot be merged: {}", r, why);
            merging = false;
        } else if (!mine.analysis->merge_share(*share)) {
            out.not_merged = kSharesNotMerged;
            merging = false;
        }
    }
    if (merging) out.analysis = std::move(mine.analysis);
    return out;
}

int serve_share_orders(RankJob& job, const std::filesystem::path& root, bool parsed, const AnalysisOptions& options) {
    PlannedRead planned;
    bool planned_once = false;
    for (;;) {
        std::string payload;
        const RankJob::Order order = job.next_order(&payload);
        if (order == RankJob::Order::kStop) return 0;
        bool ok = false;
        std::string answer;
        try {
            AnalysisOptions mine = options;
            if (order == RankJob::Order::kReadConstraints) {
                mine.clock.constraints_only = true;
            } else if (!payload.empty()) {
                std::optional<ClockResult> clocks = load_clock_result(payload);
                if (!clocks) throw std::runtime_error("rank 0's clock estimate did not arrive whole");
                mine.clock.applied = std::move(*clocks);
            }
            if (!parsed) throw std::runtime_error("this rank's arguments did not parse");
            if (!planned_once) {
                planned = plan_read(root);
                planned_once = true;
            }
            ShareRead r = read_share(root, planned, mine, static_cast<std::size_t>(job.rank()),
                                     static_cast<std::size_t>(job.size()), nullptr);
            if (r.summary.fatal || r.summary.retry) {
                answer = r.summary.problems.empty() ? "its read failed" : r.summary.problems.back();
            } else {
                answer = r.analysis->save_share();
                ok = true;
            }
        } catch (const std::exception& e) {
            answer = e.what();
        } catch (...) {
            answer = "its read stopped on an unknown error";
        }
        job.send_share(ok, answer);
    }
}

}  // namespace sigmatrace::analyzer
