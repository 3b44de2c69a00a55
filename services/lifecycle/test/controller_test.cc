// The controller against a recording provider, the fake broker and a fake
// clock: the cluster state machine, team isolation, idle and lifetime GC,
// jobs, state rebuilt by a new leader (fencing included), crash windows
// between recording and starting a node, and the orphan sweep.
#include "relay/lifecycle/controller.h"

#include <gtest/gtest.h>

#include <map>

#include "relay/kafka/testing/fake_broker.h"
#include "relay/kafka/testing/fake_consumer.h"
#include "relay/kafka/testing/fake_producer.h"

namespace relay::lifecycle {
namespace {

using namespace std::chrono_literals;
using kafka::testing::FakeBroker;
using kafka::testing::FakeProducer;
using kafka::testing::FakeTopicReader;

// Processes as a map: what a real provider would start, observed by tests.
struct FakeProcesses {
  struct Proc {
    std::string cluster, node, job;
    bool alive = true;
    int exit_code = -1;
  };
  std::map<int64_t, Proc> procs;
  int64_t next_pid = 1000;
  std::map<std::string, int> starts;  // node or job id -> times started
  bool stop_kills = true;             // SIGTERM ends a process at once
  bool fail_start = false;

  int Alive(const std::string& cluster) const {
    int n = 0;
    for (const auto& [_, p] : procs) n += (p.alive && p.cluster == cluster) ? 1 : 0;
    return n;
  }
};

class FakeProvider final : public NodeProvider {
 public:
  explicit FakeProvider(FakeProcesses* p) : p_(p) {}
  std::string name() const override { return "fake"; }
  absl::Status Acquire() override { return absl::OkStatus(); }
  void Release() override {}
  absl::Status Supports(const v1::ClusterSpec&) const override { return absl::OkStatus(); }
  absl::Status PrepareCluster(v1::Cluster& c) override {
    c.set_log_dir("/logs/" + c.id());
    return absl::OkStatus();
  }
  absl::Status StartNode(const v1::Cluster& c, v1::Node& n) override {
    if (p_->fail_start) return absl::FailedPreconditionError("no such command");
    int64_t pid = p_->next_pid++;
    p_->procs[pid] = {c.id(), n.id(), "", true, -1};
    ++p_->starts[n.id()];
    n.set_pid(pid);
    n.set_start_ticks(pid * 7);
    n.set_log_path(c.log_dir() + "/" + n.id() + ".log");
    return absl::OkStatus();
  }
  NodeStatus CheckNode(const v1::Cluster&, const v1::Node& n) override {
    auto it = p_->procs.find(n.pid());
    if (it == p_->procs.end() || !it->second.alive) return {false, false, it == p_->procs.end() ? -1 : it->second.exit_code};
    return {true, true, -1};
  }
  absl::Status StopNode(const v1::Cluster&, const v1::Node& n, bool force) override {
    auto it = p_->procs.find(n.pid());
    if (it != p_->procs.end() && (force || p_->stop_kills)) it->second.alive = false;
    return absl::OkStatus();
  }
  absl::Status CleanupCluster(const v1::Cluster&) override { return absl::OkStatus(); }
  absl::Status SubmitJob(const v1::Cluster& c, v1::Job& j) override {
    int64_t pid = p_->next_pid++;
    p_->procs[pid] = {c.id(), "", j.id(), true, -1};
    ++p_->starts[j.id()];
    j.set_pid(pid);
    j.set_log_path(c.log_dir() + "/job-" + j.id() + ".log");
    return absl::OkStatus();
  }
  JobStatus CheckJob(const v1::Cluster&, const v1::Job& j) override {
    auto& p = p_->procs.at(j.pid());
    if (p.alive) return {"RUNNING", -1, ""};
    return {p.exit_code == 0 ? "SUCCEEDED" : "FAILED", p.exit_code, p.exit_code == 0 ? "" : "exited"};
  }
  absl::Status StopJob(const v1::Cluster&, const v1::Job& j, bool force) override {
    auto& p = p_->procs.at(j.pid());
    if (force || p_->stop_kills) {
      p.alive = false;
      p.exit_code = 143;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<Owned>> Inventory() override {
    std::vector<Owned> out;
    for (const auto& [pid, p] : p_->procs) {
      if (p.alive) out.push_back(Owned{p.cluster, p.node, p.job, pid, pid, pid * 7, ""});
    }
    return out;
  }
  absl::Status Remove(const Owned& o) override {
    p_->procs[o.pid].alive = false;
    ++removed;
    return absl::OkStatus();
  }
  int removed = 0;

 private:
  FakeProcesses* p_;
};

const auth::Caller kMl{"ml-ci", "ml", false, "token"};
const auth::Caller kVision{"vision-ci", "vision", false, "token"};
const auth::Caller kAdmin{"ops", "platform", true, "token"};

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    broker_.CreateTopic("lifecycle.clusters", 3);
    broker_.CreateTopic("cluster.events", 3);
    options_.background = false;  // passes are driven by the test
    options_.sweep_interval = 1h;
    options_.stop_grace = 10s;
  }

