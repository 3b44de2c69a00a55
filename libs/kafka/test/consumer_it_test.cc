// The consumer against the real broker: offsets stored only after the
// handler's effect, poison records dead-lettered with the reason, transient
// failures retried, and the group's committed position surviving a restart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <random>
#include <map>
#include <set>
#include <thread>

#include "relay/kafka/consumer.h"
#include "relay/kafka/producer.h"
#include "support/kafka_admin.h"
#include "support/subprocess.h"
#include "support/topic_reader.h"

namespace relay::kafka {
namespace {

using namespace std::chrono_literals;

void ProduceAll(Producer& producer, const std::string& topic, const std::vector<std::string>& values) {
  std::vector<std::future<absl::Status>> acks;
  for (const auto& v : values) {
    auto p = std::make_shared<std::promise<absl::Status>>();
    acks.push_back(p->get_future());
    producer.Send(Record{topic, v, v, {{"origin", "test"}}}, [p](absl::Status s) { p->set_value(s); });
  }
  for (auto& a : acks) ASSERT_TRUE(a.get().ok());
}

// Runs a consumer until `want` distinct values were handled OK, then stops it.
std::set<std::string> ConsumeUntil(ConsumerOptions options, Producer* dlq, size_t want,
                                   std::function<absl::Status(const ConsumedRecord&)> handler) {
  auto consumer = NewKafkaConsumer(options, dlq, nullptr);
  EXPECT_TRUE(consumer.ok()) << consumer.status();
  std::set<std::string> done;
  std::mutex mu;
  std::thread runner([&] {
    auto s = (*consumer)->Run([&](const ConsumedRecord& r) {
      absl::Status st = handler(r);
      std::lock_guard lock(mu);
      if (st.ok() || IsPoison(st)) done.insert(r.value);
      if (done.size() >= want) (*consumer)->Stop();
      return st;
    });
    EXPECT_TRUE(s.ok()) << s;
  });
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard lock(mu);
      if (done.size() >= want) break;
    }
    std::this_thread::sleep_for(20ms);
  }
  (*consumer)->Stop();
  runner.join();
  return done;
}

TEST(ConsumerIT, DeadLettersPoisonRetriesTransientAndCommitsOnlyWhatWasDone) {
  std::random_device rd;
  std::string topic = "it.consumer." + std::to_string(rd());
  ASSERT_EQ(relay::testing::CreateTopic(relay::testing::FixtureBootstrap(), topic, 3), "");
  ASSERT_EQ(relay::testing::CreateTopic(relay::testing::FixtureBootstrap(), topic + ".dlq", 1), "");
  ProducerOptions popts;
  popts.bootstrap = relay::testing::FixtureBootstrap();
  auto producer = NewKafkaProducer(popts, nullptr);
  ASSERT_TRUE(producer.ok());
  std::vector<std::string> values;
  for (int i = 0; i < 20; ++i) values.push_back("v" + std::to_string(i));
  values.push_back("poison");
  values.push_back("flaky");
  ProduceAll(**producer, topic, values);

  ConsumerOptions options;
  options.bootstrap = relay::testing::FixtureBootstrap();
  options.group_id = "it-group-" + std::to_string(rd());
  options.topics = {topic};
  options.retry_backoff_min = 50ms;
  std::atomic<int> flaky_attempts{0};
  auto done = ConsumeUntil(options, producer->get(), values.size(), [&](const ConsumedRecord& r) {
    if (r.value == "poison") return absl::InvalidArgumentError("not a webhook record");
    if (r.value == "flaky" && flaky_attempts++ < 2) return absl::UnavailableError("clickhouse is down");
    EXPECT_NE(r.FindHeader("origin"), nullptr);
    return absl::OkStatus();
  });
  EXPECT_EQ(done.size(), values.size());
  EXPECT_EQ(flaky_attempts.load(), 3);  // failed twice, then succeeded

  std::string error;
  auto dlq = relay::testing::ReadTopic(relay::testing::FixtureBootstrap(), topic + ".dlq", 30s, &error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].value, "poison");
  ASSERT_NE(dlq[0].FindHeader(kDlqReasonHeader), nullptr);
  EXPECT_EQ(*dlq[0].FindHeader(kDlqReasonHeader), "not a webhook record");
  EXPECT_EQ(*dlq[0].FindHeader(kDlqTopicHeader), topic);
  EXPECT_NE(dlq[0].FindHeader("origin"), nullptr);  // original headers kept

  // The same group after a restart sees only what came after.
  ProduceAll(**producer, topic, {"later-1", "later-2"});
  std::set<std::string> seen;
  auto again = ConsumeUntil(options, producer->get(), 2, [&](const ConsumedRecord& r) {
    seen.insert(r.value);
    return absl::OkStatus();
  });
  EXPECT_EQ(seen, (std::set<std::string>{"later-1", "later-2"}));
}

