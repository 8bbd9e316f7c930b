// stall_writer N crash|exit: emits N deferred_records events through the LTTng provider, then, for `crash`,
// dies with SIGSEGV in the middle of writing one more: the event's words lie on an unreadable page, so
// lttng-ust faults while copying them, after reserving the event's room in the per-uid buffer and before
// committing it. That is what a process killed inside a tracepoint leaves: a sub-buffer that never completes
// (tools/record/crash_recovery.h). `exit` returns after the N events.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "provider/trace.h"

int main(int argc, char** argv) {
    if (argc != 3 || (std::strcmp(argv[2], "crash") != 0 && std::strcmp(argv[2], "exit") != 0)) {
        std::fprintf(stderr, "usage: stall_writer N crash|exit\n");
        return 2;
    }
    const long n = std::strtol(argv[1], nullptr, 10);
    // lttng-ust registers with the session daemon from a constructor; the session enables the events then.
    for (int i = 0; i < 500 && !ST_TRACE_ENABLED(deferred_records); ++i) usleep(10000);
    if (!ST_TRACE_ENABLED(deferred_records)) {
        std::fprintf(stderr, "stall_writer: the deferred_records event is not enabled (no session?)\n");
        return 3;
    }
    static const uint64_t words[4] = {1, 2, 3, 4};
    st_deferred_records_rec r{};
    r.layout = 3;
    r.n = 4;
    r.words = words;
    for (long i = 0; i < n; ++i) {
        r.origin_tid = static_cast<int32_t>(i);
        ST_TRACE_EMIT(deferred_records, &r);
    }
    std::printf("stall_writer: %ld events written\n", n);
    std::fflush(stdout);
    if (std::strcmp(argv[2], "exit") == 0) return 0;
    void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return 4;
    r.words = static_cast<const uint64_t*>(page);
    ST_TRACE_EMIT(deferred_records, &r);
    std::fprintf(stderr, "stall_writer: the unreadable event did not fault\n");
    return 5;
}
