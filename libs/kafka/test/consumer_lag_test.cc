// relay_kafka_consumer_lag's input: librdkafka's statistics JSON, trimmed to
// the fields read (the shape is librdkafka's STATISTICS.md).
#include "consumer_lag.h"

#include <gtest/gtest.h>

namespace relay::kafka::internal {
namespace {

constexpr std::string_view kStats = R"({
  "name": "rdkafka#consumer-1", "type": "consumer",
  "topics": {
    "github.webhooks": {"topic": "github.webhooks", "partitions": {
      "0": {"partition": 0, "fetch_state": "active", "consumer_lag": 120, "consumer_lag_stored": 40},
      "1": {"partition": 1, "fetch_state": "active", "consumer_lag": 7, "consumer_lag_stored": -1},
      "2": {"partition": 2, "fetch_state": "none", "consumer_lag": -1, "consumer_lag_stored": -1},
      "3": {"partition": 3, "fetch_state": "offset-query", "consumer_lag": -1, "consumer_lag_stored": -1},
      "-1": {"partition": -1, "fetch_state": "none", "consumer_lag": -1, "consumer_lag_stored": -1}
    }},
    "ci.callbacks": {"topic": "ci.callbacks", "partitions": {
      "5": {"partition": 5, "fetch_state": "active", "consumer_lag": 0, "consumer_lag_stored": 0}
    }}
  }
})";

TEST(ConsumerLagTest, OwnedPartitionsWithTheStoredLagFirst) {
  simdjson::dom::parser parser;
  auto lags = ParseConsumerLag(parser, kStats);
  ASSERT_EQ(lags.size(), 3u);
  EXPECT_EQ(lags[0].topic, "github.webhooks");
  EXPECT_EQ(lags[0].partition, 0);
  EXPECT_EQ(lags[0].lag, 40);  // stored offset known: what is not yet done
  EXPECT_EQ(lags[1].partition, 1);
  EXPECT_EQ(lags[1].lag, 7);  // nothing stored yet: the committed offset's lag
  EXPECT_EQ(lags[2].topic, "ci.callbacks");
  EXPECT_EQ(lags[2].partition, 5);
  EXPECT_EQ(lags[2].lag, 0);
}

TEST(ConsumerLagTest, GarbageGivesNothing) {
  simdjson::dom::parser parser;
  EXPECT_TRUE(ParseConsumerLag(parser, "not json").empty());
  EXPECT_TRUE(ParseConsumerLag(parser, R"({"topics": 3})").empty());
  EXPECT_TRUE(ParseConsumerLag(parser, R"({"type": "consumer"})").empty());
}

}  // namespace
}  // namespace relay::kafka::internal