  std::unique_ptr<Controller> NewController(FakeProvider* provider, int64_t epoch) {
    auto c = std::make_unique<Controller>(options_, provider, &reader_, &clock_, &registry_);
    EXPECT_TRUE(c->TakeOver(epoch, &producer_).ok());
    return c;
  }

  static v1::CreateClusterRequest Spec(int workers, int64_t idle_ttl = 0, const std::string& request_id = "") {
    v1::CreateClusterRequest r;
    r.set_request_id(request_id);
    auto* s = r.mutable_spec();
    s->set_kind("command");
    s->set_idle_ttl_seconds(idle_ttl);
    (*s->mutable_labels())["purpose"] = "test";
    auto* g = s->add_node_groups();
    g->set_name("workers");
    g->set_count(workers);
    g->add_command("sleep");
    g->add_command("1000");
    return r;
  }

  // Passes until the cluster is in `state` (each pass sees the last one's
  // writes acknowledged: the fake producer answers at once).
  std::string Drive(Controller& c, const std::string& id, const std::string& state, int passes = 10,
                    const auth::Caller& who = kMl) {
    std::string now;
    for (int i = 0; i < passes; ++i) {
      c.ReconcileOnce();
      now = c.Get(who, id)->state();
      if (now == state) break;
    }
    return now;
  }

  std::vector<v1::ClusterEvent> Events(const std::string& cluster) {
    std::vector<v1::ClusterEvent> out;
    for (const auto& r : broker_.All("cluster.events")) {
      v1::ClusterEvent e;
      EXPECT_TRUE(e.ParseFromString(r.value));
      if (e.cluster_id() == cluster) out.push_back(e);
    }
    return out;
  }

  ControllerOptions options_;
  FakeBroker broker_;
  FakeProducer producer_{FakeProducer::Mode::kAuto, &broker_};
  FakeTopicReader reader_{&broker_};
  FakeClock clock_;
  prometheus::Registry registry_;
  FakeProcesses procs_;
};

TEST_F(ControllerTest, ClusterComesUpRunsJobsAndGoesIdleThenIsCollected) {
  FakeProvider provider(&procs_);
  auto c = NewController(&provider, 1);
  auto created = c->Create(kMl, Spec(2, /*idle_ttl=*/60));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->state(), "REQUESTED");
  EXPECT_EQ(created->spec().team(), "ml");
  const std::string id = created->id();
  EXPECT_EQ(Drive(*c, id, "IDLE"), "IDLE");
  auto got = c->Get(kMl, id);
  EXPECT_GT(got->running_at_ms(), 0);
  EXPECT_EQ(procs_.Alive(id), 2);
  for (const auto& n : got->nodes()) EXPECT_EQ(procs_.starts[n.id()], 1) << "each node started once";

