// Following a topic as it grows, outside any consumer group: every instance
// of a service sees every record (answers addressed to whichever instance
// holds the caller, facts every instance needs). Nothing is committed.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "relay/kafka/record.h"

namespace relay::kafka {

struct FollowerOptions {
  std::string bootstrap;
  std::string client_id = "relay-follower";
  std::string topic;
  // true: every retained record, then new ones (a compacted fact table);
  // false: only records written after the follower started (answers).
  bool from_beginning = false;
  // > 0: start at the first record whose timestamp is at or after this
  // (Unix ms; the broker's offsets_for_times), then new ones: a window's
  // worth of a long topic without reading it from its start. Overrides
  // from_beginning for the partitions there at start.
  int64_t from_unix_ms = 0;
  // Longest a new record waits at the broker before a fetch answers:
  // the follower's latency floor when the topic is quiet.
  std::chrono::milliseconds max_fetch_wait{10};
  std::map<std::string, std::string> extra;  // raw librdkafka properties
};

// Called for each record on the follower's own thread, in offset order
// within a partition. Must not block for long.
using FollowCallback = std::function<void(const ConsumedRecord&)>;

class Follower {
 public:
  virtual ~Follower() = default;
  // Any thread. With from_beginning (or from_unix_ms): true once every
  // record that was in the topic when the follower started (from that
  // time on) has been handed over. Otherwise
  // true once the follower is positioned at the end of every partition.
  virtual bool CaughtUp() const = 0;
  // Any thread: OK while following, the reason otherwise (for /readyz).
  virtual absl::Status Health() const = 0;
};

// Starts following at once (a thread of its own); the destructor stops it.
// The topic's partitions are looked up again every 30 s, so partitions
// added later are followed from their start. A missing topic is retried.
absl::StatusOr<std::unique_ptr<Follower>> NewKafkaFollower(FollowerOptions options, FollowCallback callback);

// What makes followers: NewKafkaFollower, or a fake in tests
// (libs/kafka/testing).
using FollowerFactory =
    std::function<absl::StatusOr<std::unique_ptr<Follower>>(FollowerOptions, FollowCallback)>;

}  // namespace relay::kafka
