// The kubernetes provider under the controller, against the recording fake
// API server (tools/fake_k8s): the objects it creates (labels, resources,
// names), the calls it makes (bearer token on each), a cluster through its
// lifecycle with pods moved by the test (no kubelet here), KubeRay
// RayCluster create/scale/delete, job pods and their logs, 409 and
// injected 5xx, the orphan sweep by label.
#include "relay/lifecycle/kubernetes_provider.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>

#include "fake_k8s.h"
#include "relay/http/client.h"
#include "relay/kafka/testing/fake_broker.h"
#include "relay/kafka/testing/fake_consumer.h"
#include "relay/kafka/testing/fake_producer.h"
#include "relay/lifecycle/controller.h"

namespace relay::lifecycle {
namespace {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
using namespace std::chrono_literals;

const auth::Caller kMl{"ml-ci", "ml", false, "token"};

class KubernetesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("k8s-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "token") << "fake-k8s-token\n";
    fake_k8s::Options fo;
    fo.token = "fake-k8s-token";
    fake_ = std::move(*fake_k8s::FakeKubernetes::Start(fo));
    client_ = std::move(*http::Client::New("http://127.0.0.1:" + std::to_string(fake_->port())));
    KubernetesOptions ko;
    ko.api_url = "http://127.0.0.1:" + std::to_string(fake_->port());
    ko.token_file = (dir_ / "token").string();
    ko.namespace_ = "ci";
    ko.image = "debian:12-slim";
    ko.owner = "relay-test";
    ko.log_dir = (dir_ / "logs").string();
    auto p = NewKubernetesProvider(ko);
    ASSERT_TRUE(p.ok()) << p.status();
    provider_ = std::move(*p);
    broker_.CreateTopic("lifecycle.clusters", 3);
    broker_.CreateTopic("cluster.events", 3);
    ControllerOptions co;
    co.background = false;
    controller_ = std::make_unique<Controller>(co, provider_.get(), &reader_, &clock_, &registry_);
    ASSERT_TRUE(controller_->TakeOver(1, &producer_).ok());
  }
  void TearDown() override {
    controller_.reset();
    fake_->Stop();
    std::filesystem::remove_all(dir_);
  }

  json::value Api(bhttp::verb m, const std::string& path, const std::string& body = "") {
    auto r = client_->Send(m, path, {{"authorization", "Bearer fake-k8s-token"}, {"content-type", "application/json"}}, body);
    EXPECT_TRUE(r.ok());
    return r.ok() && !r->body.empty() ? json::parse(r->body) : json::value();
  }
  std::vector<json::object> Pods(const std::string& selector = "") {
    std::vector<json::object> out;
    auto list = Api(bhttp::verb::get, "/api/v1/namespaces/ci/pods" + (selector.empty() ? "" : "?labelSelector=" + selector));
    for (auto& p : list.at("items").as_array()) out.push_back(p.as_object());
    return out;
  }
  void SetPod(const std::string& name, const std::string& phase, bool ready, int exit_code = -1, const std::string& log = "") {
    json::object o{{"phase", phase}, {"ready", ready}};
    if (exit_code >= 0) o["exitCode"] = exit_code;
    if (!log.empty()) o["log"] = log;
    Api(bhttp::verb::post, "/_fake/pods/ci/" + name, json::serialize(o));
  }
  json::array Calls() { return Api(bhttp::verb::get, "/_fake/calls").as_array(); }
  std::string Drive(const std::string& id, const std::string& state, int passes = 10) {
    std::string now;
    for (int i = 0; i < passes; ++i) {
      controller_->ReconcileOnce();
      now = controller_->Get(kMl, id)->state();
      if (now == state) break;
    }
    return now;
  }
  static v1::CreateClusterRequest Command(int n) {
    v1::CreateClusterRequest r;
    auto* g = r.mutable_spec()->add_node_groups();
    r.mutable_spec()->set_kind("command");
    g->set_name("shard");
    g->set_count(n);
    g->add_command("python3");
    g->add_command("-m");
    g->add_command("pytest");
    g->mutable_resources()->set_cpus(2);
    g->mutable_resources()->set_memory_mb(4096);
    return r;
  }

