// The lifecycle controller: the clusters' state, the API's operations on
// it, and the reconcile loop that drives what providers run towards it.
//
// State lives in Kafka. Every change to a cluster (a request, an observed
// transition) is written whole to the compacted topic lifecycle.clusters
// (key: cluster id, value: ClusterRecord with the writer's leader epoch),
// and described on cluster.events. A write is acknowledged to its caller
// only once the broker has it. A deposed leader's late writes are refused by
// the broker itself (the leader's writer is a transactional producer of a
// fixed id: the new leader's fenced it), so compaction, which keeps a key's
// latest offset, never keeps one of them; readers also keep per key the
// record of the highest epoch. A new leader rebuilds the state by reading
// lifecycle.clusters to its end, then compares it with the provider's
// inventory: processes of wanted nodes are adopted, everything else
// labelled as ours is removed.
//
// The reconcile loop is level-based: each pass looks at every cluster and
// does the next step towards its desired state. A node is first recorded
// (STARTING) and only started once that record is durable, so a crash
// between the two leaves either a recorded node (started by the next
// leader, once) or a labelled process (adopted): never a duplicate, never
// an orphan.
//
// Only the leader acts and answers; TakeOver/StepDown are called by the
// leader election (leader.h). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "relay/auth/callers.h"
#include "relay/base/clock.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/reader.h"
#include "relay/lifecycle/provider.h"
#include "relay/v1/cluster.pb.h"
#include "relay/v1/lifecycle.pb.h"

