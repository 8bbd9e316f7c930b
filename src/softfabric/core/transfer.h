// Moving bytes between this process and a peer: process_vm_writev/readv (one syscall per operation: small
// transfers are bounded by the syscall, large ones by memory bandwidth), or memcpy when the peer is this process.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace softfabric {

inline constexpr int kMaxIov = 64;

// `same_process`: pid is this process (the copy is a memcpy).
// Each returns 0, or an errno: EFAULT (an address is not mapped on one side), ESRCH (the peer is gone),
// EPERM (the kernel refuses cross-process access: see docs/softfabric.md, "Requirements").
int write_to_process(int pid, bool same_process, const iovec* local, int nlocal, const iovec* remote, int nremote,
                     size_t total);
int read_from_process(int pid, bool same_process, const iovec* local, int nlocal, const iovec* remote, int nremote,
                      size_t total);

}  // namespace softfabric
