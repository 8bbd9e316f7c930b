// Finding real functions: libc's dlsym read from its symbol table, and a wrapped library's functions when it
// was dlopen'ed RTLD_LOCAL (NCCL, NVSHMEM), which RTLD_NEXT cannot see. This executable deliberately does not
// link libibverbs.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "interpose/runtime/elf_symbols.h"
#include "interpose/runtime/real_symbol.h"

namespace sigmatrace::testing {
namespace {

using interpose::DynamicSymbolTable;
using interpose::WrappedLibrary;

std::string object_of(const void* p) {
    Dl_info info{};
    if (p == nullptr || dladdr(p, &info) == 0 || info.dli_fname == nullptr) return "";
    const char* slash = std::strrchr(info.dli_fname, '/');
    return slash != nullptr ? slash + 1 : info.dli_fname;
}

TEST(RealSymbol, LibcDynamicSymbolTableAnswersLikeDlvsym) {
    const link_map* libc = interpose::link_map_containing(reinterpret_cast<const void*>(&getpid));
    ASSERT_NE(libc, nullptr);
    DynamicSymbolTable t;
    ASSERT_TRUE(t.init(libc));
    void* by_table = t.find("getpid", nullptr);
    EXPECT_EQ(by_table, reinterpret_cast<void*>(&getpid));
    const char* v = t.default_version("dlvsym");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(std::string(v).rfind("GLIBC_", 0), 0u) << v;
    EXPECT_EQ(t.find("dlvsym", v), t.find("dlvsym", nullptr));
    EXPECT_EQ(t.find("getpid", "NO_SUCH_VERSION"), nullptr);
    EXPECT_EQ(t.find("no_such_function_anywhere", nullptr), nullptr);
    EXPECT_TRUE(t.defines("dlsym"));
}

TEST(RealSymbol, RealDlsymIsLibcs) {
    EXPECT_EQ(interpose::real_dlsym(RTLD_DEFAULT, "getpid"), reinterpret_cast<void*>(&getpid));
    void* handle = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    ASSERT_NE(handle, nullptr);
    const char* v = nullptr;
    DynamicSymbolTable t;
    ASSERT_TRUE(t.init(interpose::link_map_containing(reinterpret_cast<const void*>(&getpid))));
    v = t.default_version("getpid");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(interpose::real_dlvsym(handle, "getpid", v), reinterpret_cast<void*>(&getpid));
    dlclose(handle);
}

TEST(RealSymbol, FindsFunctionsOfALibraryLoadedRtldLocal) {
    ASSERT_EQ(dlsym(RTLD_DEFAULT, "ibv_get_device_list"), nullptr)
        << "this test needs libibverbs absent from the global scope";
    EXPECT_EQ(interpose::find_real_symbol("ibv_get_device_list", "IBVERBS_1.1", WrappedLibrary::ibverbs), nullptr)
        << "not loaded yet: nothing to find, nothing loaded";
    void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) GTEST_SKIP() << "libibverbs.so.1 is not installed: " << dlerror();
    EXPECT_EQ(dlsym(RTLD_DEFAULT, "ibv_get_device_list"), nullptr) << "RTLD_LOCAL keeps it out of the global scope";
    void* fn = interpose::find_real_symbol("ibv_get_device_list", "IBVERBS_1.1", WrappedLibrary::ibverbs);
    EXPECT_EQ(fn, dlvsym(h, "ibv_get_device_list", "IBVERBS_1.1"));
    EXPECT_EQ(object_of(fn).rfind("libibverbs.so", 0), 0u) << object_of(fn);
    void* compat = interpose::find_real_symbol("ibv_open_device", "IBVERBS_1.0", WrappedLibrary::ibverbs);
    void* current = interpose::find_real_symbol("ibv_open_device", "IBVERBS_1.1", WrappedLibrary::ibverbs);
    EXPECT_NE(compat, nullptr);
    EXPECT_NE(current, nullptr);
    EXPECT_NE(compat, current) << "versions are distinct functions";
    EXPECT_EQ(interpose::find_real_symbol("ibv_open_device", nullptr, WrappedLibrary::ibverbs), current)
        << "no version: the default one, like dlsym";
    dlclose(h);
}

TEST(RealSymbol, WrappedLibraryNames) {
    EXPECT_TRUE(interpose::is_wrapped_library_path("/usr/lib/x86_64-linux-gnu/libibverbs.so.1"));
    EXPECT_TRUE(interpose::is_wrapped_library_path("libmlx5.so.1"));
    EXPECT_TRUE(interpose::is_wrapped_library_path("/opt/cuda/lib64/libcuda.so.1"));
    EXPECT_FALSE(interpose::is_wrapped_library_path("/usr/lib/libibverbs_helper.so"));
    EXPECT_FALSE(interpose::is_wrapped_library_path("/lib/x86_64-linux-gnu/libc.so.6"));
    EXPECT_FALSE(interpose::is_wrapped_library_path(nullptr));
}

}  // namespace
}  // namespace sigmatrace::testing
