// Turns a fuzzer's bytes into the values a fuzz target needs (choices,
// integers, strings), consuming them from the front. Once the bytes run out
// every value is zero or empty, so any input is a complete, finite run. A
// small stand-in for clang's FuzzedDataProvider, so that the targets also
// build with GCC (fuzz/BUILD).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace gradsync {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_ - offset_; }

  template <typename T>
  T Integral() {
    static_assert(std::is_integral_v<T>);
    std::make_unsigned_t<T> value = 0;
    const size_t n = std::min(sizeof(T), remaining());
    std::memcpy(&value, data_ + offset_, n);
    offset_ += n;
    return static_cast<T>(value);
  }

  bool Bool() { return Integral<uint8_t>() & 1; }

  // Uniform enough in [low, high] (high - low < 2^32).
  int64_t InRange(int64_t low, int64_t high) {
    const uint64_t span = static_cast<uint64_t>(high - low) + 1;
    return low + static_cast<int64_t>(Integral<uint32_t>() % span);
  }

  // A string of up to `max_size` bytes: a length, then that many bytes (as
  // many as are left).
  std::string String(size_t max_size) {
    const size_t wanted = static_cast<size_t>(InRange(0, max_size));
    const size_t n = std::min(wanted, remaining());
    std::string out(reinterpret_cast<const char*>(data_ + offset_), n);
    offset_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
};

}  // namespace gradsync
