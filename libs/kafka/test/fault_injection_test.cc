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
#include <map>
#include <set>
#include <thread>

#include "prometheus/text_serializer.h"
#include "relay/kafka/producer.h"
#include "support/timing.h"
#include "support/topic_reader.h"

namespace relay::kafka {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
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
  // The next `count` Produce requests fail with `err`.
  void FailProduces(int count, rd_kafka_resp_err_t err) {
    std::vector<rd_kafka_resp_err_t> errs(count, err);
    rd_kafka_mock_push_request_errors_array(cluster_, /*Produce*/ 0, errs.size(), errs.data());
  }
  // The next EndTxn (commit or abort) fails with `err`.
  void FailEndTxn(rd_kafka_resp_err_t err) {
    rd_kafka_mock_push_request_errors(cluster_, /*EndTxn*/ 26, 1, err);
  }
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

// Sends one record and waits for its callback (30 s at most).
absl::Status SendOne(Producer& producer, const std::string& value) {
  auto p = std::make_shared<std::promise<absl::Status>>();
  auto f = p->get_future();
  producer.Send(Record{"events", "k", value, {}}, [p](absl::Status s) { p->set_value(s); });
  if (f.wait_for(30s) != std::future_status::ready) return absl::DeadlineExceededError("no callback in 30 s");
  return f.get();
}

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
  auto send = [&](const std::string& value) { return SendOne(**producer, value); };
  ASSERT_TRUE(send("before").ok());
  cluster.SetBrokerUp(false);
  auto started = std::chrono::steady_clock::now();
  absl::Status down = send("during");
  auto took = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(absl::IsUnavailable(down)) << down;
  // At the delivery timeout, within one 50 ms deadline sweep.
  EXPECT_GE(took, 1450ms);
  EXPECT_LT(took, relay::testing::Within(1500ms, 250ms));
  cluster.SetBrokerUp(true);
  // Recovery: within a few delivery timeouts of the broker's return.
  absl::Status after = send("after");
  for (int i = 0; i < 5 && !after.ok(); ++i) after = send("after");
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
  auto started = std::chrono::steady_clock::now();
  (*producer)->Send(Record{"events", "k", "v", {}}, [&p](absl::Status s) { p.set_value(s); });
  auto f = p.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - started, relay::testing::Within(500ms, 250ms));
  EXPECT_TRUE(absl::IsUnavailable(f.get()));
  EXPECT_FALSE((*producer)->Connected());
}

// Sends `n` records with keys k0..k{keys-1} and values "<key>:<i>" from a
// thread of its own, raising a fatal error once `fatal_at` were sent, and
// records when each callback ran relative to its Send.
struct Stream {
  struct Outcome {
    absl::Status status;
    std::chrono::steady_clock::duration took;
  };
  std::mutex mu;
  std::vector<Outcome> outcomes;
  std::atomic<int> done{0};

