// rtld_next_main: checks that dlsym/dlvsym(RTLD_NEXT, ...) made from a library (rtld_next_probe) and from the
// main program still resolve relative to their caller when libsigmatrace.so interposes dlsym. Exit 0 when
// every lookup found libc's getpid, 1 otherwise (with what was found).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

extern "C" void* probe_next_getpid();
extern "C" void* probe_next_getpid_versioned();

namespace {

const char* object_of(void* p) {
    Dl_info info{};
    if (p == nullptr || dladdr(p, &info) == 0 || info.dli_fname == nullptr) return "(none)";
    const char* slash = std::strrchr(info.dli_fname, '/');
    return slash != nullptr ? slash + 1 : info.dli_fname;
}

bool is_libc(void* p) {
    return std::strncmp(object_of(p), "libc.so", 7) == 0;
}

}  // namespace

int main() {
    int bad = 0;
    void* from_probe = probe_next_getpid();
    void* from_probe_v = probe_next_getpid_versioned();
    // From the main program, RTLD_NEXT starts after it: the probe library's getpid comes first.
    void* from_main = dlsym(RTLD_NEXT, "getpid");
    std::printf("probe RTLD_NEXT getpid -> %s\n", object_of(from_probe));
    std::printf("probe RTLD_NEXT getpid@GLIBC_2.2.5 -> %s\n", object_of(from_probe_v));
    std::printf("main RTLD_NEXT getpid -> %s\n", object_of(from_main));
    bad += !is_libc(from_probe);
    bad += !is_libc(from_probe_v);
    bad += std::strncmp(object_of(from_main), "librtld_next_probe", 18) != 0;
    bad += getpid() <= 0;  // the probe forwards to libc's
    std::printf("%s\n", bad == 0 ? "ok" : "WRONG");
    return bad == 0 ? 0 : 1;
}
