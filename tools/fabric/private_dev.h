// A private /dev/infiniband for the command: `sigmatrace fabric` enters a new mount namespace (as root) or a
// user + mount namespace (as another user, where the kernel allows it) and mounts a tmpfs on /dev/infiniband
// holding uverbs<R> (symlinks to /dev/null: libibverbs only needs a character device to open) and the fake
// sysfs tree. Nothing outside the namespace changes, except that an absent /dev/infiniband directory is
// created once (as root) to have somewhere to mount: an empty directory, which libibverbs ignores.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace sigmatrace::fabric {

class SetupError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Enters the namespace and prepares /dev/infiniband; returns the directory to use as SYSFS_PATH.
// As non-root, every process of a fabric must live in one user namespace (process_vm_writev and /proc/PID/fd
// need ptrace access, which sibling user namespaces do not grant each other): the launch joins the user
// namespace of one of `fabric_member_pids` when it can, and creates one only for the first member.
std::filesystem::path enter_private_dev(uint32_t rails, const std::vector<int>& fabric_member_pids);

// Inside that namespace, shows the fake tree's class/infiniband at /sys/class/infiniband too, where UCX and Open
// MPI read some attributes directly (device/numa_node, device/local_cpus, device/driver): /sys/class becomes a
// view holding every original entry (bind mounts) plus the fabric's infiniband class. Returns an empty string
// on success, else what failed (the command still runs; only those direct reads miss).
std::string expose_sys_class_infiniband(const std::filesystem::path& sysfs);

}  // namespace sigmatrace::fabric
