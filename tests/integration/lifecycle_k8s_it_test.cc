// lifecycle's kubernetes provider against a real kube-apiserver (on etcd)
// with KubeRay's CRDs installed and its operator running
// (tools/k8s/lifecycle-fixture), beside services/lifecycle/test/
// kubernetes_test.cc, which runs the same provider against the recording
// fake. Here the objects relay makes are admitted by the real API (schemas,
// KubeRay's CRD, defaulting), the calls are authorized by the exact Role
// deploy/k8s gives relay-lifecycle (the provider uses that ServiceAccount's
// token), and KubeRay's operator turns relay's RayClusters into Pods.
//
// No kubelet, scheduler or controller-manager runs: Pods stay Pending (so
// clusters stay PROVISIONING), and nothing garbage-collects objects owned
// by a deleted RayCluster. The tests check what the API and the operator
// do, and say where a kubelet would take over. Label k8s: on demand
// (tools/dev test --k8s), not in CI (building the API server takes ~10
// minutes on a fresh machine).
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "relay/base/clock.h"
#include "relay/http/client.h"
#include "relay/kafka/testing/fake_broker.h"
#include "relay/kafka/testing/fake_consumer.h"
#include "relay/kafka/testing/fake_producer.h"
#include "relay/lifecycle/controller.h"
#include "relay/lifecycle/kubernetes_provider.h"

namespace relay::lifecycle {
namespace {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
using namespace std::chrono_literals;

const auth::Caller kMl{"ml-ci", "ml", false, "token"};

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string s((std::istreambuf_iterator<char>(in)), {});
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

class KubernetesApiServerIt : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* d = std::getenv("RELAY_IT_K8S_DIR");
    ASSERT_NE(d, nullptr) << "RELAY_IT_K8S_DIR (tools/k8s/lifecycle-fixture) is not set";
    dir_ = d;
    url_ = Read(dir_ / "url");
    ns_ = Read(dir_ / "namespace");
    token_ = Read(dir_ / "token");
    work_ = std::filesystem::temp_directory_path() / ("k8s-it-" + std::to_string(::getpid()));
    std::filesystem::create_directories(work_);
    broker_.CreateTopic("lifecycle.clusters", 3);
    broker_.CreateTopic("cluster.events", 3);
    http::ClientOptions o;
    o.ca_file = (dir_ / "ca.crt").string();
    auto c = http::Client::New(url_, o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
    admin_token_ = Read(dir_ / "apiserver" / "token");
    Start("token");
  }
  // The provider (as relay-lifecycle's ServiceAccount) under a controller.
  void Start(const std::string& ray_auth) {
    controller_.reset();
    KubernetesOptions ko;
    ko.ray_auth = ray_auth;
    ko.api_url = url_;
    ko.token_file = (dir_ / "token").string();  // relay-lifecycle's ServiceAccount, its deployed Role
    ko.ca_file = (dir_ / "ca.crt").string();
    ko.namespace_ = ns_;
    ko.owner = "relay-k8s-it";
    ko.log_dir = (work_ / "logs").string();
    auto p = NewKubernetesProvider(ko);
    ASSERT_TRUE(p.ok()) << p.status();
    provider_ = std::move(*p);
    ControllerOptions co;
    co.background = false;
    controller_ = std::make_unique<Controller>(co, provider_.get(), &reader_, &clock_, &registry_);
    ASSERT_TRUE(controller_->TakeOver(++epoch_, &producer_).ok());
  }
  void TearDown() override {
    controller_.reset();
    std::filesystem::remove_all(work_);
  }

  // The API as the cluster's admin (to look, not to act for relay).
  std::pair<unsigned, json::value> Admin(bhttp::verb m, const std::string& path) {
    auto r = client_->Send(m, path, {{"authorization", "Bearer " + admin_token_}}, "");
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {0, {}};
    boost::system::error_code ec;
    json::value v = json::parse(r->body, ec);
    return {r->status, ec ? json::value() : v};
  }
  // The API as relay-lifecycle's ServiceAccount.
  unsigned AsRelay(bhttp::verb m, const std::string& path, const std::string& body = "") {
    auto r = client_->Send(m, path, {{"authorization", "Bearer " + token_}, {"content-type", "application/json"}}, body);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->status : 0;
  }
  std::vector<json::object> Pods(const std::string& selector) {
    std::vector<json::object> out;
    auto [status, list] = Admin(bhttp::verb::get, "/api/v1/namespaces/" + ns_ + "/pods?labelSelector=" + selector);
    EXPECT_EQ(status, 200u);
    if (status == 200) {
      for (auto& p : list.at("items").as_array()) out.push_back(p.as_object());
    }
    return out;
  }
  // Waits for the operator (it acts on its own time).
  std::vector<json::object> AwaitPods(const std::string& selector, size_t n, std::chrono::seconds limit = 60s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    std::vector<json::object> pods;
    while (std::chrono::steady_clock::now() < deadline) {
      pods = Pods(selector);
      if (pods.size() == n) break;
      std::this_thread::sleep_for(250ms);
    }
    return pods;
  }
  static v1::CreateClusterRequest Ray(int workers) {
    v1::CreateClusterRequest r;
    r.mutable_spec()->set_kind("ray");
    auto* head = r.mutable_spec()->add_node_groups();
    head->set_name("head");
    head->set_count(1);
    head->set_ray_role("head");
    head->mutable_resources()->set_cpus(1);
    head->mutable_resources()->set_memory_mb(2048);
    auto* w = r.mutable_spec()->add_node_groups();
    w->set_name("cpu");
    w->set_count(workers);
    w->set_ray_role("worker");
    w->mutable_resources()->set_cpus(2);
    w->mutable_resources()->set_memory_mb(4096);
    return r;
  }

