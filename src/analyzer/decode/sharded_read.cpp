#include "analyzer/decode/sharded_read.h"

#include <exception>
#include <thread>
#include <vector>

#include "analyzer/decode/lttng_stream_reader.h"
#include "analyzer/decode/read_guard.h"

namespace sigmatrace::analyzer {

std::string why_not_sharded(const PlannedRead& planned) {
    if (planned.fatal) return "nothing to read";
    if (planned_hostnames(planned).size() < 2) return "a trace of one host is read whole (shares hold whole hosts)";
    if (!plan_is_pristine(planned.plan)) return "the trace is damaged (shares are read by the direct reader only)";
    if (reader_choice_from_env() == ReaderChoice::Babeltrace)
        return "SIGMATRACE_ANALYZE_READER=babeltrace (shares are read by the direct reader only)";
    return "";
}

std::vector<std::string> share_hosts(const PlannedRead& planned, std::size_t k, std::size_t shares) {
    // A trace without a hostname is the host "": its data is a share's like any other.
    const std::vector<std::string> hosts = planned_hostnames(planned);
    std::vector<std::string> mine;
    for (std::size_t h = k; h < hosts.size(); h += shares) mine.push_back(hosts[h]);
    return mine;
}

ShareRead read_share(const std::filesystem::path& root, PlannedRead& planned, const AnalysisOptions& options,
                     std::size_t k, std::size_t shares, ReadProgress* progress) {
    ShareRead r;
    r.analysis = std::make_unique<Analysis>(options);
    r.analysis->set_share(share_hosts(planned, k, shares));
    r.summary = read_planned(root, planned, *r.analysis, nullptr, progress, /*direct_only=*/true);
    r.analysis->finish_share();
    return r;
}

ShardedRead read_sharded(const std::filesystem::path& root, PlannedRead& planned, const AnalysisOptions& options,
                         std::size_t shares, ReadProgress* progress) {
    ShardedRead out;
    // Unguarded, the plan is materialized here once, not by each share's read at once; the shares then report to
    // a progress of their own.
    ReadProgress own_progress;
    if (progress == nullptr) {
        if (!planned.plan.materialize()) {
            out.not_merged = "the trace could not be prepared for reading";
            return out;
        }
        progress = &own_progress;
    }
    std::vector<std::unique_ptr<Analysis>> parts(shares);
    std::vector<ReadSummary> summaries(shares);
    {
        std::vector<std::exception_ptr> failed(shares);
        std::vector<std::jthread> threads;
        const auto read_one = [&](std::size_t k) {
            try {
                ShareRead r = read_share(root, planned, options, k, shares, progress);
                parts[k] = std::move(r.analysis);
                summaries[k] = std::move(r.summary);
            } catch (...) {
                failed[k] = std::current_exception();
            }
        };
        for (std::size_t k = 1; k < shares; ++k) threads.emplace_back(read_one, k);
        read_one(0);
        threads.clear();   // joined
        for (const std::exception_ptr& e : failed)
            if (e) std::rethrow_exception(e);
    }
    out.summary = std::move(summaries[0]);
    for (std::size_t k = 0; k < shares; ++k) {
        if (summaries[k].retry) out.summary.retry = true;
        if (summaries[k].fatal) {
            out.not_merged = summaries[k].problems.empty() ? "a share could not be read" : summaries[k].problems.back();
            return out;
        }
    }
    if (out.summary.retry) return out;
    for (std::size_t k = 1; k < shares; ++k)
        if (!parts[0]->merge_share(*parts[k])) {
            out.not_merged = kSharesNotMerged;
            return out;
        }
    out.analysis = std::move(parts[0]);
    return out;
}

}  // namespace sigmatrace::analyzer
