#include "core/fabric_region.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/clock.h"

namespace softfabric {
namespace {

bool valid_fabric_name(const std::string& name) {
    if (name.empty() || name.size() > 48) return false;
    for (char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
    return true;
}

// FNV-1a over the bytes of trivially copyable values.
struct Digest {
    uint64_t h = 0xcbf2'9ce4'8422'2325ull;
    template <typename T>
    void add(const T& v) {
        static_assert(std::is_trivially_copyable_v<T>);
        unsigned char bytes[sizeof(T)];
        std::memcpy(bytes, &v, sizeof(T));
        for (unsigned char b : bytes) h = (h ^ b) * 0x100'0000'01b3ull;
    }
};

void add_selector(Digest& d, const LinkSelector& s) {
    d.add(s.src.node);
    d.add(s.src.rail);
    d.add(s.dst.node);
    d.add(s.dst.rail);
    d.add(s.both);
}

}  // namespace

std::string Fabric::shm_name(const std::string& fabric_name) { return "/softfabric-" + fabric_name; }

uint64_t config_digest(const FabricConfig& config) {
    Digest d;
    d.add(config.defaults.bandwidth_bytes_per_s);
    d.add(config.defaults.latency_ns);
    d.add(config.mtu);
    d.add(config.loss_seed);
    for (const auto& o : config.overrides) {
        add_selector(d, o.link);
        d.add(o.has_bandwidth);
        d.add(o.has_latency);
        d.add(o.params.bandwidth_bytes_per_s);
        d.add(o.params.latency_ns);
    }
    for (const auto& f : config.faults) {
        add_selector(d, f.link);
        d.add(f.kind);
        d.add(f.value);
        d.add(f.from_ns);
        d.add(f.to_ns);
    }
    for (const auto& c : config.clocks) {
        d.add(c.node);
        d.add(c.offset_ns);
        d.add(c.drift_ppm);
    }
    return d.h;
}

void store_config(FabricRegion& region, const FabricConfig& config) {
    if (config.faults.size() > kMaxFaults)
        throw FabricError(fmt::format("The fabric configuration has {} faults; at most {} are supported",
                                      config.faults.size(), kMaxFaults));
    if (config.overrides.size() > kMaxOverrides)
        throw FabricError(fmt::format("The fabric configuration has {} link statements; at most {} are supported",
                                      config.overrides.size(), kMaxOverrides));
    RegionConfig& rc = region.config;
    rc.default_bandwidth = config.defaults.bandwidth_bytes_per_s;
    rc.default_latency_ns = config.defaults.latency_ns;
    rc.mtu = config.mtu;
    rc.loss_seed = config.loss_seed;
    rc.num_faults = static_cast<uint32_t>(config.faults.size());
    rc.num_overrides = static_cast<uint32_t>(config.overrides.size());
    for (size_t i = 0; i < config.faults.size(); ++i) rc.faults[i] = config.faults[i];
    for (size_t i = 0; i < config.overrides.size(); ++i) rc.overrides[i] = config.overrides[i];
    rc.digest = config_digest(config);
}

uint64_t process_start_time(int pid) {
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    if (!in) return 0;
    std::string line;
    std::getline(in, line);
    auto close = line.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream fields(line.substr(close + 2));
    std::string field;
    // After "pid (comm) " come: state(3) ppid(4) ... starttime is field 22, i.e. the 20th from here.
    for (int i = 3; i <= 22; ++i) {
        if (!(fields >> field)) return 0;
    }
    return std::strtoull(field.c_str(), nullptr, 10);
}

bool process_alive(int pid, uint64_t start_time) {
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno != EPERM) return false;
    return process_start_time(pid) == start_time;
}

Fabric::Fabric(std::string name, int fd, FabricRegion* region) : name_(std::move(name)), fd_(fd), region_(region) {}

Fabric::~Fabric() {
    if (region_) munmap(region_, sizeof(FabricRegion));
    if (fd_ >= 0) close(fd_);
}

void Fabric::lock_exclusive() const {
    while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
}
void Fabric::unlock() const { flock(fd_, LOCK_UN); }

std::unique_ptr<Fabric> Fabric::open(const std::string& name, OpenMode mode, const FabricConfig* config) {
    if (!valid_fabric_name(name))
        throw FabricError(fmt::format("Invalid fabric name '{}': use 1 to 48 characters from [A-Za-z0-9._-]", name));
    std::string shm = shm_name(name);
    int flags = O_RDWR | O_CLOEXEC | (mode == OpenMode::ReadOnly ? 0 : O_CREAT);
    int fd = shm_open(shm.c_str(), flags, 0600);
    if (fd < 0) {
        if (mode == OpenMode::ReadOnly && errno == ENOENT)
            throw FabricError(fmt::format("No fabric named '{}' on this machine (no /dev/shm{}): start processes "
                                          "with `sigmatrace fabric --name {}` first",
                                          name, shm, name));
        throw FabricError(fmt::format("Cannot open fabric shared memory: name=/dev/shm{}, reason={}", shm,
                                      std::strerror(errno)));
    }
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        throw FabricError(fmt::format("Cannot stat /dev/shm{}: {}", shm, std::strerror(err)));
    }
    if (mode == OpenMode::ReadOnly && static_cast<size_t>(st.st_size) < sizeof(FabricRegion)) {
        close(fd);
        throw FabricError(fmt::format("Fabric '{}' (/dev/shm{}) is not initialized", name, shm));
    }
    if (mode != OpenMode::ReadOnly) {
        while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
        }
        if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) != sizeof(FabricRegion)) {
            // A fresh file, or one left by another build: start from an all-zero (sparse) file.
            if (ftruncate(fd, 0) != 0 || ftruncate(fd, sizeof(FabricRegion)) != 0) {
                int err = errno;
                close(fd);
                throw FabricError(fmt::format("Cannot size fabric shared memory /dev/shm{} to {} bytes: {}", shm,
                                              sizeof(FabricRegion), std::strerror(err)));
            }
        }
    }
    void* map = mmap(nullptr, sizeof(FabricRegion), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        int err = errno;
        close(fd);
        throw FabricError(fmt::format("Cannot map fabric shared memory /dev/shm{}: {}", shm, std::strerror(err)));
    }
    std::unique_ptr<Fabric> fabric(new Fabric(name, fd, static_cast<FabricRegion*>(map)));
    if (mode == OpenMode::ReadOnly) {
        if (__atomic_load_n(&fabric->region_->magic, __ATOMIC_ACQUIRE) != kRegionMagic || fabric->region_->layout_version != kLayoutVersion)
            throw FabricError(fmt::format("Fabric '{}' was created by another SigmaTrace version (layout {})", name,
                                          fabric->region_->layout_version));
        return fabric;
    }

    struct Unlock {
        Fabric* f;
        ~Unlock() { f->unlock(); }
    } unlock_at_end{fabric.get()};
    FabricRegion& r = *fabric->region_;
    FabricConfig defaults;
    const FabricConfig& wanted = config ? *config : defaults;
    bool valid = __atomic_load_n(&r.magic, __ATOMIC_ACQUIRE) == kRegionMagic && r.layout_version == kLayoutVersion && r.region_size == sizeof(FabricRegion);
    if (!valid) {
        fabric->initialize(wanted);
    } else if (!fabric->has_live_members()) {
        if (mode == OpenMode::Launch) {
            fabric->initialize(wanted);
        } else {
            fabric->restart_clock_and_tables();
        }
    } else if (mode == OpenMode::Launch && config && r.config.digest != config_digest(*config)) {
        int user = 0;
        for (const auto& m : r.members)
            if (m.pid.load() != 0 && process_alive(m.pid.load(), m.start_time)) user = m.pid.load();
        throw FabricError(fmt::format(
            "Fabric '{}' is in use (pid {}) with another configuration: wait until its processes end, or run with "
            "another --name",
            name, user));
    }
    return fabric;
}

