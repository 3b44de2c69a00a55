// The shared budget: several instances on one budget log (the in-memory
// broker) keep the ceilings together, a secondary limit one of them meets
// pauses all, a vanished instance's claims leave the books after the hold,
// and the ledger decides the same for everyone; an instance whose host
// clock is 5 s ahead of or behind the broker's does all of that alike, and
// a log not stamped by the broker's clock is refused at start.
#include "relay/dispatch/shared_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "relay/kafka/testing/fake_admin.h"
#include "relay/kafka/testing/fake_broker.h"
#include "relay/kafka/testing/fake_consumer.h"
#include "relay/kafka/testing/fake_producer.h"
#include "support/timing.h"

namespace relay::dispatch {
namespace {

using namespace std::chrono_literals;
using kafka::testing::FakeBroker;
using kafka::testing::FakeProducer;

class SharedBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    broker_.CreateTopic("dispatch.budget", 1);
    admin_.SetTopic("dispatch.budget", 1, 1 << 20);
    admin_.SetConfig("dispatch.budget", "message.timestamp.type", "LogAppendTime");
  }
  absl::StatusOr<std::unique_ptr<SharedBudget>> Start(BudgetOptions b, std::chrono::milliseconds lease,
                                                      const Clock* clock, kafka::Producer* producer) {
    SharedBudgetOptions o;
    o.budget = b;
    o.lease = lease;
    o.hold = 2 * lease;
    auto followers = [this](kafka::FollowerOptions fo, kafka::FollowCallback cb) {
      return kafka::testing::NewFakeFollower(&broker_, std::move(fo), std::move(cb));
    };
    return SharedBudget::Start(o, producer, followers, admin_, clock, &registry_);
  }
  // An instance on the host clock `clock` (the broker's: clock_).
  std::unique_ptr<SharedBudget> Instance(BudgetOptions b, std::chrono::milliseconds lease = 500ms,
                                         const Clock* clock = nullptr) {
    auto s = Start(b, lease, clock ? clock : &clock_, &producer_);
    EXPECT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(relay::testing::WaitFor([&] { return (*s)->Health().ok(); }, 5s));
    return std::move(*s);
  }
  // Calls `budget` grants (and answers at once) within `for_how_long`;
  // with `at`, when each was granted.
  static int Granted(SharedBudget& budget, int64_t installation, bool write, std::chrono::milliseconds for_how_long,
                     std::map<std::string, std::string> headers = {},
                     std::vector<std::chrono::steady_clock::time_point>* at = nullptr) {
    int n = 0;
    auto end = std::chrono::steady_clock::now() + for_how_long;
    while (std::chrono::steady_clock::now() < end) {
      if (!budget.Acquire(installation, write).has_value()) {
        ++n;
        if (at) at->push_back(std::chrono::steady_clock::now());
        budget.Observe(installation, write, 204, headers, false);
      }
    }
    return n;
  }

  SystemClock clock_;  // the host's and the broker's, unless a test offsets the host's
  FakeBroker broker_;  // stamps records with the system clock, as LogAppendTime does
  FakeProducer producer_{FakeProducer::Mode::kAuto, &broker_};
  kafka::testing::FakeAdmin admin_;
  prometheus::Registry registry_;
};

TEST_F(SharedBudgetTest, TheWriteCeilingHoldsForEveryInstanceTogether) {
  BudgetOptions b;
  b.max_writes_per_minute = 20;
  b.window = 1s;
  auto a = Instance(b), c = Instance(b), d = Instance(b);
  std::atomic<int> total{0};
  std::vector<int> each(3);
  std::vector<std::thread> threads;
  SharedBudget* all[] = {a.get(), c.get(), d.get()};
  // Answered as GitHub answers, with the primary limit's count: while it is
  // unknown the rules allow one call at a time across every instance, and
  // which instance gets the next one is a race (one may lose them all on a
  // loaded machine).
  const std::map<std::string, std::string> github = {
      {"x-ratelimit-remaining", "4000"},
      {"x-ratelimit-reset", std::to_string(clock_.UnixMillis() / 1000 + 3600)}};
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { total += each[i] = Granted(*all[i], 1, true, 2500ms, github); });
  }
  for (auto& t : threads) t.join();
  // 2.5 s of a 1 s window of 20: at most 3 windows' worth, and well used.
  EXPECT_LE(total.load(), 60);
  EXPECT_GE(total.load(), 20) << "the ceiling is shared, not divided away (a whole window at least, even under TSan)";
  for (int i = 0; i < 3; ++i) EXPECT_GT(each[i], 0) << "instance " << i << " got nothing";
  // Reads are not content-creating: not held by the write ceiling (full
  // now: a write is refused).
  EXPECT_TRUE(a->Acquire(1, true).has_value());
  EXPECT_GT(Granted(*a, 1, false, 300ms), 5);
}

