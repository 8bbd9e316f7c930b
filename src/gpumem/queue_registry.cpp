#include "gpumem/queue_registry.h"

#include <algorithm>

namespace sigmatrace::gpumem {
namespace {

template <typename T, typename Pred> std::optional<T> take_if(std::vector<T>& v, Pred pred) {
    auto it = std::find_if(v.begin(), v.end(), pred);
    if (it == v.end()) return std::nullopt;
    T found = *it;
    v.erase(it);
    return found;
}
template <typename T, typename Pred> std::optional<T> find_if_copy(const std::vector<T>& v, Pred pred) {
    auto it = std::find_if(v.begin(), v.end(), pred);
    if (it == v.end()) return std::nullopt;
    return *it;
}
bool overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) { return a < b + blen && b < a + alen; }

}  // namespace

const char* mem_type_name(MemType m) {
    switch (m) {
    case MemType::Host: return "host";
    case MemType::Device: return "gpu";
    case MemType::HostMapped: return "host-mapped";
    case MemType::Unknown: return "unknown";
    }
    return "?";
}

void QueueRegistry::add_umem(const UmemInfo& u) {
    std::lock_guard lk(mu_);
    // A handle value can come back after a dereg; ids are unique per context while registered.
    std::erase_if(umems_, [&](const UmemInfo& x) { return x.handle == u.handle || (x.ctx == u.ctx && x.id == u.id); });
    umems_.push_back(u);
}

std::optional<UmemInfo> QueueRegistry::remove_umem(uint64_t handle) {
    std::lock_guard lk(mu_);
    return take_if(umems_, [&](const UmemInfo& x) { return x.handle == handle; });
}

std::optional<UmemInfo> QueueRegistry::find_umem(uint64_t ctx, uint32_t id) const {
    std::lock_guard lk(mu_);
    return find_if_copy(umems_, [&](const UmemInfo& x) { return x.ctx == ctx && x.id == id; });
}

void QueueRegistry::add_uar(const UarInfo& u) {
    std::lock_guard lk(mu_);
    std::erase_if(uars_, [&](const UarInfo& x) { return x.handle == u.handle; });
    uars_.push_back(u);
}

std::optional<UarInfo> QueueRegistry::remove_uar(uint64_t handle) {
    std::lock_guard lk(mu_);
    return take_if(uars_, [&](const UarInfo& x) { return x.handle == handle; });
}

std::optional<UarInfo> QueueRegistry::find_uar_page(uint64_t ctx, uint32_t page_id) const {
    std::lock_guard lk(mu_);
    return find_if_copy(uars_, [&](const UarInfo& x) { return x.ctx == ctx && x.page_id == page_id; });
}

int QueueRegistry::mark_uar_gpu_mapped(uint64_t addr, uint64_t len) {
    std::lock_guard lk(mu_);
    gpu_io_.push_back(Range{addr, len});
    // The watcher's queue list carries each queue's poster: take it again.
    generation_.fetch_add(1, std::memory_order_acq_rel);
    int n = 0;
    for (auto& u : uars_) {
        // A UAR page is 4 KiB; the register sits inside it.
        const uint64_t page = u.base_addr ? u.base_addr : u.reg_addr;
        if (overlaps(page, 4096, addr, len) || overlaps(u.reg_addr, 8, addr, len)) {
            u.gpu_mapped = true;
            ++n;
        }
    }
    return n;
}

void QueueRegistry::add_send_queue(const SendQueue& q) {
    std::lock_guard lk(mu_);
    std::erase_if(sqs_, [&](const SendQueue& x) { return x.key == q.key; });
    sqs_.push_back(q);
    generation_.fetch_add(1, std::memory_order_acq_rel);
}

void QueueRegistry::add_completion_queue(const CompletionQueue& q) {
    std::lock_guard lk(mu_);
    std::erase_if(cqs_, [&](const CompletionQueue& x) { return x.key == q.key; });
    cqs_.push_back(q);
    generation_.fetch_add(1, std::memory_order_acq_rel);
}

std::optional<SendQueue> QueueRegistry::remove_send_queue(uint64_t key) {
    std::lock_guard lk(mu_);
    auto r = take_if(sqs_, [&](const SendQueue& x) { return x.key == key; });
    if (r) generation_.fetch_add(1, std::memory_order_acq_rel);
    return r;
}