void Fabric::initialize(const FabricConfig& config) {
    // Zero the file without touching its pages (they stay sparse), then fill the header.
    if (ftruncate(fd_, 0) != 0 || ftruncate(fd_, sizeof(FabricRegion)) != 0)
        throw FabricError(fmt::format("Cannot reset fabric shared memory /dev/shm{}: {}", shm_name(name_),
                                      std::strerror(errno)));
    FabricRegion& r = *region_;
    r.layout_version = kLayoutVersion;
    r.region_size = sizeof(FabricRegion);
    std::snprintf(r.name, sizeof r.name, "%s", name_.c_str());
    r.qp_alloc_hint.store(2);
    store_config(r, config);
    r.start_ns = now_ns();
    for (auto& m : r.members) m.arena_fd.store(-1);
    // Publish: whoever sees the magic sees the initialized region (a release store rather than fence + plain
    // store, which ThreadSanitizer does not model).
    __atomic_store_n(&r.magic, kRegionMagic, __ATOMIC_RELEASE);
}

void Fabric::restart_clock_and_tables() {
    RegionConfig saved = region_->config;
    FabricConfig unused;
    initialize(unused);
    region_->config = saved;
}

bool Fabric::has_live_members() const {
    for (const auto& m : region_->members) {
        int pid = m.pid.load(std::memory_order_acquire);
        if (pid != 0 && process_alive(pid, m.start_time)) return true;
    }
    return false;
}

