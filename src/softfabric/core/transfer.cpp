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

int finish(ssize_t done, size_t total) {
    if (done < 0) return errno == ENOMEM ? EFAULT : errno;
    return static_cast<size_t>(done) == total ? 0 : EFAULT;
}

}  // namespace

int write_to_process(int pid, bool same_process, const iovec* local, int nlocal, const iovec* remote, int nremote,
                     size_t total) {
    if (total == 0) return 0;
    if (same_process) {
        copy_lists(remote, nremote, local, nlocal, total);
        return 0;
    }
    return finish(process_vm_writev(pid, local, static_cast<unsigned long>(nlocal), remote,
                                    static_cast<unsigned long>(nremote), 0),
                  total);
}

int read_from_process(int pid, bool same_process, const iovec* local, int nlocal, const iovec* remote, int nremote,
                      size_t total) {
    if (total == 0) return 0;
    if (same_process) {
        copy_lists(local, nlocal, remote, nremote, total);
        return 0;
    }
    return finish(process_vm_readv(pid, local, static_cast<unsigned long>(nlocal), remote,
                                   static_cast<unsigned long>(nremote), 0),
                  total);
}

}  // namespace softfabric
