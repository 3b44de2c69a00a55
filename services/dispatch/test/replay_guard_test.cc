// What keeps a webhook record read again from acting again: the bound of
// the ledger's memory (which relayctl's redrive applies too), where the
// line between a fresh record and a replayed or stale one is, the handled
// mark in the ledger, and the label facts already published.
#include "relay/dispatch/replay_guard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "relay/base/clock.h"
#include "relay/dispatch/ledger.h"
#include "relay/kafka/testing/fake_broker.h"
#include "relay/kafka/testing/fake_consumer.h"
#include "relay/kafka/testing/fake_producer.h"

namespace relay::dispatch {
namespace {

using ::testing::HasSubstr;
constexpr int64_t kHour = 3'600'000;
constexpr int64_t kDay = 24 * kHour;
constexpr int64_t kNow = 1'800'000'000'000;
constexpr int64_t kRetention = 15 * kDay;  // deploy/kafka/topics.txt's dispatch.ledger

TEST(LedgerMemoryTest, RecordsAreActedOnOnlyWithinTheRetentionLessADay) {
  EXPECT_TRUE(CheckWithinLedgerMemory(kNow, kNow, kRetention).ok());
  EXPECT_TRUE(CheckWithinLedgerMemory(kNow - 14 * kDay + 1, kNow, kRetention).ok());
  absl::Status old = CheckWithinLedgerMemory(kNow - 14 * kDay, kNow, kRetention);
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.message(), HasSubstr("336 h old"));
  EXPECT_THAT(old.message(), HasSubstr("past the 336 h"));
  // A dead letter of github.webhooks.dlq (kept 30 days) at 20 days.
  EXPECT_FALSE(CheckWithinLedgerMemory(kNow - 20 * kDay, kNow, kRetention).ok());
  // A clock behind the event: not old.
  EXPECT_TRUE(CheckWithinLedgerMemory(kNow + kHour, kNow, kRetention).ok());
  // A ledger kept forever remembers everything; one shorter than the
  // margin remembers nothing for sure.
  EXPECT_TRUE(CheckWithinLedgerMemory(0, kNow, 0).ok());
  EXPECT_FALSE(CheckWithinLedgerMemory(kNow, kNow, kHour).ok());
}

TEST(LedgerMemoryTest, TheRetentionIsReadFromTheTopicsConfiguration) {
  kafka::TopicDescription t{"dispatch.ledger", 6, 3, {{"cleanup.policy", "compact,delete"}, {"retention.ms", "1296000000"}}};
  EXPECT_EQ(*RetentionMs(t), 1'296'000'000);
  t.configs["retention.ms"] = "-1";
  EXPECT_EQ(*RetentionMs(t), 0);
  t.configs["retention.ms"] = "soon";
  EXPECT_EQ(RetentionMs(t).status().code(), absl::StatusCode::kInvalidArgument);
  // Compaction alone keeps the latest entry of every id.
  t.configs = {{"cleanup.policy", "compact"}, {"retention.ms", "604800000"}};
  EXPECT_EQ(*RetentionMs(t), 0);
}

kafka::ConsumedRecord Record(int64_t offset, int64_t timestamp_ms = kNow) {
  kafka::ConsumedRecord r;
  r.topic = "github.webhooks";
  r.offset = offset;
  r.timestamp_ms = timestamp_ms;
  return r;
}

TEST(NotFreshTest, ReplayedReadAgainAndStaleRecordsAskForNothingNew) {
  std::string detail;
  EXPECT_EQ(NotFresh(Record(10), kNow - kHour, 10, kNow, kRetention, &detail), "");
  // A relayctl replay's copy, however new.
  kafka::ConsumedRecord copy = Record(50);
  copy.headers.push_back({kafka::kReplayedFromHeader, "github.webhooks/0/3"});
  EXPECT_EQ(NotFresh(copy, kNow, 10, kNow, kRetention, &detail), "replayed");
  // Below the handled mark: a group moved back in time.
  EXPECT_EQ(NotFresh(Record(9), kNow - kHour, 10, kNow, kRetention, &detail), "read_again");
  EXPECT_TRUE(detail.empty());
  // A dead letter sent back 20 days after intake received it: a new Kafka
  // record (new offset, new time), an old event.
  kafka::ConsumedRecord redriven = Record(60);
  redriven.headers.push_back({kafka::kRedrivenFromHeader, "github.webhooks.dlq/0/1"});
  EXPECT_EQ(NotFresh(redriven, kNow - 20 * kDay, 10, kNow, kRetention, &detail), "stale");
  EXPECT_THAT(detail, HasSubstr("could repeat GitHub writes"));
  // Without intake's time, the record's own.
  EXPECT_EQ(NotFresh(Record(70, kNow - 20 * kDay), 0, 10, kNow, kRetention, &detail), "stale");
  EXPECT_EQ(NotFresh(Record(70, kNow - kDay), 0, 10, kNow, kRetention, &detail), "");
}

TEST(LedgerMarkTest, TheHandledMarkSurvivesARestartPerInputPartitionAndNeverMovesBack) {
  kafka::testing::FakeBroker broker;
  broker.CreateTopic("dispatch.ledger", 2);
  kafka::testing::FakeProducer producer(kafka::testing::FakeProducer::Mode::kAuto, &broker);
  kafka::testing::FakeTopicReader reader(&broker);
  FakeClock clock;
  kafka::TopicPartition p0{"github.webhooks", 0}, p2{"github.webhooks", 2}, r0{"github.requests", 0};
  {
    Ledger ledger("dispatch.ledger", 2, &producer, &producer, &reader, &clock);
    ASSERT_TRUE(ledger.Load({p0, p2, r0}).ok());
    EXPECT_EQ(ledger.HandledThrough(p0), 0);
    ASSERT_TRUE(ledger.MarkHandled(p0, 120).ok());
    ASSERT_TRUE(ledger.MarkHandled(p0, 80).ok());  // never back
    ASSERT_TRUE(ledger.MarkHandled(p2, 7).ok());   // the same ledger partition as p0
    EXPECT_EQ(ledger.HandledThrough(p0), 120);
    v1::GitHubRequest req;
    req.set_id("abc");
    ASSERT_TRUE(ledger.Put(p0, req, v1::LedgerEntry::DONE).ok());
  }
  // Another instance takes the partitions over.
  Ledger next("dispatch.ledger", 2, &producer, &producer, &reader, &clock);
  ASSERT_TRUE(next.Load({p0, p2, r0}).ok());
  EXPECT_EQ(next.HandledThrough(p0), 120);
  EXPECT_EQ(next.HandledThrough(p2), 7);
  EXPECT_EQ(next.HandledThrough(r0), 0);
  EXPECT_EQ(next.Get(p0, "abc"), v1::LedgerEntry::DONE);
  // Marks are not writes.
  EXPECT_EQ(next.Get(p0, "handled:github.webhooks/0"), v1::LedgerEntry::STATE_UNSPECIFIED);
  EXPECT_EQ(next.Get(p2, "handled:github.webhooks/2"), v1::LedgerEntry::STATE_UNSPECIFIED);
}

v1::PullRequestLabels Fact(int64_t number, int64_t event_at, int64_t received_at) {
  v1::PullRequestLabels f;
  f.set_upstream_repo("PyTorch/pytorch");
  f.set_number(number);
  f.set_event_at_unix_ms(event_at);
  f.set_received_at_unix_ms(received_at);
  return f;
}

TEST(LabelFactsTest, OnlyAFactNewerThanTheLastPublishedForItsPrIsPublished) {
  kafka::testing::FakeBroker broker;
  broker.CreateTopic("relay.pr_labels", 3);
  // Published before (by another instance): PR 1 at t=5000.
  ASSERT_TRUE(broker.Append({"relay.pr_labels", "pytorch/pytorch#1", Fact(1, 5000, 5100).SerializeAsString(), {}}).ok());
  ASSERT_TRUE(broker.Append({"relay.pr_labels", "pytorch/pytorch#1", Fact(1, 4000, 4100).SerializeAsString(), {}}).ok());
  kafka::testing::FakeTopicReader reader(&broker);
  LabelFacts facts("relay.pr_labels", &reader);
  ASSERT_TRUE(facts.Load().ok());
  EXPECT_EQ(facts.size(), 1u);
  EXPECT_FALSE(facts.Offer(Fact(1, 4500, 4600)));  // older than 5000, though read after
  EXPECT_FALSE(facts.Offer(Fact(1, 5000, 5100)));  // the same event again
  EXPECT_FALSE(facts.Offer(Fact(1, 5000, 5050)));  // same second, received earlier
  EXPECT_TRUE(facts.Offer(Fact(1, 5000, 5200)));   // same second, received later
  EXPECT_TRUE(facts.Offer(Fact(1, 6000, 6100)));
  EXPECT_FALSE(facts.Offer(Fact(1, 5500, 5600)));
  EXPECT_TRUE(facts.Offer(Fact(2, 1, 1)));  // another PR
}

}  // namespace
}  // namespace relay::dispatch
