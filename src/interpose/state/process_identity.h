// process_info: who this process is (host, pid, MPI/PMI/PMIx/Slurm rank, job), once per process and again
// in a forked child.
#pragma once

#include <cstdint>
#include <string>

namespace sigmatrace::interpose {

struct ProcessIdentity {
    int32_t pid = 0;
    int32_t ppid = 0;
    int32_t rank = -1;
    int32_t local_rank = -1;
    int32_t world_size = -1;
    std::string hostname;  // SOFTFABRIC_NODE when set (the software fabric's node name), else gethostname()
    std::string job_id;
};

// Reads the identity from the process and its environment (through `get`, getenv in the library).
ProcessIdentity read_process_identity(const char* (*get)(const char*));

// Emits process_info if it has not been emitted in this process yet and a session wants it. Called by the
// library constructor and by every set-up wrapper (so a process whose session was not ready at start still
// identifies itself before its first object event). Cheap when already done.
void emit_process_info_once() noexcept;

// In a forked child: the next emit_process_info_once() emits again, with the child's pid.
void reset_process_info_after_fork() noexcept;

}  // namespace sigmatrace::interpose