  std::filesystem::path dir_, work_;
  std::string url_, ns_, token_, admin_token_;
  std::unique_ptr<http::Client> client_;
  std::unique_ptr<NodeProvider> provider_;
  kafka::testing::FakeBroker broker_;
  kafka::testing::FakeProducer producer_{kafka::testing::FakeProducer::Mode::kAuto, &broker_};
  kafka::testing::FakeTopicReader reader_{&broker_};
  FakeClock clock_;
  prometheus::Registry registry_;
  std::unique_ptr<Controller> controller_;
  int64_t epoch_ = 0;
};

TEST_F(KubernetesApiServerIt, CommandClusterPodsAreAdmittedAndStayPendingWithoutAKubelet) {
  v1::CreateClusterRequest r;
  r.mutable_spec()->set_kind("command");
  auto* g = r.mutable_spec()->add_node_groups();
  g->set_name("shard");
  g->set_count(2);
  g->add_command("python3");
  g->add_command("-m");
  g->add_command("pytest");
  g->mutable_resources()->set_cpus(2);
  g->mutable_resources()->set_memory_mb(4096);
  auto c = controller_->Create(kMl, r);
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 3; ++i) controller_->ReconcileOnce();
  auto pods = Pods("relay.dev/cluster-id%3D" + c->id());
  ASSERT_EQ(pods.size(), 2u) << "the real API admitted both pods the provider made";
  for (const auto& p : pods) {
    EXPECT_EQ(p.at("status").at("phase"), "Pending") << "no kubelet here";
    EXPECT_FALSE(p.at("spec").as_object().contains("nodeName")) << "no scheduler here";
    // Defaulted by the API server, as in any cluster.
    EXPECT_EQ(p.at("spec").at("dnsPolicy"), "ClusterFirst");
  }
  EXPECT_EQ(controller_->Get(kMl, c->id())->state(), "PROVISIONING") << "Pending pods are not running nodes";

  ASSERT_TRUE(controller_->Delete(kMl, c->id()).ok());
  for (int i = 0; i < 10 && controller_->Get(kMl, c->id())->state() != "TERMINATED"; ++i) controller_->ReconcileOnce();
  EXPECT_EQ(controller_->Get(kMl, c->id())->state(), "TERMINATED");
  // Unscheduled pods are deleted at once (no kubelet to wait for).
  EXPECT_TRUE(AwaitPods("relay.dev/cluster-id%3D" + c->id(), 0, 20s).empty());
}

TEST_F(KubernetesApiServerIt, TokenAuthOnAKubeRayWithoutAuthOptionsIsRefusedNotSilentlyDropped) {
  // KubeRay 1.5's RayCluster CRD has no spec.authOptions: without strict
  // field validation the API server would drop it and the cluster would run
  // with its dashboard and Jobs API open. relay asks strictly: refused.
  auto c = controller_->Create(kMl, Ray(1));
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 4; ++i) controller_->ReconcileOnce();
  const std::string path = "/apis/ray.io/v1/namespaces/" + ns_ + "/rayclusters/" + c->id();
  EXPECT_EQ(Admin(bhttp::verb::get, path).first, 404u) << "no RayCluster without its authentication";
  // A refusal of the object itself is permanent: the cluster fails at once,
  // with the API server's reason for its owner to read.
  v1::Cluster got = *controller_->Get(kMl, c->id());
  EXPECT_EQ(got.state(), "FAILED");
  EXPECT_NE(got.reason().find("authOptions"), std::string::npos) << got.reason();
}

