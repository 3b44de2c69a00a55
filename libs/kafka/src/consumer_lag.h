// Consumer lag from librdkafka's statistics JSON (statistics.interval.ms),
// exported by the consumer as relay_kafka_consumer_lag so the "consumer lag
// growing" alert (deploy/prometheus) needs no exporter beside relay.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "simdjson.h"

namespace relay::kafka::internal {

struct PartitionLag {
  std::string topic;
  int32_t partition = 0;
  int64_t lag = 0;  // records between the end of the partition and relay's stored (or committed) offset
};

// Partitions this consumer owns (fetch_state other than "none") and their
// lag: consumer_lag_stored (end minus the offset stored after the effect)
// where known, else consumer_lag (end minus committed). A partition whose
// lag librdkafka does not know yet (-1, before the first fetch) is left out.
// Unparsable JSON gives an empty list.
std::vector<PartitionLag> ParseConsumerLag(simdjson::dom::parser& parser, std::string_view stats_json);

}  // namespace relay::kafka::internal
