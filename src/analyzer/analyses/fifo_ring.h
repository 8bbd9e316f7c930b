// A FIFO in a vector whose size is a power of two, grown (doubled) when full and then reused: what a queue of
// posted work requests, or of outstanding sends, is per operation, without std::deque's block bookkeeping on
// every push, pop and index. Positions wrap with a mask. Removing from the middle (a receive completed out of
// order) shifts the elements after it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace sigmatrace::analyzer {

template <typename T> class FifoRing {
public:
    FifoRing() = default;
    FifoRing(const FifoRing&) = default;
    FifoRing& operator=(const FifoRing&) = default;
    // A moved-from ring is empty, its capacity with its buffer.
    FifoRing(FifoRing&& o) noexcept
        : buf_(std::move(o.buf_)), mask_(std::exchange(o.mask_, SIZE_MAX)), head_(std::exchange(o.head_, 0)),
          size_(std::exchange(o.size_, 0)) {}
    FifoRing& operator=(FifoRing&& o) noexcept {
        if (this != &o) {
            buf_ = std::move(o.buf_);
            o.buf_.clear();
            mask_ = std::exchange(o.mask_, SIZE_MAX);
            head_ = std::exchange(o.head_, 0);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }

    std::size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }

    // The i-th oldest (0: the front).
    T& operator[](std::size_t i) { return buf_[(head_ + i) & mask()]; }
    const T& operator[](std::size_t i) const { return buf_[(head_ + i) & mask()]; }
    T& front() { return buf_[head_]; }
    const T& front() const { return buf_[head_]; }

    void push_back(const T& v) {
        if (size_ == capacity()) grow();
        buf_[(head_ + size_) & mask()] = v;
        ++size_;
    }
    // A new newest element, to be filled in place (its old contents are a previous element's).
    T& emplace_back() {
        if (size_ == capacity()) grow();
        return buf_[(head_ + size_++) & mask()];
    }
    void pop_front() { drop_front(1); }
    // Removes the n oldest (n <= size()).
    void drop_front(std::size_t n) {
        head_ = (head_ + n) & mask();
        size_ -= n;
    }
    // Removes the i-th oldest, keeping the order of the rest.
    void erase(std::size_t i) {
        for (std::size_t k = i; k + 1 < size_; ++k) (*this)[k] = std::move((*this)[k + 1]);
        --size_;
    }
    void clear() {
        head_ = 0;
        size_ = 0;
    }

    // Oldest first.
    template <typename F> void for_each(F&& f) const {
        for (std::size_t i = 0; i < size_; ++i) f((*this)[i]);
    }

    // In bytes (share_codec.cpp): the elements, oldest first.
    template <class Archive> void save(Archive& ar) const {
        ar(static_cast<uint64_t>(size_));
        for (std::size_t i = 0; i < size_; ++i) ar((*this)[i]);
    }
    template <class Archive> void load(Archive& ar) {
        uint64_t n = 0;
        ar(n);
        clear();
        for (uint64_t i = 0; i < n; ++i) {
            T v{};
            ar(v);
            push_back(v);
        }
    }

private:
    // Kept beside the buffer: a vector's size is a division by sizeof(T), on every access.
    std::size_t mask() const { return mask_; }
    std::size_t capacity() const { return mask_ + 1; }
    void grow() {
        std::vector<T> grown(std::max<std::size_t>(8, buf_.size() * 2));
        for (std::size_t i = 0; i < size_; ++i) grown[i] = std::move((*this)[i]);
        buf_ = std::move(grown);
        mask_ = buf_.size() - 1;
        head_ = 0;
    }

    std::vector<T> buf_;
    std::size_t mask_ = SIZE_MAX;   // capacity - 1: 0 capacity before the first push
    std::size_t head_ = 0, size_ = 0;
};

}  // namespace sigmatrace::analyzer
