// NodeProvider: what the reconcile loop drives. A provider starts, checks
// and stops the nodes of clusters and the jobs on them, and lists what it
// runs for this relay (its inventory) so an orphan sweep can remove what
// nobody wants any more. Every call is level-based and idempotent: the
// controller calls them again after a crash, on a state rebuilt from Kafka.
//
// The controller calls a provider from one thread at a time (the reconcile
// loop, or a takeover), so providers need no locking of their own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "relay/v1/lifecycle.pb.h"

namespace relay::lifecycle {

struct NodeStatus {
  bool alive = false;
  bool ready = false;    // alive and serving (Ray: the head answers health checks)
  int exit_code = -1;    // when not alive and known
};

struct JobStatus {
  std::string state;     // RUNNING | SUCCEEDED | FAILED | STOPPED
  int exit_code = -1;
  std::string message;
};

// Something the provider runs for this relay, found by its label.
struct Owned {
  std::string cluster_id;
  std::string node_id;   // one of node_id / job_id
  std::string job_id;
  int64_t pid = 0;       // local: a labelled process
  int64_t sid = 0;       // local: its session (a node or job is one session)
  int64_t start_ticks = 0;
  std::string object;    // kubernetes: the object's API path
};

class NodeProvider {
 public:
  virtual ~NodeProvider() = default;
  virtual std::string name() const = 0;  // local | kubernetes

  // Exclusive right to act, on top of Kafka leadership (the local
  // provider: a lock file, so two controllers on one host never both
  // spawn or kill even while Kafka still thinks both lead). Released by
  // Release and by the process's death.
  virtual absl::Status Acquire() = 0;
  virtual void Release() = 0;

  // OK when the provider can run clusters of this spec (FailedPrecondition
  // with the reason otherwise): checked when the cluster is requested.
  virtual absl::Status Supports(const v1::ClusterSpec& spec) const = 0;

  // Prepares the cluster (directories, secrets such as a Ray auth token:
  // stored in cluster.secrets, persisted before any node starts).
  virtual absl::Status PrepareCluster(v1::Cluster& cluster) = 0;
  // Starts `node` (its id, group and log path are set): fills pid,
  // start_ticks, address. Never starts a second process for the same node.
  virtual absl::Status StartNode(const v1::Cluster& cluster, v1::Node& node) = 0;
  virtual NodeStatus CheckNode(const v1::Cluster& cluster, const v1::Node& node) = 0;
  // force=false: ask it to stop (SIGTERM); true: kill it (SIGKILL).
  virtual absl::Status StopNode(const v1::Cluster& cluster, const v1::Node& node, bool force) = 0;
  // Removes the cluster's remains once every node is gone (directories
  // other than logs, provider objects).
  virtual absl::Status CleanupCluster(const v1::Cluster& cluster) = 0;

  // Jobs run on a ready cluster. SubmitJob fills pid/start_ticks (command
  // clusters) and log_path; idempotent by job id.
  virtual absl::Status SubmitJob(const v1::Cluster& cluster, v1::Job& job) = 0;
  virtual JobStatus CheckJob(const v1::Cluster& cluster, const v1::Job& job) = 0;
  virtual absl::Status StopJob(const v1::Cluster& cluster, const v1::Job& job, bool force) = 0;

  // Everything the provider runs for this relay (its owner label).
  virtual absl::StatusOr<std::vector<Owned>> Inventory() = 0;
  // Removes an orphan found by Inventory (no grace: nobody wants it).
  virtual absl::Status Remove(const Owned& orphan) = 0;
};

}  // namespace relay::lifecycle
