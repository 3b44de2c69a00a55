// The owning side of relay-collector: the job state machines (jobs.h) of
// the ci.callbacks partitions this instance owns in its consumer group.
//
// Threads: the consumer thread assigns, revokes and decides (HandleBatch);
// the sweeper (Sweep) and the labels follower (OnLabels) look at the same
// partitions under each partition's lock.
//
// A batch's decisions are made durable (job state on collector.state, the
// result on ci.results, any check run on github.requests) before any caller
// hears of them; its offsets are committed after that by the consumer loop.
// A failure anywhere makes the batch come again, and what was accepted is
// then a replay that writes the same records again.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "relay/base/clock.h"
#include "relay/collector/collector_service.h"
#include "relay/collector/jobs.h"
#include "relay/collector/label_table.h"
#include "relay/kafka/consumer.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/reader.h"
#include "relay/v1/collector.pb.h"

namespace relay::collector {

class JobOwner {
 public:
  // Everything is borrowed and must outlive the owner.
  struct Parts {
    const CollectorSettings* settings;
    const Clock* clock;
    kafka::Producer* producer;
    kafka::TopicReader* reader;        // partition loads (consumer thread)
    kafka::TopicReader* fetch_reader;  // decided jobs read back (any thread, behind a lock)
    // The labels present at start are read (L3 check runs depend on them).
    std::function<bool()> labels_caught_up;
    // The receiving side of this instance (callback_front.h): is a caller
    // waiting here, and answer it.
    std::function<bool(const std::string& request_id)> is_waiting;
    std::function<void(const v1::CallbackDecision&)> answer;
  };
  JobOwner(Parts parts, prometheus::Registry& metrics);

  // Consumer-group hooks: load a partition's jobs (collector.state) and
  // dispatches (relay.dispatches); forget them.
  absl::Status Assigned(const std::vector<kafka::TopicPartition>& tps);
  void Revoked(const std::vector<kafka::TopicPartition>& tps);
  // Decides a batch of ci.callbacks and relay.dispatches records.
  absl::Status HandleBatch(kafka::Batch& batch);
  // Prunes old history and asks (through ci.callbacks, so the owner decides
  // in order) for jobs in progress past the zombie timeout to be timed out;
  // sends again the late labels' check runs whose requests were not acked.
  void Sweep();
  // A record of relay.pr_labels: remembered, and once the labels present
  // at start are read, raises the check runs a late label asks for.
  void OnLabels(const kafka::ConsumedRecord& r);

 private:
  // One ci.callbacks partition this instance owns.
  struct Partition {
    explicit Partition(Jobs::StateFetcher fetch) : jobs(std::move(fetch)) {}
    std::mutex mu;  // the consumer thread decides, the sweeper looks
    Jobs jobs;
    std::map<std::string, std::chrono::steady_clock::time_point> sweep_asked;  // job id -> when
  };
  // A job state written in a batch: records[index] of SendAll.
  struct StateWrite {
    int32_t partition;
    std::string job_id;
    int32_t version;
    size_t index;
  };

  std::set<std::string> Devices(const std::string& upstream_repo, int64_t pr);
  Jobs::StateFetcher Fetcher(int32_t partition);
  std::shared_ptr<Partition> Part(int32_t p);
  void UpdateJobsGauge();
  // Sends every record and waits for all acks; the offset each got.
  absl::StatusOr<std::vector<int64_t>> SendAll(std::vector<kafka::Record> records);
  // A late label's check run to github.requests. Nothing commits it (the
  // labels are followed, not consumed in a group), so one not acked is kept
  // and sent again by Sweep: its id is deterministic, and a copy that did
  // land is deduplicated by dispatch's ledger.
  void SendLateCheckRun(v1::GitHubRequest write);

  const Parts p_;
  std::mutex fetch_mu_;  // fetch_reader

  std::atomic<bool> labels_live_{false};  // the labels present at start are read
  LabelTable labels_;

  std::mutex parts_mu_;
  std::map<int32_t, std::shared_ptr<Partition>> parts_;

  static constexpr size_t kMaxLateCheckRunRetries = 100'000;
  std::mutex retry_mu_;
  std::vector<v1::GitHubRequest> late_check_runs_to_retry_;

  prometheus::Family<prometheus::Counter>& sweeps_;
  prometheus::Gauge& jobs_gauge_;
  prometheus::Gauge& decided_gauge_;
  prometheus::Family<prometheus::Counter>& label_facts_;
  prometheus::Counter& state_reads_;
  prometheus::Family<prometheus::Counter>& late_check_runs_;
};

}  // namespace relay::collector
