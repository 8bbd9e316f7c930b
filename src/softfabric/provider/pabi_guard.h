// Load-time check of the private ABI: the provider resolves the four IBVERBS_PRIVATE_34 functions with dlvsym
// (instead of importing them, which would make dlopen fail with an unhelpful message) and checks that the
// running libibverbs has the structure layouts of rdma-core 36..56. On anything else it prints one message
// naming what it supports and what it found, and does not register.
#pragma once

#include <string>

#include "rdma_core_pabi34.h"

namespace softfabric::provider {

struct PrivateAbi {
    pabi::register_driver_fn register_driver = nullptr;
    pabi::init_and_alloc_context_fn init_and_alloc_context = nullptr;
    pabi::set_ops_fn set_ops = nullptr;
    pabi::uninit_context_fn uninit_context = nullptr;
};

// What the guard found out about the running libibverbs.
struct AbiFacts {
    bool private_functions = false;  // the four IBVERBS_PRIVATE_34 functions resolve
    bool layout_marker = false;      // ibv_query_qp_data_in_order@IBVERBS_1.14 (rdma-core >= 36) resolves
    unsigned release = 0;            // from the library's file name (libibverbs.so.1.14.<release>.x), 0 if unknown
    std::string path;                // the library's real path
};
// The refusal message for `facts`, or an empty string when they describe a supported libibverbs.
std::string abi_problem(const AbiFacts& facts);
// "libibverbs.so.1.14.44.0" -> 44; 0 when the name does not follow rdma-core's scheme.
unsigned release_from_path(const std::string& path);

// Fills `abi` and returns an empty string when the running libibverbs is supported; otherwise returns the
// message explaining why not.
std::string resolve_private_abi(PrivateAbi& abi);

// Resolves into the provider's own table (load-time constructor); same result as resolve_private_abi.
std::string load_private_abi();
// The functions resolved at load time (valid once the provider registered).
const PrivateAbi& private_abi();

}  // namespace softfabric::provider
