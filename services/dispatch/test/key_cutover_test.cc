#include "relay/dispatch/key_cutover.h"

#include <gtest/gtest.h>

#include "relay/github/webhook_key.h"

namespace relay::dispatch {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kFrom = 1'800'000'000'000;  // the switch instant
const int64_t kBound = kCutoverBound.count();

PartitionProgress At(std::optional<bool> next, std::optional<bool> previous = std::nullopt, int64_t at = kFrom) {
  PartitionProgress p;
  p.next_ordered = next;
  p.previous_ordered = previous;
  p.next_timestamp_ms = at;
  p.previous_timestamp_ms = at;
  return p;
}

TEST(KeyCutoverTest, APartitionHasPassedWhenTheGroupIsAtAnOrderedRecordOrPastTheLastOldOne) {
  EXPECT_TRUE(PartitionPassed(At(true), kFrom, kFrom)) << "at a new-keyed record: all before it handled";
  EXPECT_FALSE(PartitionPassed(At(false), kFrom + 10 * kBound, kFrom)) << "an old-keyed record waits, however late";
  EXPECT_TRUE(PartitionPassed(At(std::nullopt, true), kFrom, kFrom)) << "at the end after a new-keyed record";
  // At the end after an old-keyed record (or an empty partition): an old
  // key may still come until the bound after the switch.
  EXPECT_FALSE(PartitionPassed(At(std::nullopt, false), kFrom + kBound - 1, kFrom));
  EXPECT_TRUE(PartitionPassed(At(std::nullopt, false), kFrom + kBound, kFrom));
  EXPECT_FALSE(PartitionPassed(At(std::nullopt), kFrom, kFrom));
  EXPECT_TRUE(PartitionPassed(At(std::nullopt), kFrom + kBound, kFrom));
}

// Ordered, back to repository keys, ordered again: the first switch's
// ordered records are not this one's.
TEST(KeyCutoverTest, AnOrderedRecordOfAnEarlierSwitchDoesNotCount) {
  const int64_t earlier = kFrom - kBound - 1;
  EXPECT_FALSE(PartitionPassed(At(true, std::nullopt, earlier), kFrom, kFrom));
  EXPECT_TRUE(PartitionPassed(At(true, std::nullopt, kFrom - kBound), kFrom, kFrom)) << "within the clocks' skew";
  EXPECT_FALSE(PartitionPassed(At(std::nullopt, true, earlier), kFrom, kFrom));
  EXPECT_TRUE(PartitionPassed(At(std::nullopt, true, earlier), kFrom + kBound, kFrom));
}


kafka::ConsumedRecord Record(bool ordered, int64_t from = kFrom) {
  kafka::ConsumedRecord r;
  r.topic = "github.webhooks";
  if (ordered) {
    r.headers.push_back({github::kWebhookKeysHeader, github::kOrderedKeysVersion});
    r.headers.push_back({github::kWebhookKeysFromHeader, std::to_string(from)});
  }
  return r;
}

TEST(KeyCutoverTest, OrderedRecordsWaitUntilEveryPartitionPassedThenFlowWithoutFurtherChecks) {
  FakeClock clock;
  prometheus::Registry metrics;
  std::map<int32_t, PartitionProgress> progress = {{0, At(true)}, {1, At(false)}, {2, At(std::nullopt, true)}};
  int reads = 0;
  KeyCutover cutover(
      [&]() -> absl::StatusOr<std::map<int32_t, PartitionProgress>> {
        ++reads;
        return progress;
      },
      &clock, 1s, &metrics);
  EXPECT_TRUE(cutover.MayHandle(Record(false))) << "an old-keyed record never waits";
  EXPECT_EQ(reads, 0);
  EXPECT_FALSE(cutover.MayHandle(Record(true))) << "partition 1 still has old-keyed records to handle";
  EXPECT_EQ(reads, 1);
  progress[1] = At(true);
  EXPECT_FALSE(cutover.MayHandle(Record(true))) << "checked again only after the recheck interval";
  EXPECT_EQ(reads, 1);
  clock.Advance(1s);
  EXPECT_TRUE(cutover.MayHandle(Record(true)));
  EXPECT_TRUE(cutover.passed());
  progress[1] = At(false);
  clock.Advance(5s);
  EXPECT_TRUE(cutover.MayHandle(Record(true))) << "passed once: kept";
  EXPECT_EQ(reads, 2);
}

TEST(KeyCutoverTest, AProgressThatCannotBeReadHoldsAndIsTriedAgain) {
  FakeClock clock;
  prometheus::Registry metrics;
  bool fail = true;
  KeyCutover cutover(
      [&]() -> absl::StatusOr<std::map<int32_t, PartitionProgress>> {
        if (fail) return absl::UnavailableError("no broker");
        return std::map<int32_t, PartitionProgress>{{0, At(true)}};
      },
      &clock, 1s, &metrics);
  EXPECT_FALSE(cutover.MayHandle(Record(true)));
  fail = false;
  clock.Advance(1s);
  EXPECT_TRUE(cutover.MayHandle(Record(true)));
}

TEST(KeyCutoverTest, TheBoundCountsFromTheRecordsOwnSwitchInstant) {
  FakeClock clock;  // its wall clock is far past kFrom + the bound
  prometheus::Registry metrics;
  KeyCutover cutover(
      []() -> absl::StatusOr<std::map<int32_t, PartitionProgress>> {
        return std::map<int32_t, PartitionProgress>{{0, At(std::nullopt, false)}};
      },
      &clock, 1s, &metrics);
  EXPECT_FALSE(cutover.MayHandle(Record(true, clock.UnixMillis()))) << "switched just now: old keys may still come";
  clock.Advance(kCutoverBound);
  EXPECT_TRUE(cutover.MayHandle(Record(true, clock.UnixMillis() - kBound)));
}

TEST(KeyCutoverTest, ALaterSwitchIsCheckedAgain) {
  FakeClock clock;
  prometheus::Registry metrics;
  int reads = 0;
  KeyCutover cutover(
      [&]() -> absl::StatusOr<std::map<int32_t, PartitionProgress>> {
        ++reads;
        return std::map<int32_t, PartitionProgress>{{0, At(true, std::nullopt, kFrom)}};
      },
      &clock, 1s, &metrics);
  EXPECT_TRUE(cutover.MayHandle(Record(true, kFrom)));
  EXPECT_TRUE(cutover.MayHandle(Record(true, kFrom - 1))) << "an earlier switch: passed with it";
  EXPECT_EQ(reads, 1);
  EXPECT_FALSE(cutover.MayHandle(Record(true, kFrom + 10 * kBound))) << "partition 0 is at the earlier switch's records";
  EXPECT_EQ(reads, 2);
}

}  // namespace
}  // namespace relay::dispatch