namespace relay::lifecycle {

struct ControllerOptions {
  std::string clusters_topic = "lifecycle.clusters";
  std::string events_topic = "cluster.events";
  std::chrono::milliseconds reconcile_interval{1000};
  std::chrono::milliseconds stop_grace{10'000};         // SIGTERM -> SIGKILL
  std::chrono::milliseconds provision_timeout{300'000};  // REQUESTED -> RUNNING, else FAILED
  std::chrono::milliseconds usage_interval{60'000};     // usage events of running clusters
  std::chrono::milliseconds sweep_interval{30'000};     // orphan sweeps
  std::chrono::milliseconds write_timeout{10'000};      // an API call waits this long for Kafka
  std::chrono::seconds max_lifetime{7 * 24 * 3600};     // cap and default of a cluster's lifetime
  int max_nodes_per_group = 64;
  int max_clusters_per_team = 500;                      // not ended
  int max_jobs_per_cluster = 1000;                      // kept with the cluster
  int max_restarts = 5;                                 // unexpected node exits before FAILED
  bool background = true;  // false: no loop thread; the caller runs ReconcileOnce (unit tests)
};

class Controller {
 public:
  Controller(ControllerOptions options, NodeProvider* provider, kafka::TopicReader* reader, const Clock* clock,
             prometheus::Registry* metrics);
  ~Controller();

  // Leadership. TakeOver: acquire the provider, rebuild state from Kafka,
  // reconcile it with the provider's inventory, then start the loop; every
  // state record and event goes through `writer` (the service makes it a
  // transactional producer whose creation fenced the previous leader's; it
  // must outlive the leadership). A write the broker refuses as fenced
  // (kafka::IsFenced: a newer leader's producer exists) stops all acting at
  // once: the controller answers UNAVAILABLE and /readyz fails until
  // StepDown. StepDown returns once no action is in progress and none will
  // start; the writer is no longer used after it.
  absl::Status TakeOver(int64_t epoch, kafka::Producer* writer);
  void StepDown();
  bool leading() const { return leading_.load() && !fenced_.load(); }
  int64_t epoch() const { return epoch_.load(); }

  // The API. Errors: Unavailable (standby, Kafka), InvalidArgument,
  // NotFound (also another team's cluster), PermissionDenied,
  // ResourceExhausted, FailedPrecondition.
  absl::StatusOr<v1::Cluster> Create(const auth::Caller& caller, const v1::CreateClusterRequest& request);
  absl::StatusOr<v1::Cluster> Get(const auth::Caller& caller, const std::string& id);
  absl::StatusOr<std::vector<v1::Cluster>> List(const auth::Caller& caller, const v1::ListClustersRequest& request);
  absl::StatusOr<v1::Cluster> Delete(const auth::Caller& caller, const std::string& id);
  absl::StatusOr<v1::Cluster> Scale(const auth::Caller& caller, const v1::ScaleClusterRequest& request);
  absl::StatusOr<v1::Job> SubmitJob(const auth::Caller& caller, const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::Job> GetJob(const auth::Caller& caller, const std::string& cluster, const std::string& job);
  absl::StatusOr<std::vector<v1::Job>> ListJobs(const auth::Caller& caller, const std::string& cluster);
  absl::StatusOr<v1::Job> CancelJob(const auth::Caller& caller, const std::string& cluster, const std::string& job);
  // The cluster once its version is above `after_version`, or nullopt when
  // `timeout` passed first.
  absl::StatusOr<std::optional<v1::Cluster>> WaitForChange(const auth::Caller& caller, const std::string& id,
                                                           int64_t after_version, std::chrono::milliseconds timeout);

  // Pools (pools.h) size a cluster they own; as Scale, for an internal caller.
  absl::Status SetGroupCount(const std::string& cluster_id, const std::string& group, int count);

  // One reconcile pass over every cluster (the loop calls it; tests too).
  void ReconcileOnce();
  // Removes what the provider runs for us that no cluster wants.
  void SweepOrphans();

  // For /metrics and tests.
  std::map<std::string, int> CountByState() const;
  absl::Status Health() const;

  // What a caller sees of a cluster (secrets removed).
  static v1::Cluster Public(const v1::Cluster& c);

 private:
  struct Pending {
    int writes = 0;  // records sent, not yet acknowledged
  };

  void Loop();
  absl::Status Load(int64_t epoch);
  void Adopt();
  // Bumps the version, queues the record and the events for SendOutbox;
  // `done` gets the broker's answer. Requires mu_.
  void PersistLocked(v1::Cluster& c, std::vector<v1::ClusterEvent> events,
                     std::function<void(absl::Status)> done = {});
  // Sends what PersistLocked queued, in order (mu_ not held).
  void SendOutbox();
  // Persists and waits for the broker (mu_ held on entry and on return,
  // released while waiting).
  absl::Status PersistAndWait(std::unique_lock<std::mutex>& lock, v1::Cluster& c, std::vector<v1::ClusterEvent> events);
  v1::ClusterEvent Event(const v1::Cluster& c, const std::string& kind, const std::string& state,
                         const std::string& previous, const std::string& reason) const;
  absl::StatusOr<v1::Cluster*> Find(const auth::Caller& caller, const std::string& id);
  absl::Status CheckLeading() const;

  // One cluster's pass; true when it changed (to be persisted).
  bool Reconcile(v1::Cluster& c, std::vector<v1::ClusterEvent>& events);
  // A pass over one cluster, and the steps it goes through (reconcile.cc).
  struct Pass {
    std::vector<v1::ClusterEvent>& events;  // to persist with the cluster
    const int64_t now;
    const bool durable;  // its latest record is acknowledged: providers may act on it
    bool changed = false;
  };
  void ObserveNodes(v1::Cluster& c, Pass& p);
  void ObserveJobs(v1::Cluster& c, Pass& p);
  void DecideEnd(v1::Cluster& c, Pass& p);
  void TearDown(v1::Cluster& c, Pass& p);
  bool BringUp(v1::Cluster& c, Pass& p);
  void RunJobs(v1::Cluster& c, Pass& p);
  // A job's end (state, reason, time) and its event.
  void EndJob(v1::Cluster& c, v1::Job& j, const std::string& state, const std::string& reason, int64_t now,
              std::vector<v1::ClusterEvent>& events);
  void SetState(v1::Cluster& c, const std::string& state, const std::string& reason,
                std::vector<v1::ClusterEvent>& events);
  // Counts and logs a failed provider call (the next pass retries).
  void Note(const absl::Status& st, const char* op);
  void AddUsage(v1::Cluster& c, int64_t until_ms, std::vector<v1::ClusterEvent>& events);

  const ControllerOptions o_;
  NodeProvider* provider_;
  kafka::Producer* producer_ = nullptr;  // the leadership's writer (TakeOver)
  kafka::TopicReader* reader_;
  const Clock* clock_;

  mutable std::mutex mu_;
  std::condition_variable changed_;  // any cluster's version moved, or leadership did
  std::map<std::string, v1::Cluster> clusters_;
  std::map<std::string, Pending> pending_;
  std::map<std::string, std::chrono::steady_clock::time_point> cancel_sent_;  // job id -> first SIGTERM
  std::vector<std::pair<kafka::Record, kafka::DeliveryCallback>> outbox_;
  std::mutex send_mu_;  // one SendOutbox at a time
  bool wake_ = false;
  bool reload_needed_ = false;
  std::string last_error_;

  std::mutex act_mu_;  // held by every pass and takeover: StepDown waits on it
  std::atomic<bool> leading_{false};
  std::atomic<bool> fenced_{false};  // a write was refused as fenced: act no more
  std::atomic<int64_t> epoch_{0};
  std::atomic<bool> stop_{false};
  std::thread loop_;
  std::chrono::steady_clock::time_point last_sweep_{};

  prometheus::Family<prometheus::Gauge>& by_state_;
  prometheus::Histogram& reconcile_seconds_;
  prometheus::Family<prometheus::Counter>& provider_errors_;
  prometheus::Counter& writes_failed_;
  prometheus::Counter& orphans_removed_;
  prometheus::Gauge& leader_;
  prometheus::Gauge& epoch_gauge_;
};

}  // namespace relay::lifecycle
