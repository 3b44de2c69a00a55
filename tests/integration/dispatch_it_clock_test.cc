// relay-dispatch's shared budget and the hosts' clocks (issue 27, item 4).
// Two instances on one budget, one of them in this process on a host clock
// 5 s ahead of the broker's or 5 s behind it (relay::OffsetClock handed to
// the host as its clock), the other a process on the host's own clock:
// together they stay under GitHub's limits (0 breaches at the fake) and
// both write. A budget topic whose records carry their producers' clocks
// (CreateTime) is refused at start, with the reason.
// The stack and fixture: dispatch_it_support.h.
#include "dispatch_it_support.h"
#include "relay/base/clock.h"
#include "relay/base/config.h"
#include "relay/dispatch/dispatch_service.h"
#include "relay/service/host.h"
#include "support/kafka_admin.h"

namespace relay::dispatch_it {
namespace {

class DispatchClockIT : public DispatchIT, public ::testing::WithParamInterface<int> {};

INSTANTIATE_TEST_SUITE_P(HostClock, DispatchClockIT, ::testing::Values(5000, -5000),
                         [](const auto& p) { return p.param > 0 ? "Ahead5s" : "Behind5s"; });

// As TwoInstancesShareOneBudgetAndNeverBreachGitHubsLimits: 20 writes a
// second at GitHub and in both instances' settings, ten times that offered
// at once, keyed by ten repos so both own some.
TEST_P(DispatchClockIT, TwoInstancesOneOnAClockFiveSecondsOffShareOneBudgetWithoutBreachesAndBothWrite) {
  DispatchStack stack("skew");
  stack.SetAllowlist(kTenRepos);
  stack.Fake("POST", "/_fake/config",
             R"({"content_limit":{"per_window":20,"window_seconds":1},"rate_limit":{"limit":70,"window_seconds":3}})");
  std::map<std::string, std::string> env = {{"RELAY_GITHUB_MAX_WRITES_PER_MINUTE", "20"},
                                            {"RELAY_GITHUB_WRITE_WINDOW", "1s"},
                                            {"RELAY_KAFKA_SESSION_TIMEOUT", "6s"}};
  // Instance 1: this process, its host clock off by the parameter.
  SystemClock system;
  OffsetClock skewed(&system, std::chrono::milliseconds(GetParam()));
  auto config = Config::Load("", stack.Settings(env));
  ASSERT_TRUE(config.ok()) << config.status();
  service::Factories factories;
  factories.clock = &skewed;
  auto host = service::Host::Start(dispatch::Definition(), std::move(*config), factories);
  ASSERT_TRUE(host.ok()) << host.status();
  uint16_t p1 = (*host)->port();
  ASSERT_TRUE(relay::testing::WaitFor([&] { return (*host)->Ready().ok(); }, 60s, 50ms)) << (*host)->Ready();
  // Instance 2: a process on the host's clock; it joins the group second,
  // so its first assignment is the group of two.
  uint16_t p2 = stack.StartDispatch(2, env);
  ASSERT_NE(p2, 0) << stack.Log(2);
  ASSERT_TRUE(relay::testing::WaitFor(
      [&] { return stack.Log(2).find("partitions assigned") != std::string::npos; }, 60s, 100ms))
      << stack.Log(2);
  std::this_thread::sleep_for(3s);  // the group settles
  std::string run = "skew-" + Unique() + "-";
  stack.ProducePushDispatches(run, 200);
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(stack.WaitForDispatches(200, 120s, 3s), 200u);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 8s) << "200 writes at 20 a second";
  // And the budget is used, not waited out: a host behind the broker once
  // waited every denial and pause 5 s longer (65 s here, 14 s now).
  EXPECT_LT(took, relay::testing::Within(10s, 20s)) << "200 writes at 20 a second";
  auto stats = stack.Fake("GET", "/_fake/stats");
  EXPECT_EQ(stats.at("breaches").at("secondary").as_int64(), 0);
  EXPECT_EQ(stats.at("breaches").at("primary").as_int64(), 0);
  EXPECT_EQ(stats.at("breaches").at("retry_after").as_int64(), 0);
  const std::string done = "relay_github_writes_total{kind=\"dispatch\",result=\"done\"}";
  double w1 = Metric(p1, done), w2 = Metric(p2, done);
  std::cout << "clock " << GetParam() << " ms off: it wrote " << w1 << " (gave back "
            << Metric(p1, "relay_github_budget_calls_given_back_total") << " granted calls), the other wrote " << w2
            << " (gave back " << Metric(p2, "relay_github_budget_calls_given_back_total") << ") in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms" << std::endl;
  EXPECT_GT(w1, 0) << "the instance whose clock is off wrote nothing";
  EXPECT_GT(w2, 0);
  EXPECT_EQ(w1 + w2, 200);
  EXPECT_TRUE((*host)->Shutdown());
  stack.dispatch(2).Signal(SIGTERM);
  EXPECT_EQ(stack.dispatch(2).Wait(60s), 0);
}

TEST_F(DispatchIT, ABudgetTopicOnItsProducersClocksIsRefusedAtStartWithTheReason) {
  DispatchStack stack("createtime");
  stack.SetAllowlist(kTenRepos);
  std::string topic = "it.budget.createtime." + Unique();
  ASSERT_EQ(testing::CreateTopic(testing::FixtureBootstrap(), topic, 1, {{"message.timestamp.type", "CreateTime"}}),
            "");
  auto settings = stack.Settings({{"RELAY_GITHUB_BUDGET_TOPIC", topic}});
  // The binary: exits 1, the reason in its log.
  std::string log = stack.dir() + "/refused.log";
  Subprocess refused({Env("RELAY_IT_DISPATCH_BIN")}, settings, log);
  EXPECT_EQ(refused.Wait(60s), 1) << ReadFile(log);
  EXPECT_THAT(ReadFile(log), HasSubstr(topic + ": message.timestamp.type is CreateTime")) << ReadFile(log);
  // The same start in process says why in its status.
  auto config = Config::Load("", settings);
  ASSERT_TRUE(config.ok()) << config.status();
  auto host = service::Host::Start(dispatch::Definition(), std::move(*config));
  ASSERT_FALSE(host.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(host.status())) << host.status();
  EXPECT_THAT(std::string(host.status().message()), HasSubstr("LogAppendTime needed")) << host.status();
}

}  // namespace
}  // namespace relay::dispatch_it