  void Run(Producer* producer, int n, int keys, int fatal_at, std::chrono::milliseconds pace = 0ms) {
    for (int i = 0; i < n; ++i) {
      if (i == fatal_at) TestRaiseFatalError(producer);
      std::string key = "k" + std::to_string(i % keys);
      auto sent = std::chrono::steady_clock::now();
      producer->Send(Record{"events", key, key + ":" + std::to_string(i), {}}, [this, sent](absl::Status s) {
        std::lock_guard lock(mu);
        outcomes.push_back({std::move(s), std::chrono::steady_clock::now() - sent});
        ++done;
      });
      if (pace.count() > 0) std::this_thread::sleep_for(pace);
    }
  }
  bool WaitAll(int n, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (done.load() < n && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    return done.load() == n;
  }
};

TEST(ProducerFaultTest, RecordsOfOneKeyKeepTheirOrderAcrossARecreation) {
  MockCluster cluster;
  ProducerOptions options;
  options.bootstrap = cluster.bootstrap();
  options.linger = 2ms;
  auto producer = NewKafkaProducer(options, nullptr);
  ASSERT_TRUE(producer.ok()) << producer.status();
  constexpr int kRecords = 20000, kKeys = 5;
  Stream stream;
  // Sends keep coming while the handle is replaced: the ones made after the
  // fatal error must not overtake the purged ones being re-sent.
  stream.Run(producer->get(), kRecords, kKeys, kRecords / 4);
  ASSERT_TRUE(stream.WaitAll(kRecords, 60s));
  for (const auto& o : stream.outcomes) ASSERT_TRUE(o.status.ok()) << o.status;

  std::string error;
  auto records = relay::testing::ReadTopic(cluster.bootstrap(), "events", 30s, &error);
  ASSERT_TRUE(error.empty()) << error;
  // Per key, in partition order: each value's last copy comes after the
  // last copy of every earlier value (a re-send may repeat a run of values
  // the broker already had, but never puts a later Send before an earlier).
  std::map<std::string, std::vector<int>> by_key;
  for (const auto& r : records) by_key[r.key].push_back(std::stoi(r.value.substr(r.value.find(':') + 1)));
  std::set<int> seen;
  for (auto& [key, values] : by_key) {
    std::map<int, size_t> last;
    for (size_t i = 0; i < values.size(); ++i) last[values[i]] = i;
    size_t previous = 0;
    bool first = true;
    for (auto& [value, position] : last) {  // ascending values
      if (!first) {
        EXPECT_GT(position, previous) << key << ": value " << value << " out of order";
      }
      previous = position;
      first = false;
      seen.insert(value);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kRecords));
}

TEST(ProducerFaultTest, DeliveryBoundHoldsAcrossReSends) {
  MockCluster cluster;
  ProducerOptions options;
  options.bootstrap = cluster.bootstrap();
  options.delivery_timeout = 1000ms;
  auto producer = NewKafkaProducer(options, nullptr);
  ASSERT_TRUE(producer.ok()) << producer.status();
  Stream warmup;
  warmup.Run(producer->get(), 1, 1, -1);
  ASSERT_TRUE(warmup.WaitAll(1, 10s));
  // The broker goes away, then the handle fails: every record waiting is
  // re-sent on a new handle that cannot deliver either. Each callback must
  // still come within the delivery timeout of its own Send, not a fresh
  // timeout per handle.
  cluster.SetBrokerUp(false);
  Stream stream;
  stream.Run(producer->get(), 200, 3, 100, 2ms);
  ASSERT_TRUE(stream.WaitAll(200, 20s));
  auto worst = std::chrono::steady_clock::duration::zero();
  for (const auto& o : stream.outcomes) {
    EXPECT_TRUE(absl::IsUnavailable(o.status)) << o.status;
    worst = std::max(worst, o.took);
  }
  // One poll interval (50 ms) of slack for the deadline check.
  EXPECT_LT(worst, relay::testing::Within(1000ms, 200ms)) << "worst callback after "
                                   << std::chrono::duration_cast<std::chrono::milliseconds>(worst).count() << " ms";
}

TEST(ProducerFaultTest, FatalClassErrorOnAHealthyHandleIsSentAgainOnIt) {
  MockCluster cluster;
  prometheus::Registry registry;
  ProducerOptions options;
  options.bootstrap = cluster.bootstrap();
  auto producer = NewKafkaProducer(options, &registry);
  ASSERT_TRUE(producer.ok()) << producer.status();
  Stream warmup;
  warmup.Run(producer->get(), 1, 1, -1);
  ASSERT_TRUE(warmup.WaitAll(1, 10s));
  // The broker answers the next Produce requests with INVALID_PRODUCER_EPOCH:
  // librdkafka fails the records with that fatal-class error but keeps the
  // handle (it bumps its own epoch). They must be sent again on it, not
  // failed to the caller and not wait for a recreation that never comes.
  cluster.FailProduces(3, RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH);
  Stream stream;
  stream.Run(producer->get(), 100, 3, -1);
  ASSERT_TRUE(stream.WaitAll(100, 30s));
  for (const auto& o : stream.outcomes) EXPECT_TRUE(o.status.ok()) << o.status;
  std::string metrics = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_THAT(metrics, HasSubstr("relay_kafka_producer_recreations_total 0"));
  EXPECT_THAT(metrics, Not(HasSubstr("relay_kafka_produce_resends_total 0\n"))) << "the path under test did not run";
  std::string error;
  auto records = relay::testing::ReadTopic(cluster.bootstrap(), "events", 30s, &error);
  ASSERT_TRUE(error.empty()) << error;
  std::set<std::string> values;
  for (const auto& r : records) values.insert(r.value);
  for (int i = 0; i < 100; ++i) {
    std::string value = "k" + std::to_string(i % 3) + ":" + std::to_string(i);
    EXPECT_TRUE(values.count(value)) << value << " is not in the topic";
  }
}

TEST(ProducerFaultTest, FailingRecreationDoesNotStallCallbacks) {
  MockCluster cluster;
  prometheus::Registry registry;
  ProducerOptions options;
  options.bootstrap = cluster.bootstrap();
  options.delivery_timeout = 800ms;
  auto producer = NewKafkaProducer(options, &registry);
  ASSERT_TRUE(producer.ok()) << producer.status();
  // Three attempts to make a new handle fail (one a second): for about
  // three seconds there is no usable handle at all.
  TestFailRecreations(producer->get(), 3);
  Stream stream;
  stream.Run(producer->get(), 500, 3, 0, 10ms);
  ASSERT_TRUE(stream.WaitAll(500, 30s));
  int failed = 0, ok = 0;
  auto worst = std::chrono::steady_clock::duration::zero();
  for (const auto& o : stream.outcomes) {
    (o.status.ok() ? ok : failed)++;
    worst = std::max(worst, o.took);
  }
  EXPECT_LT(worst, relay::testing::Within(800ms, 200ms)) << "a callback waited "
                                  << std::chrono::duration_cast<std::chrono::milliseconds>(worst).count() << " ms";
  EXPECT_GT(failed, 0) << "no record fell in the window without a handle";
  EXPECT_GT(ok, 0) << "the producer never recovered";
  std::string metrics = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_THAT(metrics, HasSubstr("relay_kafka_producer_recreation_failures_total 3"));
  EXPECT_THAT(metrics, HasSubstr("relay_kafka_producer_recreations_total 1"));
}

// A fatal transaction error (the broker answering EndTxn with
// INVALID_TXN_STATE, as a loaded broker did to relay-dispatch's STARTED
// marks in CI) on an id no one else holds: the records in hand fail as
// retryable and a new handle goes on. On an id that may be shared (the
// default), the producer stays fenced: a new handle would fence the holder.
TEST(TransactionalProducerFaultTest, AFatalErrorOnAnIdOfItsOwnRenewsTheProducerAndLosesNothingAcked) {
  for (bool renew : {true, false}) {
    SCOPED_TRACE(renew ? "renew_after_fatal" : "an id that may be shared");
    MockCluster cluster;
    prometheus::Registry registry;
    ProducerOptions options;
    options.bootstrap = cluster.bootstrap();
    options.transactional_id = std::string("fault-") + (renew ? "own" : "shared");
    options.renew_after_fatal = renew;
    auto producer = NewKafkaProducer(options, &registry);
    ASSERT_TRUE(producer.ok()) << producer.status();
    ASSERT_TRUE(SendOne(**producer, "before").ok());
    cluster.FailEndTxn(RD_KAFKA_RESP_ERR_INVALID_TXN_STATE);
    absl::Status failed = SendOne(**producer, "refused");
    ASSERT_FALSE(failed.ok());
    absl::Status after = SendOne(**producer, "after");
    std::string metrics = prometheus::TextSerializer().Serialize(registry.Collect());
    if (renew) {
      EXPECT_TRUE(absl::IsUnavailable(failed)) << failed;
      EXPECT_FALSE(IsFenced(failed)) << failed;
      EXPECT_TRUE(after.ok()) << after;
      EXPECT_TRUE((*producer)->Connected());
      EXPECT_THAT(metrics, HasSubstr("relay_kafka_transactions_total{result=\"renewed\"} 1"));
    } else {
      EXPECT_TRUE(IsFenced(failed)) << failed;
      EXPECT_TRUE(IsFenced(after)) << after;
      EXPECT_FALSE((*producer)->Connected());
      EXPECT_THAT(metrics, Not(HasSubstr("result=\"renewed\"")));
    }
    // What was acknowledged is there; the refused record never became visible.
    std::string error;
    auto records = relay::testing::ReadTopic(cluster.bootstrap(), "events", 10s, &error);
    ASSERT_TRUE(error.empty()) << error;
    std::set<std::string> values;
    for (const auto& r : records) values.insert(r.value);
    EXPECT_TRUE(values.count("before"));
    EXPECT_EQ(values.count("after"), renew ? 1u : 0u);
  }
}

}  // namespace
}  // namespace relay::kafka
