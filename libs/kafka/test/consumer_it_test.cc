// The consumer against the real broker: offsets stored only after the
// handler's effect, poison records dead-lettered with the reason, transient
// failures retried, and the group's committed position surviving a restart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <iostream>
#include <random>
#include <map>
#include <set>
#include <thread>

#include "relay/kafka/admin.h"
#include "relay/kafka/consumer.h"
#include "relay/kafka/follower.h"
#include "relay/kafka/reader.h"
#include "relay/kafka/producer.h"
#include "support/kafka_admin.h"
#include "support/subprocess.h"
#include "support/timing.h"
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
    if (r.value == "poison") return PoisonError("not a webhook record");
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
  EXPECT_TRUE(relay::testing::WaitFor([&] { return distinct() >= 10; }, 30s)) << "the first member handled nothing";
  // A second member joins: partitions move, A's are revoked first.
  auto b = NewKafkaConsumer(options, producer->get(), nullptr);
  ASSERT_TRUE(b.ok());
  std::thread run_b([&] { EXPECT_TRUE((*b)->Run(handler_for('b')).ok()); });
  // New records keep landing on every partition until B has handled one:
  // the rebalance happened. (A may already have drained the partitions B
  // takes over; without the commit on revoke B would then redo them from
  // the start.)
  auto b_handled = [&] {
    std::lock_guard lock(mu);
    return by_member['b'];
  };
  auto join_deadline = std::chrono::steady_clock::now() + 60s;
  for (int round = 0; b_handled() == 0 && std::chrono::steady_clock::now() < join_deadline; ++round) {
    std::vector<std::string> later;
    for (int i = 0; i < 8; ++i) later.push_back("s" + std::to_string(round) + "-" + std::to_string(i));
    ProduceAll(**producer, topic, later);
    values.insert(values.end(), later.begin(), later.end());
    std::this_thread::sleep_for(250ms);
  }
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

std::string NewTopic(const std::string& stem, int partitions) {
  std::random_device rd;
  std::string topic = "it." + stem + "." + std::to_string(rd());
  EXPECT_EQ(relay::testing::CreateTopic(relay::testing::FixtureBootstrap(), topic, partitions), "");
  return topic;
}

std::unique_ptr<Producer> NewProducer() {
  ProducerOptions popts;
  popts.bootstrap = relay::testing::FixtureBootstrap();
  auto producer = NewKafkaProducer(popts, nullptr);
  EXPECT_TRUE(producer.ok()) << producer.status();
  return std::move(*producer);
}

ConsumerOptions Options(const std::string& topic, const std::string& group) {
  std::random_device rd;
  ConsumerOptions options;
  options.bootstrap = relay::testing::FixtureBootstrap();
  options.group_id = group + "-" + std::to_string(rd());
  options.topics = {topic};
  options.retry_backoff_min = 50ms;
  return options;
}