TEST_F(SharedBudgetTest, ASecondaryLimitMetByOnePausesAll) {
  BudgetOptions b;
  auto a = Instance(b), c = Instance(b);
  ASSERT_FALSE(a->Acquire(1, true).has_value());
  a->Observe(1, true, 429, {{"retry-after", "2"}}, true);
  auto own = a->Acquire(2, true);
  ASSERT_TRUE(own.has_value()) << "the instance that saw it pauses at once";
  EXPECT_GE(*own - clock_.Now(), 1500ms);
  ASSERT_TRUE(relay::testing::WaitFor([&] { return c->Acquire(1, false).has_value(); }, 2s))
      << "the other instance did not pause";
  auto other = c->Acquire(3, true);
  ASSERT_TRUE(other.has_value());
  EXPECT_GE(*other - clock_.Now(), 1000ms);
  std::this_thread::sleep_for(2100ms);
  // Polled, as below: a grant takes a claim's round trip through the
  // broker, which one 100 ms Acquire may not see out on a loaded machine.
  EXPECT_TRUE(relay::testing::WaitFor([&] { return !c->Acquire(3, true).has_value(); }, 1s)) << "the pause ends";
}

// github.budget_scope: the write ceiling holds for the App (every
// installation together) or for each installation, across every instance.
class SharedBudgetScopeTest : public SharedBudgetTest, public ::testing::WithParamInterface<BudgetScope> {};

INSTANTIATE_TEST_SUITE_P(Scope, SharedBudgetScopeTest,
                         ::testing::Values(BudgetScope::kApp, BudgetScope::kInstallation),
                         [](const auto& p) { return std::string(BudgetScopeName(p.param)); });

TEST_P(SharedBudgetScopeTest, TheWriteCeilingHoldsPerScopeAcrossInstances) {
  BudgetOptions b;
  b.max_writes_per_minute = 5;
  b.window = 60s;  // nothing leaves the window during the test
  b.scope = GetParam();
  auto a = Instance(b), c = Instance(b);
  const std::map<std::string, std::string> github = {
      {"x-ratelimit-remaining", "4000"},
      {"x-ratelimit-reset", std::to_string(clock_.UnixMillis() / 1000 + 3600)}};
  EXPECT_EQ(Granted(*a, 1, true, 800ms, github), 5) << "installation 1 takes the whole minute";
  EXPECT_EQ(Granted(*c, 1, true, 300ms, github), 0) << "another instance gets none of installation 1's";
  int other = Granted(*c, 2, true, 800ms, github);
  if (GetParam() == BudgetScope::kApp) {
    EXPECT_EQ(other, 0) << "the App's minute is full, whatever the installation";
  } else {
    EXPECT_EQ(other, 5) << "installation 2 has its own minute";
    EXPECT_EQ(Granted(*a, 2, true, 300ms, github), 0) << "and it holds on every instance";
  }
  EXPECT_GT(Granted(*c, 1, false, 300ms, github), 0) << "reads are not held by the write ceiling";
}