TEST(ConsumerIT, WithoutStoringNothingIsCommitted) {
  std::random_device rd;
  std::string topic = "it.consumer.nostore." + std::to_string(rd());
  ASSERT_EQ(relay::testing::CreateTopic(relay::testing::FixtureBootstrap(), topic, 1), "");
  ProducerOptions popts;
  popts.bootstrap = relay::testing::FixtureBootstrap();
  auto producer = NewKafkaProducer(popts, nullptr);
  ASSERT_TRUE(producer.ok());
  ProduceAll(**producer, topic, {"a"});
  ConsumerOptions options;
  options.bootstrap = relay::testing::FixtureBootstrap();
  options.group_id = "it-nostore-" + std::to_string(rd());
  options.topics = {topic};
  options.retry_backoff_min = 50ms;
  // The handler keeps failing: the consumer stops mid-retry, commits nothing.
  std::atomic<int> attempts{0};
  auto consumer = NewKafkaConsumer(options, producer->get(), nullptr);
  ASSERT_TRUE(consumer.ok());
  std::thread runner([&] {
    (void)(*consumer)->Run([&](const ConsumedRecord&) {
      if (++attempts >= 3) (*consumer)->Stop();
      return absl::UnavailableError("down");
    });
  });
  runner.join();
  EXPECT_GE(attempts.load(), 3);
  // A new consumer in the group gets the record again.
  std::set<std::string> seen;
  ConsumeUntil(options, producer->get(), 1, [&](const ConsumedRecord& r) {
    seen.insert(r.value);
    return absl::OkStatus();
  });
  EXPECT_EQ(seen, std::set<std::string>{"a"});
}

TEST(ConsumerIT, RebalanceCommitsOnRevokeSoTheNewOwnerRedoesNothing) {
  std::random_device rd;
  std::string topic = "it.consumer.rebalance." + std::to_string(rd());
  ASSERT_EQ(relay::testing::CreateTopic(relay::testing::FixtureBootstrap(), topic, 4), "");
  ProducerOptions popts;
  popts.bootstrap = relay::testing::FixtureBootstrap();
  auto producer = NewKafkaProducer(popts, nullptr);
  ASSERT_TRUE(producer.ok());
  std::vector<std::string> values;
  for (int i = 0; i < 120; ++i) values.push_back("r" + std::to_string(i));
  ProduceAll(**producer, topic, values);

  ConsumerOptions options;
  options.bootstrap = relay::testing::FixtureBootstrap();
  options.group_id = "it-rebalance-" + std::to_string(rd());
  options.topics = {topic};
  // Auto-commit far in the future: only the commit on revoke can save the
  // first owner's work from being redone.
  options.commit_interval = std::chrono::minutes(10);
  std::mutex mu;
  std::map<std::string, int> handled;  // value -> times handled
  std::map<char, int> by_member;       // 'a' / 'b' -> records handled
  auto handler_for = [&](char member) {
    return [&, member](const ConsumedRecord& r) {
      // Slow enough that the stream outlasts B's join (a few seconds).
      std::this_thread::sleep_for(40ms);
      std::lock_guard lock(mu);
      handled[r.value]++;
      by_member[member]++;
      return absl::OkStatus();
    };
  };
  auto distinct = [&] {
    std::lock_guard lock(mu);
    return handled.size();
  };
  auto a = NewKafkaConsumer(options, producer->get(), nullptr);
  ASSERT_TRUE(a.ok());
  std::thread run_a([&] { EXPECT_TRUE((*a)->Run(handler_for('a')).ok()); });
  while (distinct() < 10) std::this_thread::sleep_for(5ms);
  // A second member joins: partitions move, A's are revoked first.
  auto b = NewKafkaConsumer(options, producer->get(), nullptr);
  ASSERT_TRUE(b.ok());
  std::thread run_b([&] { EXPECT_TRUE((*b)->Run(handler_for('b')).ok()); });
  // After the rebalance, new records land on every partition, B's included.
  // (A may already have drained the partitions B takes over; without the
  // commit on revoke B would then redo them from the start.)
  std::this_thread::sleep_for(5s);
  std::vector<std::string> later;
  for (int i = 0; i < 40; ++i) later.push_back("s" + std::to_string(i));
  ProduceAll(**producer, topic, later);
  values.insert(values.end(), later.begin(), later.end());
  auto deadline = std::chrono::steady_clock::now() + 90s;
  while (distinct() < values.size() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  (*a)->Stop();
  (*b)->Stop();
  run_a.join();
  run_b.join();
  std::lock_guard lock(mu);
  EXPECT_EQ(handled.size(), values.size());
  // The rebalance really happened mid-stream: both members did work.
  EXPECT_GT(by_member['a'], 0);
  EXPECT_GT(by_member['b'], 0) << "B never got partitions: the test did not exercise a rebalance";
  int redone = 0;
  for (auto& [v, n] : handled) redone += n > 1;
  EXPECT_EQ(redone, 0) << redone << " records were handled twice across the rebalance";
}

}  // namespace
}  // namespace relay::kafka