  std::filesystem::path dir_;
  std::unique_ptr<fake_k8s::FakeKubernetes> fake_;
  std::unique_ptr<http::Client> client_;
  std::unique_ptr<NodeProvider> provider_;
  kafka::testing::FakeBroker broker_;
  kafka::testing::FakeProducer producer_{kafka::testing::FakeProducer::Mode::kAuto, &broker_};
  kafka::testing::FakeTopicReader reader_{&broker_};
  FakeClock clock_;
  prometheus::Registry registry_;
  std::unique_ptr<Controller> controller_;
};

TEST_F(KubernetesTest, CommandClusterIsPodsThroughItsWholeLife) {
  auto c = controller_->Create(kMl, Command(2));
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 3; ++i) controller_->ReconcileOnce();
  auto pods = Pods("relay.dev/cluster-id%3D" + c->id());
  ASSERT_EQ(pods.size(), 2u);
  const auto& pod = pods[0];
  auto labels = pod.at("metadata").at("labels").as_object();
  EXPECT_EQ(labels.at("app.kubernetes.io/managed-by"), "relay-lifecycle");
  EXPECT_EQ(labels.at("relay.dev/owner"), "relay-test");
  EXPECT_EQ(labels.at("relay.dev/team"), "ml");
  auto container = pod.at("spec").at("containers").as_array()[0].as_object();
  EXPECT_EQ(container.at("image"), "debian:12-slim");
  EXPECT_EQ(json::serialize(container.at("command")), R"(["python3","-m","pytest"])");
  EXPECT_EQ(json::serialize(container.at("resources").at("limits")), R"({"cpu":"2000m","memory":"4096Mi"})");
  EXPECT_EQ(pod.at("spec").at("restartPolicy"), "Never");
  EXPECT_EQ(controller_->Get(kMl, c->id())->state(), "PROVISIONING") << "pods are Pending";

  for (const auto& p : Pods("relay.dev/cluster-id%3D" + c->id())) {
    SetPod(std::string(p.at("metadata").at("name").as_string()), "Running", true);
  }
  EXPECT_EQ(Drive(c->id(), "IDLE"), "IDLE");

  // A job is a pod; its log is kept when it ends.
  v1::SubmitJobRequest job;
  job.set_cluster_id(c->id());
  job.set_entrypoint("pytest -k smoke");
  auto j = controller_->SubmitJob(kMl, job);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(Drive(c->id(), "RUNNING"), "RUNNING");
  std::string job_pod = c->id() + "-" + j->id();
  auto jp = Api(bhttp::verb::get, "/api/v1/namespaces/ci/pods/" + job_pod);
  EXPECT_EQ(json::serialize(jp.at("spec").at("containers").as_array()[0].at("command")), R"(["/bin/sh","-c","pytest -k smoke"])");
  SetPod(job_pod, "Failed", false, 3, "1 failed, 9 passed\n");
  EXPECT_EQ(Drive(c->id(), "IDLE"), "IDLE");
  auto done = controller_->GetJob(kMl, c->id(), j->id());
  EXPECT_EQ(done->state(), "FAILED");
  EXPECT_EQ(done->exit_code(), 3);
  std::ifstream log(done->log_path());
  std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_EQ(text, "1 failed, 9 passed\n");

  // Scale down deletes one pod; delete removes the rest.
  v1::ScaleClusterRequest scale;
  scale.set_id(c->id());
  scale.set_node_group("shard");
  scale.set_count(1);
  ASSERT_TRUE(controller_->Scale(kMl, scale).ok());
  controller_->ReconcileOnce();
  controller_->ReconcileOnce();
  EXPECT_EQ(Pods("relay.dev/node-id%3D" + c->id() + "-shard-1").size(), 0u) << "the newest node goes";
  ASSERT_TRUE(controller_->Delete(kMl, c->id()).ok());
  EXPECT_EQ(Drive(c->id(), "TERMINATED"), "TERMINATED");
  EXPECT_TRUE(Pods("relay.dev/cluster-id%3D" + c->id()).empty());

  // Every call carried the service account's bearer token.
  for (const auto& call : Calls()) {
    EXPECT_NE(call.at("status").as_int64(), 401) << json::serialize(call);
  }
}

TEST_F(KubernetesTest, ConflictsAndServerErrorsNeverDuplicateAPod) {
  auto c = controller_->Create(kMl, Command(1));
  ASSERT_TRUE(c.ok());
  // The first create fails with a 500; the next pass creates it once.
  Api(bhttp::verb::post, "/_fake/faults", R"({"method":"POST","path":"/pods$","status":500,"count":1})");
  for (int i = 0; i < 4; ++i) controller_->ReconcileOnce();
  EXPECT_EQ(Pods("relay.dev/cluster-id%3D" + c->id()).size(), 1u);
  int posts = 0;
  for (const auto& call : Calls()) posts += call.at("method") == "POST" && call.at("path") == "/api/v1/namespaces/ci/pods";
  EXPECT_GE(posts, 2) << "retried after the 500";
  // The same node created again (a leader that crashed after creating it):
  // 409, recognised as this cluster's, not a failure.
  v1::Cluster got = *controller_->Get(kMl, c->id());
  v1::Node node = got.nodes(0);
  EXPECT_TRUE(provider_->StartNode(got, node).ok());
  EXPECT_EQ(Pods("relay.dev/cluster-id%3D" + c->id()).size(), 1u);
}

