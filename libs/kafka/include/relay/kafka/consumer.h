// The consuming edge: at-least-once processing with offsets stored only
// after the handler's effect is done, a dead-letter topic for poison records,
// retries with backoff for everything else, one record at a time or in
// batches bounded by rows, bytes and time.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/record.h"

namespace relay::kafka {

// A handler says "this record can never succeed, dead-letter it" with
// PoisonError, and only so. Any other error, whatever its code, is taken as
// a failure of the handler's own effect (a produce the broker refused, a
// database that is down) and retried: the input record is not to blame.
absl::Status PoisonError(std::string_view reason);
bool IsPoison(const absl::Status& status);

// What a single-record handler's Status means to the consumer:
//   OK            effect done; the offset is stored
//   PoisonError   the record goes to <topic><dead_letter_suffix> with the
//                 reason, then its offset is stored
//   anything else the partition is rewound to the record and paused for a
//                 backoff; the record is handed over again after it
using RecordHandler = absl::AnyInvocable<absl::Status(const ConsumedRecord&)>;

// Records handed to a batch handler. Records of one partition are in offset
// order; a batch may span partitions.
class Batch {
 public:
  explicit Batch(std::vector<ConsumedRecord> records) : records_(std::move(records)) {}
  const std::vector<ConsumedRecord>& records() const { return records_; }
  // Marks records()[index] as poison: once the handler returns OK it goes to
  // the dead-letter topic with `reason` (and counts as done).
  void Reject(size_t index, std::string reason) { rejected_.emplace_back(index, std::move(reason)); }
  const std::vector<std::pair<size_t, std::string>>& rejected() const { return rejected_; }
  // Holds records()[index] and every later record of its partition: they
  // were not handled (the handler waits for something outside the
  // partition). Once the handler returns OK, the partition's records before
  // it are done (stored; rejected ones dead-lettered), and the partition is
  // rewound to it and paused for a backoff, as after an error, so it comes
  // again. Without OK, Hold changes nothing (the whole batch comes again).
  void Hold(size_t index) {
    const ConsumedRecord& r = records_.at(index);
    auto [it, added] = held_.try_emplace({r.topic, r.partition}, r.offset);
    if (!added) it->second = std::min(it->second, r.offset);
  }
  // Partition -> the offset it is held at.
  const std::map<TopicPartition, int64_t>& held() const { return held_; }
  bool IsHeld(const ConsumedRecord& r) const {
    auto it = held_.find({r.topic, r.partition});
    return it != held_.end() && r.offset >= it->second;
  }

