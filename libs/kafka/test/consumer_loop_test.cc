// The consumer loop over the in-memory broker: batch bounds, offsets stored
// only after the effect, dead letters, retries that pause one partition
// while others flow, and the ways the loop refuses to skip a record.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "relay/kafka/testing/fake_consumer.h"
#include "relay/kafka/testing/fake_producer.h"
#include "support/timing.h"

namespace relay::kafka {
namespace {

using namespace std::chrono_literals;
using testing::FakeBroker;
using testing::FakeProducer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kTopic[] = "in";
constexpr char kGroup[] = "g";

class ConsumerLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    broker_.CreateTopic(kTopic, 2);
    broker_.CreateTopic(std::string(kTopic) + ".dlq", 1);
  }
  ConsumerOptions Options() {
    ConsumerOptions o;
    o.group_id = kGroup;
    o.topics = {kTopic};
    o.retry_backoff_min = 50ms;
    o.retry_backoff_max = 200ms;
    return o;
  }
  void Put(int32_t partition, const std::string& value) {
    ASSERT_TRUE(broker_.AppendTo(partition, Record{kTopic, value, value, {}}).ok());
  }
  // Runs `consumer` on a thread until `until` holds (or 10 s), then stops
  // it; what Run returned is in last_run_, and it must be OK.
  void RunUntil(Consumer& consumer, std::function<absl::Status()> run, std::function<bool()> until) {
    std::thread t([&] { last_run_ = run(); });
    relay::testing::WaitFor(until, 10s, 2ms);
    consumer.Stop();
    t.join();
    EXPECT_TRUE(last_run_.ok()) << last_run_;
  }
  absl::Status last_run_;
  int64_t Committed(int32_t partition) { return broker_.Committed(kGroup, kTopic, partition); }

  FakeBroker broker_;
  FakeProducer dlq_{FakeProducer::Mode::kAuto, &broker_};
};

TEST_F(ConsumerLoopTest, BatchesAreBoundedByRowsAndOffsetsFollowEachBatch) {
  for (int i = 0; i < 25; ++i) Put(0, "v" + std::to_string(i));
  auto consumer = testing::NewFakeConsumer(&broker_, Options(), &dlq_);
  std::vector<size_t> sizes;
  std::vector<int64_t> committed_before;
  BatchOptions bo;
  bo.max_records = 10;
  bo.max_wait = 200ms;
  RunUntil(
      *consumer,
      [&] {
        return consumer->RunBatches(bo, [&](Batch& b) {
          sizes.push_back(b.records().size());
          committed_before.push_back(Committed(0));
          return absl::OkStatus();
        });
      },
      [&] { return Committed(0) == 25; });
  EXPECT_THAT(sizes, ElementsAre(10, 10, 5));  // the last one after max_wait
  // Each batch's offsets were stored only after its handler returned.
  EXPECT_THAT(committed_before, ElementsAre(-1, 10, 20));
  EXPECT_EQ(Committed(0), 25);
}

TEST_F(ConsumerLoopTest, BatchesAreBoundedByBytesAndTime) {
  for (int i = 0; i < 6; ++i) Put(0, std::string(100, 'x'));  // key + value: 200 bytes each
  auto consumer = testing::NewFakeConsumer(&broker_, Options(), &dlq_);
  std::vector<size_t> sizes;
  std::vector<std::chrono::steady_clock::time_point> at;
  BatchOptions bo;
  bo.max_records = 1000;
  bo.max_bytes = 400;
  bo.max_wait = 300ms;
  auto start = std::chrono::steady_clock::now();
  RunUntil(
      *consumer,
      [&] {
        return consumer->RunBatches(bo, [&](Batch& b) {
          sizes.push_back(b.records().size());
          at.push_back(std::chrono::steady_clock::now());
          return absl::OkStatus();
        });
      },
      [&] { return Committed(0) == 6; });
  EXPECT_THAT(sizes, ElementsAre(2, 2, 2));
  EXPECT_LT(at[0] - start, relay::testing::Within(0ms, 150ms)) << "a full batch must not wait for max_wait";
  // One more record alone: handed over after max_wait, not before.
  Put(0, "late");
  auto consumer2 = testing::NewFakeConsumer(&broker_, Options(), &dlq_);
  auto put_at = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point handed;
  RunUntil(
      *consumer2,
      [&] {
        return consumer2->RunBatches(bo, [&](Batch&) {
          handed = std::chrono::steady_clock::now();
          return absl::OkStatus();
        });
      },
      [&] { return Committed(0) == 7; });
  EXPECT_GE(handed - put_at, 280ms);
  EXPECT_LT(handed - put_at, relay::testing::Within(300ms, 300ms));
}