TEST_P(SharedBudgetScopeTest, ASecondaryLimitPausesEveryInstanceForItsScope) {
  BudgetOptions b;
  b.scope = GetParam();
  auto a = Instance(b), c = Instance(b);
  ASSERT_FALSE(a->Acquire(1, true).has_value());
  a->Observe(1, true, 429, {{"retry-after", "2"}}, true);
  ASSERT_TRUE(relay::testing::WaitFor([&] { return c->Acquire(1, false).has_value(); }, 2s))
      << "the other instance did not pause installation 1";
  EXPECT_TRUE(a->Acquire(1, true).has_value()) << "the instance that saw it pauses at once";
  if (GetParam() == BudgetScope::kApp) {
    EXPECT_TRUE(c->Acquire(2, true).has_value()) << "the App pauses: every installation";
    EXPECT_TRUE(a->Acquire(2, true).has_value());
  } else {
    EXPECT_FALSE(c->Acquire(2, true).has_value()) << "only installation 1 pauses";
    c->Observe(2, true, 204, {}, false);
    EXPECT_FALSE(a->Acquire(2, true).has_value()) << "nor on the instance that met the limit";
    a->Observe(2, true, 204, {}, false);
  }
}

TEST_F(SharedBudgetTest, ThePrimaryLimitOneInstanceLearnedHoldsTheOthers) {
  BudgetOptions b;
  auto a = Instance(b), c = Instance(b);
  int64_t reset = clock_.UnixMillis() / 1000 + 30;
  ASSERT_FALSE(a->Acquire(7, false).has_value());
  a->Observe(7, false, 200, {{"x-ratelimit-remaining", "0"}, {"x-ratelimit-reset", std::to_string(reset)}}, false);
  std::this_thread::sleep_for(700ms);  // the lease ends: its release tells everyone
  EXPECT_EQ(Granted(*c, 7, false, 500ms), 0) << "GitHub said none are left until the reset";
  EXPECT_GT(Granted(*c, 8, false, 300ms), 0) << "another installation has its own";
  EXPECT_EQ(c->Remaining(7), 0);
}

TEST_F(SharedBudgetTest, ALogNotStampedByTheBrokersClockIsRefusedAtStart) {
  admin_.SetConfig("dispatch.budget", "message.timestamp.type", "CreateTime");
  auto s = Start(BudgetOptions{}, 500ms, &clock_, &producer_);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(s.status())) << s.status();
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("message.timestamp.type is CreateTime"));
  EXPECT_TRUE(producer_.sent().empty()) << "it wrote to the log before refusing it";
  admin_.RemoveTopic("dispatch.budget");
  EXPECT_TRUE(absl::IsNotFound(Start(BudgetOptions{}, 500ms, &clock_, &producer_).status()));
}

// One instance's host clock is 5 s ahead of the broker's, or behind it.
class SharedBudgetSkewTest : public SharedBudgetTest, public ::testing::WithParamInterface<int> {
 protected:
  OffsetClock skewed_{&clock_, std::chrono::milliseconds(GetParam())};
};

INSTANTIATE_TEST_SUITE_P(HostClock, SharedBudgetSkewTest, ::testing::Values(5000, -5000),
                         [](const auto& p) { return p.param > 0 ? "Ahead5s" : "Behind5s"; });

// No window of the ceiling holds more writes than it allows, and the
// skewed instance writes its share: the grants it reads back in time are
// not given back as late (ahead), nor are pauses longer for it (behind).
TEST_P(SharedBudgetSkewTest, BothInstancesWriteAndNoWindowHoldsMoreThanTheCeiling) {
  BudgetOptions b;
  b.max_writes_per_minute = 20;
  b.window = 1s;
  auto a = Instance(b), c = Instance(b, 500ms, &skewed_);
  std::vector<std::chrono::steady_clock::time_point> at_a, at_c;
  int na = 0, nc = 0;
  std::thread ta([&] { na = Granted(*a, 1, true, 2500ms, {}, &at_a); });
  std::thread tc([&] { nc = Granted(*c, 1, true, 2500ms, {}, &at_c); });
  ta.join();
  tc.join();
  EXPECT_GT(na, 0);
  EXPECT_GT(nc, 0) << "the instance whose clock is off got nothing";
  EXPECT_GE(na + nc, 20) << "a whole window at least";
  // A write counts from its claim's log time until a window after its
  // release, and it is used in between: any window of use times holds at
  // most the ceiling (less 2 ms: log times are whole milliseconds, so a
  // window on the log may be up to 1 ms shorter than in real time).
  std::vector<std::chrono::steady_clock::time_point> all = at_a;
  all.insert(all.end(), at_c.begin(), at_c.end());
  std::sort(all.begin(), all.end());
  size_t most = 0;
  std::chrono::nanoseconds span{};
  for (size_t i = 0, j = 0; j < all.size(); ++j) {
    while (all[j] - all[i] >= 1s - 2ms) ++i;
    if (j - i + 1 > most) {
      most = j - i + 1;
      span = all[j] - all[i];
    }
  }
  EXPECT_LE(most, 20u) << "writes within " << span.count() << " ns";
}

