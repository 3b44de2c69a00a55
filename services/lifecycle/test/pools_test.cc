// Runner-pool sizing: ARC's label rule, reservations keyed by job id, the
// scale-down delay, expiry of lost jobs, and the pools file's checks.
#include "relay/lifecycle/pools.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "relay/v1/webhook.pb.h"

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

// The runner pools follow github.webhooks outside any group: a record they
// cannot read is counted by reason and logged, never dropped unseen.
TEST(PoolsTest, RecordsThePoolsCannotReadAreCountedByReason) {
  class Held final : public kafka::Follower {
   public:
    bool CaughtUp() const override { return false; }
    absl::Status Health() const override { return absl::OkStatus(); }
  };
  kafka::FollowCallback deliver;
  kafka::FollowerFactory follow = [&](kafka::FollowerOptions, kafka::FollowCallback cb)
      -> absl::StatusOr<std::unique_ptr<kafka::Follower>> {
    deliver = std::move(cb);
    return std::make_unique<Held>();
  };
  prometheus::Registry metrics;
  auto pools = PoolManager::Start(Pools(), "unused:9092", "github.webhooks", nullptr, nullptr, &metrics, follow);
  ASSERT_TRUE(pools.ok()) << pools.status();
  ASSERT_TRUE(deliver);
  auto record = [](const std::string& event, const std::string& body) {
    v1::WebhookRecord w;
    w.set_event(event);
    w.set_content_type("application/json");
    w.set_body(body);
    w.set_received_at_unix_ms(1000);
    kafka::ConsumedRecord r;
    r.topic = "github.webhooks";
    r.value = w.SerializeAsString();
    return r;
  };
  kafka::ConsumedRecord garbage;
  garbage.value = std::string("\xff\xff\xff", 3);
  deliver(garbage);
  deliver(record("workflow_job", "not json"));
  deliver(record("workflow_job", R"({"action":"opened","pull_request":{}})"));
  deliver(record("push", "not json either: not a pool's event, so not read"));
  deliver(record("workflow_job", R"({"action":"queued","workflow_job":{"id":7,"labels":["self-hosted","linux","npu"]},)"
                                 R"("repository":{"full_name":"acme/npu"}})"));
  auto value = [&](const std::string& name, const std::string& label, const std::string& want) {
    for (const auto& family : metrics.Collect()) {
      if (family.name != name) continue;
      for (const auto& m : family.metric) {
        for (const auto& l : m.label) {
          if (l.name == label && l.value == want) return m.counter.value;
        }
      }
    }
    return -1.0;
  };
  EXPECT_EQ(value("relay_lifecycle_pool_webhooks_skipped_total", "reason", "undecodable"), 1);
  EXPECT_EQ(value("relay_lifecycle_pool_webhooks_skipped_total", "reason", "payload"), 2);
  EXPECT_EQ(value("relay_lifecycle_pool_webhooks_total", "pool", "npu"), 1);
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