// enough_bytes: a batch that large is handed over as soon as nothing more
// is waiting, not after max_wait; a smaller one still waits it out.
TEST_F(ConsumerLoopTest, ABatchOfEnoughBytesDoesNotWaitForMoreRecords) {
  for (int i = 0; i < 3; ++i) Put(0, std::string(100, 'x'));  // 200 bytes each with the key
  auto consumer = testing::NewFakeConsumer(&broker_, Options(), &dlq_);
  std::mutex mu;
  std::vector<size_t> sizes;
  std::vector<std::chrono::steady_clock::time_point> at;
  BatchOptions bo;
  bo.max_records = 1000;
  bo.max_bytes = 1'000'000;
  bo.max_wait = 2s;
  bo.enough_bytes = 500;
  auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point put_at;
  bool put = false;
  RunUntil(
      *consumer,
      [&] {
        return consumer->RunBatches(bo, [&](Batch& b) {
          std::lock_guard lock(mu);
          sizes.push_back(b.records().size());
          at.push_back(std::chrono::steady_clock::now());
          return absl::OkStatus();
        });
      },
      [&] {
        std::lock_guard lock(mu);
        if (at.size() == 1 && !put) {
          // Below enough_bytes (one small record): max_wait, as before.
          put = true;
          put_at = std::chrono::steady_clock::now();
          Put(0, "small");
        }
        return Committed(0) == 4;
      });
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0], 3u) << "every record waiting goes into the batch";
  EXPECT_LT(at[0] - start, relay::testing::Within(0ms, 1000ms)) << "600 bytes >= enough_bytes: no wait for max_wait";
  EXPECT_EQ(sizes[1], 1u);
  EXPECT_GE(at[1] - put_at, 1900ms);
}

TEST_F(ConsumerLoopTest, FailedBatchIsRedoneWholeAfterABackoffWhileOtherPartitionsFlow) {
  Put(0, "a0");
  Put(0, "a1");
  for (int i = 0; i < 5; ++i) Put(1, "b" + std::to_string(i));
  auto consumer = testing::NewFakeConsumer(&broker_, Options(), &dlq_);
  std::atomic<int> a_failures{0};
  std::vector<std::string> done;
  std::mutex mu;
  RunUntil(
      *consumer,
      [&] {
        return consumer->Run([&](const ConsumedRecord& r) -> absl::Status {
          if (r.partition == 0 && a_failures < 3) {
            ++a_failures;
            return absl::UnavailableError("database down");
          }
          std::lock_guard lock(mu);
          done.push_back(r.value);
          return absl::OkStatus();
        });
      },
      [&] { return Committed(0) == 2 && Committed(1) == 5; });
  EXPECT_EQ(a_failures, 3);
  // Partition 1 went on while partition 0 was paused, and partition 0 kept
  // its order: a0 before a1, neither skipped.
  std::vector<std::string> a;
  for (auto& v : done) {
    if (v[0] == 'a') a.push_back(v);
  }
  EXPECT_THAT(a, ElementsAre("a0", "a1"));
  EXPECT_EQ(done.size(), 7u);
  EXPECT_NE(done[0], "a0") << "partition 1 should have been served during partition 0's backoff";
}

TEST_F(ConsumerLoopTest, RejectedRecordsAreDeadLetteredOnlyAfterTheBatchSucceeded) {
  for (int i = 0; i < 4; ++i) Put(0, "r" + std::to_string(i));
  auto consumer = testing::NewFakeConsumer(&broker_, Options(), &dlq_);
  int calls = 0;
  BatchOptions bo;
  bo.max_records = 4;
  RunUntil(
      *consumer,
      [&] {
        return consumer->RunBatches(bo, [&](Batch& b) -> absl::Status {
          ++calls;
          b.Reject(1, "undecodable");
          // The first attempt fails: nothing may reach the DLQ yet.
          return calls == 1 ? absl::UnavailableError("insert failed") : absl::OkStatus();
        });
      },
      [&] { return Committed(0) == 4; });
  EXPECT_EQ(calls, 2);
  auto dead = broker_.All(std::string(kTopic) + ".dlq");
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].value, "r1");
  ASSERT_NE(dead[0].FindHeader(kDlqReasonHeader), nullptr);
  EXPECT_EQ(*dead[0].FindHeader(kDlqReasonHeader), "undecodable");
  EXPECT_EQ(*dead[0].FindHeader(kDlqOffsetHeader), "1");
}

