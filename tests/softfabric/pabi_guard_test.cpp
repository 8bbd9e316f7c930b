// The private-ABI guard: which libibverbs the provider accepts, and the message it prints otherwise.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "provider/pabi_guard.h"

namespace softfabric::provider {
namespace {

TEST(PabiGuard, ReadsTheReleaseFromTheLibraryName) {
    EXPECT_EQ(release_from_path("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"), 44u);
    EXPECT_EQ(release_from_path("/opt/rdma/lib/libibverbs.so.1.14.56.1"), 56u);
    EXPECT_EQ(release_from_path("/usr/lib/libibverbs.so.1"), 0u);
}

TEST(PabiGuard, AcceptsRdmaCore36To56WithThePrivateFunctions) {
    AbiFacts f{true, true, 44, "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"};
    EXPECT_EQ(abi_problem(f), "");
    f.release = 0;  // a library named otherwise: the symbols decide
    EXPECT_EQ(abi_problem(f), "");
}

TEST(PabiGuard, RefusesOtherAbisWithOneMessageNamingBoth) {
    AbiFacts newer{false, true, 59, "/usr/lib/libibverbs.so.1.15.59.0"};
    std::string m = abi_problem(newer);
    EXPECT_NE(m.find("IBVERBS_PRIVATE_34"), std::string::npos);
    EXPECT_NE(m.find("rdma-core 36..56"), std::string::npos);
    EXPECT_NE(m.find("rdma-core 59 (/usr/lib/libibverbs.so.1.15.59.0)"), std::string::npos);
    EXPECT_NE(m.find("no IBVERBS_PRIVATE_34 symbols"), std::string::npos);
    // rdma-core 34/35: the same private ABI name, an older layout.
    AbiFacts older{true, false, 35, "/usr/lib/libibverbs.so.1.13.35.0"};
    EXPECT_NE(abi_problem(older), "");
    AbiFacts out_of_range{true, true, 57, "/usr/lib/libibverbs.so.1.14.57.0"};
    EXPECT_NE(abi_problem(out_of_range), "");
}

TEST(PabiGuard, TheInstalledLibibverbsIsSupported) {
    // As when libibverbs loads the provider: the library is already in the process.
    void* lib = dlopen("libibverbs.so.1", RTLD_NOW);
    ASSERT_NE(lib, nullptr) << dlerror();
    PrivateAbi abi;
    EXPECT_EQ(resolve_private_abi(abi), "") << "the build requires libibverbs of rdma-core 36..56";
    EXPECT_NE(abi.register_driver, nullptr);
    EXPECT_NE(abi.init_and_alloc_context, nullptr);
    EXPECT_NE(abi.set_ops, nullptr);
    EXPECT_NE(abi.uninit_context, nullptr);
    dlclose(lib);
}

}  // namespace
}  // namespace softfabric::provider
