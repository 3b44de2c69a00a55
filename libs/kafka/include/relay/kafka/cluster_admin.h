// What an operator asks of a Kafka cluster (relayctl): topics and their
// offsets, consumer groups and their committed offsets, offsets by time, and
// moving a stopped group's offsets. Raw librdkafka admin and metadata calls
// on one consumer handle that never joins a group.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "relay/kafka/record.h"

namespace relay::kafka {

struct PartitionOffsets {
  int64_t low = 0;   // oldest offset retained
  int64_t high = 0;  // offset the next record gets (the end)
};

struct GroupDescription {
  std::string id;
  // librdkafka's names: Stable, Empty, PreparingRebalance,
  // CompletingRebalance, Dead, Unknown. "Dead" for a group the broker does
  // not know.
  std::string state;
  int members = 0;
};

// Thread-compatible: one call at a time.
class ClusterAdmin {
 public:
  virtual ~ClusterAdmin() = default;
  // Topic name -> partition count; internal topics (__consumer_offsets...) left out.
  // Unavailable when no broker answers within the timeout.
  virtual absl::StatusOr<std::map<std::string, int>> Topics() = 0;
  // Partition -> low/high watermarks. NotFound for a missing topic.
  virtual absl::StatusOr<std::map<int32_t, PartitionOffsets>> Offsets(const std::string& topic) = 0;
  // Partition -> the first offset whose timestamp is at or after `unix_ms`
  // (the end offset when there is none).
  virtual absl::StatusOr<std::map<int32_t, int64_t>> OffsetsForTime(const std::string& topic, int64_t unix_ms) = 0;
  virtual absl::StatusOr<std::vector<GroupDescription>> Groups() = 0;
  // State "Dead" (and no offsets below) for a group the broker does not know.
  virtual absl::StatusOr<GroupDescription> DescribeGroup(const std::string& group) = 0;
  // Every committed offset of the group.
  virtual absl::StatusOr<std::map<TopicPartition, int64_t>> CommittedOffsets(const std::string& group) = 0;
  // Sets the group's committed offsets. The broker refuses while the group
  // has members (FailedPrecondition then, saying so).
  virtual absl::Status SetCommittedOffsets(const std::string& group,
                                           const std::map<TopicPartition, int64_t>& offsets) = 0;
  // Deletes a group without members (its committed offsets go with it).
  virtual absl::Status DeleteGroup(const std::string& group) = 0;
  // The timestamp (ms) of the first record at or after `offset`; NotFound
  // when there is none up to the end (only transaction markers, say);
  // DeadlineExceeded when the fetch did not answer in time.
  virtual absl::StatusOr<int64_t> TimestampAt(const std::string& topic, int32_t partition, int64_t offset) = 0;
};

// Fails with Unavailable, naming the bootstrap, when no broker answers
// within `timeout` (a first metadata request is made here).
absl::StatusOr<std::unique_ptr<ClusterAdmin>> NewClusterAdmin(const std::string& bootstrap,
                                                              std::chrono::milliseconds timeout);

}  // namespace relay::kafka