// Batch::Hold: the records before the held one are done and stored (a
// rejected one dead-lettered); the held one and the rest of its partition
// come again after a backoff, while other partitions flow.
TEST_F(ConsumerLoopTest, AHeldPartitionStoresWhatCameBeforeAndComesAgainFromTheHeldRecord) {
  for (int i = 0; i < 10; ++i) Put(0, "a" + std::to_string(i));
  for (int i = 0; i < 3; ++i) Put(1, "b" + std::to_string(i));
  auto consumer = testing::NewFakeConsumer(&broker_, Options(), &dlq_);
  BatchOptions bo;
  bo.max_wait = 20ms;
  std::mutex mu;
  std::vector<std::string> handed;  // every value, every time it was handed over
  int holds = 2;                    // partition 0 is held at a5 twice, then goes on
  RunUntil(
      *consumer,
      [&] {
        return consumer->RunBatches(bo, [&](Batch& b) {
          std::lock_guard lock(mu);
          for (size_t i = 0; i < b.records().size(); ++i) {
            const auto& r = b.records()[i];
            handed.push_back(r.value);
            if (r.value == "a2") b.Reject(i, "poison before the hold");
            if (r.value == "a7") b.Reject(i, "poison after the hold");
            if (r.value == "a5" && holds > 0) {
              --holds;
              b.Hold(i);
            }
          }
          return absl::OkStatus();
        });
      },
      [&] { return Committed(0) == 10 && Committed(1) == 3; });
  auto count = [&](const std::string& v) { return std::count(handed.begin(), handed.end(), v); };
  EXPECT_EQ(count("a0"), 1) << "stored before the hold: not handed over again";
  EXPECT_EQ(count("a4"), 1);
  EXPECT_EQ(count("a5"), 3) << "held twice, then handled";
  EXPECT_EQ(count("a9"), 3);
  EXPECT_EQ(count("b0"), 1) << "another partition is not held";
  auto dead = broker_.All(std::string(kTopic) + ".dlq");
  ASSERT_EQ(dead.size(), 2u) << "a2 once (before the hold), a7 once (only when it was handled)";
  EXPECT_EQ(dead[0].value, "a2");
  EXPECT_EQ(dead[1].value, "a7");
}

TEST_F(ConsumerLoopTest, OnlyPoisonErrorDeadLettersAHandlersOwnFailureIsRetried) {
  Put(0, "input");
  auto consumer = testing::NewFakeConsumer(&broker_, Options(), &dlq_);
  int attempts = 0;
  RunUntil(
      *consumer,
      [&] {
        return consumer->Run([&](const ConsumedRecord&) -> absl::Status {
          // The handler's own produce was refused (InvalidArgument, as a
          // too-large record is): that is not the input's fault.
          if (++attempts < 3) return absl::InvalidArgumentError("produce: MSG_SIZE_TOO_LARGE");
          return absl::OkStatus();
        });
      },
      [&] { return Committed(0) == 1; });
  EXPECT_EQ(attempts, 3);
  EXPECT_TRUE(broker_.All(std::string(kTopic) + ".dlq").empty());
  EXPECT_TRUE(IsPoison(PoisonError("bad")));
  EXPECT_FALSE(IsPoison(absl::InvalidArgumentError("bad")));

  Put(0, "poison");
  auto again = testing::NewFakeConsumer(&broker_, Options(), &dlq_);
  RunUntil(*again, [&] { return again->Run([](const ConsumedRecord&) { return PoisonError("not a record"); }); },
           [&] { return Committed(0) == 2; });
  ASSERT_EQ(broker_.All(std::string(kTopic) + ".dlq").size(), 1u);
}

