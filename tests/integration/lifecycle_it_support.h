// What the lifecycle integration tests share (lifecycle_it_test.cc, lifecycle_it_ray_test.cc):
// the tokens, the stack (broker topics, relay-lifecycle as a process), the
// process table, and the API calls the tests repeat.
#pragma once
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <thread>
#include <boost/json.hpp>
#include "absl/cleanup/cleanup.h"
#include "reflection_subset.grpc.pb.h"
#include "relay/auth/callers.h"
#include "relay/auth/jwt.h"
#include "relay/auth/oidc.h"
#include "relay/base/clock.h"
#include "relay/base/config.h"
#include "relay/lifecycle/lifecycle_service.h"
#include "relay/lifecycle/local_provider.h"
#include "relay/service/host.h"
#include "relay/v1/cluster.pb.h"
#include "relay/v1/lifecycle.grpc.pb.h"
#include "support/fixtures.h"
#include "support/http_client.h"
#include "support/kafka_admin.h"
#include "support/subprocess.h"
#include "support/timing.h"
#include "support/topic_reader.h"

namespace relay::lifecycle_it {


using testing::Env;
using testing::HttpClient;
using testing::ReadFile;
using testing::Subprocess;
using testing::Unique;
using namespace std::chrono_literals;

inline constexpr char kMlToken[] = "it-ml-token-0123456789";
inline constexpr char kVisionToken[] = "it-vision-token-0123456789";
inline constexpr char kAdminToken[] = "it-admin-token-0123456789";

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return pred();
}

// Labelled processes of `owner` by cluster id.
inline std::map<std::string, std::vector<lifecycle::LabelledProcess>> ProcessTable(const std::string& owner) {
  std::map<std::string, std::vector<lifecycle::LabelledProcess>> out;
  for (auto& p : lifecycle::FindLabelled(owner)) out[p.cluster_id].push_back(p);
  return out;
}

// Session leaders of a cluster's nodes (one per node).
inline std::map<std::string, int64_t> NodeSessions(const std::string& owner, const std::string& cluster) {
  std::map<std::string, int64_t> out;
  for (auto& p : lifecycle::FindLabelled(owner)) {
    if (p.cluster_id == cluster && !p.node_id.empty() && p.proc.pid == p.proc.sid) {
      EXPECT_EQ(out.count(p.node_id), 0u) << "two processes for node " << p.node_id;
      out[p.node_id] = p.proc.pid;
    }
  }
  return out;
}

// As root, nodes run as other uids (lifecycle.local.run_as or uid_range),
// which must reach their work dirs: the stack lives under /tmp then (the
// build tree may sit under a directory closed to them, such as /root).
inline std::string StackDir(const std::string& name) {
  std::string base = ::geteuid() == 0 ? "/tmp/relay-it" : Env("RELAY_IT_DIR");
  return base + "/lifecycle-" + name + "-" + Unique();
}

// The user a single-team stack's jobs run as: as root, never root itself.
inline std::string RunAs() { return ::geteuid() == 0 ? "nobody" : ""; }

class LifecycleStack {
 public:
  // `owner`: the owner label; empty: one of its own. `same_kafka_as`: share
  // that stack's topics and election group (one installation seen from
  // Kafka), with a host's worth of its own (dir, owner): a second host.
  // `clusters_topic_configs`: settings of the state topic.
  explicit LifecycleStack(const std::string& name, const std::string& owner = "",
                          const LifecycleStack* same_kafka_as = nullptr,
                          const std::map<std::string, std::string>& clusters_topic_configs = {})
      : dir_(StackDir(name)),
        owner_(owner.empty() ? "it-" + name + "-" + Unique() : owner),
        clusters_topic_(same_kafka_as ? same_kafka_as->clusters_topic_ : "it.lifecycle.clusters." + Unique()),
        leader_topic_(same_kafka_as ? same_kafka_as->leader_topic_ : "it.lifecycle.leader." + Unique()),
        group_(same_kafka_as ? same_kafka_as->group_ : "it-lifecycle-" + Unique()) {
    testing::RunCommand("mkdir -p " + dir_ + " && chmod 0711 " + dir_);
    std::ofstream(dir_ + "/tokens.yaml") << "tokens:\n"
                                         << "  - {name: ml-ci, team: ml, sha256: " << auth::ServiceTokenDigest(kMlToken) << "}\n"
                                         << "  - {name: vision-ci, team: vision, sha256: " << auth::ServiceTokenDigest(kVisionToken) << "}\n"
                                         << "  - {name: ops, team: platform, role: admin, sha256: " << auth::ServiceTokenDigest(kAdminToken) << "}\n";
    EXPECT_EQ(testing::CreateTopic(testing::FixtureBootstrap(), clusters_topic_, 3, clusters_topic_configs), "");
    EXPECT_EQ(testing::CreateTopic(testing::FixtureBootstrap(), leader_topic_, 1), "");
  }
  ~LifecycleStack() {
    procs_.clear();
    // Whatever a test left running goes (a failed test must not leak).
    for (auto& p : lifecycle::FindLabelled(owner_)) {
      if (p.proc.sid > 1 && p.proc.sid != ::getsid(0)) ::kill(static_cast<pid_t>(-p.proc.sid), SIGKILL);
    }
  }

