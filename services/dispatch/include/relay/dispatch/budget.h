// One GitHub API budget for the whole suite, honoured before every write:
//   - a ceiling on content-creating requests per window (GitHub's secondary
//     limit: 80 a minute by default). A write counts from when it is granted
//     until a window after its answer: GitHub counts it on arrival, which
//     is somewhere in between, so no window GitHub sees can hold more;
//   - no more than max_writes_per_hour (GitHub: 500) over a sliding hour;
//   - each installation's primary limit, from the X-RateLimit-Remaining and
//     X-RateLimit-Reset of its answers (counting calls still in flight);
//   - a pause after a secondary-limit answer (403/429 with Retry-After, or
//     one minute when GitHub gives none).
// The write ceilings and the pause hold for the whole App, or for each
// installation apart (BudgetScope); the primary limit is always each
// installation's. Thread-safe. Time from the Clock, so tests drive it by hand.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "relay/base/clock.h"

namespace relay::dispatch {

// What GitHub's secondary limits (the write ceilings, and the pause after
// a secondary-limit answer) are counted over (github.budget_scope).
//   kApp: one count for every installation of the App, as GitHub's
//     documentation allows us to assume (it does not say they are counted
//     per installation token); the default.
//   kInstallation: one count per installation: a pause one installation
//     met pauses only that installation.
enum class BudgetScope { kApp, kInstallation };

struct BudgetOptions {
  // GitHub's content-creation ceiling (github.max_writes_per_minute), per
  // `window`: the minute it counts in (github.write_window), 60 s outside
  // tests that must see it work without waiting minutes.
  int64_t max_writes_per_minute = 80;
  std::chrono::milliseconds window{60'000};
  // GitHub's second content-creation limit: 500 an hour.
  int64_t max_writes_per_hour = 500;
  // The pause after a secondary-limit answer without Retry-After.
  std::chrono::milliseconds secondary_pause{60'000};
  BudgetScope scope = BudgetScope::kApp;
};

// "app" or "installation"; InvalidArgument naming both otherwise.
absl::StatusOr<BudgetScope> ParseBudgetScope(std::string_view name);
std::string_view BudgetScopeName(BudgetScope scope);

// What the executor asks before every GitHub call and tells after it. The
// service's is SharedBudget (shared_budget.h: one budget for every
// dispatch instance); Budget below is the rules themselves, for one
// process.
class CallBudget {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~CallBudget() = default;
  // Takes one call of `installation` (and one content-creating write when
  // `write`): nullopt when granted (it is counted), else when to ask again.
  virtual std::optional<TimePoint> Acquire(int64_t installation, bool write) = 0;
  // The call granted by Acquire (with the same `write`) ended with these
  // answer headers (lower-case names; status 0 when there was no answer).
  // `secondary`: the answer was a secondary rate limit (IsSecondaryLimit).
  virtual void Observe(int64_t installation, bool write, unsigned status,
                       const std::map<std::string, std::string>& headers, bool secondary) = 0;
  // For /metrics: primary calls left for an installation (-1 unknown) and
  // writes left in the current window (per installation: the fewest any
  // installation seen has left).
  virtual int64_t Remaining(int64_t installation) const = 0;
  virtual int64_t WritesLeftInWindow() const = 0;
};

class Budget final : public CallBudget {
 public:
  Budget(BudgetOptions options, const Clock* clock) : options_(options), clock_(clock) {}

  std::optional<TimePoint> Acquire(int64_t installation, bool write) override;
  void Observe(int64_t installation, bool write, unsigned status, const std::map<std::string, std::string>& headers,
               bool secondary) override;
  int64_t Remaining(int64_t installation) const override;
  int64_t WritesLeftInWindow() const override;

  // The parts SharedBudget's ledger drives: up to `n` calls granted at once
  // (each as Acquire would), the number granted and, when 0, when to ask
  // again in *retry_at; the end of granted calls, `used` made (their writes
  // count in the windows from now) and `unused` never made (they leave no
  // trace); and what an answer said of the limits.
  int64_t AcquireN(int64_t installation, bool write, int64_t n, TimePoint* retry_at);
  void Release(int64_t installation, bool write, int64_t used, int64_t unused);
  void Learn(int64_t installation, unsigned status, const std::map<std::string, std::string>& headers,
             bool secondary);
  // The end of the secondary-limit pause that holds `installation`.
  TimePoint paused_until(int64_t installation) const;

 private:
  struct Primary {
    int64_t remaining = -1;      // from the last answer; -1: unknown yet
    int64_t reset_unix = 0;
    int64_t in_flight = 0;
  };
  // The write ceilings and the pause of one scope: the App's (key 0) or
  // one installation's.
  struct Ceilings {
    std::deque<TimePoint> writes;  // answered writes, by answer time, in the current window
    int64_t in_flight = 0;         // writes granted, not answered yet
    std::deque<TimePoint> hour;    // answered writes of the last hour
    TimePoint paused_until{};
  };
  int64_t ScopeKey(int64_t installation) const {
    return options_.scope == BudgetScope::kApp ? 0 : installation;
  }
  void ExpireWindowLocked(Ceilings& c, TimePoint now) const;
  std::optional<TimePoint> AcquireLocked(int64_t installation, bool write);
  void ReleaseLocked(int64_t installation, bool write, int64_t used, int64_t unused);
  void LearnLocked(int64_t installation, unsigned status, const std::map<std::string, std::string>& headers,
                   bool secondary);

  BudgetOptions options_;
  const Clock* clock_;
  mutable std::mutex mu_;
  mutable std::map<int64_t, Ceilings> ceilings_;  // by ScopeKey
  std::map<int64_t, Primary> primary_;
};

}  // namespace relay::dispatch