 private:
  std::vector<ConsumedRecord> records_;
  std::vector<std::pair<size_t, std::string>> rejected_;
  std::map<TopicPartition, int64_t> held_;
};

// OK: the effect of every record not rejected (nor held: Batch::Hold) is
// done; rejected records are dead-lettered, then every offset of the batch
// is stored (a held partition's up to the record it is held at). Any error: nothing
// is stored, every partition of the batch is rewound to its first record in
// the batch and paused for a backoff, and the records come again (the effect
// must therefore be idempotent).
using BatchHandler = absl::AnyInvocable<absl::Status(Batch&)>;

struct BatchOptions {
  size_t max_records = 10'000;
  int64_t max_bytes = 16 * 1024 * 1024;  // keys + values
  // A batch is handed over when it is full or this long after its first
  // record arrived, whichever comes first.
  std::chrono::milliseconds max_wait{1000};
  // Also handed over at once, without waiting out max_wait, when it holds
  // this many bytes and no further record is waiting in the client (0:
  // never). The wait exists to make a handler's writes large (ClickHouse
  // wants few big inserts); a batch already this large gains nothing by
  // it, and at the tail of a backlog or a burst it only delayed records
  // already read (relay-stats' last 63 MiB batch of a 3 M-row backlog
  // waited the whole second: docs/benchmarks.md).
  int64_t enough_bytes = 0;
};

// Kafka headers a dead-lettered record carries besides its own.
inline constexpr char kDlqReasonHeader[] = "relay-dlq-reason";
inline constexpr char kDlqTopicHeader[] = "relay-dlq-topic";
inline constexpr char kDlqPartitionHeader[] = "relay-dlq-partition";
inline constexpr char kDlqOffsetHeader[] = "relay-dlq-offset";

// Partition ownership hooks, on the consuming thread. on_assign runs before
// any record of the assigned partitions is handed over (rebuild per-partition
// state there); an error pauses those partitions and the hook is called
// again for them (with every partition still waiting) after a backoff
// (retry_backoff_min doubling to retry_backoff_max), with Health() saying
// so, until it succeeds or they are revoked; no record of theirs is handed
// over before. on_revoke runs before another member may own them (drop that
// state).
using PartitionsAssigned = std::function<absl::Status(const std::vector<TopicPartition>&)>;
using PartitionsRevoked = std::function<void(const std::vector<TopicPartition>&)>;

struct ConsumerOptions {
  std::string bootstrap;
  std::string group_id;
  std::string client_id = "relay";
  std::vector<std::string> topics;
  std::string dead_letter_suffix = ".dlq";
  std::chrono::milliseconds retry_backoff_min{100};
  std::chrono::milliseconds retry_backoff_max{30'000};
  std::chrono::milliseconds commit_interval{1000};
  std::string auto_offset_reset = "earliest";
  // Bound on records prefetched by librdkafka (queued.max.messages.kbytes:
  // for this high-level consumer, its one queue, whatever the number of
  // partitions; a fetch response in flight comes on top), so memory is
  // bounded by configuration whatever the input volume.
  int64_t fetch_queue_kbytes = 16 * 1024;
  PartitionsAssigned on_assign;
  PartitionsRevoked on_revoke;
  // Raw librdkafka properties, applied last; the ones that carry the
  // at-least-once guarantee are refused (kProtectedConsumerProperties).
  std::map<std::string, std::string> extra;
};

inline constexpr const char* kProtectedConsumerProperties[] = {
    "enable.auto.offset.store", "enable.auto.commit", "auto.commit.enable", "group.id",
    "bootstrap.servers", "metadata.broker.list", "enable.partition.eof"};

// This consumer as a member of its group, as the group coordinator knows it
// (group id, generation, member id): what a transaction that also commits
// offsets carries, so the coordinator can refuse it from a member that is
// no longer in the current generation (KIP-447; producer.h,
// ProducerOptions::group_offsets). Opaque; defined in libs/kafka.
struct GroupMember;

// Runs on the thread that calls Run/RunBatches. A partition whose record
// failed is paused, not slept on: polling goes on, so rebalances and other
// partitions are served during a backoff. Offsets are committed periodically,
// synchronously when partitions are revoked, and on return.
class Consumer {
 public:
  virtual ~Consumer() = default;
  // Handles records until Stop() (returns OK) or until the consumer cannot
  // go on without losing or skipping a record (returns why, and Health()
  // says so from then on): a fatal client error, a dead-letter topic that
  // refuses records permanently, a partition that cannot be rewound.
  virtual absl::Status Run(RecordHandler handler) = 0;
  virtual absl::Status RunBatches(BatchOptions options, BatchHandler handler) = 0;
  // Any thread. Run returns after the record or batch in hand is finished.
  virtual void Stop() = 0;
  // Any thread: OK while the consumer can make progress, the reason when it
  // stopped with an error or is retrying a dead-letter write (for /readyz).
  virtual absl::Status Health() const = 0;
  // Any thread: the membership now (a snapshot: a rebalance after the call
  // makes it stale, which is the point); null before the first join, or
  // for a consumer that is not a Kafka group member (the in-memory fake).
  virtual std::shared_ptr<const GroupMember> Member() const { return nullptr; }
};

// `dead_letters` must outlive the consumer; it is used to write poison
// records and is waited on (the offset is stored only after the DLQ ack).
absl::StatusOr<std::unique_ptr<Consumer>> NewKafkaConsumer(ConsumerOptions options,
                                                          Producer* dead_letters,
                                                          prometheus::Registry* metrics);

}  // namespace relay::kafka
