#include "record/process_report.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace sigmatrace::record {

ProcessReport parse_process_report(const std::string& text) {
    ProcessReport r;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("traced ", 0) == 0) ++r.traced;
        else if (line.rfind("not-traced ", 0) == 0) r.not_traced.push_back(line.substr(11));
        else if (line.rfind("partial ", 0) == 0) r.partial.push_back(line.substr(8));
    }
    return r;
}

ReportFile::ReportFile() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/sigmatrace-record.XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
        error_ = "cannot create a directory like " + templ + ": " + std::strerror(errno);
        return;
    }
    dir_ = templ;
    const std::string file = dir_ + "/processes";
    // World-writable: the recorded command may switch users (sudo, a job launcher); the directory is private
    // to this run and its name unpredictable.
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        error_ = "cannot create " + file + ": " + std::strerror(errno);
        return;
    }
    ::fchmod(fd, 0666);
    ::close(fd);
    ::chmod(dir_.c_str(), 0755);
    path_ = file;
}

ReportFile::~ReportFile() {
    if (dir_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

ProcessReport ReportFile::read() const {
    if (path_.empty()) return {};
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return parse_process_report(s.str());
}

}  // namespace sigmatrace::record
