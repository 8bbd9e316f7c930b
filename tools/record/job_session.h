// One recording session per host for the ranks of a job: `mpirun ... sigmatrace record [--relay URL] -- APP`
// runs one `record` per rank, and the ranks on one host share that host's session daemon. Sessions on one daemon
// each receive every registered process's events (per-uid buffers, no process filter), so one session per rank
// would record every rank of the host once per rank. Instead the host's ranks meet in a job file and share one
// session:
//   - the first rank to arrive creates the session (named after the job), later ranks join it;
//   - each rank runs its command and leaves; the last to leave stops the session, reports its loss and destroys
//     it (the trace is then complete, locally or on the relay);
//   - members are process IDs: one that died without leaving (killed) is dropped by the next rank that looks,
//     so the last live rank still closes the session.
// Every step runs under an exclusive lock on the job file (flock), held from the look at the members to the end
// of the session's creation or destruction: a rank never joins a session that is being destroyed.
//
// The job file lives in the daemon's run directory (/var/run/lttng as root, $LTTNG_HOME/.lttng otherwise),
// which LTTng already requires to be local to the host.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "record/subprocess.h"

namespace sigmatrace::record {

// The job a rank belongs to, from its launcher's variables; nullopt when this process is no rank (no rank
// variable set). Open MPI: OMPI_MCA_ess_base_jobid; PMIx launchers: PMIX_NAMESPACE; Slurm: SLURM_JOB_ID and
// SLURM_STEP_ID. The key holds only [A-Za-z0-9_-] (other characters become '_'): it names a session and a file.
std::optional<std::string> job_key(const Environment& env);

// What the job file holds.
struct JobMembers {
    std::string output;           // the session's local trace directory ("" when it streams to a relay)
    std::vector<pid_t> members;   // ranks recording into it, in arrival order

    // Parses the file's text (two lines: the output, the members); empty or damaged text is an empty state.
    static JobMembers parse(const std::string& text);
    std::string text() const;
    // Drops members `alive` says are gone.
    void prune(const std::function<bool(pid_t)>& alive);
};

// The job file of `key` in `dir`, locked for the life of this object.
class LockedJobFile {
public:
    // Opens (creates) and locks the file; waits for another rank's lock. Sets `error` and returns nullopt when
    // it cannot.
    static std::optional<LockedJobFile> open(const std::string& dir, const std::string& key, std::string* error);
    LockedJobFile(LockedJobFile&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
    LockedJobFile(const LockedJobFile&) = delete;
    LockedJobFile& operator=(const LockedJobFile&) = delete;
    LockedJobFile& operator=(LockedJobFile&& o) noexcept {
        std::swap(fd_, o.fd_);
        std::swap(path_, o.path_);
        return *this;
    }
    ~LockedJobFile();

    JobMembers read() const;
    // Replaces the content; an empty state removes the file (the job ended on this host).
    std::string write(const JobMembers& m);

private:
    LockedJobFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
    int fd_ = -1;
    std::string path_;
};

// Whether process `pid` still runs (kill(pid, 0); a process of another user counts as running).
bool process_alive(pid_t pid);

}  // namespace sigmatrace::record
