#include "relay/allowlist/allowlist.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "prometheus/text_serializer.h"

namespace relay::allowlist {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kAllLevels[] = R"(
L1: [acme/one, acme/two]
L2:
  - acme/second
L3:
  xpu:
    intel/torch-xpu: [alice, bob]
  npu:
    - ascend/pytorch-npu
L4:
  - amd/rocm-ci: "carol, dave"
  - nvidia/cuda-ci
)";

TEST(AllowlistTest, ReadsEveryLevelInTheReferenceShape) {
  auto list = Allowlist::Parse(kAllLevels, "test");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->entries().size(), 7u);
  EXPECT_EQ(list->Count(Level::kL1), 2u);
  EXPECT_EQ(list->Count(Level::kL4), 2u);
  const Entry* xpu = list->Find("Intel/Torch-XPU");  // GitHub names are case-insensitive
  ASSERT_NE(xpu, nullptr);
  EXPECT_EQ(xpu->repo, "intel/torch-xpu");
  EXPECT_EQ(xpu->level, Level::kL3);
  EXPECT_EQ(xpu->device, "xpu");
  EXPECT_THAT(xpu->oncalls, ElementsAre("alice", "bob"));
  EXPECT_EQ(list->Find("ascend/pytorch-npu")->device, "npu");
  EXPECT_THAT(list->Find("amd/rocm-ci")->oncalls, ElementsAre("carol", "dave"));
  EXPECT_EQ(list->Find("acme/none"), nullptr);
  // Highest level first.
  EXPECT_EQ(list->entries().front().level, Level::kL4);
  EXPECT_EQ(list->entries().back().level, Level::kL1);
}

TEST(AllowlistTest, RefusesARepoListedTwiceOrMalformed) {
  auto twice = Allowlist::Parse("L1: [acme/one]\nL4: [ACME/One]\n", "f.yaml");
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("ACME/One is listed twice (L1 and L4)"));
  auto same_level = Allowlist::Parse("L2: [acme/one, acme/one]\n", "f.yaml");
  EXPECT_FALSE(same_level.ok());
  EXPECT_THAT(std::string(Allowlist::Parse("L1: [not-a-repo]\n", "f.yaml").status().message()),
              HasSubstr("'not-a-repo' is not an owner/name repository"));
  EXPECT_THAT(std::string(Allowlist::Parse("L5: [a/b]\n", "f.yaml").status().message()), HasSubstr("unknown level"));
  EXPECT_THAT(std::string(Allowlist::Parse("L3: [a/b]\n", "f.yaml").status().message()), HasSubstr("L3 must map"));
  EXPECT_THAT(std::string(Allowlist::Parse("L1: [a/b\n", "f.yaml").status().message()), HasSubstr("f.yaml"));
}

TEST(AllowlistFileTest, ReloadsOnChangeAndKeepsTheLastGoodOneOnABadFile) {
  std::string path = "/tmp/relay-allowlist-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << "L1: [acme/one]\n";
  prometheus::Registry registry;
  auto file = AllowlistFile::Open(path, &registry);
  ASSERT_TRUE(file.ok()) << file.status();
  auto first = (*file)->Current();
  EXPECT_TRUE((*file)->Refresh().ok());
  EXPECT_EQ((*file)->Current(), first) << "unchanged content must not publish a new list";

  std::ofstream(path) << "L2: [acme/one, acme/two]\n";
  ASSERT_TRUE((*file)->Refresh().ok());
  EXPECT_EQ((*file)->Current()->Find("acme/one")->level, Level::kL2);

  std::ofstream(path) << "L2: [acme/one]\nL4: [acme/one]\n";  // bad: refused
  EXPECT_FALSE((*file)->Refresh().ok());
  EXPECT_EQ((*file)->Current()->Count(Level::kL2), 2u);
  EXPECT_TRUE((*file)->Refresh().ok()) << "the same bad file is refused once, not on every poll";
  std::string metrics = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_THAT(metrics, HasSubstr(R"(relay_allowlist_reloads_total{result="refused"} 1)"));
  EXPECT_THAT(metrics, HasSubstr(R"(relay_allowlist_reloads_total{result="loaded"} 2)"));
  EXPECT_THAT(metrics, HasSubstr(R"(relay_allowlist_repos{level="L2"} 2)"));

  std::remove(path.c_str());
  EXPECT_FALSE(AllowlistFile::Open(path, &registry).ok());
}