TEST_F(KubernetesApiServerIt, KubeRaysOperatorMakesTheHeadAndWorkerPodsOfRelaysRayCluster) {
  Start("none");  // KubeRay 1.5 has no token authentication (the test above)
  auto c = controller_->Create(kMl, Ray(2));
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 4; ++i) controller_->ReconcileOnce();
  const std::string path = "/apis/ray.io/v1/namespaces/" + ns_ + "/rayclusters/" + c->id();
  auto [status, rc] = Admin(bhttp::verb::get, path);
  ASSERT_EQ(status, 200u) << "KubeRay's CRD admitted relay's RayCluster";
  const auto& groups = rc.at("spec").at("workerGroupSpecs").as_array();
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].at("groupName"), "cpu");
  EXPECT_EQ(groups[0].at("replicas").as_int64(), 2);
  EXPECT_TRUE(rc.at("spec").as_object().contains("headGroupSpec"));

  // The operator: one head pod and a pod per worker replica, labelled with
  // the cluster's name, owned by the RayCluster. Pending: no kubelet.
  auto head = AwaitPods("ray.io/cluster%3D" + c->id() + ",ray.io/node-type%3Dhead", 1);
  ASSERT_EQ(head.size(), 1u) << "KubeRay made the head pod";
  auto workers = AwaitPods("ray.io/cluster%3D" + c->id() + ",ray.io/node-type%3Dworker", 2);
  ASSERT_EQ(workers.size(), 2u) << "KubeRay made a pod per worker replica";
  for (const auto& p : workers) {
    EXPECT_EQ(p.at("status").at("phase"), "Pending");
    const auto& owners = p.at("metadata").at("ownerReferences").as_array();
    ASSERT_EQ(owners.size(), 1u);
    EXPECT_EQ(owners[0].at("kind"), "RayCluster");
    EXPECT_EQ(std::string(owners[0].at("name").as_string()), c->id());
  }
  EXPECT_EQ(controller_->Get(kMl, c->id())->state(), "PROVISIONING") << "KubeRay does not call it ready: pods Pending";

  // Scale: relay patches replicas; the operator adds a pod.
  v1::ScaleClusterRequest scale;
  scale.set_id(c->id());
  scale.set_node_group("cpu");
  scale.set_count(3);
  ASSERT_TRUE(controller_->Scale(kMl, scale).ok());
  for (int i = 0; i < 4; ++i) controller_->ReconcileOnce();
  EXPECT_EQ(Admin(bhttp::verb::get, path).second.at("spec").at("workerGroupSpecs").as_array()[0].at("replicas").as_int64(),
            3);
  EXPECT_EQ(AwaitPods("ray.io/cluster%3D" + c->id() + ",ray.io/node-type%3Dworker", 3).size(), 3u)
      << "the operator followed relay's patch";

  // Delete: the RayCluster goes. Its pods would follow through the garbage
  // collector (kube-controller-manager), which does not run here.
  ASSERT_TRUE(controller_->Delete(kMl, c->id()).ok());
  for (int i = 0; i < 10 && controller_->Get(kMl, c->id())->state() != "TERMINATED"; ++i) controller_->ReconcileOnce();
  EXPECT_EQ(controller_->Get(kMl, c->id())->state(), "TERMINATED");
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (Admin(bhttp::verb::get, path).first != 404 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(250ms);
  }
  EXPECT_EQ(Admin(bhttp::verb::get, path).first, 404u);
}

TEST_F(KubernetesApiServerIt, TheDeployedRoleAllowsTheProviderAndNothingMore) {
  // What the provider did above went through this token. Beyond it:
  // nothing in another namespace, no Secrets, no cluster-wide lists.
  EXPECT_EQ(AsRelay(bhttp::verb::get, "/api/v1/namespaces/" + ns_ + "/pods"), 200u);
  EXPECT_EQ(AsRelay(bhttp::verb::get, "/apis/ray.io/v1/namespaces/" + ns_ + "/rayclusters"), 200u);
  EXPECT_EQ(AsRelay(bhttp::verb::get, "/api/v1/namespaces/default/pods"), 403u);
  EXPECT_EQ(AsRelay(bhttp::verb::get, "/api/v1/pods"), 403u);
  EXPECT_EQ(AsRelay(bhttp::verb::get, "/api/v1/namespaces/" + ns_ + "/secrets"), 403u);
  EXPECT_EQ(AsRelay(bhttp::verb::post, "/api/v1/namespaces/" + ns_ + "/services",
                    R"({"metadata":{"name":"x"},"spec":{"ports":[{"port":80}]}})"),
            403u);
  EXPECT_EQ(AsRelay(bhttp::verb::get, "/apis/ray.io/v1/namespaces/" + ns_ + "/rayjobs"), 403u);
}

}  // namespace
}  // namespace relay::lifecycle