TEST_F(ConsumerLoopTest, DeadLetterTopicRefusingRecordsStopsTheConsumerWithoutSkipping) {
  Put(0, "poison");
  Put(0, "after");
  FakeProducer dlq(FakeProducer::Mode::kAuto, &broker_);
  dlq.set_topic_status(std::string(kTopic) + ".dlq", absl::NotFoundError("UNKNOWN_TOPIC_OR_PART"));
  auto consumer = testing::NewFakeConsumer(&broker_, Options(), &dlq);
  std::vector<std::string> seen;
  absl::Status status = consumer->Run([&](const ConsumedRecord& r) -> absl::Status {
    seen.push_back(r.value);
    return r.value == "poison" ? PoisonError("bad") : absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("in.dlq refuses records"));
  EXPECT_THAT(status.message(), HasSubstr("in/0@0 was neither dead-lettered nor skipped"));
  EXPECT_EQ(consumer->Health(), status);
  EXPECT_EQ(Committed(0), -1);
  // Tried three times (a metadata gap passes), "after" never handled past it.
  EXPECT_THAT(seen, ElementsAre("poison", "poison", "poison"));
}

// Fails the dead-letter write of the second rejected record once.
class FlakyDlq final : public Producer {
 public:
  explicit FlakyDlq(FakeBroker* broker) : inner_(FakeProducer::Mode::kAuto, broker) {}
  void Send(Record record, DeliveryCallback done) override {
    if (record.value == "r2" && !failed_) {
      failed_ = true;
      std::move(done)(absl::UnavailableError("broker down"));
      return;
    }
    inner_.Send(std::move(record), std::move(done));
  }
  absl::Status Flush(std::chrono::milliseconds) override { return absl::OkStatus(); }
  bool Connected() const override { return true; }

 private:
  FakeProducer inner_;
  bool failed_ = false;
};

TEST_F(ConsumerLoopTest, ABatchRetriedAfterADeadLetterFailureDoesNotDeadLetterTwice) {
  for (int i = 0; i < 4; ++i) Put(0, "r" + std::to_string(i));
  FlakyDlq dlq(&broker_);
  auto consumer = testing::NewFakeConsumer(&broker_, Options(), &dlq);
  BatchOptions bo;
  bo.max_records = 4;
  RunUntil(
      *consumer,
      [&] {
        return consumer->RunBatches(bo, [&](Batch& b) {
          b.Reject(1, "bad");  // r1
          b.Reject(2, "bad");  // r2: its first write fails
          return absl::OkStatus();
        });
      },
      [&] { return Committed(0) == 4; });
  auto dead = broker_.All(std::string(kTopic) + ".dlq");
  std::vector<std::string> values;
  for (const auto& r : dead) values.push_back(r.value);
  EXPECT_THAT(values, ElementsAre("r1", "r2"));
  EXPECT_TRUE(consumer->Health().ok());
}

TEST_F(ConsumerLoopTest, TransientDeadLetterFailureRetriesAndHealthSaysSo) {
  Put(0, "poison");
  FakeProducer dlq(FakeProducer::Mode::kAuto, &broker_);
  dlq.set_topic_status(std::string(kTopic) + ".dlq", absl::UnavailableError("broker down"));
  auto consumer = testing::NewFakeConsumer(&broker_, Options(), &dlq);
  std::atomic<int> attempts{0};
  std::thread t([&] {
    (void)consumer->Run([&](const ConsumedRecord&) {
      ++attempts;
      return PoisonError("bad");
    });
  });
  relay::testing::WaitFor([&] { return attempts >= 2; }, 10s, 2ms);
  ASSERT_GE(attempts.load(), 2);
  EXPECT_TRUE(absl::IsUnavailable(consumer->Health())) << consumer->Health();
  EXPECT_EQ(Committed(0), -1);
  dlq.set_topic_status(std::string(kTopic) + ".dlq", absl::OkStatus());
  relay::testing::WaitFor([&] { return Committed(0) == 1; }, 5s, 2ms);
  consumer->Stop();
  t.join();
  EXPECT_EQ(Committed(0), 1);
  EXPECT_TRUE(consumer->Health().ok());
  EXPECT_EQ(broker_.All(std::string(kTopic) + ".dlq").size(), 1u);
}

TEST_F(ConsumerLoopTest, FatalClientErrorSurfaces) {
  Put(0, "x");
  auto consumer = testing::NewFakeConsumer(&broker_, Options(), &dlq_);
  broker_.InjectConsumerFatal(kGroup, absl::AbortedError("FENCED_INSTANCE_ID"));
  absl::Status status = consumer->Run([](const ConsumedRecord&) { return absl::OkStatus(); });
  EXPECT_TRUE(absl::IsAborted(status)) << status;
  EXPECT_FALSE(consumer->Health().ok());
  EXPECT_EQ(Committed(0), -1);
}

TEST_F(ConsumerLoopTest, TheAssignHookRunsBeforeAnyRecordAndAFailingOneIsRetriedNotTheEnd) {
  Put(0, "a");
  Put(1, "b");
  ConsumerOptions options = Options();
  std::vector<std::string> events;
  options.on_assign = [&](const std::vector<TopicPartition>& tps) {
    events.push_back("assigned " + std::to_string(tps.size()));
    return absl::OkStatus();
  };
  auto consumer = testing::NewFakeConsumer(&broker_, options, &dlq_);
  RunUntil(*consumer, [&] {
    return consumer->Run([&](const ConsumedRecord& r) {
      events.push_back(r.value);
      return absl::OkStatus();
    });
  }, [&] { return Committed(0) == 1 && Committed(1) == 1; });
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0], "assigned 2");

  // A hook that fails (a state load hitting its reader timeout) twice: the
  // consumer does not end; its partitions wait, Health says why, and once
  // the hook succeeds every record comes, in order, none skipped.
  Put(0, "c");
  Put(0, "d");
  ConsumerOptions failing = Options();
  std::atomic<int> calls{0};
  failing.on_assign = [&](const std::vector<TopicPartition>& tps) {
    EXPECT_EQ(tps.size(), 2u);
    return ++calls <= 2 ? absl::UnavailableError("ledger unreadable") : absl::OkStatus();
  };
  auto flaky = testing::NewFakeConsumer(&broker_, failing, &dlq_);
  std::vector<std::string> handled;
  std::mutex mu;
  std::atomic<bool> seen_unhealthy{false};
  std::thread watch([&] {
    relay::testing::WaitFor([&] {
      absl::Status h = flaky->Health();
      if (!h.ok() && std::string(h.message()).find("ledger unreadable") != std::string::npos) seen_unhealthy = true;
      return seen_unhealthy.load();
    }, 10s, 1ms);
  });
  RunUntil(*flaky, [&] {
    return flaky->Run([&](const ConsumedRecord& r) {
      std::lock_guard lock(mu);
      EXPECT_GE(calls.load(), 3) << "a record was handed over before the hook succeeded";
      handled.push_back(r.value);
      return absl::OkStatus();
    });
  }, [&] { return Committed(0) == 3; });
  watch.join();
  EXPECT_TRUE(seen_unhealthy) << "Health() did not say the hook was failing";
  EXPECT_EQ(calls.load(), 3);
  EXPECT_THAT(handled, ElementsAre("c", "d"));
  EXPECT_TRUE(flaky->Health().ok()) << flaky->Health();
}

