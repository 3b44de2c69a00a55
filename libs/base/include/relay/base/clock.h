// Time at the I/O edge: code that needs "now" takes a Clock so tests can
// drive time by hand (FakeClock) instead of sleeping.
#pragma once

#include <atomic>
#include <chrono>

namespace relay {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time, for deadlines and windows.
  virtual std::chrono::steady_clock::time_point Now() const = 0;
  // Wall-clock time in milliseconds since the Unix epoch, for records.
  virtual int64_t UnixMillis() const = 0;
};

class SystemClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::now();
  }
  int64_t UnixMillis() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

// Another clock with its wall clock moved by `offset` (its steady time
// unchanged): a host whose clock is ahead or behind, in tests. `base` must
// outlive it. Thread-safe if `base` is.
class OffsetClock final : public Clock {
 public:
  OffsetClock(const Clock* base, std::chrono::milliseconds offset) : base_(base), offset_(offset) {}
  std::chrono::steady_clock::time_point Now() const override { return base_->Now(); }
  int64_t UnixMillis() const override { return base_->UnixMillis() + offset_.count(); }

 private:
  const Clock* base_;
  std::chrono::milliseconds offset_;
};

// Thread-safe; starts at an arbitrary fixed point and moves only by Advance.
class FakeClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(nanos_.load()));
  }
  int64_t UnixMillis() const override { return 1'700'000'000'000 + nanos_.load() / 1'000'000; }
  void Advance(std::chrono::nanoseconds d) { nanos_ += d.count(); }

 private:
  std::atomic<int64_t> nanos_{1'000'000'000};
};

}  // namespace relay
