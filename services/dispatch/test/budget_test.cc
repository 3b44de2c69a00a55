// The budget with a clock driven by hand.
#include "relay/dispatch/budget.h"

#include <gtest/gtest.h>

namespace relay::dispatch {
namespace {

using namespace std::chrono_literals;
using std::chrono::minutes;

TEST(BudgetTest, TheWriteCeilingHoldsPerWindow) {
  FakeClock clock;
  Budget budget({3, 60s}, &clock);
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(budget.Acquire(1, true).has_value());
    budget.Observe(1, true, 204, {}, false);
  }
  // The third is granted and still in flight: it counts already.
  EXPECT_FALSE(budget.Acquire(1, true).has_value());
  EXPECT_TRUE(budget.Acquire(1, true).has_value());
  clock.Advance(5s);
  budget.Observe(1, true, 204, {}, false);  // answered 5 s later: it stays in the window until then + 60 s
  auto wait = budget.Acquire(1, true);
  ASSERT_TRUE(wait.has_value());
  EXPECT_EQ(*wait - clock.Now(), 55s);  // the first two leave first
  EXPECT_FALSE(budget.Acquire(1, false).has_value()) << "reads are not content-creating";
  budget.Observe(1, false, 200, {}, false);
  clock.Advance(55s);
  EXPECT_FALSE(budget.Acquire(1, true).has_value());
  EXPECT_EQ(budget.WritesLeftInWindow(), 1);
  budget.Observe(1, true, 204, {}, false);
  clock.Advance(5s);
  EXPECT_EQ(budget.WritesLeftInWindow(), 2);
}

TEST(BudgetTest, PrimaryRemainingCountsCallsInFlight) {
  FakeClock clock;
  Budget budget({1000, 60s}, &clock);
  int64_t reset = clock.UnixMillis() / 1000 + 100;
  ASSERT_FALSE(budget.Acquire(7, true).has_value());
  budget.Observe(7, true, 204, {{"x-ratelimit-remaining", "2"}, {"x-ratelimit-reset", std::to_string(reset)}}, false);
  ASSERT_FALSE(budget.Acquire(7, true).has_value());  // 2 left, 1 in flight
  ASSERT_FALSE(budget.Acquire(7, true).has_value());  // 2 left, 2 in flight
  auto wait = budget.Acquire(7, true);
  ASSERT_TRUE(wait.has_value()) << "a third call would exceed what GitHub said is left";
  EXPECT_GE(*wait - clock.Now(), 100s);
  EXPECT_FALSE(budget.Acquire(8, true).has_value()) << "another installation has its own budget";
  // The two calls end; after the reset (and a second's margin for clock
  // differences) calls go again, one at a time until an answer tells the
  // new count.
  budget.Observe(7, true, 204, {{"x-ratelimit-remaining", "1"}, {"x-ratelimit-reset", std::to_string(reset)}}, false);
  budget.Observe(7, true, 204, {{"x-ratelimit-remaining", "0"}, {"x-ratelimit-reset", std::to_string(reset)}}, false);
  clock.Advance(100s);
  EXPECT_TRUE(budget.Acquire(7, true).has_value()) << "not before the reset has surely passed";
  clock.Advance(1s);
  EXPECT_FALSE(budget.Acquire(7, true).has_value());
  EXPECT_TRUE(budget.Acquire(7, true).has_value()) << "the new count is not known yet";
  budget.Observe(7, true, 204, {{"x-ratelimit-remaining", "4999"}, {"x-ratelimit-reset", std::to_string(reset + 3600)}}, false);
  EXPECT_FALSE(budget.Acquire(7, true).has_value());
  EXPECT_FALSE(budget.Acquire(7, true).has_value());
}

TEST(BudgetTest, TheHourlyCeilingHoldsToo) {
  FakeClock clock;
  Budget budget({1000, 60s, 5, 60s}, &clock);
  for (int i = 0; i < 5; ++i) {
    ASSERT_FALSE(budget.Acquire(1, true).has_value());
    budget.Observe(1, true, 204, {}, false);
    clock.Advance(minutes(10));
  }
  auto wait = budget.Acquire(1, true);  // 50 minutes in: five in the last hour
  ASSERT_TRUE(wait.has_value());
  EXPECT_EQ(*wait - clock.Now(), minutes(10));
  clock.Advance(minutes(10));
  EXPECT_FALSE(budget.Acquire(1, true).has_value());
}

TEST(BudgetTest, AnOlderHigherCountArrivingLateDoesNotRaiseTheBudget) {
  FakeClock clock;
  Budget budget({1000, 60s}, &clock);
  std::string reset = std::to_string(clock.UnixMillis() / 1000 + 100);
  ASSERT_FALSE(budget.Acquire(1, false).has_value());
  budget.Observe(1, false, 200, {{"x-ratelimit-remaining", "5"}, {"x-ratelimit-reset", reset}}, false);
  ASSERT_FALSE(budget.Acquire(1, false).has_value());
  ASSERT_FALSE(budget.Acquire(1, false).has_value());
  budget.Observe(1, false, 200, {{"x-ratelimit-remaining", "1"}, {"x-ratelimit-reset", reset}}, false);
  budget.Observe(1, false, 200, {{"x-ratelimit-remaining", "4"}, {"x-ratelimit-reset", reset}}, false);  // older, late
  EXPECT_EQ(budget.Remaining(1), 1);
}

TEST(BudgetTest, ASecondaryLimitAnswerPausesEveryone) {
  FakeClock clock;
  Budget budget({1000, 60s}, &clock);
  ASSERT_FALSE(budget.Acquire(1, true).has_value());
  budget.Observe(1, true, 429, {{"retry-after", "7"}}, false);
  auto wait = budget.Acquire(2, true);
  ASSERT_TRUE(wait.has_value());
  EXPECT_EQ(*wait - clock.Now(), 7s);
  clock.Advance(7s);
  EXPECT_FALSE(budget.Acquire(2, true).has_value());
  budget.Observe(2, true, 204, {}, false);
  // A 403 secondary limit without Retry-After (GitHub often sends none):
  // a minute, as GitHub asks.
  ASSERT_FALSE(budget.Acquire(2, true).has_value());
  budget.Observe(2, true, 403, {}, /*secondary=*/true);
  auto pause = budget.Acquire(1, false);
  ASSERT_TRUE(pause.has_value());
  EXPECT_EQ(*pause - clock.Now(), 60s);
  // A plain 403 (forbidden) pauses nobody.
  clock.Advance(60s);
  ASSERT_FALSE(budget.Acquire(2, true).has_value());
  budget.Observe(2, true, 403, {}, false);
  EXPECT_FALSE(budget.Acquire(1, false).has_value());
}

// With the App's scope (the default) every installation draws on one pair
// of ceilings and one pause.
TEST(BudgetTest, TheAppScopeHoldsEveryInstallationTogether) {
  FakeClock clock;
  BudgetOptions o{2, 60s};
  ASSERT_EQ(o.scope, BudgetScope::kApp) << "the conservative scope is the default";
  Budget budget(o, &clock);
  ASSERT_FALSE(budget.Acquire(1, true).has_value());
  ASSERT_FALSE(budget.Acquire(2, true).has_value());
  EXPECT_TRUE(budget.Acquire(3, true).has_value()) << "a third installation shares the App's ceiling";
  EXPECT_EQ(budget.WritesLeftInWindow(), 0);
}

// With the installation scope each installation has its own ceilings and
// its own pause; the primary limit stays each installation's either way.
TEST(BudgetTest, TheInstallationScopeGivesEachItsOwnCeilingsAndPause) {
  FakeClock clock;
  BudgetOptions o{2, 60s, 3, 60s};
  o.scope = BudgetScope::kInstallation;
  Budget budget(o, &clock);
  for (int64_t installation : {1, 2}) {
    for (int i = 0; i < 2; ++i) {
      ASSERT_FALSE(budget.Acquire(installation, true).has_value()) << installation;
      budget.Observe(installation, true, 204, {}, false);
    }
    EXPECT_TRUE(budget.Acquire(installation, true).has_value()) << "installation " << installation << "'s minute is full";
  }
  EXPECT_EQ(budget.WritesLeftInWindow(), 0) << "the fewest any installation has left";
  // The hourly ceiling is each installation's too: 3 an hour.
  clock.Advance(60s);
  ASSERT_FALSE(budget.Acquire(1, true).has_value());
  budget.Observe(1, true, 204, {}, false);
  EXPECT_TRUE(budget.Acquire(1, true).has_value()) << "installation 1 made its 3 this hour";
  EXPECT_FALSE(budget.Acquire(2, true).has_value()) << "installation 2 made 2";
  budget.Observe(2, true, 204, {}, false);
  // A secondary limit met by installation 3 pauses installation 3 only.
  ASSERT_FALSE(budget.Acquire(3, true).has_value());
  budget.Observe(3, true, 403, {{"retry-after", "30"}}, /*secondary=*/true);
  auto paused = budget.Acquire(3, false);
  ASSERT_TRUE(paused.has_value());
  EXPECT_EQ(*paused - clock.Now(), 30s);
  EXPECT_FALSE(budget.Acquire(4, true).has_value()) << "another installation is not paused";
  EXPECT_EQ(budget.paused_until(3), clock.Now() + 30s);
  EXPECT_EQ(budget.paused_until(4), Budget::TimePoint{});
}

TEST(BudgetTest, TheScopeIsReadByName) {
  EXPECT_EQ(*ParseBudgetScope("app"), BudgetScope::kApp);
  EXPECT_EQ(*ParseBudgetScope("installation"), BudgetScope::kInstallation);
  auto bad = ParseBudgetScope("token");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("app, installation"), std::string::npos) << bad.status();
  EXPECT_EQ(BudgetScopeName(BudgetScope::kInstallation), "installation");
}

}  // namespace
}  // namespace relay::dispatch