  // A job makes it RUNNING; its end makes it IDLE again.
  v1::SubmitJobRequest job;
  job.set_cluster_id(id);
  job.set_entrypoint("python train.py");
  job.set_request_id("train-1");
  auto j = c->SubmitJob(kMl, job);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->state(), "PENDING");
  EXPECT_EQ(c->SubmitJob(kMl, job)->id(), j->id()) << "the same request_id is the same job";
  EXPECT_EQ(Drive(*c, id, "RUNNING"), "RUNNING");
  EXPECT_EQ(c->GetJob(kMl, id, j->id())->state(), "RUNNING");
  procs_.procs[c->GetJob(kMl, id, j->id())->pid()].alive = false;
  procs_.procs[c->GetJob(kMl, id, j->id())->pid()].exit_code = 0;
  EXPECT_EQ(Drive(*c, id, "IDLE"), "IDLE");
  EXPECT_EQ(c->GetJob(kMl, id, j->id())->state(), "SUCCEEDED");

  // Idle for less than the TTL: kept. Past it: torn down.
  clock_.Advance(59s);
  c->ReconcileOnce();
  EXPECT_EQ(c->Get(kMl, id)->state(), "IDLE");
  clock_.Advance(2s);
  EXPECT_EQ(Drive(*c, id, "TERMINATED"), "TERMINATED");
  EXPECT_EQ(procs_.Alive(id), 0);
  EXPECT_NE(c->Get(kMl, id)->reason().find("idle"), std::string::npos) << c->Get(kMl, id)->reason();

  // The history: every transition, the job, usage per node group.
  std::vector<std::string> states;
  double node_seconds = 0, cluster_seconds = 0;
  bool job_succeeded = false;
  for (const auto& e : Events(id)) {
    if (e.kind() == "cluster") states.push_back(e.state());
    if (e.kind() == "usage") {
      node_seconds += e.node_seconds();
      cluster_seconds += e.cluster_seconds();
    }
    job_succeeded = job_succeeded || (e.kind() == "job" && e.state() == "SUCCEEDED" && !e.log_path().empty());
    EXPECT_EQ(e.team(), "ml");
  }
  EXPECT_EQ(states, (std::vector<std::string>{"REQUESTED", "PROVISIONING", "RUNNING", "IDLE", "RUNNING", "IDLE",
                                              "TERMINATING", "TERMINATED"}));
  EXPECT_TRUE(job_succeeded);
  EXPECT_NEAR(cluster_seconds, 61, 0.5);
  EXPECT_NEAR(node_seconds, 2 * 61, 1);
  // Deleted clusters stay readable.
  v1::ListClustersRequest all;
  all.set_include_ended(true);
  EXPECT_EQ(c->List(kMl, all)->size(), 1u);
  EXPECT_EQ(c->List(kMl, {})->size(), 0u);
}