TEST_F(KubernetesTest, TheSweepDeletesLabelledPodsNoClusterWants) {
  auto c = controller_->Create(kMl, Command(1));
  for (int i = 0; i < 3; ++i) controller_->ReconcileOnce();
  json::object orphan{{"metadata", json::object{{"name", "c0000000000000000-shard-0"},
                                                {"labels", json::object{{"app.kubernetes.io/managed-by", "relay-lifecycle"},
                                                                        {"relay.dev/owner", "relay-test"},
                                                                        {"relay.dev/cluster-id", "c0000000000000000"},
                                                                        {"relay.dev/node-id", "c0000000000000000-shard-0"}}}}},
                      {"spec", json::object{}}};
  Api(bhttp::verb::post, "/api/v1/namespaces/ci/pods", json::serialize(orphan));
  json::object someone_else = orphan;
  someone_else["metadata"].as_object()["name"] = "not-ours";
  someone_else["metadata"].as_object()["labels"].as_object()["relay.dev/owner"] = "another-installation";
  Api(bhttp::verb::post, "/api/v1/namespaces/ci/pods", json::serialize(someone_else));
  controller_->SweepOrphans();
  auto names = Pods();
  std::set<std::string> left;
  for (auto& p : names) left.insert(std::string(p.at("metadata").at("name").as_string()));
  EXPECT_FALSE(left.count("c0000000000000000-shard-0")) << "our orphan is deleted";
  EXPECT_TRUE(left.count("not-ours")) << "another installation's pod is not ours to delete";
  EXPECT_TRUE(left.count(c->id() + "-shard-0")) << "the wanted node stays";
}

TEST_F(KubernetesTest, RayClusterIsOneKubeRayObjectScaledByPatch) {
  v1::CreateClusterRequest r;
  r.mutable_spec()->set_kind("ray");
  auto* head = r.mutable_spec()->add_node_groups();
  head->set_name("head");
  head->set_count(1);
  head->set_ray_role("head");
  auto* workers = r.mutable_spec()->add_node_groups();
  workers->set_name("gpu");
  workers->set_count(2);
  workers->set_ray_role("worker");
  workers->mutable_resources()->set_gpus(1);
  auto c = controller_->Create(kMl, r);
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 4; ++i) controller_->ReconcileOnce();
  std::string path = "/apis/ray.io/v1/namespaces/ci/rayclusters/" + c->id();
  auto rc = Api(bhttp::verb::get, path);
  ASSERT_TRUE(rc.is_object()) << "the RayCluster exists";
  EXPECT_EQ(rc.at("spec").at("authOptions").at("mode"), "token");
  auto group = rc.at("spec").at("workerGroupSpecs").as_array()[0].as_object();
  EXPECT_EQ(group.at("groupName"), "gpu");
  EXPECT_EQ(group.at("replicas").as_int64(), 2) << "patched up as workers start";
  EXPECT_EQ(json::serialize(group.at("template").at("spec").at("containers").as_array()[0].at("resources").at("limits")),
            R"({"nvidia.com/gpu":"1"})");
  EXPECT_EQ(controller_->Get(kMl, c->id())->state(), "PROVISIONING") << "KubeRay has not said ready";
  Api(bhttp::verb::post, "/_fake/rayclusters/ci/" + c->id(), R"({"state":"ready","readyWorkerReplicas":2})");
  EXPECT_EQ(Drive(c->id(), "IDLE"), "IDLE");

  v1::ScaleClusterRequest scale;
  scale.set_id(c->id());
  scale.set_node_group("gpu");
  scale.set_count(1);
  ASSERT_TRUE(controller_->Scale(kMl, scale).ok());
  controller_->ReconcileOnce();
  EXPECT_EQ(Api(bhttp::verb::get, path).at("spec").at("workerGroupSpecs").as_array()[0].at("replicas").as_int64(), 1);

  // Past the count it was created with: KubeRay caps replicas at
  // maxReplicas, so that is raised too (lifecycle_k8s_it_test saw the
  // operator ignore the extra replica before).
  scale.set_count(3);
  ASSERT_TRUE(controller_->Scale(kMl, scale).ok());
  for (int i = 0; i < 3; ++i) controller_->ReconcileOnce();
  auto grown = Api(bhttp::verb::get, path).at("spec").at("workerGroupSpecs").as_array()[0];
  EXPECT_EQ(grown.at("replicas").as_int64(), 3);
  EXPECT_EQ(grown.at("maxReplicas").as_int64(), 3);

  ASSERT_TRUE(controller_->Delete(kMl, c->id()).ok());
  EXPECT_EQ(Drive(c->id(), "TERMINATED"), "TERMINATED");
  auto gone = client_->Send(bhttp::verb::get, path, {{"authorization", "Bearer fake-k8s-token"}}, "");
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->status, 404u);
}

}  // namespace
}  // namespace relay::lifecycle