// A secondary limit the other instance met pauses the skewed one for as
// long as it lasts on the broker's clock: not 5 s less, not 5 s more.
TEST_P(SharedBudgetSkewTest, APauseHoldsTheSkewedInstanceAndEndsForItOnTime) {
  BudgetOptions b;
  auto a = Instance(b), c = Instance(b, 500ms, &skewed_);
  ASSERT_FALSE(a->Acquire(1, true).has_value());
  a->Observe(1, true, 429, {{"retry-after", "2"}}, true);
  ASSERT_TRUE(relay::testing::WaitFor([&] { return c->Acquire(1, false).has_value(); }, 2s))
      << "the skewed instance did not pause";
  auto other = c->Acquire(3, true);
  ASSERT_TRUE(other.has_value());
  EXPECT_GE(*other - clock_.Now(), 1000ms) << "told to ask again before the pause ends";
  EXPECT_LE(*other - clock_.Now(), 2100ms) << "told to wait past the pause";
  std::this_thread::sleep_for(2100ms);
  EXPECT_TRUE(relay::testing::WaitFor([&] { return !c->Acquire(3, true).has_value(); }, 1s)) << "the pause ends";
}

// A grant read back more than half a lease after its claim was sent is
// given back unused, whatever the host's clock says (behind the broker,
// the old arithmetic saw every grant as early).
TEST_P(SharedBudgetSkewTest, AGrantReadBackLateIsGivenBackAndOneInTimeIsUsed) {
  FakeProducer manual(FakeProducer::Mode::kManual, &broker_);
  auto s = Start(BudgetOptions{}, 2s, &skewed_, &manual);
  ASSERT_TRUE(s.ok()) << s.status();
  auto& c = **s;
  ASSERT_TRUE(manual.CompleteNext(absl::OkStatus())) << "no probe";
  ASSERT_TRUE(relay::testing::WaitFor([&] { return c.Health().ok(); }, 5s)) << c.Health();
  // The claim is not written for 1.2 s (a slow broker): read back late.
  ASSERT_TRUE(c.Acquire(1, false).has_value());
  ASSERT_EQ(manual.pending(), 1u);
  std::this_thread::sleep_for(1200ms);
  ASSERT_TRUE(manual.CompleteNext(absl::OkStatus()));
  // At once, not when the 2 s lease ends unused.
  ASSERT_TRUE(relay::testing::WaitFor([&] { return manual.pending() == 1; }, 800ms)) << "nothing given back";
  v1::BudgetRecord back;
  ASSERT_TRUE(back.ParseFromString(manual.sent().back().value));
  ASSERT_TRUE(back.has_release());
  EXPECT_EQ(back.release().used(), 0);
  ASSERT_TRUE(manual.CompleteNext(absl::OkStatus()));
  // Written at once: used.
  std::optional<CallBudget::TimePoint> got = CallBudget::TimePoint{};
  std::thread t([&] { got = c.Acquire(1, false); });
  // EXPECT, not ASSERT: the thread is joined whatever happens (Acquire
  // gives up after ~100 ms).
  EXPECT_TRUE(relay::testing::WaitFor([&] { return manual.pending() == 1; }, 2s));
  EXPECT_TRUE(manual.CompleteNext(absl::OkStatus()));
  t.join();
  EXPECT_FALSE(got.has_value()) << "a grant read back in time was not used";
  c.Observe(1, false, 204, {}, false);
  s->reset();  // its release has nowhere to go but pending
}

