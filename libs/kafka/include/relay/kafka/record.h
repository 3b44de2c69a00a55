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

// Header names every relay record carries.
inline constexpr char kSchemaHeader[] = "relay-schema";          // the protobuf message's full name
inline constexpr char kDeliveryHeader[] = "relay-delivery-id";  // the webhook delivery it stems from
// Set by relayctl: a dead letter sent back to its topic after a fix
// ("<dlq topic>/<partition>/<offset>"), and a copy made by a replay
// ("<source topic>/<partition>/<offset>").
inline constexpr char kRedrivenFromHeader[] = "relay-redriven-from";
inline constexpr char kReplayedFromHeader[] = "relay-replayed-from";

// A record of a protobuf `message` with relay's headers (the delivery header
// only when `delivery_id` is set). A template so this library needs no
// protobuf: any generated message type fits.
template <typename Message>
Record MessageRecord(std::string topic, std::string key, const Message& message, const std::string& delivery_id = "",
                     int32_t partition = -1) {
  Record r{std::move(topic), std::move(key), message.SerializeAsString(),
           {{kSchemaHeader, std::string(message.GetDescriptor()->full_name())}}, partition};
  if (!delivery_id.empty()) r.headers.push_back({kDeliveryHeader, delivery_id});
  return r;
}

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