// What each repository wants dispatched: its events and labels, the
// default (today's events, any labels) for a repository without one.
TEST(AllowlistTest, ReadsSubscriptionsAndDefaultsTheRest) {
  auto list = Allowlist::Parse(std::string(kAllLevels) + R"(
subscriptions:
  ACME/one:
    events: [pull_request.synchronize, pull_request.labeled]
    labels: [ciflow/trunk, "ciflow/rocm*"]
  acme/two:
    events: [pull_request]
  acme/second:
    labels: [ciflow/second]
  nvidia/cuda-ci:
    events: []
)", "test");
  ASSERT_TRUE(list.ok()) << list.status();
  const Entry* one = list->Find("acme/one");
  ASSERT_TRUE(one->subscribed);
  EXPECT_TRUE(one->subscription.WantsEvent("pull_request", "synchronize"));
  EXPECT_TRUE(one->subscription.WantsEvent("pull_request", "labeled"));
  EXPECT_FALSE(one->subscription.WantsEvent("pull_request", "opened"));
  EXPECT_FALSE(one->subscription.WantsEvent("push", ""));
  EXPECT_TRUE(one->subscription.MatchesLabel("ciflow/trunk"));
  EXPECT_TRUE(one->subscription.MatchesLabel("ciflow/rocm/123"));
  EXPECT_FALSE(one->subscription.MatchesLabel("ciflow/trunk2"));
  const Entry* two = list->Find("acme/two");
  EXPECT_THAT(two->subscription.events, ElementsAre("pull_request.closed", "pull_request.opened",
                                                    "pull_request.reopened", "pull_request.synchronize"));
  EXPECT_TRUE(two->subscription.labels.empty());
  EXPECT_EQ(list->Find("acme/second")->subscription.events, Subscription::Default().events)
      << "labels alone narrow the default events";
  EXPECT_TRUE(list->Find("nvidia/cuda-ci")->subscription.events.empty()) << "asks for no dispatch at all";
  const Entry* other = list->Find("amd/rocm-ci");
  EXPECT_FALSE(other->subscribed);
  EXPECT_EQ(other->subscription.events, Subscription::Default().events);
  EXPECT_TRUE(other->subscription.WantsEvent("push", ""));
  EXPECT_FALSE(other->subscription.WantsEvent("pull_request", "labeled")) << "not dispatched before subscriptions";
}

TEST(AllowlistTest, RefusesASubscriptionItCannotHonour) {
  auto refused = [](const std::string& subscriptions) {
    auto list = Allowlist::Parse(std::string(kAllLevels) + "subscriptions:\n" + subscriptions, "allow.yaml");
    EXPECT_FALSE(list.ok()) << subscriptions;
    return list.ok() ? std::string() : std::string(list.status().message());
  };
  EXPECT_THAT(refused("  acme/nowhere:\n    events: [push]\n"), HasSubstr("acme/nowhere, which is in no level"));
  EXPECT_THAT(refused("  acme/one:\n    events: [pull_request.edited]\n"),
              HasSubstr("unknown event 'pull_request.edited'"));
  EXPECT_THAT(refused("  acme/one:\n    events: [issues]\n"), HasSubstr("unknown event 'issues'"));
  EXPECT_THAT(refused("  acme/one:\n    branches: [main]\n"), HasSubstr("unknown key 'branches'"));
  EXPECT_THAT(refused("  acme/one:\n    events: push\n"), HasSubstr("events must be a list"));
  EXPECT_THAT(refused("  acme/one:\n    labels: ['*']\n"), HasSubstr("a label must be a name"));
  EXPECT_THAT(refused("  acme/one: {events: [push]}\n  Acme/One: {events: [push]}\n"), HasSubstr("two subscriptions"));
  EXPECT_TRUE(Allowlist::Parse(std::string(kAllLevels) + "subscriptions:\n  acme/one: {events: [push]}\n", "t").ok())
      << "the same file with a good one is read";
}

}  // namespace
}  // namespace relay::allowlist