TEST(BrokerClockTest, OwnRecordsAnchorItOthersOnlyRaiseIt) {
  BrokerClock b;
  auto t0 = std::chrono::steady_clock::time_point(100s);
  EXPECT_FALSE(b.anchored());
  // Others' records read now say only that the broker is past their time.
  b.Saw(1'000'000, t0, false);
  EXPECT_EQ(b.EarliestMs(t0 + 2s), 1'002'000);
  EXPECT_FALSE(b.anchored());
  b.Saw(900'000, t0 + 2s, false);  // older, read later: says less
  EXPECT_EQ(b.EarliestMs(t0 + 2s), 1'002'000);
  // An own record sets it afresh, even lower (drift on a long quiet run).
  b.Saw(1'001'500, t0 + 2s, true);
  EXPECT_TRUE(b.anchored());
  EXPECT_EQ(b.EarliestMs(t0 + 3s), 1'002'500);
}

// The rules on the log alone: the same records give the same grants, and a
// claim nobody releases (its instance vanished) counts until the hold.
TEST(BudgetLedgerTest, GrantsAreDeterministicAndAVanishedClaimLeavesAfterTheHold) {
  BudgetOptions b;
  b.max_writes_per_minute = 5;
  b.window = 10s;
  auto claim = [](const std::string& who, int64_t seq, int count) {
    v1::BudgetRecord r;
    r.set_instance(who);
    r.set_seq(seq);
    r.mutable_claim()->set_installation(1);
    r.mutable_claim()->set_write(true);
    r.mutable_claim()->set_count(count);
    return r;
  };
  auto release = [](const std::string& who, int64_t seq, int64_t claim_seq, int used, int64_t remaining,
                    int64_t reset) {
    v1::BudgetRecord r;
    r.set_instance(who);
    r.set_seq(seq);
    r.mutable_release()->set_claim_seq(claim_seq);
    r.mutable_release()->set_used(used);
    r.mutable_release()->set_remaining(remaining);
    r.mutable_release()->set_reset_unix(reset);
    return r;
  };
  BudgetLedger one(b, 3s), two(b, 3s);
  int64_t t = 1'800'000'000'000, reset = t / 1000 + 3600;
  // Until an answer tells the installation's primary limit, one call at a
  // time; then the window's ceiling decides, in log order.
  std::vector<v1::BudgetRecord> log = {claim("a", 1, 4), release("a", 2, 1, 1, 4999, reset), claim("a", 3, 4),
                                       claim("b", 1, 4), claim("a", 4, 4)};
  std::vector<int64_t> g1, g2;
  for (const auto& r : log) {
    auto x = one.Apply(r, t), y = two.Apply(r, t);
    if (x) g1.push_back(x->granted);
    if (y) g2.push_back(y->granted);
  }
  EXPECT_EQ(g1, (std::vector<int64_t>{1, 4, 0, 0}));
  EXPECT_EQ(g1, g2) << "the same log, the same grants";
  // "a" vanishes with 4 granted calls it never releases: they count as made
  // once the hold (3 s) passes, and stay in the window 10 s from then.
  EXPECT_EQ(one.Apply(claim("c", 1, 1), t + 2'000)->granted, 0);
  EXPECT_EQ(one.open_claims(), 1u);
  EXPECT_EQ(one.Apply(claim("c", 2, 1), t + 3'500)->granted, 0) << "made writes stay in the window";
  EXPECT_EQ(one.open_claims(), 0u);
  EXPECT_EQ(one.Apply(claim("c", 3, 1), t + 10'100)->granted, 1) << "the first write left the window";
  EXPECT_EQ(one.Apply(claim("c", 4, 5), t + 13'600)->granted, 4) << "a window after the hold: 5 less c's one";
}

}  // namespace
}  // namespace relay::dispatch
