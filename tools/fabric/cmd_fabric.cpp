// sigmatrace fabric [--node N] [--rails R] [--config FILE] [--name NAME] [--] CMD ARGS...
// sigmatrace fabric --stats [--json] [--name NAME]
//
// Runs CMD with the software fabric's NICs of node N as its RDMA devices (docs/softfabric.md): joins (or
// starts) the named fabric, gives CMD a private /dev/infiniband and a fake sysfs tree, points libibverbs at
// the provider with RDMAV_DRIVERS, and execs CMD, whose exit status becomes ours. The environment variables
// are set for CMD only.
#include <fmt/core.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/install_layout.h"
#include "core/config.h"
#include "core/fabric_region.h"
#include "core/identity.h"
#include "core/stats.h"
#include "fabric/fake_sysfs.h"
#include "fabric/node_expression.h"
#include "fabric/private_dev.h"
#include "sigmatrace/commands.h"

namespace sigmatrace::cli {
namespace {

constexpr const char* kUsage =
    "usage: sigmatrace fabric [--node N] [--rails R] [--config FILE] [--name NAME] [--] CMD ARGS...\n"
    "       sigmatrace fabric --stats [--json] [--name NAME]\n"
    "\n"
    "Runs CMD with the NICs of software-fabric node N as its RDMA devices. Processes started this way on one\n"
    "machine share the fabric NAME; each sees only its own node's NICs (sfab_0 .. sfab_<R-1>).\n"
    "\n"
    "  --node N       node number or name (0, node3), or rank, rank/K, rank%K: derived from the MPI rank\n"
    "                 (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID). Default 0.\n"
    "  --rails R      NICs per node, 1..8 (default 1)\n"
    "  --config FILE  link bandwidths/latencies and fault schedule (docs/softfabric.md); applies when the\n"
    "                 fabric starts; a running fabric with another configuration is refused\n"
    "  --name NAME    fabric name (default $SOFTFABRIC_NAME, else 'default')\n"
    "  --stats        print the per-link counters of the fabric (--json: as JSON)\n";

struct Options {
    std::string node = "0";
    uint32_t rails = 1;
    std::optional<std::string> config;
    std::string name;
    bool stats = false;
    bool json = false;
    std::vector<char*> command;
};

int usage_error(const std::string& message) {
    fmt::print(stderr, "sigmatrace fabric: {}\n\n{}", message, kUsage);
    return 2;
}

}  // namespace

int cmd_fabric(Args args) {
    Options o;
    const char* env_name = std::getenv("SOFTFABRIC_NAME");
    o.name = env_name && *env_name ? env_name : "default";
    size_t i = 0;
    auto value = [&](std::string_view flag) -> std::optional<std::string> {
        if (i + 1 >= args.size()) return std::nullopt;
        (void)flag;
        return std::string(args[++i]);
    };
    for (; i < args.size(); ++i) {
        std::string_view a = args[i];
        if (a == "--") {
            ++i;
            break;
        }
        if (a == "-h" || a == "--help") {
            fmt::print("{}", kUsage);
            return 0;
        }
        if (a == "--stats") {
            o.stats = true;
        } else if (a == "--json") {
            o.json = true;
        } else if (a == "--node" || a == "--rails" || a == "--config" || a == "--name") {
            auto v = value(a);
            if (!v) return usage_error(fmt::format("{} needs a value", a));
            if (a == "--node") o.node = *v;
            if (a == "--config") o.config = *v;
            if (a == "--name") o.name = *v;
            if (a == "--rails") {
                char* end = nullptr;
                unsigned long r = std::strtoul(v->c_str(), &end, 10);
                if (!end || *end || r < 1 || r > softfabric::kMaxRails)
                    return usage_error(fmt::format("invalid --rails '{}': use 1..{}", *v, softfabric::kMaxRails));
                o.rails = static_cast<uint32_t>(r);
            }
        } else if (a.starts_with("-")) {
            return usage_error(fmt::format("unknown option '{}'", a));
        } else {
            break;
        }
    }
    for (; i < args.size(); ++i) o.command.push_back(args[i]);

    try {
        if (o.stats) {
            auto s = softfabric::read_stats(o.name);
            fmt::print("{}", o.json ? softfabric::format_stats_json(s) : softfabric::format_stats_text(s));
            return 0;
        }
        if (o.command.empty()) return usage_error("no command to run");
        uint32_t node = fabric::evaluate_node(o.node);

        InstallLayout layout = InstallLayout::from_self();
        auto provider = layout.fabric_dir() / "libsoftfabric-rdmav34.so";
        if (!std::filesystem::exists(provider))
            throw std::runtime_error(fmt::format("The fabric provider is missing: expected {} (is SigmaTrace fully "
                                                 "built or installed?)",
                                                 provider.string()));

        softfabric::FabricConfig config;
        if (o.config) config = softfabric::load_config_file(*o.config);
        auto fab = softfabric::Fabric::open(o.name, softfabric::OpenMode::Launch, o.config ? &config : nullptr);
        std::filesystem::path sysfs;
        {
            // Under the fabric's lock, so that concurrent launches agree on one user namespace (non-root).
            softfabric::Fabric::Exclusive lock(*fab);
            sysfs = fabric::enter_private_dev(o.rails, fab->live_member_pids());
            // Register this process now: exec keeps the pid, so the fabric counts CMD as a member from the
            // start (another launch cannot reconfigure it in between).
            fab->join_locked(node);
        }
        fabric::write_fake_sysfs(sysfs, o.name, node, o.rails);
        if (softfabric::configured_part_id() != 0) {
            if (std::string problem = fabric::expose_sys_class_infiniband(sysfs); !problem.empty())
                fmt::print(stderr, "sigmatrace fabric: note: /sys/class/infiniband shows no fabric NIC ({}); UCX and "
                                   "Open MPI then miss the NICs' locality and driver\n", problem);
        }

        setenv("SYSFS_PATH", sysfs.c_str(), 1);
        setenv("RDMAV_DRIVERS", (layout.fabric_dir() / "libsoftfabric").c_str(), 1);
        setenv("SOFTFABRIC_NAME", o.name.c_str(), 1);
        setenv("SOFTFABRIC_NODE", softfabric::node_name(node).c_str(), 1);
        setenv("SOFTFABRIC_NODE_INDEX", std::to_string(node).c_str(), 1);
        setenv("SOFTFABRIC_RAILS", std::to_string(o.rails).c_str(), 1);
        // A node whose clock the configuration skews: its processes' trace clock runs off by that much
        // (src/softfabric/clock/skewed_clock_plugin.cpp), counted from the fabric's start like the faults.
        if (const softfabric::ClockSkew* skew = config.clock_of(node)) {
            const auto plugin = layout.fabric_dir() / "libsoftfabric-clock.so";
            if (!std::filesystem::exists(plugin))
                throw std::runtime_error(fmt::format("The configuration skews node{}'s clock, but the clock plugin is "
                                                     "missing: expected {}", node, plugin.string()));
            setenv("LTTNG_UST_CLOCK_PLUGIN", plugin.c_str(), 1);
            setenv("SOFTFABRIC_CLOCK_OFFSET_NS", std::to_string(skew->offset_ns).c_str(), 1);
            setenv("SOFTFABRIC_CLOCK_DRIFT_PPM", fmt::format("{}", skew->drift_ppm).c_str(), 1);
            setenv("SOFTFABRIC_CLOCK_EPOCH_NS", std::to_string(fab->region().start_ns).c_str(), 1);
        }
        // mlx5 DevX / direct verbs on fabric devices: the libmlx5 stand-in comes first in the library path
        // (src/softfabric/mlx5/; it forwards every other device to the system's libmlx5).
        if (auto mlx5 = layout.fabric_dir() / "mlx5"; std::filesystem::exists(mlx5 / "libmlx5.so.1")) {
            const char* old = std::getenv("LD_LIBRARY_PATH");
            std::string path = mlx5.string();
            if (old && *old) path += std::string(":") + old;
            setenv("LD_LIBRARY_PATH", path.c_str(), 1);
            // UCX's DevX memory domain creates by default RC QPs, DCTs, DCIs and cyclic SRQs (RMPs) as DevX objects.
            // The fabric has no RMP (log_max_rmp is 0), and UCX 1.13's rc_mlx5 then still picks the cyclic SRQ
            // layout and asserts: unless the user chose, its SRQs are verbs ones (docs/softfabric.md).
            setenv("UCX_IB_MLX5_DEVX_OBJECTS", "rcqp,dct,dci", 0);
            // UCX 1.13 turns PCIe relaxed ordering on by the CPU (AMD ones), whatever the device reports (the
            // fabric reports none and has no indirect mkeys): its rc_mlx5 and dc_mlx5 then name remote addresses
            // past the target's memory region in RDMA WRITEs and atomics, which fail with remote access errors.
            // Unless the user chose, it is off (docs/softfabric.md).
            setenv("UCX_IB_PCI_RELAXED_ORDERING", "off", 0);
        }
    } catch (const std::exception& e) {
        fmt::print(stderr, "sigmatrace fabric: {}\n", e.what());
        return 2;
    }
    o.command.push_back(nullptr);
    execvp(o.command[0], o.command.data());
    fmt::print(stderr, "sigmatrace fabric: Cannot run '{}': {}\n", o.command[0], std::strerror(errno));
    return errno == ENOENT ? 127 : 126;
}

}  // namespace sigmatrace::cli