std::optional<CompletionQueue> QueueRegistry::remove_completion_queue(uint64_t key) {
    std::lock_guard lk(mu_);
    auto r = take_if(cqs_, [&](const CompletionQueue& x) { return x.key == key; });
    if (r) generation_.fetch_add(1, std::memory_order_acq_rel);
    return r;
}

std::optional<SendQueue> QueueRegistry::find_send_queue(uint64_t key) const {
    std::lock_guard lk(mu_);
    return find_if_copy(sqs_, [&](const SendQueue& x) { return x.key == key; });
}

std::optional<SendQueue> QueueRegistry::find_send_queue_by_qpn(uint64_t ctx, uint32_t qpn) const {
    std::lock_guard lk(mu_);
    return find_if_copy(sqs_, [&](const SendQueue& x) { return x.ctx == ctx && x.qpn == qpn; });
}

std::optional<CompletionQueue> QueueRegistry::find_completion_queue_by_cqn(uint64_t ctx, uint32_t cqn) const {
    std::lock_guard lk(mu_);
    return find_if_copy(cqs_, [&](const CompletionQueue& x) { return x.ctx == ctx && x.cqn == cqn; });
}

std::optional<CompletionQueue> QueueRegistry::find_completion_queue(uint64_t key) const {
    std::lock_guard lk(mu_);
    return find_if_copy(cqs_, [&](const CompletionQueue& x) { return x.key == key; });
}

std::vector<uint64_t> QueueRegistry::queues_in_range(uint64_t ctx, uint64_t addr, uint64_t len) const {
    std::lock_guard lk(mu_);
    std::vector<uint64_t> keys;
    for (const auto& q : sqs_)
        if (q.ctx == ctx && (overlaps(q.ring_addr, uint64_t{q.wqebbs} * 64, addr, len) ||
                             (q.dbr_addr && overlaps(q.dbr_addr, 4, addr, len))))
            keys.push_back(q.key);
    for (const auto& q : cqs_)
        if (q.ctx == ctx && (overlaps(q.ring_addr, uint64_t{q.ncqe} * q.cqe_size, addr, len) ||
                             (q.dbr_addr && overlaps(q.dbr_addr, 4, addr, len))))
            keys.push_back(q.key);
    return keys;
}

records::Poster QueueRegistry::poster_locked(const SendQueue& q) const {
    auto gpu_reaches = [](MemType m) { return m == MemType::Device || m == MemType::HostMapped; };
    if (gpu_reaches(q.ring_mem) || (q.dbr_addr != 0 && gpu_reaches(q.dbr_mem))) return records::Poster::gpu;
    uint64_t doorbell = q.doorbell_addr;
    if (q.source == QueueSource::Devx)
        for (const auto& u : uars_)
            if (u.ctx == q.ctx && u.page_id == q.uar_page) {
                if (u.gpu_mapped) return records::Poster::gpu;
                doorbell = u.reg_addr;
            }
    if (doorbell != 0)
        for (const Range& r : gpu_io_)
            if (overlaps(doorbell, 8, r.addr, r.len)) return records::Poster::gpu;
    return records::Poster::cpu_direct;
}

records::Poster QueueRegistry::poster_of(const SendQueue& q) const {
    std::lock_guard lk(mu_);
    return poster_locked(q);
}

uint64_t QueueRegistry::snapshot(std::vector<SendQueue>& sqs, std::vector<CompletionQueue>& cqs) const {
    std::lock_guard lk(mu_);
    sqs = sqs_;
    for (SendQueue& q : sqs) q.poster = poster_locked(q);
    cqs = cqs_;
    return generation_.load(std::memory_order_acquire);
}

size_t QueueRegistry::send_queue_count() const {
    std::lock_guard lk(mu_);
    return sqs_.size();
}

void QueueRegistry::clear() {
    std::lock_guard lk(mu_);
    umems_.clear();
    uars_.clear();
    gpu_io_.clear();
    sqs_.clear();
    cqs_.clear();
    generation_.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace sigmatrace::gpumem
