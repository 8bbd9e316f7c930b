// The process-wide tables of what set-up calls registered (UMEMs, UARs) and the queues learned from them. Cold
// path only (set-up and tear-down calls): one mutex guards everything; the watcher copies the queue lists when
// the generation counter moves, so its sweeps never take this lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "gpumem/queue_types.h"

namespace sigmatrace::gpumem {

class QueueRegistry {
public:
    // ---- memory and doorbell pages
    void add_umem(const UmemInfo& u);
    std::optional<UmemInfo> remove_umem(uint64_t handle);
    std::optional<UmemInfo> find_umem(uint64_t ctx, uint32_t id) const;
    void add_uar(const UarInfo& u);
    std::optional<UarInfo> remove_uar(uint64_t handle);
    std::optional<UarInfo> find_uar_page(uint64_t ctx, uint32_t page_id) const;
    // Notes [addr, addr + len) as I/O memory mapped into a GPU (cuMemHostRegister IoMemory, hipHostRegister ...)
    // and marks every UAR whose register page overlaps it; returns how many UARs.
    int mark_uar_gpu_mapped(uint64_t addr, uint64_t len);
    // Who posts to `q` (docs/gpumem.md, "Who posted"): a GPU when its ring or doorbell record lives in memory a GPU
    // reaches (GPU memory, host memory mapped into a GPU) or its doorbell register was mapped into a GPU; else a
    // CPU thread writing WQEs itself.
    records::Poster poster_of(const SendQueue& q) const;

    // ---- queues
    void add_send_queue(const SendQueue& q);
    void add_completion_queue(const CompletionQueue& q);
    std::optional<SendQueue> remove_send_queue(uint64_t key);
    std::optional<CompletionQueue> remove_completion_queue(uint64_t key);
    std::optional<SendQueue> find_send_queue(uint64_t key) const;
    std::optional<SendQueue> find_send_queue_by_qpn(uint64_t ctx, uint32_t qpn) const;
    std::optional<CompletionQueue> find_completion_queue_by_cqn(uint64_t ctx, uint32_t cqn) const;
    std::optional<CompletionQueue> find_completion_queue(uint64_t key) const;
    // Queues that live in [addr, addr + len) (ring or doorbell record): used when their memory is deregistered.
    std::vector<uint64_t> queues_in_range(uint64_t ctx, uint64_t addr, uint64_t len) const;

    // Bumped on every queue change.
    uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
    // Copies the queue lists and returns their generation.
    uint64_t snapshot(std::vector<SendQueue>& sqs, std::vector<CompletionQueue>& cqs) const;

    size_t send_queue_count() const;
    // Drops everything (a forked child: the parent's queues are not its own).
    void clear();

    // fork() protection: hold the lock across fork so the child never inherits it locked by a vanished thread.
    void lock_for_fork() { mu_.lock(); }
    void unlock_after_fork() { mu_.unlock(); }

private:
    records::Poster poster_locked(const SendQueue& q) const;

    mutable std::mutex mu_;
    std::vector<UmemInfo> umems_;
    std::vector<UarInfo> uars_;
    struct Range {
        uint64_t addr, len;
    };
    std::vector<Range> gpu_io_;  // I/O ranges mapped into a GPU (doorbell pages)
    std::vector<SendQueue> sqs_;
    std::vector<CompletionQueue> cqs_;
    std::atomic<uint64_t> generation_{0};
};

}  // namespace sigmatrace::gpumem
