#include "consumer_lag.h"

#include <charconv>

namespace relay::kafka::internal {

std::vector<PartitionLag> ParseConsumerLag(simdjson::dom::parser& parser, std::string_view stats_json) {
  std::vector<PartitionLag> out;
  simdjson::dom::element doc;
  if (parser.parse(stats_json.data(), stats_json.size()).get(doc) != simdjson::SUCCESS) return out;
  simdjson::dom::object topics;
  if (doc["topics"].get(topics) != simdjson::SUCCESS) return out;
  for (auto topic : topics) {
    simdjson::dom::object partitions;
    if (topic.value["partitions"].get(partitions) != simdjson::SUCCESS) continue;
    for (auto p : partitions) {
      int32_t partition = -1;
      std::string_view key = p.key;
      auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), partition);
      if (ec != std::errc() || partition < 0) continue;  // "-1": the unassigned-partition bucket
      std::string_view fetch_state;
      if (p.value["fetch_state"].get(fetch_state) != simdjson::SUCCESS || fetch_state == "none") continue;
      int64_t lag = -1;
      if (p.value["consumer_lag_stored"].get(lag) != simdjson::SUCCESS || lag < 0) {
        if (p.value["consumer_lag"].get(lag) != simdjson::SUCCESS) lag = -1;
      }
      if (lag < 0) continue;
      out.push_back({std::string(topic.key), partition, lag});
    }
  }
  return out;
}

}  // namespace relay::kafka::internal
