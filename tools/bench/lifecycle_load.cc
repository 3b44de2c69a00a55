// relay-lifecycle-load: drives a running relay-lifecycle through its gRPC
// API for tools/bench/lifecycle-bench.
//
//   relay-lifecycle-load converge --addr A --token T --clusters N [--nodes K] [--threads C]
//     creates N command clusters of K nodes (`sleep 3600`) from C threads,
//     waits until every one is RUNNING or IDLE, deletes them all, waits
//     until every one is TERMINATED; prints JSON: wall times of both
//     phases and the per-cluster provisioning wait (running_at - created_at)
//     percentiles.
//   relay-lifecycle-load api --addr A --token T --seconds S [--threads C]
//     GetCluster (read) and CreateCluster+DeleteCluster (write, each acked
//     only once durable in Kafka) calls for S seconds each; prints calls/s.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "relay/v1/lifecycle.grpc.pb.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string mode, addr, token;
  int clusters = 500, nodes = 1, threads = 8;
  double seconds = 10;
};

std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->AddMetadata("authorization", "Bearer " + token);
  c->set_deadline(std::chrono::system_clock::now() + 60s);
  return c;
}

relay::v1::CreateClusterRequest Spec(int nodes, const std::string& request_id) {
  relay::v1::CreateClusterRequest r;
  r.set_request_id(request_id);
  auto* s = r.mutable_spec();
  s->set_kind("command");
  (*s->mutable_labels())["bench"] = "lifecycle";
  auto* g = s->add_node_groups();
  g->set_name("n");
  g->set_count(nodes);
  g->add_command("sleep");
  g->add_command("3600");
  return r;
}

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

// Counts clusters with label bench=lifecycle by state (ended included).
std::map<std::string, int> States(relay::v1::LifecycleApi::Stub& stub, const std::string& token,
                                  std::vector<relay::v1::Cluster>* all = nullptr) {
  relay::v1::ListClustersRequest q;
  (*q.mutable_labels())["bench"] = "lifecycle";
  q.set_include_ended(true);
  relay::v1::ListClustersResponse r;
  std::map<std::string, int> out;
  if (!stub.ListClusters(Ctx(token).get(), q, &r).ok()) return out;
  for (const auto& c : r.clusters()) ++out[c.state()];
  if (all) all->assign(r.clusters().begin(), r.clusters().end());
  return out;
}

