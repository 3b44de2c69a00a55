// Runner pools: a pool of CI runners bound to runner labels, sized from
// `workflow_job` webhooks (read from github.webhooks, as intake wrote them),
// the way actions-runner-controller's webhook-driven autoscaler sizes a
// RunnerDeployment, with two changes: reservations are keyed by the job's
// id (a redelivered `queued` counts once; a `completed` that overtakes its
// `queued` leaves a tombstone), and a pool is a lifecycle cluster (one node
// group, `runners`, one node per runner).
//
// Matching (ARC's rule): a job belongs to a pool when every label of its
// `runs-on`, `self-hosted` excepted, is one of the pool's labels (case
// insensitive), and its repository is one of the pool's (any, when the
// pool lists none). When several pools match, the one with the fewest
// labels wins, then the first in the file.
//
// Sizing: `queued` (or `in_progress` never seen queued) reserves a runner
// until the job completes or `reservation_ttl` passes (a lost `completed`);
// desired = clamp(min + reservations, min, max). Scale-up is immediate;
// scale-down waits `scale_down_delay` after the last scale-up (no
// flapping), then goes straight to the target: to zero when min is 0.
// Times are the webhooks' own (intake's received_at), so replaying the
// topic gives the same reservations.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "relay/base/clock.h"
#include "relay/kafka/follower.h"
#include "relay/lifecycle/controller.h"

namespace relay::lifecycle {

struct PoolSpec {
  std::string name;                 // [a-z0-9-]{1,32}
  std::string team;
  std::set<std::string> labels;     // lower-case
  std::set<std::string> repos;      // lower-case owner/name; empty: any
  int min = 0;
  int max = 1;
  std::chrono::milliseconds scale_down_delay{10 * 60 * 1000};
  std::chrono::milliseconds reservation_ttl{60 * 60 * 1000};
  std::vector<std::string> command;  // each runner's process (argv)
};

// The spec of a pool's cluster (kind command, group `runners` of `min`
// nodes running the pool's command, labelled with the pool).
v1::ClusterSpec PoolClusterSpec(const PoolSpec& pool);

// The pools file (YAML):
//   pools:
//     - name: npu
//       team: npu-infra
//       labels: [self-hosted, linux, npu]
//       repos: [acme/npu-backend]     # optional
//       min: 0
//       max: 8
//       scale_down_delay: 10m         # optional (default 10m)
//       reservation_ttl: 60m          # optional (default 60m)
//       command: [/opt/actions-runner/run.sh, --ephemeral]
absl::StatusOr<std::vector<PoolSpec>> LoadPools(const std::string& path);
absl::StatusOr<std::vector<PoolSpec>> ParsePools(const std::string& yaml, const std::string& origin);

// One workflow_job webhook, reduced to what sizing needs.
struct WorkflowJobEvent {
  std::string action;               // queued | in_progress | completed | waiting
  int64_t job_id = 0;
  std::string repository;           // lower-case
  std::vector<std::string> labels;  // lower-case
  int64_t at_ms = 0;                // when intake received it
};

// Parses a workflow_job payload (JSON); InvalidArgument when it is not one.
absl::StatusOr<WorkflowJobEvent> ParseWorkflowJob(std::string_view json, int64_t at_ms);

// The sizing state of every pool. Thread-safe.
class PoolScaler {
 public:
  explicit PoolScaler(std::vector<PoolSpec> pools);
  const std::vector<PoolSpec>& pools() const { return pools_; }
  // The pool the job belongs to ("" when none).
  std::string Match(const WorkflowJobEvent& e) const;
  // Applies one webhook; returns the pool it counted for ("" when none).
  std::string Apply(const WorkflowJobEvent& e);
  // The pool's runner count at `now_ms` (remembers scale-ups for the delay).
  int Desired(const std::string& pool, int64_t now_ms);
  int Reservations(const std::string& pool, int64_t now_ms) const;

 private:
  struct State {
    std::map<int64_t, int64_t> reserved;   // job id -> expiry (ms)
    std::map<int64_t, int64_t> completed;  // job id -> expiry of the tombstone
    int current = -1;                      // -1: not sized yet
    int64_t last_scale_up_ms = 0;
  };
  std::vector<PoolSpec> pools_;
  mutable std::mutex mu_;
  std::map<std::string, State> state_;
};


// Keeps each pool's cluster at its PoolScaler size. Every instance follows
// the webhooks topic from its start (so a standby is warm when it takes
// over); only the leader creates and scales, and only once the follower has
// read the backlog (a half-read backlog would scale pools down).
class PoolManager {
 public:
  // `follow` makes the follower of `webhooks_topic`.
  static absl::StatusOr<std::unique_ptr<PoolManager>> Start(std::vector<PoolSpec> pools, const std::string& bootstrap,
                                                            const std::string& webhooks_topic, Controller* controller,
                                                            const Clock* clock, prometheus::Registry* metrics,
                                                            const kafka::FollowerFactory& follow);
  virtual ~PoolManager() = default;
  // One sizing round (the service runs it every second).
  virtual void Tick() = 0;
  virtual absl::Status Health() const = 0;
};

}  // namespace relay::lifecycle
