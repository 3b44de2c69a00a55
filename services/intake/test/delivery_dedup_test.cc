#include "delivery_dedup.h"

#include <gtest/gtest.h>

namespace relay::intake {
namespace {

using Claim = DeliveryDedup::Claim;
using std::chrono::minutes;

auto NoWaiter() {
  return [](bool) { FAIL() << "waiter must not be called"; };
}

TEST(DeliveryDedupTest, DurableIdIsDuplicateWithinWindowOnly) {
  FakeClock clock;
  DeliveryDedup dedup(&clock, minutes(10), 100);
  EXPECT_EQ(dedup.Begin("a", NoWaiter()), Claim::kNew);
  dedup.Finish("a", true);
  EXPECT_EQ(dedup.Begin("a", NoWaiter()), Claim::kDone);
  clock.Advance(minutes(9));
  EXPECT_EQ(dedup.Begin("a", NoWaiter()), Claim::kDone);
  clock.Advance(minutes(2));
  EXPECT_EQ(dedup.Begin("a", NoWaiter()), Claim::kNew);
}

TEST(DeliveryDedupTest, FailedAttemptFreesTheIdForARetry) {
  FakeClock clock;
  DeliveryDedup dedup(&clock, minutes(10), 100);
  EXPECT_EQ(dedup.Begin("a", NoWaiter()), Claim::kNew);
  dedup.Finish("a", false);
  EXPECT_EQ(dedup.Begin("a", NoWaiter()), Claim::kNew);
  EXPECT_EQ(dedup.size(), 1u);
}

TEST(DeliveryDedupTest, ConcurrentDuplicateGetsTheFirstOutcome) {
  FakeClock clock;
  DeliveryDedup dedup(&clock, minutes(10), 100);
  ASSERT_EQ(dedup.Begin("a", NoWaiter()), Claim::kNew);
  int calls = 0;
  bool seen = false;
  ASSERT_EQ(dedup.Begin("a", [&](bool durable) { ++calls; seen = durable; }), Claim::kJoined);
  EXPECT_EQ(calls, 0);
  dedup.Finish("a", true);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(seen);

  ASSERT_EQ(dedup.Begin("b", NoWaiter()), Claim::kNew);
  ASSERT_EQ(dedup.Begin("b", [&](bool durable) { ++calls; seen = durable; }), Claim::kJoined);
  dedup.Finish("b", false);
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(seen);
}

TEST(DeliveryDedupTest, CapEvictsOldestDurableIds) {
  FakeClock clock;
  DeliveryDedup dedup(&clock, minutes(10), 2);
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_EQ(dedup.Begin(id, NoWaiter()), Claim::kNew);
    dedup.Finish(id, true);
  }
  EXPECT_EQ(dedup.size(), 2u);
  EXPECT_EQ(dedup.Begin("a", NoWaiter()), Claim::kNew);  // evicted
  EXPECT_EQ(dedup.Begin("c", NoWaiter()), Claim::kDone);
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
    ASSERT_EQ(dedup.Begin(id, NoWaiter()), Claim::kNew);
    dedup.Finish(id, true);
  }
  EXPECT_EQ(dedup.size(), kCap);
  EXPECT_EQ(dedup.capacity(), capacity);
}

TEST(DeliveryDedupTest, ZeroWindowDisablesDedup) {
  FakeClock clock;
  DeliveryDedup dedup(&clock, std::chrono::milliseconds(0), 100);
  ASSERT_EQ(dedup.Begin("a", NoWaiter()), Claim::kNew);
  dedup.Finish("a", true);
  EXPECT_EQ(dedup.Begin("a", NoWaiter()), Claim::kNew);
}

}  // namespace
}  // namespace relay::intake