int Converge(const Args& a) {
  auto channel = grpc::CreateChannel(a.addr, grpc::InsecureChannelCredentials());
  auto stub = relay::v1::LifecycleApi::NewStub(channel);
  std::atomic<int> next{0}, failed{0};
  std::vector<std::string> ids(a.clusters);
  auto t0 = Clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < a.threads; ++t) {
    workers.emplace_back([&] {
      for (int i = next++; i < a.clusters; i = next++) {
        relay::v1::Cluster c;
        if (stub->CreateCluster(Ctx(a.token).get(), Spec(a.nodes, "bench-" + std::to_string(i)), &c).ok()) {
          ids[i] = c.id();
        } else {
          ++failed;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  double created = std::chrono::duration<double>(Clock::now() - t0).count();
  while (true) {
    auto s = States(*stub, a.token);
    if (s["RUNNING"] + s["IDLE"] + s["FAILED"] >= a.clusters - failed) break;
    if (Clock::now() - t0 > 600s) break;
    std::this_thread::sleep_for(50ms);
  }
  double up = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<relay::v1::Cluster> all;
  auto states = States(*stub, a.token, &all);
  std::vector<double> waits;
  for (const auto& c : all) {
    if (c.running_at_ms() > 0) waits.push_back((c.running_at_ms() - c.created_at_ms()) / 1000.0);
  }
  auto t1 = Clock::now();
  next = 0;
  workers.clear();
  for (int t = 0; t < a.threads; ++t) {
    workers.emplace_back([&] {
      for (int i = next++; i < a.clusters; i = next++) {
        if (ids[i].empty()) continue;
        relay::v1::DeleteClusterRequest d;
        d.set_id(ids[i]);
        relay::v1::Cluster c;
        if (!stub->DeleteCluster(Ctx(a.token).get(), d, &c).ok()) ++failed;
      }
    });
  }
  for (auto& w : workers) w.join();
  while (true) {
    auto s = States(*stub, a.token);
    if (s["TERMINATED"] + s["FAILED"] >= a.clusters) break;
    if (Clock::now() - t1 > 600s) break;
    std::this_thread::sleep_for(50ms);
  }
  double down = std::chrono::duration<double>(Clock::now() - t1).count();
  auto end = States(*stub, a.token);
  std::cout << "{\"clusters\": " << a.clusters << ", \"nodes_per_cluster\": " << a.nodes << ", \"create_calls_s\": " << created
            << ", \"all_running_s\": " << up << ", \"all_terminated_s\": " << down
            << ", \"provisioning_wait_p50_s\": " << Pct(waits, 0.5) << ", \"provisioning_wait_p99_s\": " << Pct(waits, 0.99)
            << ", \"provisioning_wait_max_s\": " << Pct(waits, 1.0) << ", \"reached_running\": " << waits.size()
            << ", \"failed_calls\": " << failed.load() << ", \"terminated\": " << end["TERMINATED"]
            << ", \"failed_clusters\": " << end["FAILED"] + states["FAILED"] << "}" << std::endl;
  return failed == 0 && end["TERMINATED"] == a.clusters ? 0 : 1;
}

int Api(const Args& a) {
  auto channel = grpc::CreateChannel(a.addr, grpc::InsecureChannelCredentials());
  auto stub = relay::v1::LifecycleApi::NewStub(channel);
  relay::v1::Cluster target;
  if (!stub->CreateCluster(Ctx(a.token).get(), Spec(0, "bench-api-target"), &target).ok()) return 1;
  auto run = [&](auto call) {
    std::atomic<int64_t> ok{0}, bad{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> ts;
    std::atomic<int> seq{0};
    for (int t = 0; t < a.threads; ++t) {
      ts.emplace_back([&] {
        while (!stop) (call(seq++) ? ok : bad)++;
      });
    }
    auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));
    stop = true;
    for (auto& t : ts) t.join();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    return std::pair<double, int64_t>(ok / s, bad.load());
  };
  auto reads = run([&](int) {
    relay::v1::GetClusterRequest g;
    g.set_id(target.id());
    relay::v1::Cluster c;
    return stub->GetCluster(Ctx(a.token).get(), g, &c).ok();
  });
  // Writes: a create (no nodes) and its delete, each durable in Kafka
  // before the answer. Each pair is two calls.
  auto writes = run([&](int i) {
    relay::v1::Cluster c;
    if (!stub->CreateCluster(Ctx(a.token).get(), Spec(0, "bench-api-" + std::to_string(i)), &c).ok()) return false;
    relay::v1::DeleteClusterRequest d;
    d.set_id(c.id());
    return stub->DeleteCluster(Ctx(a.token).get(), d, &c).ok();
  });
  std::cout << "{\"threads\": " << a.threads << ", \"get_per_s\": " << reads.first << ", \"get_errors\": " << reads.second
            << ", \"create_delete_pairs_per_s\": " << writes.first << ", \"write_calls_per_s\": " << 2 * writes.first
            << ", \"write_errors\": " << writes.second << "}" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (argc < 2) {
    std::cerr << "usage: relay-lifecycle-load converge|api --addr A --token T [--clusters N] [--nodes K] [--threads C] [--seconds S]\n";
    return 2;
  }
  a.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--addr") a.addr = v;
    else if (k == "--token") a.token = v;
    else if (k == "--clusters") a.clusters = std::atoi(v.c_str());
    else if (k == "--nodes") a.nodes = std::atoi(v.c_str());
    else if (k == "--threads") a.threads = std::atoi(v.c_str());
    else if (k == "--seconds") a.seconds = std::atof(v.c_str());
    else {
      std::cerr << "unknown flag " << k << "\n";
      return 2;
    }
  }
  if (a.mode == "converge") return Converge(a);
  if (a.mode == "api") return Api(a);
  std::cerr << "unknown mode " << a.mode << "\n";
  return 2;
}
