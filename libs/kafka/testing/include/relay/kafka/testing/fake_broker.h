// An in-memory Kafka for unit tests: topics with partitions, offsets,
// committed group offsets. FakeProducer can write into it, and the fake
// consumer and reader (fake_consumer.h) read from it, so a service's Kafka
// side can be tested without a broker. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "relay/base/clock.h"
#include "relay/kafka/record.h"

namespace relay::kafka::testing {

class FakeBroker {
 public:
  // `clock` stamps records appended without a timestamp (as a broker's
  // LogAppendTime does); null: the system clock.
  explicit FakeBroker(const Clock* clock = nullptr) : clock_(clock) {}
  void CreateTopic(const std::string& topic, int partitions);
  absl::StatusOr<int> Partitions(const std::string& topic) const;
  // Appends `record` (NotFound for an unknown topic), stamped `timestamp_ms`
  // or, when 0, the broker's clock. The partition is a
  // hash of the key, so one key stays on one partition as with librdkafka's
  // partitioner (the hash differs; tests must not rely on which partition).
  absl::StatusOr<std::pair<int32_t, int64_t>> Append(const Record& record, int64_t timestamp_ms = 0);
  // Appends to a chosen partition (tests that need records on two partitions).
  absl::StatusOr<int64_t> AppendTo(int32_t partition, const Record& record, int64_t timestamp_ms = 0);
  // Up to `max` records of a partition from offset `from`.
  std::vector<ConsumedRecord> Read(const std::string& topic, int32_t partition, int64_t from, size_t max) const;
  int64_t EndOffset(const std::string& topic, int32_t partition) const;
  // Every record of `topic`, partition by partition.
  std::vector<ConsumedRecord> All(const std::string& topic) const;
  // Waits until some record is appended or `timeout` passes.
  void WaitForAppend(std::chrono::milliseconds timeout) const;

  // Group offsets: the offset of the next record to read; -1 when none.
  void Commit(const std::string& group, const std::string& topic, int32_t partition, int64_t next_offset);
  int64_t Committed(const std::string& group, const std::string& topic, int32_t partition) const;

  // Makes every fake consumer of `group` report `status` as fatal.
  void InjectConsumerFatal(const std::string& group, absl::Status status);
  absl::Status ConsumerFatal(const std::string& group) const;

 private:
  const Clock* clock_ = nullptr;
  mutable std::mutex mu_;
  mutable std::condition_variable appended_;
  uint64_t appends_ = 0;
  std::map<std::string, std::vector<std::vector<ConsumedRecord>>> topics_;
  std::map<std::tuple<std::string, std::string, int32_t>, int64_t> committed_;
  std::map<std::string, absl::Status> fatal_;
};

}  // namespace relay::kafka::testing