TEST(ConsumerIT, BatchesOnTheRealBrokerStoreOffsetsOnlyAfterTheirEffect) {
  std::string topic = NewTopic("batch", 3);
  auto producer = NewProducer();
  std::vector<std::string> values;
  for (int i = 0; i < 1000; ++i) values.push_back("b" + std::to_string(i));
  ProduceAll(*producer, topic, values);
  ConsumerOptions options = Options(topic, "it-batch");
  auto consumer = NewKafkaConsumer(options, producer.get(), nullptr);
  ASSERT_TRUE(consumer.ok());
  std::set<std::string> handled;
  size_t largest = 0;
  int failures = 0;
  BatchOptions bo;
  bo.max_records = 300;
  bo.max_wait = 200ms;
  std::thread runner([&] {
    auto s = (*consumer)->RunBatches(bo, [&](Batch& b) -> absl::Status {
      if (failures++ == 1) return absl::UnavailableError("insert failed once");  // the second batch comes again
      largest = std::max(largest, b.records().size());
      for (const auto& r : b.records()) handled.insert(r.value);
      if (handled.size() == values.size()) (*consumer)->Stop();
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << s;
  });
  runner.join();
  EXPECT_EQ(handled.size(), values.size());
  EXPECT_LE(largest, 300u);
  EXPECT_GT(largest, 1u);
  // Everything was committed: the group sees nothing more.
  ProduceAll(*producer, topic, {"after"});
  std::set<std::string> seen;
  ConsumeUntil(options, producer.get(), 1, [&](const ConsumedRecord& r) {
    seen.insert(r.value);
    return absl::OkStatus();
  });
  EXPECT_EQ(seen, std::set<std::string>{"after"});
}

TEST(ConsumerIT, ABackoffDoesNotHoldUpARebalance) {
  std::string topic = NewTopic("backoff", 4);
  auto producer = NewProducer();
  std::vector<std::string> values;
  for (int i = 0; i < 40; ++i) values.push_back("x" + std::to_string(i));
  ProduceAll(*producer, topic, values);
  ConsumerOptions options = Options(topic, "it-backoff");
  // A fails everything, with a backoff far longer than the rebalance may
  // take: while paused it must go on polling, so B's join completes.
  options.retry_backoff_min = 30s;
  options.retry_backoff_max = 30s;
  auto a = NewKafkaConsumer(options, producer.get(), nullptr);
  ASSERT_TRUE(a.ok());
  std::atomic<int> a_attempts{0};
  std::thread run_a([&] {
    EXPECT_TRUE((*a)->Run([&](const ConsumedRecord&) {
                  ++a_attempts;
                  return absl::UnavailableError("downstream down");
                }).ok());
  });
  // Every partition failed once and is paused.
  for (auto until = std::chrono::steady_clock::now() + 30s; a_attempts < 4 && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(a_attempts.load(), 4);
  auto b = NewKafkaConsumer(options, producer.get(), nullptr);
  ASSERT_TRUE(b.ok());
  auto joined = std::chrono::steady_clock::now();
  std::atomic<bool> b_got_one{false};
  std::chrono::steady_clock::time_point first;
  std::thread run_b([&] {
    EXPECT_TRUE((*b)->Run([&](const ConsumedRecord&) {
                  if (!b_got_one.exchange(true)) first = std::chrono::steady_clock::now();
                  return absl::OkStatus();
                }).ok());
  });
  auto deadline = joined + 25s;
  while (!b_got_one && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  (*a)->Stop();
  (*b)->Stop();
  run_a.join();
  run_b.join();
  ASSERT_TRUE(b_got_one) << "B got no partition within 25 s";
  // The rebalance takes a few seconds on this broker, not A's 30 s backoff.
  EXPECT_LT(first - joined, 15s);
}

TEST(ConsumerIT, FatalErrorStopsTheConsumerAndHealthSaysWhy) {
  std::string topic = NewTopic("fatal", 1);
  auto producer = NewProducer();
  ConsumerOptions options = Options(topic, "it-fatal");
  // Static membership: a second member with the same instance id fences
  // the first, which librdkafka reports as a fatal error.
  options.extra["group.instance.id"] = "relay-it-instance";
  std::atomic<bool> a_assigned{false};
  ConsumerOptions a_options = options;
  a_options.on_assign = [&](const std::vector<TopicPartition>&) {
    a_assigned = true;
    return absl::OkStatus();
  };
  auto a = NewKafkaConsumer(a_options, producer.get(), nullptr);
  ASSERT_TRUE(a.ok());
  absl::Status a_result;
  std::thread run_a([&] { a_result = (*a)->Run([](const ConsumedRecord&) { return absl::OkStatus(); }); });
  // A is a member (has its partitions) before B comes with the same id.
  for (auto until = std::chrono::steady_clock::now() + 30s; !a_assigned && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(a_assigned);
  auto b = NewKafkaConsumer(options, producer.get(), nullptr);
  ASSERT_TRUE(b.ok());
  std::thread run_b([&] { (void)(*b)->Run([](const ConsumedRecord&) { return absl::OkStatus(); }); });
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while ((*a)->Health().ok() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  (*b)->Stop();
  run_b.join();
  (*a)->Stop();
  run_a.join();
  EXPECT_TRUE(absl::IsAborted(a_result)) << a_result;
  EXPECT_THAT(std::string(a_result.message()), ::testing::HasSubstr("FENCED"));
  EXPECT_FALSE((*a)->Health().ok());
}

// Issue 15, item 5: a partition-assignment hook that fails (dispatch's
// ledger load, collector's state load hitting its reader timeout) no
// longer ends the consumer for good: its partitions wait, paused, and the
// hook is retried with a backoff; once it succeeds every record comes, none
// handed over before, none skipped.
TEST(ConsumerIT, AFailingAssignHookIsRetriedAndNoRecordIsHandedOverBeforeIt) {
  std::random_device rd;
  std::string topic = "it.assign." + std::to_string(rd());
  ASSERT_EQ(relay::testing::CreateTopic(relay::testing::FixtureBootstrap(), topic, 3), "");
  ProducerOptions popts;
  popts.bootstrap = relay::testing::FixtureBootstrap();
  auto producer = NewKafkaProducer(popts, nullptr);
  ASSERT_TRUE(producer.ok());
  std::vector<std::string> values;
  for (int i = 0; i < 30; ++i) values.push_back("v" + std::to_string(i));
  ProduceAll(**producer, topic, values);
  ConsumerOptions options;
  options.bootstrap = relay::testing::FixtureBootstrap();
  options.group_id = "it-assign-" + std::to_string(rd());
  options.topics = {topic};
  options.retry_backoff_min = 100ms;
  options.retry_backoff_max = 400ms;
  std::atomic<int> hook_calls{0};
  std::atomic<bool> loaded{false};
  options.on_assign = [&](const std::vector<TopicPartition>&) {
    if (++hook_calls <= 3) return absl::DeadlineExceededError("state load: reader timed out");
    loaded = true;
    return absl::OkStatus();
  };
  std::atomic<bool> early{false};
  auto done = ConsumeUntil(options, producer->get(), values.size(), [&](const ConsumedRecord&) {
    if (!loaded) early = true;
    return absl::OkStatus();
  });
  EXPECT_EQ(done.size(), values.size()) << "records of the waiting partitions were skipped";
  EXPECT_FALSE(early) << "a record was handed over before its partition's state was loaded";
  EXPECT_GE(hook_calls.load(), 4);
}

// Issue 15, item 6: fencing at the broker. A second transactional
// producer of the same id fences the first; the first's late write is
// refused (it believes it may still write), so the key's latest record is
// the second's, not the deposed one's. Without fencing the late write would
// be the key's latest offset, the one compaction keeps.
TEST(TransactionalProducerIT, TheNewHolderFencesTheOldOnesLateWrites) {
  std::random_device rd;
  std::string topic = "it.fenced." + std::to_string(rd());
  ASSERT_EQ(relay::testing::CreateTopic(relay::testing::FixtureBootstrap(), topic, 1, {{"cleanup.policy", "compact"}}),
            "");
  ProducerOptions o;
  o.bootstrap = relay::testing::FixtureBootstrap();
  o.transactional_id = "it-leader-" + std::to_string(rd());
  auto send = [&](Producer& p, const std::string& key, const std::string& value) {
    auto done = std::make_shared<std::promise<absl::Status>>();
    auto f = done->get_future();
    p.Send(Record{topic, key, value, {}}, [done](absl::Status s) { done->set_value(s); });
    return f.get();
  };
  auto old_leader = NewKafkaProducer(o, nullptr);
  ASSERT_TRUE(old_leader.ok()) << old_leader.status();
  ASSERT_TRUE(send(**old_leader, "cluster-1", "epoch-1").ok());
  auto new_leader = NewKafkaProducer(o, nullptr);  // fences the old one
  ASSERT_TRUE(new_leader.ok()) << new_leader.status();
  ASSERT_TRUE(send(**new_leader, "cluster-1", "epoch-2").ok());
  absl::Status late = send(**old_leader, "cluster-1", "epoch-1-late");
  EXPECT_TRUE(IsFenced(late)) << late;
  EXPECT_TRUE(IsFenced(send(**old_leader, "cluster-2", "anything"))) << "fenced for good";
  EXPECT_FALSE((*old_leader)->Connected());

  // What read_committed readers (every relay consumer) see: the late write
  // never landed. (lifecycle_it_test forces a compaction on top.)
  std::string error;
  std::vector<std::string> values;
  for (const auto& r : relay::testing::ReadTopic(relay::testing::FixtureBootstrap(), topic, 10s, &error)) {
    if (r.key == "cluster-1") values.push_back(r.value);
  }
  EXPECT_THAT(values, ::testing::ElementsAre("epoch-1", "epoch-2"));
}

TEST(ConsumerIT, MissingDeadLetterTopicStopsTheConsumerWithoutSkipping) {
  std::string topic = NewTopic("nodlq", 1);  // and no <topic>.dlq
  auto producer = NewProducer();
  ProduceAll(*producer, topic, {"poison", "next"});
  ConsumerOptions options = Options(topic, "it-nodlq");
  auto consumer = NewKafkaConsumer(options, producer.get(), nullptr);
  ASSERT_TRUE(consumer.ok());
  std::vector<std::string> seen;
  auto result = std::async(std::launch::async, [&] {
    return (*consumer)->Run([&](const ConsumedRecord& r) {
      seen.push_back(r.value);
      return r.value == "poison" ? PoisonError("bad") : absl::OkStatus();
    });
  });
  // The consumer stops by itself once the dead-letter write failed for good
  // (a consumer retrying it forever would still be running here).
  bool stopped = result.wait_for(40s) == std::future_status::ready;
  absl::Status health = (*consumer)->Health();
  if (!stopped) (*consumer)->Stop();
  absl::Status run = result.get();
  EXPECT_TRUE(stopped) << "the consumer kept re-running the poison record";
  EXPECT_FALSE(run.ok());
  EXPECT_THAT(std::string(run.message()), ::testing::HasSubstr(topic + ".dlq"));
  EXPECT_FALSE(health.ok());
  EXPECT_THAT(std::string(health.message()), ::testing::HasSubstr(topic + ".dlq"));
  for (const auto& v : seen) EXPECT_EQ(v, "poison") << "a record past the poison one was handled";
  // Nothing was committed: the group starts at the poison record again.
  std::vector<std::string> again;
  auto fresh = NewKafkaConsumer(options, producer.get(), nullptr);
  ASSERT_TRUE(fresh.ok());
  std::thread t([&] {
    (void)(*fresh)->Run([&](const ConsumedRecord& r) {
      again.push_back(r.value);
      (*fresh)->Stop();
      return absl::UnavailableError("just looking");
    });
  });
  t.join();
  ASSERT_FALSE(again.empty());
  EXPECT_EQ(again[0], "poison");
}

TEST(ReaderIT, ReadsToTheEndSeenAtTheStartAndAdminDescribesTopics) {
  std::string topic = NewTopic("reader", 3);
  auto producer = NewProducer();
  std::vector<std::string> values;
  for (int i = 0; i < 300; ++i) values.push_back("r" + std::to_string(i));
  ProduceAll(*producer, topic, values);
  ReaderOptions ro;
  ro.bootstrap = relay::testing::FixtureBootstrap();
  ro.timeout = 30s;
  auto reader = NewKafkaTopicReader(ro);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(*(*reader)->Partitions(topic), 3);
  std::set<std::string> seen;
  std::map<int32_t, int64_t> last_offset;
  auto end = (*reader)->ReadToEnd(topic, {}, [&](const ConsumedRecord& r) {
    seen.insert(r.value);
    EXPECT_GT(r.offset + 1, last_offset[r.partition]) << "offsets must rise within a partition";
    last_offset[r.partition] = r.offset + 1;
    return absl::OkStatus();
  });
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(seen.size(), values.size());
  int64_t total = 0;
  for (auto& [p, o] : *end) total += o;
  EXPECT_EQ(total, 300);
  // One partition only; and a second read sees the same (nothing consumed).
  size_t one = 0;
  ASSERT_TRUE((*reader)->ReadToEnd(topic, {1}, [&](const ConsumedRecord& r) {
                EXPECT_EQ(r.partition, 1);
                ++one;
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(static_cast<int64_t>(one), (*end)[1]);
  EXPECT_TRUE(absl::IsNotFound((*reader)->ReadToEnd("it.no.such.topic", {}, [](const ConsumedRecord&) {
                                  return absl::OkStatus();
                                }).status()));
  // One record by its offset (a kept state record read back), quickly and
  // again; past the end: NotFound.
  for (int64_t offset : {int64_t{0}, (*end)[1] - 1, int64_t{0}}) {
    auto t0 = std::chrono::steady_clock::now();
    auto at = (*reader)->ReadAt(topic, 1, offset);
    ASSERT_TRUE(at.ok()) << at.status();
    EXPECT_EQ(at->offset, offset);
    EXPECT_EQ(at->partition, 1);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    std::cout << "ReadAt " << offset << ": "
              << std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count()
              << " us" << std::endl;
  }
  EXPECT_TRUE(absl::IsNotFound((*reader)->ReadAt(topic, 1, (*end)[1]).status()));

  auto admin = NewKafkaAdmin(relay::testing::FixtureBootstrap(), "it-admin");
  ASSERT_TRUE(admin.ok());
  auto webhooks = (*admin)->DescribeTopic("github.webhooks", 10s);
  ASSERT_TRUE(webhooks.ok()) << webhooks.status();
  EXPECT_EQ(webhooks->partitions, 6);
  EXPECT_EQ(webhooks->replication_factor, 1);
  EXPECT_TRUE(webhooks->configs.count("max.message.bytes"));
  EXPECT_TRUE(CheckTopicAccepts(*webhooks, 25 * 1024 * 1024).ok()) << CheckTopicAccepts(*webhooks, 25 * 1024 * 1024);
  EXPECT_TRUE(absl::IsNotFound((*admin)->DescribeTopic("it.no.such.topic", 10s).status()));
}

// A follower from the beginning sees what was there, says when it caught
// up, then sees new records; one from the end sees only new records.
TEST(FollowerIT, FromTheBeginningCatchesUpThenFollowsFromTheEndOnlyNew) {
  std::string topic = NewTopic("follow", 3);
  auto producer = NewProducer();
  std::vector<std::string> before;
  for (int i = 0; i < 100; ++i) before.push_back("old" + std::to_string(i));
  ProduceAll(*producer, topic, before);
  std::mutex mu;
  std::set<std::string> all, fresh;
  FollowerOptions fo;
  fo.bootstrap = relay::testing::FixtureBootstrap();
  fo.topic = topic;
  fo.from_beginning = true;
  auto all_follower = NewKafkaFollower(fo, [&](const ConsumedRecord& r) {
    std::lock_guard lock(mu);
    all.insert(r.value);
  });
  ASSERT_TRUE(all_follower.ok()) << all_follower.status();
  fo.from_beginning = false;
  auto new_follower = NewKafkaFollower(fo, [&](const ConsumedRecord& r) {
    std::lock_guard lock(mu);
    fresh.insert(r.value);
  });
  ASSERT_TRUE(new_follower.ok());
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!((*all_follower)->CaughtUp() && (*new_follower)->CaughtUp()) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE((*all_follower)->CaughtUp());
  ASSERT_TRUE((*new_follower)->CaughtUp());
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(all.size(), 100u) << "caught up before every old record was handed over";
  }
  EXPECT_TRUE((*all_follower)->Health().ok()) << (*all_follower)->Health();
  ProduceAll(*producer, topic, {"new1", "new2", "new3"});
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard lock(mu);
      if (all.size() == 103 && fresh.size() == 3) break;
    }
    std::this_thread::sleep_for(20ms);
  }
  std::lock_guard lock(mu);
  EXPECT_EQ(all.size(), 103u);
  EXPECT_EQ(fresh, (std::set<std::string>{"new1", "new2", "new3"}));
}

// A follower from a time starts at the broker's offset for it
// (offsets_for_times) on every partition: it hands over what was written
// from then on, not the topic's older records, says when it caught up, and
// then follows new ones.
TEST(FollowerIT, FromATimeStartsThereNotAtTheTopicsStart) {
  std::string topic = NewTopic("follow-time", 3);
  auto producer = NewProducer();
  std::vector<std::string> old, recent;
  for (int i = 0; i < 60; ++i) old.push_back("old" + std::to_string(i));
  ProduceAll(*producer, topic, old);
  std::this_thread::sleep_for(1100ms);  // record timestamps are milliseconds: a clear line
  int64_t from = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch()).count() - 500;
  for (int i = 0; i < 30; ++i) recent.push_back("recent" + std::to_string(i));
  ProduceAll(*producer, topic, recent);
  std::mutex mu;
  std::set<std::string> seen;
  FollowerOptions fo;
  fo.bootstrap = relay::testing::FixtureBootstrap();
  fo.topic = topic;
  fo.from_unix_ms = from;
  auto follower = NewKafkaFollower(fo, [&](const ConsumedRecord& r) {
    std::lock_guard lock(mu);
    seen.insert(r.value);
  });
  ASSERT_TRUE(follower.ok()) << follower.status();
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!(*follower)->CaughtUp() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  ASSERT_TRUE((*follower)->CaughtUp());
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(seen, std::set<std::string>(recent.begin(), recent.end()));
  }
  ProduceAll(*producer, topic, {"new1"});
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard lock(mu);
      if (seen.count("new1")) break;
    }
    std::this_thread::sleep_for(20ms);
  }
  std::lock_guard lock(mu);
  EXPECT_EQ(seen.size(), recent.size() + 1);
}

}  // namespace
}  // namespace relay::kafka
