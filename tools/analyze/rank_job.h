// sigmatrace-analyze started as several ranks (mpirun, srun) of a build with MPI: the ranks read the trace in
// shares, one each, and rank 0 merges them (docs/analyzer.md, "Under mpirun"). This is the MPI side: rank 0 sends
// each read's orders to the others, and takes their finished shares back in bytes (Analysis::save_share).
// Without MPI at build time join() returns null and rank 0 reads alone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace sigmatrace::analyzer {

class RankJob {
public:
    // What rank 0 asks of the others.
    enum class Order : uint32_t {
        kStop = 0,              // the job is over: leave
        kReadConstraints = 1,   // the clock pass: read your share for the clock constraints only
        kRead = 2,              // read your share (with the clock estimate sent along, when there is one)
    };

    // Joins the job's ranks when `ranks` processes were started together and MPI agrees; null otherwise (no
    // MPI in this build, or an MPI that does not see the launcher's ranks: then rank 0 reads alone).
    static std::unique_ptr<RankJob> join(int32_t ranks);
    virtual ~RankJob() = default;

    virtual int32_t rank() const = 0;
    virtual int32_t size() const = 0;

    // Rank 0: sends `order` (and `payload`) to every other rank.
    virtual void send_order(Order order, const std::string& payload) = 0;
    // The others: waits for rank 0's next order.
    virtual Order next_order(std::string* payload) = 0;

    // The others: sends rank 0 this rank's answer to an order: the share's bytes, or why it has none.
    virtual void send_share(bool ok, const std::string& bytes_or_reason) = 0;
    // Rank 0: the answer of rank `from` (1 .. size()-1), in any order of arrival of the others.
    virtual bool receive_share(int32_t from, std::string* bytes_or_reason) = 0;
};

}  // namespace sigmatrace::analyzer
