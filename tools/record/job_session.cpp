#include "record/job_session.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <sstream>

namespace sigmatrace::record {
namespace {

std::string sanitized(std::string s) {
    for (char& c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) c = '_';
    return s;
}

}  // namespace

std::optional<std::string> job_key(const Environment& env) {
    // A rank variable says this process is a rank; the job variable names the job.
    if (!value_of(env, "OMPI_COMM_WORLD_RANK").empty() && !value_of(env, "OMPI_MCA_ess_base_jobid").empty())
        return sanitized("ompi-" + value_of(env, "OMPI_MCA_ess_base_jobid"));
    if (!value_of(env, "PMIX_RANK").empty() && !value_of(env, "PMIX_NAMESPACE").empty())
        return sanitized("pmix-" + value_of(env, "PMIX_NAMESPACE"));
    if (!value_of(env, "SLURM_PROCID").empty() && !value_of(env, "SLURM_JOB_ID").empty()) {
        const std::string step = value_of(env, "SLURM_STEP_ID");
        return sanitized("slurm-" + value_of(env, "SLURM_JOB_ID") + (step.empty() ? "" : "-" + step));
    }
    return std::nullopt;
}

JobMembers JobMembers::parse(const std::string& text) {
    JobMembers m;
    std::istringstream in(text);
    std::string line;
    if (!std::getline(in, m.output) || !std::getline(in, line)) return {};
    std::istringstream pids(line);
    std::string word;
    while (pids >> word) {
        pid_t pid = 0;
        const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), pid);
        if (ec != std::errc() || end != word.data() + word.size() || pid <= 0) return {};
        m.members.push_back(pid);
    }
    return m;
}

std::string JobMembers::text() const {
    std::string out = output + "\n";
    for (size_t i = 0; i < members.size(); ++i) out += (i ? " " : "") + std::to_string(members[i]);
    return out + "\n";
}

void JobMembers::prune(const std::function<bool(pid_t)>& alive) {
    std::erase_if(members, [&](pid_t p) { return !alive(p); });
}

bool process_alive(pid_t pid) {
    return kill(pid, 0) == 0 || errno == EPERM;
}

std::optional<LockedJobFile> LockedJobFile::open(const std::string& dir, const std::string& key, std::string* error) {
    const std::string path = dir + "/sigmatrace-job-" + key;
    // The last rank of a job removes the file: a rank that opened it before and locks it after would hold a
    // removed file's lock, so the lock counts only when the path still names the locked file.
    for (int attempt = 0; attempt < 100; ++attempt) {
        const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) {
            *error = "Cannot open the job file the ranks of this host share: path=" + path + ", reason=" + std::strerror(errno);
            return std::nullopt;
        }
        int rc;
        while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
        }
        if (rc != 0) {
            *error = "Cannot lock the job file: path=" + path + ", reason=" + std::strerror(errno);
            close(fd);
            return std::nullopt;
        }
        struct stat held{}, named{};
        if (fstat(fd, &held) == 0 && stat(path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
            held.st_dev == named.st_dev)
            return LockedJobFile(fd, path);
        close(fd);
    }
    *error = "Cannot lock the job file: path=" + path + ", reason=it kept being removed and recreated";
    return std::nullopt;
}

LockedJobFile::~LockedJobFile() {
    if (fd_ >= 0) close(fd_);  // releases the lock
}

JobMembers LockedJobFile::read() const {
    std::string text;
    char buf[4096];
    ssize_t n;
    off_t off = 0;
    while ((n = pread(fd_, buf, sizeof buf, off)) > 0) {
        text.append(buf, static_cast<size_t>(n));
        off += n;
    }
    return JobMembers::parse(text);
}

std::string LockedJobFile::write(const JobMembers& m) {
    if (m.members.empty()) {
        if (unlink(path_.c_str()) != 0 && errno != ENOENT)
            return "Cannot remove the job file: path=" + path_ + ", reason=" + std::strerror(errno);
        return "";
    }
    const std::string text = m.text();
    if (ftruncate(fd_, 0) != 0 || pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
        return "Cannot write the job file: path=" + path_ + ", reason=" + std::strerror(errno);
    return "";
}

}  // namespace sigmatrace::record