uint32_t Fabric::join(uint32_t node, int pid) {
    Exclusive lock(*this);
    return join_locked(node, pid);
}

std::vector<int> Fabric::live_member_pids() const {
    std::vector<int> pids;
    for (const auto& m : region_->members) {
        int pid = m.pid.load(std::memory_order_acquire);
        if (pid != 0 && process_alive(pid, m.start_time)) pids.push_back(pid);
    }
    return pids;
}

uint32_t Fabric::join_locked(uint32_t node, int pid) {
    if (pid == 0) pid = getpid();
    uint64_t start = process_start_time(pid);
    FabricRegion& r = *region_;
    for (uint32_t i = 0; i < kMaxMembers; ++i) {
        MemberSlot& m = r.members[i];
        if (m.pid.load() == pid && m.start_time == start) {
            m.node = node;
            return i;
        }
    }
    for (int pass = 0; pass < 2; ++pass) {
        for (uint32_t i = 0; i < kMaxMembers; ++i) {
            MemberSlot& m = r.members[i];
            int owner = m.pid.load();
            if (owner != 0 && (pass == 0 || process_alive(owner, m.start_time))) continue;
            if (owner != 0) {
                // A dead member: its QPs are gone with it.
                for (auto& q : r.qps)
                    if (q.qpn.load(std::memory_order_relaxed) != 0 && q.member == i) q.qpn.store(0);
            }
            m.generation.fetch_add(1);
            m.start_time = start;
            m.node = node;
            m.arena_fd.store(-1);
            m.arena_size = 0;
            m.pid.store(pid, std::memory_order_release);
            return i;
        }
    }
    throw FabricError(fmt::format("Fabric '{}' has no free member slot: {} processes are attached", name_,
                                  kMaxMembers));
}

void Fabric::leave(uint32_t slot) {
    lock_exclusive();
    MemberSlot& m = region_->members[slot];
    for (auto& q : region_->qps)
        if (q.qpn.load(std::memory_order_relaxed) != 0 && q.member == slot) q.qpn.store(0);
    m.arena_fd.store(-1);
    m.pid.store(0, std::memory_order_release);
    unlock();
}

bool Fabric::member_alive(uint32_t slot, uint32_t generation) const {
    const MemberSlot& m = region_->members[slot];
    int pid = m.pid.load(std::memory_order_acquire);
    return pid != 0 && m.generation.load() == generation && process_alive(pid, m.start_time);
}

void Fabric::collect_dead_members() {
    lock_exclusive();
    for (uint32_t i = 0; i < kMaxMembers; ++i) {
        MemberSlot& m = region_->members[i];
        int pid = m.pid.load();
        if (pid == 0 || process_alive(pid, m.start_time)) continue;
        for (auto& q : region_->qps)
            if (q.qpn.load(std::memory_order_relaxed) != 0 && q.member == i) q.qpn.store(0);
        m.pid.store(0);
    }
    unlock();
}

}  // namespace softfabric