TEST_F(ControllerTest, TeamsSeeOnlyTheirOwnClusters) {
  FakeProvider provider(&procs_);
  auto c = NewController(&provider, 1);
  auto ml = c->Create(kMl, Spec(1));
  ASSERT_TRUE(ml.ok());
  EXPECT_EQ(c->Get(kVision, ml->id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c->Delete(kVision, ml->id()).status().code(), absl::StatusCode::kNotFound);
  v1::ScaleClusterRequest scale;
  scale.set_id(ml->id());
  scale.set_node_group("workers");
  scale.set_count(3);
  EXPECT_EQ(c->Scale(kVision, scale).status().code(), absl::StatusCode::kNotFound);
  v1::SubmitJobRequest job;
  job.set_cluster_id(ml->id());
  job.set_entrypoint("true");
  EXPECT_EQ(c->SubmitJob(kVision, job).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c->List(kVision, {})->size(), 0u);
  v1::ListClustersRequest other;
  other.set_team("ml");
  EXPECT_EQ(c->List(kVision, other).status().code(), absl::StatusCode::kPermissionDenied);
  auto foreign = Spec(1);
  foreign.mutable_spec()->set_team("ml");
  EXPECT_EQ(c->Create(kVision, foreign).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(c->List(kAdmin, {})->size(), 1u) << "an admin sees every team";
  EXPECT_TRUE(c->Get(kAdmin, ml->id()).ok());
}

TEST_F(ControllerTest, BadSpecsAreRefusedWithTheReason) {
  FakeProvider provider(&procs_);
  auto c = NewController(&provider, 1);
  auto r = Spec(1);
  r.mutable_spec()->set_kind("vm");
  EXPECT_EQ(c->Create(kMl, r).status().code(), absl::StatusCode::kInvalidArgument);
  r = Spec(1000);
  EXPECT_NE(c->Create(kMl, r).status().message().find("count 1000"), std::string::npos);
  r = Spec(1);
  r.mutable_spec()->mutable_node_groups(0)->clear_command();
  EXPECT_EQ(c->Create(kMl, r).status().code(), absl::StatusCode::kInvalidArgument);
  r = Spec(1);
  r.mutable_spec()->mutable_node_groups(0)->set_name("Bad Name");
  EXPECT_EQ(c->Create(kMl, r).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(broker_.All("lifecycle.clusters").size(), 0u) << "nothing recorded";
}

TEST_F(ControllerTest, ScaleUpAndDownAndDelete) {
  FakeProvider provider(&procs_);
  auto c = NewController(&provider, 1);
  auto cl = c->Create(kMl, Spec(1, 0, "scale-me"));
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(c->Create(kMl, Spec(1, 0, "scale-me"))->id(), cl->id()) << "idempotent by request_id";
  EXPECT_EQ(Drive(*c, cl->id(), "IDLE"), "IDLE");
  v1::ScaleClusterRequest scale;
  scale.set_id(cl->id());
  scale.set_node_group("workers");
  scale.set_count(3);
  ASSERT_TRUE(c->Scale(kMl, scale).ok());
  for (int i = 0; i < 4; ++i) c->ReconcileOnce();
  EXPECT_EQ(procs_.Alive(cl->id()), 3);
  scale.set_count(0);
  ASSERT_TRUE(c->Scale(kMl, scale).ok());
  for (int i = 0; i < 4; ++i) c->ReconcileOnce();
  EXPECT_EQ(procs_.Alive(cl->id()), 0) << "scale to zero";
  EXPECT_EQ(c->Get(kMl, cl->id())->state(), "IDLE");
  scale.set_count(1);
  ASSERT_TRUE(c->Scale(kMl, scale).ok());
  for (int i = 0; i < 4; ++i) c->ReconcileOnce();
  EXPECT_EQ(procs_.Alive(cl->id()), 1);
  std::set<std::string> ids;
  v1::Cluster scaled = *c->Get(kMl, cl->id());
  for (const auto& n : scaled.nodes()) EXPECT_TRUE(ids.insert(n.id()).second) << "node ids are never reused";
  EXPECT_EQ(ids.size(), 4u);

  ASSERT_TRUE(c->Delete(kMl, cl->id()).ok());
  EXPECT_EQ(c->Scale(kMl, scale).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Drive(*c, cl->id(), "TERMINATED"), "TERMINATED");
  EXPECT_EQ(procs_.Alive(cl->id()), 0);
}

TEST_F(ControllerTest, ANodeThatIgnoresSigtermIsKilledAfterTheGrace) {
  FakeProvider provider(&procs_);
  procs_.stop_kills = false;
  auto c = NewController(&provider, 1);
  auto cl = c->Create(kMl, Spec(1));
  EXPECT_EQ(Drive(*c, cl->id(), "IDLE"), "IDLE");
  ASSERT_TRUE(c->Delete(kMl, cl->id()).ok());
  for (int i = 0; i < 3; ++i) c->ReconcileOnce();
  EXPECT_EQ(c->Get(kMl, cl->id())->state(), "TERMINATING");
  EXPECT_EQ(procs_.Alive(cl->id()), 1);
  clock_.Advance(11s);
  EXPECT_EQ(Drive(*c, cl->id(), "TERMINATED"), "TERMINATED");
}

TEST_F(ControllerTest, MaxLifetimeEndsABusyCluster) {
  FakeProvider provider(&procs_);
  auto c = NewController(&provider, 1);
  auto r = Spec(1);
  r.mutable_spec()->set_max_lifetime_seconds(3600);
  auto cl = c->Create(kMl, r);
  EXPECT_EQ(Drive(*c, cl->id(), "IDLE"), "IDLE");
  v1::SubmitJobRequest job;
  job.set_cluster_id(cl->id());
  job.set_entrypoint("sleep 99999");
  auto j = c->SubmitJob(kMl, job);
  EXPECT_EQ(Drive(*c, cl->id(), "RUNNING"), "RUNNING");
  clock_.Advance(3601s);
  EXPECT_EQ(Drive(*c, cl->id(), "TERMINATED"), "TERMINATED");
  EXPECT_EQ(c->GetJob(kMl, cl->id(), j->id())->state(), "CANCELLED");
}

TEST_F(ControllerTest, FailedProvisioningIsCleanedUpAndEndsFailed) {
  FakeProvider provider(&procs_);
  auto c = NewController(&provider, 1);
  procs_.fail_start = true;
  auto cl2 = c->Create(kMl, Spec(1));
  EXPECT_EQ(Drive(*c, cl2->id(), "FAILED"), "FAILED");
  EXPECT_NE(c->Get(kMl, cl2->id())->reason().find("no such command"), std::string::npos);
  EXPECT_EQ(procs_.Alive(cl2->id()), 0);
}

TEST_F(ControllerTest, ANewLeaderRebuildsStateAndIgnoresADeposedLeadersWrites) {
  FakeProvider provider(&procs_);
  std::string id;
  {
    auto a = NewController(&provider, 5);
    id = a->Create(kMl, Spec(2))->id();
    EXPECT_EQ(Drive(*a, id, "IDLE"), "IDLE");
    a->StepDown();
    EXPECT_EQ(a->Get(kMl, id).status().code(), absl::StatusCode::kUnavailable) << "a standby does not answer";
  }
  // A deposed leader (epoch 4) writes late: a stale record for the cluster.
  v1::ClusterRecord stale;
  stale.mutable_cluster()->set_id(id);
  stale.mutable_cluster()->set_state("TERMINATED");
  stale.mutable_cluster()->mutable_spec()->set_team("ml");
  stale.set_leader_epoch(4);
  ASSERT_TRUE(broker_.Append(kafka::Record{"lifecycle.clusters", id, stale.SerializeAsString(), {}, -1}).ok());

  auto b = NewController(&provider, 9);
  auto got = b->Get(kMl, id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state(), "IDLE") << "the epoch 4 record lost to epoch 5's";
  EXPECT_EQ(procs_.Alive(id), 2);
  for (int i = 0; i < 3; ++i) b->ReconcileOnce();
  for (const auto& n : got->nodes()) EXPECT_EQ(procs_.starts[n.id()], 1) << "the new leader started nothing again";
  EXPECT_EQ(procs_.Alive(id), 2);
}

TEST_F(ControllerTest, CrashBetweenRecordingAndStartingANodeStartsItOnce) {
  FakeProvider provider(&procs_);
  std::string id;
  {
    auto a = NewController(&provider, 1);
    id = a->Create(kMl, Spec(1))->id();
    a->ReconcileOnce();  // records the node STARTING; it starts on the next pass
    EXPECT_EQ(procs_.Alive(id), 0);
    a->StepDown();       // "crash"
  }
  auto b = NewController(&provider, 2);
  EXPECT_EQ(Drive(*b, id, "IDLE"), "IDLE");
  EXPECT_EQ(procs_.Alive(id), 1);
  for (const auto& [node, n] : procs_.starts) EXPECT_EQ(n, 1) << node;
}

TEST_F(ControllerTest, CrashBetweenStartingANodeAndRecordingItAdoptsTheProcess) {
  FakeProvider provider(&procs_);
  std::string id;
  {
    auto a = NewController(&provider, 1);
    id = a->Create(kMl, Spec(1))->id();
    a->ReconcileOnce();
    a->StepDown();
  }
  // The process the dead leader started after its last durable write.
  v1::ClusterRecord rec;
  auto records = broker_.All("lifecycle.clusters");
  ASSERT_TRUE(rec.ParseFromString(records.back().value));
  ASSERT_EQ(rec.cluster().nodes_size(), 1);
  const std::string node = rec.cluster().nodes(0).id();
  procs_.procs[4242] = {id, node, "", true, -1};
  procs_.starts[node] = 1;
  auto b = NewController(&provider, 2);
  EXPECT_EQ(Drive(*b, id, "IDLE"), "IDLE");
  EXPECT_EQ(procs_.Alive(id), 1);
  EXPECT_EQ(procs_.starts[node], 1) << "adopted, not started twice";
  EXPECT_EQ(b->Get(kMl, id)->nodes(0).pid(), 4242);
}

TEST_F(ControllerTest, TheSweepRemovesWhatNoClusterWants) {
  FakeProvider provider(&procs_);
  auto c = NewController(&provider, 1);
  auto cl = c->Create(kMl, Spec(1));
  EXPECT_EQ(Drive(*c, cl->id(), "IDLE"), "IDLE");
  procs_.procs[7001] = {"c-unknown", "c-unknown-w-0", "", true, -1};        // a cluster nobody has
  procs_.procs[7002] = {cl->id(), cl->id() + "-workers-99", "", true, -1};  // a node the cluster never had
  c->SweepOrphans();
  EXPECT_EQ(provider.removed, 2);
  EXPECT_EQ(procs_.Alive(cl->id()), 1) << "the wanted node stays";
}

TEST_F(ControllerTest, AFailedStateWriteIsNotAcknowledged) {
  FakeProvider provider(&procs_);
  auto c = NewController(&provider, 1);
  producer_.set_topic_status("lifecycle.clusters", absl::UnavailableError("broker down"));
  auto r = c->Create(kMl, Spec(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(c->Health().ok()) << "the leader rebuilds its state before answering again";
}

// A write the broker refuses as fenced (a newer leader's transactional
// producer exists): the controller stops acting at once, whatever the
// election still says, and answers UNAVAILABLE.
TEST_F(ControllerTest, AFencedWriteStopsEveryAction) {
  FakeProvider provider(&procs_);
  auto c = NewController(&provider, 1);
  auto cl = c->Create(kMl, Spec(2));
  ASSERT_TRUE(cl.ok());
  c->ReconcileOnce();
  int starts_before = 0;
  for (const auto& [node, n] : procs_.starts) starts_before += n;
  producer_.set_topic_status("lifecycle.clusters", kafka::FencedError("fenced: PRODUCER_FENCED"));
  c->ReconcileOnce();  // its writes are refused as fenced
  c->ReconcileOnce();
  EXPECT_FALSE(c->leading());
  EXPECT_NE(std::string(c->Health().message()).find("fenced"), std::string::npos) << c->Health();
  auto refused = c->Create(kMl, Spec(1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  producer_.set_topic_status("lifecycle.clusters", absl::OkStatus());
  for (int i = 0; i < 3; ++i) c->ReconcileOnce();
  int starts_after = 0;
  for (const auto& [node, n] : procs_.starts) starts_after += n;
  EXPECT_LE(starts_after, starts_before + 2) << "it went on starting nodes after it was fenced";
  EXPECT_FALSE(c->leading());
}

}  // namespace
}  // namespace relay::lifecycle
