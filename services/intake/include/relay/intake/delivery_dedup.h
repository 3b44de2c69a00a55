// Remembers the GitHub deliveries that were made durable, so a redelivery
// within `window` is acknowledged without a second record. A delivery is its
// id and a digest of its body: only a repeat of both is a duplicate. The
// signature covers the body alone, so anyone who has read one signed body
// (from the topic, a log, a proxy) can post it under any id; were the id
// enough, they could claim the id of a genuine delivery that failed, and
// GitHub's redelivery of it would be answered "duplicate" and never
// recorded. A known id with another body is therefore recorded again and
// reported as a conflict.
//
// Only a request that passed signature verification may call Begin: an
// unauthenticated caller can never claim or probe an id.
//
// Per process: with several intake replicas a redelivery may land on
// another one and be recorded twice; consumers deduplicate by (delivery id,
// body digest) (docs/architecture.md), so this is an optimisation of the
// topic, not the guarantee. Thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "relay/base/clock.h"

namespace relay::intake {

using BodyDigest = std::array<uint8_t, 32>;  // SHA-256

class DeliveryDedup {
 public:
  enum class Claim {
    kNew,       // unknown id: the caller owns (id, digest) and must Finish it
    kConflict,  // known id, another body: the caller owns (id, digest) and must Finish it
    kDone,      // this id and body are durable within the window: acknowledge, record nothing
    kJoined,    // this id and body are in flight; `on_outcome` gets that request's outcome
  };
  // Called with true when the in-flight request made it durable.
  using Waiter = absl::AnyInvocable<void(bool durable) &&>;

  DeliveryDedup(const Clock* clock, std::chrono::milliseconds window, size_t max_entries);

  Claim Begin(const std::string& delivery_id, const BodyDigest& digest, Waiter on_outcome);
  // Ends a kNew or kConflict claim. durable=false forgets it, so a retry is
  // recorded.
  void Finish(const std::string& delivery_id, const BodyDigest& digest, bool durable);

  // Distinct ids remembered (durable or in flight).
  size_t size() const;
  // Slots the table holds without growing (for tests: it is sized for
  // max_entries at construction, so Begin never rehashes under the lock).
  size_t capacity() const;

 private:
  struct Body {
    BodyDigest digest;
    bool durable = false;
    std::vector<Waiter> waiters;
  };
  // Nearly every id has one body; a conflict adds a second.
  using Bodies = absl::InlinedVector<Body, 1>;
  void ExpireLocked(std::chrono::steady_clock::time_point now);
  static Body* Find(Bodies& bodies, const BodyDigest& digest);

  const Clock* clock_;
  std::chrono::milliseconds window_;
  size_t max_entries_;
  mutable std::mutex mu_;
  // Open addressing: at saturation the table holds up to max_entries ids,
  // and std::unordered_map's node chasing was ~2% of intake's CPU in cache
  // misses (perf, docs/benchmarks.md).
  absl::flat_hash_map<std::string, Bodies> entries_;
  // Durable deliveries in the order they became durable, for expiry and the
  // cap (which counts deliveries, not ids).
  struct Durable {
    std::chrono::steady_clock::time_point at;
    std::string id;
    BodyDigest digest;
  };
  std::deque<Durable> order_;
};

}  // namespace relay::intake
