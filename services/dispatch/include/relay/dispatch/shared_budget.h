// One GitHub budget for every dispatch instance, whatever their number.
//
// GitHub's limits are the App's (per installation, and the secondary limits
// for content-creating requests), not a process's: N instances each with
// its own Budget would allow N times the ceilings, and each would learn a
// Retry-After alone. So every grant is decided on one log instead: the
// single-partition topic dispatch.budget, stamped with the broker's clock
// (LogAppendTime). An instance that needs calls appends a claim; every
// instance follows the topic from its start (kept two hours, the hourly
// ceiling's look-back) and applies each record, in log order, to the same
// rules (Budget, driven by the records' log time): a claim gets what the
// rules allow at its log time given every earlier record. All instances
// compute the same grants without asking each other; only the claimer
// acts on its own.
//
//   claim(installation, write, n)  -> granted g (0..n), decided identically everywhere
//   release(claim, used)           -> the claim's calls end: `used` of them were made
//                                     (their writes count in the windows from here),
//                                     the rest never were; with the primary limit's
//                                     remaining/reset its answers last said
//   observation(pause)             -> a secondary limit: everyone it counts (the App,
//                                     or its installation: BudgetScope) pauses, at
//                                     once, not at the next release
//
// A granted call not made within `lease` is given back. An instance that
// vanishes (SIGKILL) never releases: its claims count as made until `hold`
// after them (lease + the longest call + a margin), then leave the books.
// A grant read back later than half a lease after its claim was sent is
// given back unused rather than used late.
//
// One clock: every time compared is on the broker's (the records' log
// times; Start refuses a topic whose timestamps are not LogAppendTime, as
// CreateTime would be each writer's own clock). "Now" on it is estimated
// from this instance's steady clock and its own records' log times
// (BrokerClock); the host's wall clock is never read, so a host ahead of
// or behind the broker gets and keeps its share, and pauses end for it
// when they end on the broker. Only intervals this instance measures alone
// (a lease, a claim's round trip) are steady-clock intervals. Why broker
// time and not steady intervals alone: a pause or a denial is a point in
// log time, and waiting for it locally needs how long ago, on the broker,
// that was. The late-grant check needs no estimate: a claim is stamped
// after it was sent, so its grant is at most (read - sent) old.
//
// The cost is a Kafka round trip (append, then read back) per claim; claims
// are sized to the callers waiting (up to max_claim), or to max_claim while
// the ceilings are far (PlentifulLocked), so a busy instance amortises it
// over many calls.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "relay/base/clock.h"
#include "relay/dispatch/budget.h"
#include "relay/kafka/admin.h"
#include "relay/kafka/follower.h"
#include "relay/kafka/producer.h"
#include "relay/v1/dispatch.pb.h"

namespace relay::dispatch {

// A Clock set from log records (the ledger's time): monotonic, never
// behind the latest record applied.
class LogClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::time_point(std::chrono::milliseconds(ms_.load()));
  }
  int64_t UnixMillis() const override { return ms_.load(); }
  void AdvanceTo(int64_t ms) {
    if (ms > ms_.load()) ms_ = ms;
  }

 private:
  std::atomic<int64_t> ms_{0};
};

// "Now" on the broker's clock, from the local steady clock. A record read
// at steady time `read` got its log time when it was appended, at or before
// `read`: so the broker's now >= log time + (steady now - read), a lower
// bound, as close as the record was fresh when read. This instance's own
// records are (it sent them moments before), so each one read back sets
// the bound afresh (the two clocks' drift never adds up past the last
// one); others' records only raise it. Until an own record is back, the
// bound may be far behind (a quiet log read from its start): anchored().
// Not thread-safe.
class BrokerClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // A record with log time `log_ms` read at `read`; `own`: this instance
  // sent it (and knows when).
  void Saw(int64_t log_ms, TimePoint read, bool own);
  bool anchored() const { return anchored_; }
  // The earliest the broker's clock can read at steady time `now` (ms).
  int64_t EarliestMs(TimePoint now) const;

 private:
  bool anchored_ = false;
  int64_t offset_ms_ = 0;  // broker ms - steady ms, at least (once anything was seen)
  bool seen_ = false;
};

// The rules applied to the budget log: pure, deterministic in the records
// and their log times. Not thread-safe.
class BudgetLedger {
 public:
  BudgetLedger(BudgetOptions options, std::chrono::milliseconds hold)
      : hold_(hold), rules_(options, &clock_) {}

  struct Grant {
    std::string instance;
    int64_t seq = 0;
    int64_t installation = 0;
    bool write = false;
    int64_t granted = 0;
    int64_t claim_ms = 0;     // the claim's log time
    int64_t retry_at_ms = 0;  // granted 0: when a claim could be granted (log time)
  };
  // Applies one record at its log time; a claim's grant.
  std::optional<Grant> Apply(const v1::BudgetRecord& record, int64_t log_ms);

  int64_t now_ms() const { return clock_.UnixMillis(); }
  // The end of the pause that holds `installation` (its scope's).
  int64_t paused_until_ms(int64_t installation) const;
  int64_t Remaining(int64_t installation) const { return rules_.Remaining(installation); }
  int64_t WritesLeft() const { return rules_.WritesLeftInWindow(); }
  size_t open_claims() const { return claims_.size(); }

