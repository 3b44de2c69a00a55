// The shared budget: several instances on one budget log (the in-memory
// broker) keep the ceilings together, a secondary limit one of them meets
// pauses all, a vanished instance's claims leave the books after the hold,
// and the ledger decides the same for everyone.
#include "relay/dispatch/shared_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

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
  void SetUp() override { broker_.CreateTopic("dispatch.budget", 1); }
  std::unique_ptr<SharedBudget> Instance(BudgetOptions b, std::chrono::milliseconds lease = 500ms) {
    SharedBudgetOptions o;
    o.budget = b;
    o.lease = lease;
    o.hold = 2 * lease;
    auto followers = [this](kafka::FollowerOptions fo, kafka::FollowCallback cb) {
      return kafka::testing::NewFakeFollower(&broker_, std::move(fo), std::move(cb));
    };
    auto s = SharedBudget::Start(o, &producer_, followers, &clock_, &registry_);
    EXPECT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(relay::testing::WaitFor([&] { return (*s)->Health().ok(); }, 5s));
    return std::move(*s);
  }
  // Calls `budget` grants (and answers at once) within `for_how_long`.
  static int Granted(SharedBudget& budget, int64_t installation, bool write, std::chrono::milliseconds for_how_long,
                     std::map<std::string, std::string> headers = {}) {
    int n = 0;
    auto end = std::chrono::steady_clock::now() + for_how_long;
    while (std::chrono::steady_clock::now() < end) {
      if (!budget.Acquire(installation, write).has_value()) {
        ++n;
        budget.Observe(installation, write, 204, headers, false);
      }
    }
    return n;
  }

  SystemClock clock_;
  FakeBroker broker_;
  FakeProducer producer_{FakeProducer::Mode::kAuto, &broker_};
  prometheus::Registry registry_;
};

TEST_F(SharedBudgetTest, TheWriteCeilingHoldsForEveryInstanceTogether) {
  BudgetOptions b;
  b.max_writes_per_window = 20;
  b.window = 1s;
  auto a = Instance(b), c = Instance(b), d = Instance(b);
  std::atomic<int> total{0};
  std::vector<int> each(3);
  std::vector<std::thread> threads;
  SharedBudget* all[] = {a.get(), c.get(), d.get()};
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { total += each[i] = Granted(*all[i], 1, true, 2500ms); });
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
  EXPECT_FALSE(c->Acquire(3, true).has_value()) << "the pause ends";
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

// The rules on the log alone: the same records give the same grants, and a
// claim nobody releases (its instance vanished) counts until the hold.
TEST(BudgetLedgerTest, GrantsAreDeterministicAndAVanishedClaimLeavesAfterTheHold) {
  BudgetOptions b;
  b.max_writes_per_window = 5;
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
