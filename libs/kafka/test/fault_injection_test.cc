// Producer fault handling on librdkafka's in-process mock cluster: a fatal
// idempotence error mid-stream and a broker outage. The mock cluster stands
// in for the broker only here, where faults must be injected.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <set>

#include "prometheus/text_serializer.h"
#include "relay/kafka/producer.h"
#include "support/topic_reader.h"

namespace relay::kafka {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class MockCluster {
 public:
  MockCluster() {
    char err[256];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    cluster_ = rd_kafka_mock_cluster_new(rk_, 1);
    rd_kafka_mock_topic_create(cluster_, "events", 3, 1);
  }
  ~MockCluster() {
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(rk_);
  }
  std::string bootstrap() const { return rd_kafka_mock_cluster_bootstraps(cluster_); }
  void SetBrokerUp(bool up) {
    if (up) {
      rd_kafka_mock_broker_set_up(cluster_, 1);
    } else {
      rd_kafka_mock_broker_set_down(cluster_, 1);
    }
  }

 private:
  rd_kafka_t* rk_;
  rd_kafka_mock_cluster_t* cluster_;
};

struct Results {
  std::mutex mu;
  std::vector<absl::Status> statuses;
  std::promise<void> all_done;
  size_t expected = 0;
  void Add(absl::Status s) {
    std::lock_guard lock(mu);
    statuses.push_back(std::move(s));
    if (statuses.size() == expected) all_done.set_value();
  }
};

TEST(ProducerFaultTest, FatalErrorMidStreamRecreatesProducerAndLosesNothing) {
  MockCluster cluster;
  prometheus::Registry registry;
  ProducerOptions options;
  options.bootstrap = cluster.bootstrap();
  options.linger = 5ms;
  auto producer = NewKafkaProducer(options, &registry);
  ASSERT_TRUE(producer.ok()) << producer.status();

  constexpr int kRecords = 2000;
  Results results;
  results.expected = kRecords;
  for (int i = 0; i < kRecords; ++i) {
    if (i == kRecords / 2) TestRaiseFatalError(producer->get());
    (*producer)->Send(Record{"events", "k" + std::to_string(i % 7), "v" + std::to_string(i), {}},
                      [&results](absl::Status s) { results.Add(std::move(s)); });
  }
  ASSERT_EQ(results.all_done.get_future().wait_for(60s), std::future_status::ready);
  for (const auto& s : results.statuses) ASSERT_TRUE(s.ok()) << s;
  std::string metrics = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_THAT(metrics, HasSubstr("relay_kafka_producer_recreations_total 1"));
  EXPECT_THAT(metrics, HasSubstr("relay_kafka_produced_records_total{result=\"ok\"} 2000"));

  // Every record is in the topic (a re-send may have duplicated some).
  std::string error;
  auto records = relay::testing::ReadTopic(cluster.bootstrap(), "events", 30s, &error);
  ASSERT_TRUE(error.empty()) << error;
  std::set<std::string> values;
  for (const auto& r : records) values.insert(r.value);
  EXPECT_EQ(values.size(), static_cast<size_t>(kRecords));
}

TEST(ProducerFaultTest, BrokerDownFailsWithinDeliveryTimeoutAndRecovers) {
  MockCluster cluster;
  ProducerOptions options;
  options.bootstrap = cluster.bootstrap();
  options.delivery_timeout = 1500ms;
  auto producer = NewKafkaProducer(options, nullptr);
  ASSERT_TRUE(producer.ok());
  auto send = [&](const std::string& value) {
    auto p = std::make_shared<std::promise<absl::Status>>();
    auto f = p->get_future();
    (*producer)->Send(Record{"events", "k", value, {}}, [p](absl::Status s) { p->set_value(s); });
    return f;
  };
  ASSERT_TRUE(send("before").get().ok());
  cluster.SetBrokerUp(false);
  auto started = std::chrono::steady_clock::now();
  absl::Status down = send("during").get();
  EXPECT_TRUE(absl::IsUnavailable(down)) << down;
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
  cluster.SetBrokerUp(true);
  // Recovery: within a few delivery timeouts of the broker's return.
  absl::Status after = send("after").get();
  for (int i = 0; i < 5 && !after.ok(); ++i) after = send("after").get();
  EXPECT_TRUE(after.ok()) << after;
}

TEST(ProducerFaultTest, UnreachableBrokerNeverHangsTheCaller) {
  // Nothing listens on port 1: the deadline alone must end the attempt.
  ProducerOptions options;
  options.bootstrap = "127.0.0.1:1";
  options.delivery_timeout = 500ms;
  auto producer = NewKafkaProducer(options, nullptr);
  ASSERT_TRUE(producer.ok());
  std::promise<absl::Status> p;
  (*producer)->Send(Record{"events", "k", "v", {}}, [&p](absl::Status s) { p.set_value(s); });
  auto f = p.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(absl::IsUnavailable(f.get()));
  EXPECT_FALSE((*producer)->Connected());
}

}  // namespace
}  // namespace relay::kafka
