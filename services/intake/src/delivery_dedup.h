// Remembers GitHub delivery ids that were made durable, so a redelivery of
// the same id within `window` is acknowledged without a second record.
//
// Only a request that passed signature verification may call Begin: an
// unauthenticated caller can never claim or probe an id.
//
// Per process: with several intake replicas a redelivery may land on
// another one and be recorded twice; consumers deduplicate by delivery id
// (docs/architecture.md), so this is an optimisation of the topic, not the
// guarantee. Thread-safe.
#pragma once

#include <chrono>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "relay/base/clock.h"

namespace relay::intake {

class DeliveryDedup {
 public:
  enum class Claim {
    kNew,       // caller owns the id now and must call Finish(id, ...)
    kDone,      // already durable within the window: acknowledge, record nothing
    kJoined,    // the same id is in flight; `on_outcome` gets that request's outcome
  };
  // Called with true when the in-flight request made it durable.
  using Waiter = absl::AnyInvocable<void(bool durable) &&>;

  DeliveryDedup(const Clock* clock, std::chrono::milliseconds window, size_t max_entries);

  Claim Begin(const std::string& delivery_id, Waiter on_outcome);
  // Ends the kNew claim. durable=false forgets the id, so a retry is recorded.
  void Finish(const std::string& delivery_id, bool durable);

  size_t size() const;
  // Slots the table holds without growing (for tests: it is sized for
  // max_entries at construction, so Begin never rehashes under the lock).
  size_t capacity() const;

 private:
  struct Entry {
    bool durable = false;
    std::vector<Waiter> waiters;
  };
  void ExpireLocked(std::chrono::steady_clock::time_point now);

  const Clock* clock_;
  std::chrono::milliseconds window_;
  size_t max_entries_;
  mutable std::mutex mu_;
  // Open addressing: at saturation the table holds up to max_entries ids,
  // and std::unordered_map's node chasing was ~2% of intake's CPU in cache
  // misses (perf, docs/benchmarks.md).
  absl::flat_hash_map<std::string, Entry> entries_;
  // Durable ids in the order they became durable, for expiry and the cap.
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>> order_;
};

}  // namespace relay::intake
