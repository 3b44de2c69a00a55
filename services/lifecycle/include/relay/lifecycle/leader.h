// Leader election on Kafka: every relay-lifecycle instance joins one
// consumer group on the single-partition topic lifecycle.leader; the member
// the group coordinator assigns partition 0 leads. A dead leader stops
// heartbeating and loses the partition after the session timeout, so a
// standby takes over within seconds.
//
// Fencing: on assignment the new leader appends a claim record to
// lifecycle.leader and reads the partition back to it; the claim's offset
// (assigned by the broker, strictly increasing) is its epoch. Every state
// record it writes carries the epoch, and a reader keeps per cluster the
// record of the highest epoch, so a deposed leader's late writes never win
// (controller.h). A later claim than its own means someone else was
// elected since: it does not act. Revocation stops the controller before
// the rebalance callback returns. On top of that the local provider holds
// a lock file while acting (provider.h), so even a leader Kafka has
// already replaced cannot spawn or kill on the same host.
//
// librdkafka 2.0.2 (Debian's) has no getter for the group generation,
// which is why the epoch comes from a claim record.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace relay::lifecycle {

struct LeaderOptions {
  std::string bootstrap;
  std::string topic = "lifecycle.leader";
  std::string group_id = "relay-lifecycle";
  std::string instance;  // shown in claims and logs (host:pid by default)
  std::chrono::milliseconds session_timeout{6000};  // broker minimum (group.min.session.timeout.ms) is 6 s
  std::chrono::milliseconds heartbeat_interval{1000};
};

struct LeaderCallbacks {
  // Called on the elector's worker thread with the new epoch; a failure
  // makes the elector retry (while it still holds the partition).
  std::function<absl::Status(int64_t epoch)> elected;
  // Called before the partition is given up; must return only once this
  // instance no longer acts.
  std::function<void()> deposed;
};

class LeaderElector {
 public:
  static absl::StatusOr<std::unique_ptr<LeaderElector>> Start(LeaderOptions options, LeaderCallbacks callbacks);
  virtual ~LeaderElector() = default;
  // Leaves the group (deposed() first), so a standby takes over at once.
  virtual void Stop() = 0;
  virtual bool leading() const = 0;
  virtual absl::Status Health() const = 0;
};

}  // namespace relay::lifecycle
