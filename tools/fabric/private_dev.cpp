#include "fabric/private_dev.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <system_error>

namespace sigmatrace::fabric {
namespace {

constexpr const char* kDevDir = "/dev/infiniband";

void write_proc(const char* path, const std::string& text) {
    std::ofstream out(path);
    out << text;
    out.flush();
    if (!out) throw SetupError(fmt::format("Cannot write {} ('{}'): {}", path, text, std::strerror(errno)));
}

}  // namespace

// Joins the user namespace of a live fabric member (ours when we created it, as its owner).
bool join_member_user_namespace(const std::vector<int>& pids) {
    struct stat self {};
    if (stat("/proc/self/ns/user", &self) != 0) return false;
    for (int pid : pids) {
        std::string path = fmt::format("/proc/{}/ns/user", pid);
        struct stat other {};
        if (stat(path.c_str(), &other) != 0) continue;
        if (other.st_ino == self.st_ino && other.st_dev == self.st_dev) continue;  // the one we are in
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        int rc = setns(fd, CLONE_NEWUSER);
        close(fd);
        if (rc == 0) return true;
    }
    return false;
}

std::filesystem::path enter_private_dev(uint32_t rails, const std::vector<int>& fabric_member_pids) {
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (uid == 0) {
        if (unshare(CLONE_NEWNS) != 0)
            throw SetupError(fmt::format("Cannot create a private mount namespace (unshare CLONE_NEWNS): {}",
                                         std::strerror(errno)));
    } else if (join_member_user_namespace(fabric_member_pids)) {
        if (unshare(CLONE_NEWNS) != 0)
            throw SetupError(fmt::format("Cannot create a mount namespace in the fabric's user namespace: {}",
                                         std::strerror(errno)));
    } else {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
            throw SetupError(fmt::format(
                "Cannot create a user + mount namespace (unshare): {}. As a non-root user `sigmatrace fabric` "
                "needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and "
                "user.max_user_namespaces > 0); otherwise run it as root",
                std::strerror(errno)));
        // Keep our own identity inside (the command sees its usual uid and gid).
        write_proc("/proc/self/setgroups", "deny");
        write_proc("/proc/self/uid_map", fmt::format("{} {} 1", uid, uid));
        write_proc("/proc/self/gid_map", fmt::format("{} {} 1", gid, gid));
    }
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        throw SetupError(fmt::format("Cannot make the mount namespace private: {}", std::strerror(errno)));
    struct stat st {};
    if (stat(kDevDir, &st) != 0) {
        if (uid != 0 || mkdir(kDevDir, 0755) != 0)
            throw SetupError(fmt::format(
                "{} does not exist and cannot be created ({}): run `mkdir {}` once as root (an empty directory; "
                "libibverbs ignores it), or run sigmatrace fabric as root",
                kDevDir, std::strerror(errno), kDevDir));
    }
    if (mount("softfabric", kDevDir, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=4m") != 0)
        throw SetupError(fmt::format("Cannot mount a tmpfs on {}: {}", kDevDir, std::strerror(errno)));
    for (uint32_t rail = 0; rail < rails; ++rail) {
        std::string node = fmt::format("{}/uverbs{}", kDevDir, rail);
        if (symlink("/dev/null", node.c_str()) != 0)
            throw SetupError(fmt::format("Cannot create {}: {}", node, std::strerror(errno)));
    }
    return std::filesystem::path(kDevDir) / "softfabric-sysfs";
}

}  // namespace sigmatrace::fabric

namespace sigmatrace::fabric {

std::string expose_sys_class_infiniband(const std::filesystem::path& sysfs) {
    namespace fs = std::filesystem;
    const fs::path sys_class = "/sys/class";
    const fs::path view = fs::path(kDevDir) / "softfabric-sysclass";
    std::error_code ec;
    if (!fs::is_directory(sys_class, ec)) return fmt::format("{} is not a directory", sys_class.string());
    fs::create_directories(view, ec);
    if (ec) return fmt::format("cannot create {}: {}", view.string(), ec.message());
    for (const auto& entry : fs::directory_iterator(sys_class, ec)) {
        const std::string name = entry.path().filename().string();
        if (name == "infiniband") continue;  // the fabric's replaces a real one: the command sees only fabric NICs
        const fs::path at = view / name;
        fs::create_directory(at, ec);
        if (ec) return fmt::format("cannot create {}: {}", at.string(), ec.message());
        if (mount(entry.path().c_str(), at.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
            return fmt::format("cannot bind {} into the view: {}", entry.path().string(), std::strerror(errno));
    }
    if (ec) return fmt::format("cannot list {}: {}", sys_class.string(), ec.message());
    fs::create_symlink(sysfs / "class/infiniband", view / "infiniband", ec);
    if (ec) return fmt::format("cannot create {}: {}", (view / "infiniband").string(), ec.message());
    if (mount(view.c_str(), sys_class.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
        return fmt::format("cannot mount the view on {}: {}", sys_class.string(), std::strerror(errno));
    return {};
}

}  // namespace sigmatrace::fabric
