// Fake consumer, topic reader and follower over a FakeBroker. The consumer runs the
// same loop as the real one (batching, offsets stored after the effect,
// dead letters, paused partitions), over an in-memory source: one member
// that owns every partition of its topics, starting at the group's
// committed offsets. Unlike the real client, a stored offset is committed at
// once (the real one commits within commit_interval and on revoke/close).
#pragma once

#include <atomic>

#include <memory>

#include "prometheus/registry.h"
#include "relay/kafka/consumer.h"
#include "relay/kafka/follower.h"
#include "relay/kafka/reader.h"
#include "relay/kafka/testing/fake_broker.h"

namespace relay::kafka::testing {

// `broker` and `dead_letters` must outlive the consumer.
std::unique_ptr<Consumer> NewFakeConsumer(FakeBroker* broker, ConsumerOptions options, Producer* dead_letters,
                                          prometheus::Registry* metrics = nullptr);

class FakeTopicReader final : public TopicReader {
 public:
  explicit FakeTopicReader(const FakeBroker* broker) : broker_(broker) {}
  absl::StatusOr<int> Partitions(const std::string& topic) override { return broker_->Partitions(topic); }
  absl::StatusOr<std::map<int32_t, int64_t>> ReadToEnd(const std::string& topic,
                                                       const std::vector<int32_t>& partitions,
                                                       ReadCallback callback) override;
  absl::StatusOr<ConsumedRecord> ReadAt(const std::string& topic, int32_t partition, int64_t offset) override {
    auto records = broker_->Read(topic, partition, offset, 1);
    if (records.empty() || records[0].offset != offset) {
      return absl::NotFoundError(topic + "/" + std::to_string(partition) + " has no record at " + std::to_string(offset));
    }
    ++reads_at_;
    return records[0];
  }
  int64_t reads_at() const { return reads_at_.load(); }

 private:
  const FakeBroker* broker_;
  std::atomic<int64_t> reads_at_{0};
};

// Follows `options.topic` on `broker` (which must outlive it) as the real
// follower does: from the beginning, a time (from_unix_ms) or the end at start, every
// partition in offset order, on a thread of its own until destroyed. A
// missing topic is waited for. Health is always OK.
absl::StatusOr<std::unique_ptr<Follower>> NewFakeFollower(const FakeBroker* broker, FollowerOptions options,
                                                          FollowCallback callback);

}  // namespace relay::kafka::testing
