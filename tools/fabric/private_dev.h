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

}  // namespace sigmatrace::fabric
