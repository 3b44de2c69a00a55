// Runner-pool sizing: ARC's label rule, reservations keyed by job id, the
// scale-down delay, expiry of lost jobs, and the pools file's checks.
#include "relay/lifecycle/pools.h"

#include <gtest/gtest.h>

namespace relay::lifecycle {
namespace {

using namespace std::chrono_literals;

std::vector<PoolSpec> Pools() {
  auto p = ParsePools(R"(pools:
  - name: npu
    team: npu-infra
    labels: [self-hosted, linux, NPU]
    min: 0
    max: 3
    scale_down_delay: 10m
    reservation_ttl: 1h
    command: [sleep, "600"]
  - name: npu-big
    team: npu-infra
    labels: [linux, npu, x64, big]
    repos: [Acme/Big]
    max: 2
    command: [sleep, "600"]
)", "test");
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : std::vector<PoolSpec>{};
}

WorkflowJobEvent Job(const std::string& action, int64_t id, int64_t at_ms, std::vector<std::string> labels = {"self-hosted", "linux", "npu"},
                     const std::string& repo = "acme/npu") {
  return WorkflowJobEvent{action, id, repo, std::move(labels), at_ms};
}

TEST(PoolsTest, LabelsMatchAsArcMatchesThem) {
  PoolScaler s(Pools());
  EXPECT_EQ(s.Match(Job("queued", 1, 0)), "npu");
  EXPECT_EQ(s.Match(Job("queued", 1, 0, {"linux"})), "npu") << "a subset of the pool's labels";
  EXPECT_EQ(s.Match(Job("queued", 1, 0, {"linux", "npu", "gpu"})), "") << "a label the pool lacks";
  EXPECT_EQ(s.Match(Job("queued", 1, 0, {"ubuntu-latest"})), "");
  EXPECT_EQ(s.Match(Job("queued", 1, 0, {"big"}, "acme/big")), "npu-big");
  EXPECT_EQ(s.Match(Job("queued", 1, 0, {"big"}, "acme/other")), "") << "npu-big serves acme/big only";
  EXPECT_EQ(s.Match(Job("queued", 1, 0, {"linux", "npu"}, "acme/big")), "npu") << "the fewest labels win";
}

TEST(PoolsTest, ReservationsAreKeyedByJobAndTheDelayHoldsScaleDown) {
  PoolScaler s(Pools());
  int64_t t = 1'000'000;
  EXPECT_EQ(s.Desired("npu", t), 0) << "scale to zero";
  s.Apply(Job("queued", 1, t));
  s.Apply(Job("queued", 1, t)) ;  // redelivered
  s.Apply(Job("queued", 2, t));
  EXPECT_EQ(s.Desired("npu", t), 2);
  for (int id = 3; id <= 6; ++id) s.Apply(Job("queued", id, t));
  EXPECT_EQ(s.Desired("npu", t), 3) << "clamped to max";
  s.Apply(Job("in_progress", 1, t + 1000));
  EXPECT_EQ(s.Reservations("npu", t + 1000), 6) << "in_progress keeps its reservation";
  for (int id = 1; id <= 6; ++id) s.Apply(Job("completed", id, t + 2000));
  EXPECT_EQ(s.Reservations("npu", t + 2000), 0);
  EXPECT_EQ(s.Desired("npu", t + 2000), 3) << "held: within the scale-down delay";
  EXPECT_EQ(s.Desired("npu", t + 599'000), 3);
  EXPECT_EQ(s.Desired("npu", t + 600'000), 0) << "then straight to the target";
  // A completed that overtook its queued: the late queued reserves nothing.
  s.Apply(Job("completed", 9, t + 700'000));
  s.Apply(Job("queued", 9, t + 700'001));
  EXPECT_EQ(s.Reservations("npu", t + 700'001), 0);
  // waiting asks for nothing yet.
  s.Apply(Job("waiting", 10, t + 700'002));
  EXPECT_EQ(s.Reservations("npu", t + 700'002), 0);
}

TEST(PoolsTest, ALostCompletedExpires) {
  PoolScaler s(Pools());
  int64_t t = 5'000'000;
  s.Apply(Job("queued", 1, t));
  EXPECT_EQ(s.Desired("npu", t), 1);
  EXPECT_EQ(s.Reservations("npu", t + 3'600'000 - 1), 1);
  EXPECT_EQ(s.Reservations("npu", t + 3'600'000), 0) << "reservation_ttl passed";
  EXPECT_EQ(s.Desired("npu", t + 3'600'000), 0);
}

TEST(PoolsTest, AReplayGivesTheSameSizes) {
  std::vector<WorkflowJobEvent> stream;
  for (int i = 0; i < 20; ++i) stream.push_back(Job(i % 3 == 2 ? "completed" : "queued", i / 2, 1'000 * i));
  PoolScaler a(Pools()), b(Pools());
  for (const auto& e : stream) a.Apply(e);
  for (const auto& e : stream) b.Apply(e);
  for (const auto& e : stream) b.Apply(e);  // the topic read twice
  EXPECT_EQ(a.Reservations("npu", 20'000), b.Reservations("npu", 20'000));
}

TEST(PoolsTest, ParsesRealPayloadFieldsAndRefusesOthers) {
  auto e = ParseWorkflowJob(R"({"action":"queued","workflow_job":{"id":289782451,"labels":["Self-Hosted","Linux"],"status":"waiting"},"repository":{"full_name":"Codertocat/Hello-World"}})", 42);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->action, "queued") << "the action decides, not workflow_job.status";
  EXPECT_EQ(e->job_id, 289782451);
  EXPECT_EQ(e->labels, (std::vector<std::string>{"self-hosted", "linux"}));
  EXPECT_EQ(e->repository, "codertocat/hello-world");
  EXPECT_FALSE(ParseWorkflowJob(R"({"action":"opened","pull_request":{}})", 0).ok());
  EXPECT_FALSE(ParseWorkflowJob("nope", 0).ok());
}

TEST(PoolsTest, PoolsFileMistakesAreNamed) {
  EXPECT_FALSE(ParsePools("pools: {}", "t").ok());
  EXPECT_FALSE(ParsePools("pools:\n  - {name: a, team: t, labels: [self-hosted], command: [x]}\n", "t").ok());
  EXPECT_FALSE(ParsePools("pools:\n  - {name: a, team: t, labels: [x], min: 3, max: 2, command: [x]}\n", "t").ok());
  EXPECT_FALSE(ParsePools("pools:\n  - {name: a, team: t, labels: [x], scale_down_delay: soon, command: [x]}\n", "t").ok());
  auto same = ParsePools("pools:\n  - {name: a, team: t, labels: [x], command: [x]}\n  - {name: b, team: t, labels: [X], command: [x]}\n", "t");
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.status().message().find("same labels"), std::string_view::npos);
}

}  // namespace
}  // namespace relay::lifecycle
