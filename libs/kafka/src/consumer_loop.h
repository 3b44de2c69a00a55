// The consumer's logic, apart from any Kafka client: batching, offsets
// stored after the effect, dead-lettering, paused partitions with backoff,
// dropping what a rebalance took away. The librdkafka consumer (consumer.cc)
// and the in-memory fake (testing/) are each a `Source` under this loop, so
// the fake behaves as the real thing does. Internal to libs/kafka.
#pragma once

#include <chrono>
#include <compare>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "relay/kafka/consumer.h"

namespace relay::kafka::internal {

using kafka::TopicPartition;

// What the loop needs from a Kafka client. Used by one thread (the loop's);
// callbacks run inside Poll on that thread.
class Source {
 public:
  using RevokeCallback = std::function<void(const std::vector<TopicPartition>&)>;
  using AssignCallback = std::function<void(const std::vector<TopicPartition>&)>;
  virtual ~Source() = default;
  // The next record, or nullopt after `timeout`. Client errors met on the
  // way are logged and counted by the source; rebalances run inside Poll
  // and report revoked partitions through the callback.
  virtual std::optional<ConsumedRecord> Poll(std::chrono::milliseconds timeout) = 0;
  // Non-OK once the client is unusable (a fatal error).
  virtual absl::Status Fatal() = 0;
  // Non-OK while the client reports a permanent problem (a subscribed topic
  // that does not exist, no authorization).
  virtual absl::Status Degraded() = 0;
  virtual void Store(const TopicPartition& tp, int64_t next_offset) = 0;
  virtual absl::Status Rewind(const TopicPartition& tp, int64_t offset) = 0;
  virtual void Pause(const TopicPartition& tp) = 0;
  virtual void Resume(const TopicPartition& tp) = 0;
  // Commits stored offsets and leaves the group.
  virtual absl::Status Close() = 0;
  // Any thread (Consumer::Member).
  virtual std::shared_ptr<const GroupMember> Member() const { return nullptr; }
  void set_on_revoke(RevokeCallback callback) { on_revoke_ = std::move(callback); }
  // Called inside Poll once partitions are assigned, before any of their
  // records is returned.
  void set_on_assign(AssignCallback callback) { on_assign_ = std::move(callback); }

 protected:
  RevokeCallback on_revoke_;
  AssignCallback on_assign_;
};

struct LoopOptions {
  std::string dead_letter_suffix = ".dlq";
  std::chrono::milliseconds retry_backoff_min{100};
  std::chrono::milliseconds retry_backoff_max{30'000};
  PartitionsAssigned on_assign;
  PartitionsRevoked on_revoke;
};

inline LoopOptions LoopOptionsFrom(const ConsumerOptions& o) {
  return {o.dead_letter_suffix, o.retry_backoff_min, o.retry_backoff_max, o.on_assign, o.on_revoke};
}

// `metrics` itself (not owned) when given, else a registry of one's own.
inline std::shared_ptr<prometheus::Registry> RegistryOrOwn(prometheus::Registry* metrics) {
  if (metrics) return std::shared_ptr<prometheus::Registry>(metrics, [](prometheus::Registry*) {});
  return std::make_shared<prometheus::Registry>();
}

// The Consumer contract (consumer.h) over any Source.
class LoopConsumer final : public Consumer {
 public:
  // `metrics` must hold whatever registry `source` registered its own
  // metrics in: it outlives the source.
  LoopConsumer(std::unique_ptr<Source> source, LoopOptions options, Producer* dead_letters,
               std::shared_ptr<prometheus::Registry> metrics);

  absl::Status Run(RecordHandler handler) override;
  absl::Status RunBatches(BatchOptions options, BatchHandler handler) override;
  void Stop() override { stop_ = true; }
  absl::Status Health() const override;
  std::shared_ptr<const GroupMember> Member() const override { return source_->Member(); }

 private:
  absl::Status Deliver(BatchHandler& handler);
  // Rewinds and pauses every partition of `records` for its backoff.
  absl::Status RetryLater(const std::vector<ConsumedRecord>& records, const absl::Status& why);
  // Pauses each partition, rewinds it to its offset and sets its backoff;
  // `failed`: logged as a failure (else as a hold, Batch::Hold).
  absl::Status RewindAndPause(const std::map<TopicPartition, int64_t>& first, size_t records, const absl::Status& why,
                              bool failed);
  absl::Status DeadLetter(const ConsumedRecord& record, const std::string& reason);
  void ResumeDue();
  void OnRevoke(const std::vector<TopicPartition>& revoked);
  void OnAssign(const std::vector<TopicPartition>& assigned);
  void AssignFailed(const absl::Status& why);
  void RetryAssignDue();
  absl::Status Fail(absl::Status status);
  void SetHealth(absl::Status status);
  void SetAssignHealth(absl::Status status);

  std::shared_ptr<prometheus::Registry> registry_;  // before source_: outlives it
  std::unique_ptr<Source> source_;
  LoopOptions options_;
  Producer* dead_letters_;
  // Partitions whose on_assign hook failed (loop thread): paused until a
  // retry succeeds, with the first offset dropped meanwhile (read again).
  std::map<TopicPartition, std::optional<int64_t>> unready_;
  std::chrono::milliseconds assign_backoff_{100};
  std::chrono::steady_clock::time_point assign_retry_at_{};
  prometheus::Family<prometheus::Counter>& outcomes_;
  prometheus::Counter& done_;
  prometheus::Counter& dead_lettered_;
  prometheus::Counter& retried_;
  prometheus::Histogram& batch_records_;
  std::atomic<bool> stop_{false};

  // Loop thread only.
  std::vector<ConsumedRecord> pending_;
  int64_t pending_bytes_ = 0;
  std::chrono::steady_clock::time_point first_at_;
  struct Backoff {
    std::chrono::milliseconds next;
    std::optional<std::chrono::steady_clock::time_point> resume_at;  // set while paused
  };
  std::map<TopicPartition, Backoff> backoff_;
  // Records of the batch in hand already in the dead-letter topic (a batch
  // retried after a dead-letter failure does not write them twice).
  using Position = std::tuple<std::string, int32_t, int64_t>;
  std::set<Position> dead_lettered_positions_;
  int dlq_failures_ = 0;  // permanent dead-letter refusals in a row
  static constexpr int kPermanentDlqFailures = 3;

  mutable std::mutex health_mu_;
  absl::Status health_;
  absl::Status assign_health_;  // a failing assignment hook, while it is retried
};

}  // namespace relay::kafka::internal