 private:
  struct Claim {
    int64_t installation = 0;
    bool write = false;
    int64_t granted = 0;
    int64_t at_ms = 0;
  };
  std::chrono::milliseconds hold_;
  LogClock clock_;
  Budget rules_;
  std::map<std::pair<std::string, int64_t>, Claim> claims_;  // (instance, seq) -> granted, not released
};

struct SharedBudgetOptions {
  std::string bootstrap;
  std::string topic = "dispatch.budget";
  BudgetOptions budget;
  std::chrono::milliseconds lease{2000};
  // How long a claim nobody released counts (an instance that vanished):
  // at least lease + the longest call (github.request_timeout) + a margin.
  std::chrono::milliseconds hold{45'000};
  int max_claim = 16;
  std::string instance;  // empty: a random id
};

class SharedBudget final : public CallBudget {
 public:
  // Checks through `admin` that the topic's records carry the broker's
  // clock (LogAppendTime; FailedPrecondition with the reason otherwise),
  // then starts following the budget log (from its start) and sends a
  // probe. Acquire grants nothing until the log is read to its end and an
  // own record (the probe) is back. Only steady time is read from `clock`.
  static absl::StatusOr<std::unique_ptr<SharedBudget>> Start(SharedBudgetOptions options, kafka::Producer* producer,
                                                            const kafka::FollowerFactory& followers,
                                                            kafka::Admin& admin, const Clock* clock,
                                                            prometheus::Registry* metrics);
  ~SharedBudget() override;

  // Grants from the local leases; waits up to ~100 ms for a claim's grant,
  // then tells when to ask again. Any thread.
  std::optional<TimePoint> Acquire(int64_t installation, bool write) override;
  void Observe(int64_t installation, bool write, unsigned status, const std::map<std::string, std::string>& headers,
               bool secondary) override;
  int64_t Remaining(int64_t installation) const override;
  int64_t WritesLeftInWindow() const override;

  // OK once the log is read to its end and followed, and the broker's
  // clock is known (an own record read back) (for /readyz).
  absl::Status Health() const;
  // Gives back every lease whose calls ended (call once no call is in
  // progress: on drain, after the scheduler stopped).
  void Close();
  const std::string& instance() const { return options_.instance; }

 private:
  using Key = std::pair<int64_t, bool>;  // installation, write
  struct Lease {
    int64_t seq = 0;
    int64_t granted = 0, taken = 0, answered = 0;
    std::chrono::steady_clock::time_point expires;
    int64_t remaining = -1, reset_unix = 0;  // the last answer's primary limit
  };

  SharedBudget(SharedBudgetOptions options, kafka::Producer* producer, const Clock* clock,
               prometheus::Registry* metrics);
  void OnRecord(const kafka::ConsumedRecord& record);
  void Tick();
  void MaybeClaimLocked(const Key& key);
  // The windows and the primary limit hold kAheadFactor x max_claim calls
  // or more: claims ask for max_claim, not only for the callers waiting.
  static constexpr int64_t kAheadFactor = 8;
  bool PlentifulLocked(const Key& key) const;
  void CloseExpiredLocked();
  void ReleaseLocked(const Key& key, const Lease& lease);
  void Send(v1::BudgetRecord record);
  void ProbeLocked();
  // The earliest the broker's clock can read now (ms): the ledger's latest
  // log time at least.
  int64_t BrokerNowLocked() const;
  bool ReadyLocked() const { return follower_ && follower_->CaughtUp() && broker_.anchored(); }

  SharedBudgetOptions options_;
  kafka::Producer* producer_;
  const Clock* clock_;
  prometheus::Family<prometheus::Counter>& claims_;
  prometheus::Counter& given_back_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  BudgetLedger ledger_;
  std::map<Key, std::deque<Lease>> leases_;
  std::map<Key, int64_t> waiting_;        // callers inside Acquire
  std::map<Key, int64_t> claiming_;       // calls asked for in claims not yet seen back
  std::map<int64_t, std::pair<Key, int64_t>> pending_;  // claim seq -> (key, count)
  std::map<Key, int64_t> denied_until_ms_;  // a claim got nothing: the next not before (log time)
  // A secondary limit this instance saw, before its record is back (log
  // time), by scope (0: the App's; else the installation's).
  std::map<int64_t, int64_t> local_pause_until_ms_;
  int64_t ScopeKey(int64_t installation) const {
    return options_.budget.scope == BudgetScope::kApp ? 0 : installation;
  }
  BrokerClock broker_;
  std::map<int64_t, std::chrono::steady_clock::time_point> sent_at_;  // own records not read back yet (seq)
  std::chrono::steady_clock::time_point last_sent_{};  // the last own record (a probe follows a quiet spell)
  int64_t seq_ = 0;
  bool closed_ = false;
  bool stop_ = false;
  std::mutex failed_mu_;                 // never held while taking mu_
  std::vector<int64_t> failed_claims_;   // claims the producer refused (the ticker asks again)
  std::unique_ptr<kafka::Follower> follower_;
  std::thread ticker_;
};

}  // namespace relay::dispatch
