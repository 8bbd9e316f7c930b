// A library that, like a malloc or MPI interposer, looks up "the next" definition of a function it also
// defines, with dlsym(RTLD_NEXT, ...) and dlvsym(RTLD_NEXT, ...). glibc resolves RTLD_NEXT relative to the
// caller's return address: if libsigmatrace.so's dlsym changed the caller, the lookup would start after
// libsigmatrace.so and could find this library's own getpid, or not find libc's.
#include <dlfcn.h>
#include <unistd.h>

extern "C" {

__attribute__((visibility("default"))) pid_t getpid(void) {
    using Fn = pid_t (*)();
    static Fn next = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "getpid"));
    return next != nullptr ? next() : -1;
}

// The results go through a volatile so that the calls are not tail calls: a tail call would make the
// caller of these functions (the main program) the caller of dlsym.
__attribute__((visibility("default"))) void* probe_next_getpid() {
    void* volatile p = dlsym(RTLD_NEXT, "getpid");
    return p;
}

__attribute__((visibility("default"))) void* probe_next_getpid_versioned() {
    void* volatile p = dlvsym(RTLD_NEXT, "getpid", "GLIBC_2.2.5");
    return p;
}
}
