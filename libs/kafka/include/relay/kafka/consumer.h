// The consuming edge: at-least-once processing with offsets stored only
// after the handler's effect is done, a dead-letter topic for poison records,
// and retries with backoff for everything else.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/record.h"

namespace relay::kafka {

// What the handler's Status means to the consumer:
//   OK                                   effect done; the offset is stored
//   InvalidArgument, FailedPrecondition,
//   DataLoss (IsPoison)                  the record can never succeed; it goes to
//                                        <topic><dead_letter_suffix> with the reason,
//                                        then its offset is stored
//   anything else                        transient; the same record is handed
//                                        over again after a backoff
using RecordHandler = absl::AnyInvocable<absl::Status(const ConsumedRecord&)>;

bool IsPoison(const absl::Status& status);

// Kafka headers a dead-lettered record carries besides its own.
inline constexpr char kDlqReasonHeader[] = "relay-dlq-reason";
inline constexpr char kDlqTopicHeader[] = "relay-dlq-topic";
inline constexpr char kDlqPartitionHeader[] = "relay-dlq-partition";
inline constexpr char kDlqOffsetHeader[] = "relay-dlq-offset";

struct ConsumerOptions {
  std::string bootstrap;
  std::string group_id;
  std::string client_id = "relay";
  std::vector<std::string> topics;
  std::string dead_letter_suffix = ".dlq";
  std::chrono::milliseconds retry_backoff_min{100};
  // Kept well under max.poll.interval.ms so a long outage never costs the
  // group membership.
  std::chrono::milliseconds retry_backoff_max{30'000};
  std::chrono::milliseconds commit_interval{1000};
  std::string auto_offset_reset = "earliest";
  std::map<std::string, std::string> extra;  // raw librdkafka properties, applied last
};

// Runs on the thread that calls Run(). Commits stored offsets periodically,
// synchronously when partitions are revoked in a rebalance, and on Stop.
class Consumer {
 public:
  virtual ~Consumer() = default;
  // Polls and handles records until Stop(); then commits and leaves the group.
  virtual absl::Status Run(RecordHandler handler) = 0;
  // Any thread. Run returns after the record in hand is finished.
  virtual void Stop() = 0;
};

// `dead_letters` must outlive the consumer; it is used to write poison
// records and is waited on (the offset is stored only after the DLQ ack).
absl::StatusOr<std::unique_ptr<Consumer>> NewKafkaConsumer(ConsumerOptions options,
                                                          Producer* dead_letters,
                                                          prometheus::Registry* metrics);

}  // namespace relay::kafka
