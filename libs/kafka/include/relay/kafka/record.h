// What relay puts on and reads from Kafka, in our own terms.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace relay::kafka {

struct Header {
  std::string key;
  std::string value;
};

// A record to produce. The producer owns it until the delivery callback runs.
struct Record {
  std::string topic;
  std::string key;
  std::string value;
  std::vector<Header> headers;
  // -1: the partitioner picks by key. Set to co-partition a record with the
  // input it stems from (a ledger next to its topic).
  int32_t partition = -1;
};

struct TopicPartition {
  std::string topic;
  int32_t partition = 0;
  auto operator<=>(const TopicPartition&) const = default;
};

// A record read from a topic.
struct ConsumedRecord {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = 0;
  int64_t timestamp_ms = 0;
  std::string key;
  std::string value;
  std::vector<Header> headers;

  // The first header named `key`, or nullptr.
  const std::string* FindHeader(std::string_view name) const {
    for (const auto& h : headers) {
      if (h.key == name) return &h.value;
    }
    return nullptr;
  }
};

}  // namespace relay::kafka
