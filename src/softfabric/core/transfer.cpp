#include "core/transfer.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace softfabric {
namespace {

// Copies between two scatter lists within this process.
void copy_lists(const iovec* dst, int ndst, const iovec* src, int nsrc, size_t total) {
    int di = 0, si = 0;
    size_t doff = 0, soff = 0;
    while (total > 0 && di < ndst && si < nsrc) {
        size_t n = dst[di].iov_len - doff;
        if (src[si].iov_len - soff < n) n = src[si].iov_len - soff;
        if (total < n) n = total;
        std::memcpy(static_cast<char*>(dst[di].iov_base) + doff, static_cast<const char*>(src[si].iov_base) + soff, n);
        total -= n;
        doff += n;
        soff += n;
        if (doff == dst[di].iov_len) ++di, doff = 0;
        if (soff == src[si].iov_len) ++si, soff = 0;
    }
}

// process_vm_writev or process_vm_readv: `local` and `remote` in the same places for both.
using VmCall = ssize_t (*)(pid_t, const iovec*, unsigned long, const iovec*, unsigned long, unsigned long);

// Moves `total` bytes between `local` and `remote` of process `pid`, towards `remote` when `to_remote`.
int move(VmCall vm_call, bool to_remote, int pid, bool same_process, const iovec* local, int nlocal,
         const iovec* remote, int nremote, size_t total) {
    if (total == 0) return 0;
    if (same_process) {
        if (to_remote) copy_lists(remote, nremote, local, nlocal, total);
        else copy_lists(local, nlocal, remote, nremote, total);
        return 0;
    }
    const ssize_t done = vm_call(pid, local, static_cast<unsigned long>(nlocal), remote,
                                 static_cast<unsigned long>(nremote), 0);
    if (done < 0) return errno == ENOMEM ? EFAULT : errno;
    return static_cast<size_t>(done) == total ? 0 : EFAULT;
}

}  // namespace

int write_to_process(int pid, bool same_process, const iovec* local, int nlocal, const iovec* remote, int nremote,
                     size_t total) {
    return move(&process_vm_writev, true, pid, same_process, local, nlocal, remote, nremote, total);
}

int read_from_process(int pid, bool same_process, const iovec* local, int nlocal, const iovec* remote, int nremote,
                      size_t total) {
    return move(&process_vm_readv, false, pid, same_process, local, nlocal, remote, nremote, total);
}

}  // namespace softfabric
