// What a service checks about its topics before it calls itself ready: the
// topic exists and takes records as large as the service will send.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace relay::kafka {

struct TopicDescription {
  std::string name;
  int partitions = 0;
  int replication_factor = 0;
  // Effective topic configuration (explicit or inherited from the broker).
  std::map<std::string, std::string> configs;
};

// Thread-safe. One librdkafka handle for metadata and config requests.
class Admin {
 public:
  virtual ~Admin() = default;
  // NotFound when the topic does not exist; Unavailable when the cluster
  // does not answer within `timeout`.
  virtual absl::StatusOr<TopicDescription> DescribeTopic(const std::string& topic,
                                                         std::chrono::milliseconds timeout) = 0;
};

absl::StatusOr<std::unique_ptr<Admin>> NewKafkaAdmin(const std::string& bootstrap, const std::string& client_id);

// OK when `topic` can take a record of `max_record_bytes` (key, value and
// headers, uncompressed: the worst case): its max.message.bytes is at least
// that plus the record-batch overhead. FailedPrecondition naming the setting
// and both numbers otherwise.
absl::Status CheckTopicAccepts(const TopicDescription& topic, int64_t max_record_bytes);

// OK when the broker stamps `topic`'s records with its own clock as it
// appends them (message.timestamp.type=LogAppendTime), so every record's
// timestamp is on one clock whoever wrote it. FailedPrecondition naming the
// setting and its value otherwise (CreateTime: each producer's own clock).
absl::Status CheckLogAppendTime(const TopicDescription& topic);

// Bytes a record batch adds around one record (batch header, record
// framing): what max.message.bytes must allow beyond the record itself.
inline constexpr int64_t kRecordBatchOverhead = 512;

}  // namespace relay::kafka
