#include "relay/dispatch/budget.h"

#include <algorithm>

namespace relay::dispatch {

using namespace std::chrono_literals;

absl::StatusOr<BudgetScope> ParseBudgetScope(std::string_view name) {
  if (name == "app") return BudgetScope::kApp;
  if (name == "installation") return BudgetScope::kInstallation;
  return absl::InvalidArgumentError("'" + std::string(name) + "' is not a budget scope (app, installation)");
}

std::string_view BudgetScopeName(BudgetScope scope) {
  return scope == BudgetScope::kApp ? "app" : "installation";
}

void Budget::ExpireWindowLocked(Ceilings& c, TimePoint now) const {
  while (!c.writes.empty() && now - c.writes.front() >= options_.window) c.writes.pop_front();
  while (!c.hour.empty() && now - c.hour.front() >= std::chrono::hours(1)) c.hour.pop_front();
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

Budget::TimePoint Budget::paused_until(int64_t installation) const {
  std::lock_guard lock(mu_);
  auto it = ceilings_.find(ScopeKey(installation));
  return it == ceilings_.end() ? TimePoint{} : it->second.paused_until;
}

std::optional<Budget::TimePoint> Budget::AcquireLocked(int64_t installation, bool write) {
  TimePoint now = clock_->Now();
  Ceilings& c = ceilings_[ScopeKey(installation)];
  if (now < c.paused_until) return c.paused_until;
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
    ExpireWindowLocked(c, now);
    if (static_cast<int64_t>(c.writes.size()) + c.in_flight >= options_.max_writes_per_minute) {
      // The oldest answered write leaves the window first; with none
      // answered yet, look again shortly.
      return c.writes.empty() ? now + std::chrono::milliseconds(20) : c.writes.front() + options_.window;
    }
    if (static_cast<int64_t>(c.hour.size()) + c.in_flight >= options_.max_writes_per_hour) {
      return c.hour.empty() ? now + std::chrono::milliseconds(20) : c.hour.front() + std::chrono::hours(1);
    }
    ++c.in_flight;
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
    Ceilings& c = ceilings_[ScopeKey(installation)];
    c.in_flight = std::max<int64_t>(0, c.in_flight - used - unused);
    const TimePoint now = clock_->Now();
    const auto made = static_cast<size_t>(std::max<int64_t>(0, used));
    c.writes.insert(c.writes.end(), made, now);
    c.hour.insert(c.hour.end(), made, now);
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
    // Everyone the limit counts pauses: the App, or this installation.
    TimePoint& until = ceilings_[ScopeKey(installation)].paused_until;
    until = std::max(until, clock_->Now() + (retry_after ? std::chrono::milliseconds(*retry_after * 1000)
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
  const TimePoint now = clock_->Now();
  int64_t fewest = std::min(options_.max_writes_per_minute, options_.max_writes_per_hour);
  for (auto& [key, c] : ceilings_) {
    ExpireWindowLocked(c, now);
    fewest = std::min(fewest, std::min(options_.max_writes_per_minute - static_cast<int64_t>(c.writes.size()),
                                       options_.max_writes_per_hour - static_cast<int64_t>(c.hour.size())) -
                                  c.in_flight);
  }
  return fewest;
}

}  // namespace relay::dispatch
