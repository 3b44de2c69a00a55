#include "relay/dispatch/budget.h"

#include <algorithm>

namespace relay::dispatch {

using namespace std::chrono_literals;

void Budget::ExpireWindowLocked(TimePoint now) const {
  while (!writes_.empty() && now - writes_.front() >= options_.window) writes_.pop_front();
  while (!hour_.empty() && now - hour_.front() >= std::chrono::hours(1)) hour_.pop_front();
}

std::optional<Budget::TimePoint> Budget::Acquire(int64_t installation, bool write) {
  std::lock_guard lock(mu_);
  return AcquireLocked(installation, write);
}

int64_t Budget::AcquireN(int64_t installation, bool write, int64_t n, TimePoint* retry_at) {
  std::lock_guard lock(mu_);
  int64_t granted = 0;
  for (; granted < n; ++granted) {
    if (auto wait = AcquireLocked(installation, write)) {
      if (granted == 0 && retry_at) *retry_at = *wait;
      break;
    }
  }
  return granted;
}

Budget::TimePoint Budget::paused_until() const {
  std::lock_guard lock(mu_);
  return paused_until_;
}

std::optional<Budget::TimePoint> Budget::AcquireLocked(int64_t installation, bool write) {
  TimePoint now = clock_->Now();
  if (now < paused_until_) return paused_until_;
  Primary& p = primary_[installation];
  int64_t now_unix = clock_->UnixMillis() / 1000;
  // Past the reset (a second late: GitHub's clock and ours differ by parts
  // of one) the count is unknown until an answer says it.
  if (p.remaining >= 0 && now_unix > p.reset_unix) p.remaining = -1;
  // Unknown: one call at a time until an answer tells what is left, so a
  // burst cannot overrun a limit not learnt yet.
  if (p.remaining < 0 && p.in_flight > 0) return now + std::chrono::milliseconds(20);
  // Calls in flight will each take one too.
  if (p.remaining >= 0 && p.remaining - p.in_flight <= 0) {
    return now + std::chrono::seconds(std::max<int64_t>(1, p.reset_unix - now_unix + 2));
  }
  if (write) {
    ExpireWindowLocked(now);
    if (static_cast<int64_t>(writes_.size()) + writes_in_flight_ >= options_.max_writes_per_minute) {
      // The oldest answered write leaves the window first; with none
      // answered yet, look again shortly.
      return writes_.empty() ? now + std::chrono::milliseconds(20) : writes_.front() + options_.window;
    }
    if (static_cast<int64_t>(hour_.size()) + writes_in_flight_ >= options_.max_writes_per_hour) {
      return hour_.empty() ? now + std::chrono::milliseconds(20) : hour_.front() + std::chrono::hours(1);
    }
    ++writes_in_flight_;
  }
  ++p.in_flight;
  return std::nullopt;
}

void Budget::Observe(int64_t installation, bool write, unsigned status,
                     const std::map<std::string, std::string>& headers, bool secondary) {
  // One lock for both: between the call leaving the in-flight count and its
  // answer's count being learnt, another thread would see a slot free that
  // the answer says is gone (a primary-limit breach, seen under load).
  std::lock_guard lock(mu_);
  ReleaseLocked(installation, write, 1, 0);
  LearnLocked(installation, status, headers, secondary);
}

void Budget::Release(int64_t installation, bool write, int64_t used, int64_t unused) {
  std::lock_guard lock(mu_);
  ReleaseLocked(installation, write, used, unused);
}

void Budget::Learn(int64_t installation, unsigned status, const std::map<std::string, std::string>& headers,
                   bool secondary) {
  std::lock_guard lock(mu_);
  LearnLocked(installation, status, headers, secondary);
}

void Budget::ReleaseLocked(int64_t installation, bool write, int64_t used, int64_t unused) {
  if (write) {
    writes_in_flight_ = std::max<int64_t>(0, writes_in_flight_ - used - unused);
    const TimePoint now = clock_->Now();
    const auto made = static_cast<size_t>(std::max<int64_t>(0, used));
    writes_.insert(writes_.end(), made, now);
    hour_.insert(hour_.end(), made, now);
  }
  Primary& p = primary_[installation];
  p.in_flight = std::max<int64_t>(0, p.in_flight - used - unused);
}

void Budget::LearnLocked(int64_t installation, unsigned status, const std::map<std::string, std::string>& headers,
                         bool secondary) {
  Primary& p = primary_[installation];
  auto header = [&](const char* name) -> std::optional<int64_t> {
    auto it = headers.find(name);
    if (it == headers.end()) return std::nullopt;
    try {
      return std::stoll(it->second);
    } catch (...) {
      return std::nullopt;
    }
  };
  auto remaining = header("x-ratelimit-remaining");
  auto reset = header("x-ratelimit-reset");
  if (remaining && reset) {
    // Answers of one window arrive out of order across connections: within
    // a window the count only falls, so an older, higher one is ignored.
    if (*reset > p.reset_unix || p.remaining < 0) {
      p.remaining = *remaining;
      p.reset_unix = *reset;
    } else if (*reset == p.reset_unix) {
      p.remaining = std::min(p.remaining, *remaining);
    }
  }
  auto retry_after = header("retry-after");
  if (secondary || status == 429) {
    // GitHub: wait Retry-After, or at least a minute when it says nothing.
    paused_until_ = std::max(paused_until_, clock_->Now() + (retry_after ? std::chrono::milliseconds(*retry_after * 1000)
                                                                          : options_.secondary_pause));
  }
}

int64_t Budget::Remaining(int64_t installation) const {
  std::lock_guard lock(mu_);
  auto it = primary_.find(installation);
  return it == primary_.end() ? -1 : it->second.remaining;
}

int64_t Budget::WritesLeftInWindow() const {
  std::lock_guard lock(mu_);
  ExpireWindowLocked(clock_->Now());
  return std::min(options_.max_writes_per_minute - static_cast<int64_t>(writes_.size()),
                  options_.max_writes_per_hour - static_cast<int64_t>(hour_.size())) -
         writes_in_flight_;
}

}  // namespace relay::dispatch
