#include "provider/pabi_guard.h"

#include <dlfcn.h>
#include <fmt/core.h>
#include <link.h>

#include <climits>
#include <cstdlib>

namespace softfabric::provider {
namespace {

PrivateAbi g_abi;  // written once by the load-time constructor, read-only afterwards

}  // namespace

unsigned release_from_path(const std::string& path) {
    auto pos = path.rfind(".so.1.");
    if (pos == std::string::npos) return 0;
    std::string rest = path.substr(pos + 6);  // "14.44.0"
    auto dot = rest.find('.');
    if (dot == std::string::npos) return 0;
    return static_cast<unsigned>(std::strtoul(rest.c_str() + dot + 1, nullptr, 10));
}

std::string abi_problem(const AbiFacts& f) {
    bool in_range = f.release == 0 || (f.release >= pabi::kOldestLayoutRelease && f.release <= pabi::kNewestLayoutRelease);
    if (f.private_functions && f.layout_marker && in_range) return {};
    std::string found = f.release ? fmt::format("rdma-core {} ({})", f.release, f.path)
                                  : (f.path.empty() ? std::string("an unknown libibverbs") : f.path);
    return fmt::format(
        "softfabric: not loading: this provider supports the libibverbs private ABI {} with the layout of "
        "rdma-core {}..{}, but this process runs {}{}. Rebuild SigmaTrace against this rdma-core, or run on a "
        "system with rdma-core {}..{} (Debian 12 ships 44).",
        pabi::kPrivateAbiNode, pabi::kOldestLayoutRelease, pabi::kNewestLayoutRelease, found,
        f.private_functions ? "" : fmt::format(" (no {} symbols)", pabi::kPrivateAbiNode), pabi::kOldestLayoutRelease,
        pabi::kNewestLayoutRelease);
}

const PrivateAbi& private_abi() { return g_abi; }

std::string resolve_private_abi(PrivateAbi& abi) {
    void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) return "softfabric: not loading: libibverbs.so.1 is not loaded in this process";
    AbiFacts facts;
    if (void* any = dlsym(lib, "ibv_get_device_list")) {
        Dl_info info{};
        if (dladdr(any, &info) && info.dli_fname) {
            char real[PATH_MAX];
            facts.path = realpath(info.dli_fname, real) ? real : info.dli_fname;
            facts.release = release_from_path(facts.path);
        }
    }
    abi.register_driver =
        reinterpret_cast<pabi::register_driver_fn>(dlvsym(lib, "verbs_register_driver_34", pabi::kPrivateAbiNode));
    abi.init_and_alloc_context = reinterpret_cast<pabi::init_and_alloc_context_fn>(
        dlvsym(lib, "_verbs_init_and_alloc_context", pabi::kPrivateAbiNode));
    abi.set_ops = reinterpret_cast<pabi::set_ops_fn>(dlvsym(lib, "verbs_set_ops", pabi::kPrivateAbiNode));
    abi.uninit_context =
        reinterpret_cast<pabi::uninit_context_fn>(dlvsym(lib, "verbs_uninit_context", pabi::kPrivateAbiNode));
    facts.private_functions = abi.register_driver && abi.init_and_alloc_context && abi.set_ops && abi.uninit_context;
    // ibv_query_qp_data_in_order@IBVERBS_1.14 appeared in rdma-core 36, the first release with the layouts in
    // rdma_core_pabi34.h; IBVERBS_PRIVATE_34 ended with rdma-core 56.
    facts.layout_marker = dlvsym(lib, "ibv_query_qp_data_in_order", "IBVERBS_1.14") != nullptr;
    dlclose(lib);
    return abi_problem(facts);
}

std::string load_private_abi() { return resolve_private_abi(g_abi); }

}  // namespace softfabric::provider
