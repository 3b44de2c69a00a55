#include "relay/intake/delivery_dedup.h"

#include <gtest/gtest.h>

namespace relay::intake {
namespace {

using Claim = DeliveryDedup::Claim;
using std::chrono::minutes;

auto NoWaiter() {
  return [](bool) { FAIL() << "waiter must not be called"; };
}

// A body digest that differs per `n` (the table only compares them).
BodyDigest D(uint8_t n = 1) {
  BodyDigest d{};
  d[0] = n;
  return d;
}

TEST(DeliveryDedupTest, DurableIdIsDuplicateWithinWindowOnly) {
  FakeClock clock;
  DeliveryDedup dedup(&clock, minutes(10), 100);
  EXPECT_EQ(dedup.Begin("a", D(), NoWaiter()), Claim::kNew);
  dedup.Finish("a", D(), true);
  EXPECT_EQ(dedup.Begin("a", D(), NoWaiter()), Claim::kDone);
  clock.Advance(minutes(9));
  EXPECT_EQ(dedup.Begin("a", D(), NoWaiter()), Claim::kDone);
  clock.Advance(minutes(2));
  EXPECT_EQ(dedup.Begin("a", D(), NoWaiter()), Claim::kNew);
}

TEST(DeliveryDedupTest, FailedAttemptFreesTheIdForARetry) {
  FakeClock clock;
  DeliveryDedup dedup(&clock, minutes(10), 100);
  EXPECT_EQ(dedup.Begin("a", D(), NoWaiter()), Claim::kNew);
  dedup.Finish("a", D(), false);
  EXPECT_EQ(dedup.Begin("a", D(), NoWaiter()), Claim::kNew);
  EXPECT_EQ(dedup.size(), 1u);
}

TEST(DeliveryDedupTest, ConcurrentDuplicateGetsTheFirstOutcome) {
  FakeClock clock;
  DeliveryDedup dedup(&clock, minutes(10), 100);
  ASSERT_EQ(dedup.Begin("a", D(), NoWaiter()), Claim::kNew);
  int calls = 0;
  bool seen = false;
  ASSERT_EQ(dedup.Begin("a", D(), [&](bool durable) { ++calls; seen = durable; }), Claim::kJoined);
  EXPECT_EQ(calls, 0);
  dedup.Finish("a", D(), true);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(seen);

  ASSERT_EQ(dedup.Begin("b", D(), NoWaiter()), Claim::kNew);
  ASSERT_EQ(dedup.Begin("b", D(), [&](bool durable) { ++calls; seen = durable; }), Claim::kJoined);
  dedup.Finish("b", D(), false);
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(seen);
}

TEST(DeliveryDedupTest, CapEvictsOldestDurableIds) {
  FakeClock clock;
  DeliveryDedup dedup(&clock, minutes(10), 2);
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_EQ(dedup.Begin(id, D(), NoWaiter()), Claim::kNew);
    dedup.Finish(id, D(), true);
  }
  EXPECT_EQ(dedup.size(), 2u);
  EXPECT_EQ(dedup.Begin("a", D(), NoWaiter()), Claim::kNew);  // evicted
  EXPECT_EQ(dedup.Begin("c", D(), NoWaiter()), Claim::kDone);
}

TEST(DeliveryDedupTest, FillingToTheCapNeverGrowsTheTable) {
  // Growth rehashes every id under the lock, stalling every HTTP thread.
  FakeClock clock;
  constexpr size_t kCap = 20'000;
  DeliveryDedup dedup(&clock, minutes(10), kCap);
  const size_t capacity = dedup.capacity();
  EXPECT_GE(capacity, kCap);
  for (size_t i = 0; i < kCap + 1000; ++i) {  // past the cap: oldest evicted
    std::string id = "delivery-" + std::to_string(i);
    ASSERT_EQ(dedup.Begin(id, D(), NoWaiter()), Claim::kNew);
    dedup.Finish(id, D(), true);
  }
  EXPECT_EQ(dedup.size(), kCap);
  EXPECT_EQ(dedup.capacity(), capacity);
}

TEST(DeliveryDedupTest, ZeroWindowDisablesDedup) {
  FakeClock clock;
  DeliveryDedup dedup(&clock, std::chrono::milliseconds(0), 100);
  ASSERT_EQ(dedup.Begin("a", D(), NoWaiter()), Claim::kNew);
  dedup.Finish("a", D(), true);
  EXPECT_EQ(dedup.Begin("a", D(), NoWaiter()), Claim::kNew);
}

TEST(DeliveryDedupTest, SameIdWithAnotherBodyIsAConflictAndRecordedToo) {
  FakeClock clock;
  DeliveryDedup dedup(&clock, minutes(10), 100);
  // A replayed body claims the id of a genuine delivery first...
  ASSERT_EQ(dedup.Begin("genuine", D(1), NoWaiter()), Claim::kNew);
  dedup.Finish("genuine", D(1), true);
  // ...GitHub's redelivery of the genuine body is still recorded.
  ASSERT_EQ(dedup.Begin("genuine", D(2), NoWaiter()), Claim::kConflict);
  dedup.Finish("genuine", D(2), true);
  // Both are known now: a repeat of either is a duplicate.
  EXPECT_EQ(dedup.Begin("genuine", D(1), NoWaiter()), Claim::kDone);
  EXPECT_EQ(dedup.Begin("genuine", D(2), NoWaiter()), Claim::kDone);
  EXPECT_EQ(dedup.size(), 1u);
  // A conflict in flight is joined only by the same body.
  ASSERT_EQ(dedup.Begin("genuine", D(3), NoWaiter()), Claim::kConflict);
  int joined = 0;
  ASSERT_EQ(dedup.Begin("genuine", D(3), [&](bool) { ++joined; }), Claim::kJoined);
  dedup.Finish("genuine", D(3), false);  // failed: forgotten, the others stay
  EXPECT_EQ(joined, 1);
  EXPECT_EQ(dedup.Begin("genuine", D(3), NoWaiter()), Claim::kConflict);
  EXPECT_EQ(dedup.Begin("genuine", D(1), NoWaiter()), Claim::kDone);
}

TEST(DeliveryDedupTest, BodiesOfOneIdExpireOneByOne) {
  FakeClock clock;
  DeliveryDedup dedup(&clock, minutes(10), 100);
  ASSERT_EQ(dedup.Begin("a", D(1), NoWaiter()), Claim::kNew);
  dedup.Finish("a", D(1), true);
  clock.Advance(minutes(5));
  ASSERT_EQ(dedup.Begin("a", D(2), NoWaiter()), Claim::kConflict);
  dedup.Finish("a", D(2), true);
  clock.Advance(minutes(6));  // the first is past the window, the second not
  EXPECT_EQ(dedup.Begin("a", D(2), NoWaiter()), Claim::kDone);
  EXPECT_EQ(dedup.Begin("a", D(1), NoWaiter()), Claim::kConflict);
}

}  // namespace
}  // namespace relay::intake