  std::map<std::string, std::string> Env_() const {
    return {{"RELAY_HTTP_LISTEN", "127.0.0.1:0"},
            {"RELAY_HTTP_DRAIN_DELAY", "0s"},
            {"RELAY_KAFKA_BOOTSTRAP", testing::FixtureBootstrap()},
            {"RELAY_KAFKA_GROUP_ID", group_},
            {"RELAY_GRPC_LISTEN", "127.0.0.1:0"},
            {"RELAY_LIFECYCLE_TOKENS_FILE", dir_ + "/tokens.yaml"},
            {"RELAY_LIFECYCLE_STATE_DIR", dir_ + "/state"},
            {"RELAY_LIFECYCLE_LOCAL_TEAM", "ml"},
            {"RELAY_LIFECYCLE_LOCAL_RUN_AS", RunAs()},
            {"RELAY_LIFECYCLE_OWNER", owner_},
            {"RELAY_LIFECYCLE_TOPICS_CLUSTERS", clusters_topic_},
            {"RELAY_LIFECYCLE_TOPICS_LEADER", leader_topic_},
            {"RELAY_LIFECYCLE_RECONCILE_INTERVAL", "200ms"},
            {"RELAY_LIFECYCLE_SWEEP_INTERVAL", "1s"},
            {"RELAY_LIFECYCLE_STOP_GRACE", "2s"}};
  }

  // Starts instance n; returns its HTTP port (0 if it did not start).
  uint16_t Start(int n, std::map<std::string, std::string> extra = {}) {
    std::string port_file = dir_ + "/lifecycle" + std::to_string(n) + ".port";
    std::remove(port_file.c_str());
    auto env = Env_();
    for (auto& [k, v] : extra) env[k] = v;
    procs_[n] = std::make_unique<Subprocess>(std::vector<std::string>{Env("RELAY_IT_LIFECYCLE_BIN"), "--port-file", port_file},
                                             env, dir_ + "/lifecycle" + std::to_string(n) + ".log");
    // Until it listens, or exits (a refused configuration: exit 2).
    WaitFor([&] { return std::ifstream(port_file).good() || !procs_[n]->Running(); }, 30s);
    if (!testing::WaitForFile(port_file, 100ms)) return 0;
    ports_[n] = static_cast<uint16_t>(std::stoi(ReadFile(port_file)));
    return ports_[n];
  }
  bool Leading(int n) { return testing::MetricValue(ports_[n], "relay_lifecycle_leader") == 1; }
  uint16_t port(int n) { return ports_[n]; }
  bool WaitLeading(int n, std::chrono::milliseconds timeout = 60s) {
    return WaitFor([&] { return Leading(n) && HttpClient("127.0.0.1", ports_[n]).Get("/readyz").status == 200; }, timeout);
  }
  std::string GrpcAddress(int n) {
    return "127.0.0.1:" + std::to_string(static_cast<int>(testing::MetricValue(ports_[n], "relay_lifecycle_grpc_port")));
  }
  std::unique_ptr<v1::LifecycleApi::Stub> Stub(int n) {
    return v1::LifecycleApi::NewStub(grpc::CreateChannel(GrpcAddress(n), grpc::InsecureChannelCredentials()));
  }
  Subprocess& proc(int n) { return *procs_[n]; }
  std::string Log(int n) { return ReadFile(dir_ + "/lifecycle" + std::to_string(n) + ".log"); }
  const std::string& owner() const { return owner_; }
  const std::string& dir() const { return dir_; }
  const std::string& clusters_topic() const { return clusters_topic_; }

 private:
  std::string dir_, owner_, clusters_topic_, leader_topic_, group_;
  std::map<int, std::unique_ptr<Subprocess>> procs_;
  std::map<int, uint16_t> ports_;
};

inline std::unique_ptr<grpc::ClientContext> As(const std::string& token, std::chrono::milliseconds timeout = 30s) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  return ctx;
}

inline v1::CreateClusterRequest CommandCluster(int nodes, const std::string& request_id = "", int64_t idle_ttl = 0) {
  v1::CreateClusterRequest r;
  r.set_request_id(request_id);
  auto* s = r.mutable_spec();
  s->set_kind("command");
  s->set_idle_ttl_seconds(idle_ttl);
  auto* g = s->add_node_groups();
  g->set_name("workers");
  g->set_count(nodes);
  // A node that ignores nothing: sleep dies on SIGTERM.
  g->add_command("sleep");
  g->add_command("600");
  return r;
}

// Waits (WatchCluster) until the cluster is in one of `states`.
inline std::string WaitState(v1::LifecycleApi::Stub& stub, const std::string& token, const std::string& id,
                      std::set<std::string> states, std::chrono::milliseconds timeout = 60s) {
  auto ctx = As(token, timeout);
  v1::WatchClusterRequest req;
  req.set_id(id);
  auto reader = stub.WatchCluster(ctx.get(), req);
  v1::Cluster c;
  std::string last;
  while (reader->Read(&c)) {
    last = c.state();
    if (states.count(last)) {
      ctx->TryCancel();
      break;
    }
  }
  reader->Finish();
  return last;
}

inline v1::Cluster GetCluster(v1::LifecycleApi::Stub& stub, const std::string& token, const std::string& id) {
  v1::GetClusterRequest req;
  req.set_id(id);
  v1::Cluster out;
  auto st = stub.GetCluster(As(token).get(), req, &out);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return out;
}

// Waits until the job has ended (neither PENDING nor RUNNING); `done` is
// its last state read.
inline bool WaitJobEnded(v1::LifecycleApi::Stub& stub, const std::string& token, const std::string& cluster,
                  const std::string& job, v1::Job& done, std::chrono::milliseconds timeout) {
  return WaitFor(
      [&] {
        v1::GetJobRequest g;
        g.set_cluster_id(cluster);
        g.set_job_id(job);
        done.Clear();
        return stub.GetJob(As(token).get(), g, &done).ok() && done.state() != "PENDING" && done.state() != "RUNNING";
      },
      timeout);
}

}  // namespace relay::lifecycle_it