TEST_F(ConsumerLoopTest, ReaderReadsEveryPartitionToTheEndSeenAtTheStart) {
  Put(0, "a");
  Put(1, "b");
  Put(1, "c");
  testing::FakeTopicReader reader(&broker_);
  std::vector<std::string> seen;
  auto end = reader.ReadToEnd(kTopic, {}, [&](const ConsumedRecord& r) {
    seen.push_back(r.value);
    return absl::OkStatus();
  });
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_THAT(seen, ElementsAre("a", "b", "c"));
  EXPECT_EQ((*end)[0], 1);
  EXPECT_EQ((*end)[1], 2);
  seen.clear();
  ASSERT_TRUE(reader.ReadToEnd(kTopic, {1}, [&](const ConsumedRecord& r) {
    seen.push_back(r.value);
    return absl::OkStatus();
  }).ok());
  EXPECT_THAT(seen, ElementsAre("b", "c"));
  EXPECT_TRUE(absl::IsNotFound(reader.ReadToEnd("nope", {}, [](const ConsumedRecord&) {
    return absl::OkStatus();
  }).status()));
}

TEST_F(ConsumerLoopTest, FakeFollowersStartAtTheBeginningOrAtTheEndAndFollowNewRecords) {
  Put(0, "old");
  std::mutex mu;
  std::vector<std::string> all, fresh;
  auto into = [&](std::vector<std::string>* seen) {
    return [&mu, seen](const ConsumedRecord& r) {
      std::lock_guard lock(mu);
      seen->push_back(r.value);
    };
  };
  FollowerOptions from_start, from_end;
  from_start.topic = from_end.topic = kTopic;
  from_start.from_beginning = true;
  auto a = testing::NewFakeFollower(&broker_, from_start, into(&all));
  auto b = testing::NewFakeFollower(&broker_, from_end, into(&fresh));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(relay::testing::WaitFor([&] { return (*a)->CaughtUp() && (*b)->CaughtUp(); }, 5s));
  Put(1, "new");
  relay::testing::WaitFor(
      [&] {
        std::lock_guard lock(mu);
        return all.size() == 2 && fresh.size() == 1;
      },
      5s);
  std::lock_guard lock(mu);
  EXPECT_THAT(all, ElementsAre("old", "new"));
  EXPECT_THAT(fresh, ElementsAre("new"));
}

}  // namespace
}  // namespace relay::kafka
