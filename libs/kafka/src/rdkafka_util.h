// librdkafka helpers shared by the clients in libs/kafka. Internal.
#pragma once

#include <librdkafka/rdkafka.h>

#include "relay/kafka/record.h"

namespace relay::kafka::internal {

// Copies a consumed message (topic, partition, offset, timestamp, key,
// value, headers) into our own terms.
ConsumedRecord ToRecord(const rd_kafka_message_t* message);

}  // namespace relay::kafka::internal
