// librdkafka helpers shared by the clients in libs/kafka. Internal.
#pragma once

#include <librdkafka/rdkafka.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

#include "relay/kafka/consumer.h"
#include "relay/kafka/record.h"

namespace relay::kafka {

// consumer.h: a snapshot of librdkafka's consumer group metadata.
struct GroupMember {
  explicit GroupMember(rd_kafka_consumer_group_metadata_t* m) : metadata(m) {}
  ~GroupMember() { rd_kafka_consumer_group_metadata_destroy(metadata); }
  GroupMember(const GroupMember&) = delete;
  GroupMember& operator=(const GroupMember&) = delete;
  rd_kafka_consumer_group_metadata_t* metadata;
};

}  // namespace relay::kafka

namespace relay::kafka::internal {

// Copies a consumed message (topic, partition, offset, timestamp, key,
// value, headers) into our own terms.
ConsumedRecord ToRecord(const rd_kafka_message_t* message);

// A consumer handle outside any group (partitions assigned by hand,
// nothing committed, no partition EOF events), with `props` and then
// `extra` applied and logs routed to relay's log. `what` names it in
// errors ("kafka reader").
absl::StatusOr<rd_kafka_t*> NewUngroupedConsumer(const std::string& what,
                                                 std::vector<std::pair<std::string, std::string>> props,
                                                 const std::map<std::string, std::string>& extra);

// Leaves and destroys a handle of NewUngroupedConsumer; nullptr is a no-op.
void CloseUngroupedConsumer(rd_kafka_t* rk);

}  // namespace relay::kafka::internal
