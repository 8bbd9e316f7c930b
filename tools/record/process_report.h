// What the traced processes told `sigmatrace record` about themselves.
//
// Tracing starts in a process at its first RDMA use (docs/interpose.md, "When tracing starts"), so a recording
// of a command that never touches RDMA is legitimately empty, and an empty trace alone cannot say whether
// something went wrong. record therefore hands every process a report file (SIGMATRACE_RECORD_REPORT); each
// process that starts tracing appends one line (src/interpose/runtime/activation.cpp):
//   traced pid=123 comm=ib_write_bw
//   not-traced pid=124 comm=ib_write_bw reason=provider: dlopen(...): ...
//   partial pid=125 comm=ib_write_bw reason=registration with the session daemon not complete after 30.0 s ...
// and record reports the processes that used RDMA but could not be traced, or whose trace may lack events.
#pragma once

#include <string>
#include <vector>

namespace sigmatrace::record {

struct ProcessReport {
    int traced = 0;                       // processes whose events reach the session
    std::vector<std::string> not_traced;  // "pid=124 comm=x reason=..." per process that used RDMA untraced
    std::vector<std::string> partial;     // "pid=125 comm=x reason=..." per process traced, maybe with gaps
};

// Parses the report file's text (unknown lines are ignored: a newer tracer may say more).
ProcessReport parse_process_report(const std::string& text);

// A private, empty report file (in a fresh directory under TMPDIR or /tmp), removed with its directory when
// this object goes away.
class ReportFile {
public:
    ReportFile();
    ~ReportFile();
    ReportFile(const ReportFile&) = delete;
    ReportFile& operator=(const ReportFile&) = delete;

    // "" when it could not be created (error() says why); the recording then goes on without the report.
    const std::string& path() const { return path_; }
    const std::string& error() const { return error_; }
    ProcessReport read() const;

private:
    std::string dir_;
    std::string path_;
    std::string error_;
};

}  // namespace sigmatrace::record
