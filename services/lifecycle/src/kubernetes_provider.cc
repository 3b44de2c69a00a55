#include "relay/lifecycle/kubernetes_provider.h"

#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "relay/base/log.h"
#include "relay/base/status.h"
#include "relay/http/client.h"

namespace relay::lifecycle {
namespace {

namespace json = boost::json;
namespace bhttp = boost::beast::http;

constexpr char kManagedBy[] = "app.kubernetes.io/managed-by";
constexpr char kOwner[] = "relay.dev/owner";
constexpr char kClusterId[] = "relay.dev/cluster-id";
constexpr char kNodeId[] = "relay.dev/node-id";
constexpr char kJobId[] = "relay.dev/job-id";
constexpr char kInCluster[] = "/var/run/secrets/kubernetes.io/serviceaccount";

std::string ReadTrimmed(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(ss.str()));
}

const json::value* At(const json::value& v, std::initializer_list<std::string_view> path) {
  const json::value* at = &v;
  for (auto k : path) {
    if (!at->is_object()) return nullptr;
    at = at->as_object().if_contains(k);
    if (!at) return nullptr;
  }
  return at;
}

std::string Str(const json::value& v, std::initializer_list<std::string_view> path) {
  const json::value* at = At(v, path);
  return at && at->is_string() ? std::string(at->as_string()) : "";
}

json::object Resources(const v1::Resources& r) {
  json::object q;
  if (r.cpus() > 0) q["cpu"] = absl::StrCat(static_cast<int64_t>(r.cpus() * 1000), "m");
  if (r.memory_mb() > 0) q["memory"] = absl::StrCat(r.memory_mb(), "Mi");
  if (r.gpus() > 0) q["nvidia.com/gpu"] = std::to_string(r.gpus());
  if (q.empty()) return {};
  return json::object{{"requests", q}, {"limits", q}};
}

class KubernetesProvider final : public NodeProvider {
 public:
  explicit KubernetesProvider(KubernetesOptions o) : o_(std::move(o)) {}

  absl::Status Init() {
    if (o_.api_url.empty()) {
      const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
      const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
      if (!host || !port) return absl::InvalidArgumentError("lifecycle.kubernetes.api_url is empty and this is not a pod");
      o_.api_url = absl::StrCat("https://", host, ":", port);
      if (o_.token_file.empty()) o_.token_file = std::string(kInCluster) + "/token";
      if (o_.ca_file.empty()) o_.ca_file = std::string(kInCluster) + "/ca.crt";
      if (o_.namespace_.empty()) o_.namespace_ = ReadTrimmed(std::string(kInCluster) + "/namespace");
    }
    if (o_.namespace_.empty()) o_.namespace_ = "default";
    if (o_.token_file.empty()) return absl::InvalidArgumentError("lifecycle.kubernetes.token_file is required outside a pod");
    http::ClientOptions co;
    co.ca_file = o_.ca_file;
    co.connect_timeout = std::chrono::seconds(2);
    co.request_timeout = std::chrono::seconds(10);
    co.user_agent = "relay-lifecycle";
    RELAY_ASSIGN_OR_RETURN(client_, http::Client::New(o_.api_url, co));
    if (ReadTrimmed(o_.token_file).empty()) return absl::InvalidArgumentError("cannot read token file " + o_.token_file);
    return absl::OkStatus();
  }

  std::string name() const override { return "kubernetes"; }
  absl::Status Acquire() override { return absl::OkStatus(); }
  void Release() override {}

  absl::Status Supports(const v1::ClusterSpec& spec) const override {
    if (spec.kind() == "command" || spec.kind() == "ray") return absl::OkStatus();
    return absl::FailedPreconditionError("the kubernetes provider has no kind " + spec.kind());
  }

  absl::Status PrepareCluster(v1::Cluster& cluster) override {
    std::error_code ec;
    std::filesystem::create_directories(LogDir(cluster.id()), ec);
    cluster.set_log_dir(LogDir(cluster.id()));
    return absl::OkStatus();
  }

  absl::Status StartNode(const v1::Cluster& c, v1::Node& node) override {
    const v1::NodeGroup* g = Group(c, node.group());
    if (!g) return absl::InvalidArgumentError("node group " + node.group() + " is not in the spec");
    node.set_log_path(absl::StrCat("k8s://", o_.namespace_, "/pods/", node.id()));
    if (c.spec().kind() == "ray") {
      node.set_address(absl::StrCat("k8s://", o_.namespace_, "/rayclusters/", c.id()));
      if (g->ray_role() == "head") return CreateRayCluster(c);
      return PatchWorkers(c);
    }
    json::object container{{"name", "main"}, {"image", o_.image}, {"command", Argv(*g)}};
    if (auto r = Resources(g->resources()); !r.empty()) container["resources"] = r;
    json::object pod{{"apiVersion", "v1"},
                     {"kind", "Pod"},
                     {"metadata", Metadata(node.id(), c, kNodeId, node.id())},
                     {"spec", json::object{{"restartPolicy", "Never"}, {"containers", json::array{container}}}}};
    return Create("/api/v1/namespaces/" + o_.namespace_ + "/pods", node.id(), pod, c.id());
  }

  NodeStatus CheckNode(const v1::Cluster& c, const v1::Node& node) override {
    NodeStatus unknown{true, node.ready(), -1};  // API trouble: no change
    if (c.spec().kind() == "ray") {
      auto rc = Get(RayClusterPath(c.id()));
      if (!rc.ok()) return rc.status().code() == absl::StatusCode::kNotFound ? NodeStatus{} : unknown;
      const v1::NodeGroup* g = Group(c, node.group());
      if (g && g->ray_role() == "worker" && node.state() == "STOPPING") return NodeStatus{};  // replicas were patched down
      bool ready = Str(*rc, {"status", "state"}) == "ready";
      if (g && g->ray_role() == "worker") {
        const json::value* n = At(*rc, {"status", "readyWorkerReplicas"});
        ready = ready && n && n->is_int64() && n->as_int64() >= DesiredWorkers(c);
      }
      return NodeStatus{true, ready, -1};
    }
    auto pod = Get("/api/v1/namespaces/" + o_.namespace_ + "/pods/" + node.id());
    if (!pod.ok()) return pod.status().code() == absl::StatusCode::kNotFound ? NodeStatus{} : unknown;
    return PodStatus(*pod);
  }

  absl::Status StopNode(const v1::Cluster& c, const v1::Node& node, bool force) override {
    if (c.spec().kind() == "ray") {
      const v1::NodeGroup* g = Group(c, node.group());
      if (g && g->ray_role() == "worker") return PatchWorkers(c);
      return Delete(RayClusterPath(c.id()), force);
    }
    return Delete("/api/v1/namespaces/" + o_.namespace_ + "/pods/" + node.id(), force);
  }

  absl::Status CleanupCluster(const v1::Cluster& c) override {
    // Whatever is left of the cluster (job pods included), in one call.
    auto r = Call(bhttp::verb::delete_,
                  "/api/v1/namespaces/" + o_.namespace_ + "/pods?labelSelector=" + Selector(c.id()), "");
    return r.ok() ? absl::OkStatus() : r.status();
  }

  absl::Status SubmitJob(const v1::Cluster& c, v1::Job& job) override {
    std::string name = c.id() + "-" + job.id();
    job.set_log_path(LogDir(c.id()) + "/job-" + job.id() + ".log");
    json::array command{"/bin/sh", "-c", job.entrypoint()};
    std::string image = o_.image;
    if (c.spec().kind() == "ray") {
      // KubeRay's head service: <cluster>-head-svc, dashboard port 8265.
      image = o_.ray_image;
      command = json::array{"ray", "job", "submit", "--address", "http://" + c.id() + "-head-svc:8265",
                            "--submission-id", job.id(), "--", "/bin/sh", "-c", job.entrypoint()};
    }
    json::object pod{{"apiVersion", "v1"},
                     {"kind", "Pod"},
                     {"metadata", Metadata(name, c, kJobId, job.id())},
                     {"spec", json::object{{"restartPolicy", "Never"},
                                           {"containers", json::array{json::object{
                                                              {"name", "main"}, {"image", image}, {"command", command}}}}}}};
    return Create("/api/v1/namespaces/" + o_.namespace_ + "/pods", name, pod, c.id());
  }

  JobStatus CheckJob(const v1::Cluster& c, const v1::Job& job) override {
    std::string path = "/api/v1/namespaces/" + o_.namespace_ + "/pods/" + c.id() + "-" + job.id();
    auto pod = Get(path);
    if (!pod.ok()) {
      if (pod.status().code() == absl::StatusCode::kNotFound) return JobStatus{"FAILED", -1, "the job's pod is gone"};
      return JobStatus{"RUNNING", -1, ""};
    }
    std::string phase = Str(*pod, {"status", "phase"});
    if (phase != "Succeeded" && phase != "Failed") return JobStatus{"RUNNING", -1, ""};
    NodeStatus s = PodStatus(*pod);
    auto log = Call(bhttp::verb::get, path + "/log", "");
    if (log.ok() && log->status == 200) std::ofstream(job.log_path(), std::ios::trunc) << log->body;
    if (phase == "Succeeded") return JobStatus{"SUCCEEDED", s.exit_code < 0 ? 0 : s.exit_code, ""};
    return JobStatus{"FAILED", s.exit_code, absl::StrCat("the job's pod failed (exit code ", s.exit_code, ")")};
  }

  absl::Status StopJob(const v1::Cluster& c, const v1::Job& job, bool force) override {
    return Delete("/api/v1/namespaces/" + o_.namespace_ + "/pods/" + c.id() + "-" + job.id(), force);
  }

  absl::StatusOr<std::vector<Owned>> Inventory() override {
    std::vector<Owned> out;
    std::string selector = absl::StrCat(kManagedBy, "%3Drelay-lifecycle%2C", kOwner, "%3D", o_.owner);
    for (const char* base : {"/api/v1/namespaces/", "/apis/ray.io/v1/namespaces/"}) {
      std::string path = base + o_.namespace_ + (std::string(base).find("ray.io") != std::string::npos ? "/rayclusters" : "/pods");
      auto list = Get(path + "?labelSelector=" + selector);
      if (!list.ok()) return list.status();
      const json::value* items = At(*list, {"items"});
      if (!items || !items->is_array()) continue;
      for (const auto& item : items->as_array()) {
        Owned o;
        o.cluster_id = Str(item, {"metadata", "labels", kClusterId});
        o.node_id = Str(item, {"metadata", "labels", kNodeId});
        o.job_id = Str(item, {"metadata", "labels", kJobId});
        o.object = path + "/" + Str(item, {"metadata", "name"});
        out.push_back(std::move(o));
      }
    }
    return out;
  }

  absl::Status Remove(const Owned& orphan) override {
    if (orphan.object.empty()) return absl::OkStatus();
    return Delete(orphan.object, true);
  }

 private:
  static const v1::NodeGroup* Group(const v1::Cluster& c, const std::string& name) {
    for (const auto& g : c.spec().node_groups()) {
      if (g.name() == name) return &g;
    }
    return nullptr;
  }
  static json::array Argv(const v1::NodeGroup& g) {
    json::array a;
    for (const auto& s : g.command()) a.push_back(json::value(s));
    return a;
  }
  std::string LogDir(const std::string& cluster) const { return o_.log_dir + "/" + cluster; }
  std::string RayClusterPath(const std::string& id) const {
    return "/apis/ray.io/v1/namespaces/" + o_.namespace_ + "/rayclusters/" + id;
  }
  std::string Selector(const std::string& cluster) const {
    return absl::StrCat(kOwner, "%3D", o_.owner, "%2C", kClusterId, "%3D", cluster);
  }
  json::object Metadata(const std::string& name, const v1::Cluster& c, const char* id_label, const std::string& id) const {
    json::object labels{{kManagedBy, "relay-lifecycle"}, {kOwner, o_.owner}, {kClusterId, c.id()}, {id_label, id},
                        {"relay.dev/team", c.spec().team()}};
    return json::object{{"name", name}, {"namespace", o_.namespace_}, {"labels", labels}};
  }

  static int64_t DesiredWorkers(const v1::Cluster& c) {
    int64_t n = 0;
    for (const auto& node : c.nodes()) {
      const v1::NodeGroup* g = Group(c, node.group());
      if (g && g->ray_role() == "worker" && (node.state() == "STARTING" || node.state() == "RUNNING")) ++n;
    }
    return n;
  }

  static NodeStatus PodStatus(const json::value& pod) {
    NodeStatus s;
    std::string phase = Str(pod, {"status", "phase"});
    s.alive = phase == "Pending" || phase == "Running" || phase.empty();
    if (const json::value* conds = At(pod, {"status", "conditions"}); conds && conds->is_array()) {
      for (const auto& cond : conds->as_array()) {
        if (Str(cond, {"type"}) == "Ready") s.ready = phase == "Running" && Str(cond, {"status"}) == "True";
      }
    }
    if (const json::value* cs = At(pod, {"status", "containerStatuses"}); cs && cs->is_array() && !cs->as_array().empty()) {
      if (const json::value* code = At(cs->as_array()[0], {"state", "terminated", "exitCode"}); code && code->is_int64()) {
        s.exit_code = static_cast<int>(code->as_int64());
      }
    }
    return s;
  }

  absl::Status CreateRayCluster(const v1::Cluster& c) {
    json::object head_template;
    json::array workers;
    auto tmpl = [&](const v1::NodeGroup& g, const char* role) {
      json::object container{{"name", std::string("ray-") + role}, {"image", o_.ray_image}};
      if (auto r = Resources(g.resources()); !r.empty()) container["resources"] = r;
      return json::object{{"metadata", json::object{{"labels", json::object{{kManagedBy, "relay-lifecycle"},
                                                                           {kOwner, o_.owner},
                                                                           {kClusterId, c.id()}}}}},
                          {"spec", json::object{{"containers", json::array{container}}}}};
    };
    for (const auto& g : c.spec().node_groups()) {
      if (g.ray_role() == "head") {
        head_template = tmpl(g, "head");
      } else {
        workers.push_back(json::object{{"groupName", g.name()}, {"replicas", 0}, {"minReplicas", 0},
                                       {"maxReplicas", std::max(g.count(), 1)}, {"rayStartParams", json::object{}},
                                       {"template", tmpl(g, "worker")}});
      }
    }
    json::object rc{{"apiVersion", "ray.io/v1"},
                     {"kind", "RayCluster"},
                     {"metadata", Metadata(c.id(), c, kNodeId, c.id() + "-head")},
                     {"spec", json::object{{"rayVersion", "2.60.0"},
                                           {"headGroupSpec", json::object{{"rayStartParams", json::object{}},
                                                                          {"template", head_template}}},
                                           {"workerGroupSpecs", workers}}}};
    std::string collection = "/apis/ray.io/v1/namespaces/" + o_.namespace_ + "/rayclusters";
    if (o_.ray_auth == "token") {
      // Token authentication (KubeRay's authOptions): the dashboard and Jobs
      // API refuse anyone without it. Strict field validation: an API server
      // whose RayCluster CRD lacks the field answers 422 instead of dropping
      // it and running the cluster open (lifecycle_k8s_it_test, KubeRay 1.5).
      rc["spec"].as_object()["authOptions"] = json::object{{"mode", "token"}};
      collection += "?fieldValidation=Strict";
    }
    // The node id label names the head: the inventory maps the object to it.
    for (const auto& n : c.nodes()) {
      const v1::NodeGroup* g = Group(c, n.group());
      if (g && g->ray_role() == "head") rc["metadata"].as_object()["labels"].as_object()[kNodeId] = n.id();
    }
    return Create(collection, c.id(), rc, c.id());
  }

  // Sets every worker group's replicas to its live worker nodes, and its
  // maxReplicas to the group's count: KubeRay caps replicas at maxReplicas,
  // so a group scaled past the count it was created with would otherwise
  // never get its pods (found against KubeRay's operator,
  // tests/integration/lifecycle_k8s_it_test.cc).
  absl::Status PatchWorkers(const v1::Cluster& c) {
    json::array ops;
    int index = 0;
    for (const auto& g : c.spec().node_groups()) {
      if (g.ray_role() != "worker") continue;
      int64_t live = 0;
      for (const auto& n : c.nodes()) live += (n.group() == g.name() && (n.state() == "STARTING" || n.state() == "RUNNING")) ? 1 : 0;
      ops.push_back(json::object{{"op", "replace"},
                                 {"path", absl::StrCat("/spec/workerGroupSpecs/", index, "/maxReplicas")},
                                 {"value", std::max<int64_t>({g.count(), live, 1})}});
      ops.push_back(json::object{{"op", "replace"},
                                 {"path", absl::StrCat("/spec/workerGroupSpecs/", index, "/replicas")},
                                 {"value", live}});
      ++index;
    }
    auto r = Call(bhttp::verb::patch, RayClusterPath(c.id()), json::serialize(ops), "application/json-patch+json");
    if (!r.ok()) return r.status();
    if (r->status == 404) return absl::FailedPreconditionError("RayCluster " + c.id() + " does not exist (its head starts it)");
    if (r->status / 100 != 2) return absl::UnavailableError(absl::StrCat("PATCH RayCluster answered ", r->status));
    return absl::OkStatus();
  }

  // Creates an object; an existing one of the same cluster counts as created.
  absl::Status Create(const std::string& collection, const std::string& name, const json::object& obj,
                      const std::string& cluster) {
    auto r = Call(bhttp::verb::post, collection, json::serialize(obj));
    if (!r.ok()) return r.status();
    if (r->status == 201 || r->status == 200) return absl::OkStatus();
    // The object itself refused (schema, strict fields, admission): asking
    // again changes nothing, so the reason is kept for the operator.
    if (r->status == 422 || r->status == 400) {
      return absl::FailedPreconditionError(absl::StrCat("create ", name, ": the API server refused it (", r->status,
                                                        "): ", r->body.substr(0, 400)));
    }
    if (r->status == 409) {
      auto existing = Get(collection.substr(0, collection.find('?')) + "/" + name);
      if (existing.ok() && Str(*existing, {"metadata", "labels", kClusterId}) == cluster) return absl::OkStatus();
      return absl::FailedPreconditionError(name + " exists and is not this cluster's");
    }
    return absl::UnavailableError(absl::StrCat("create ", name, ": the API server answered ", r->status, " ",
                                               r->body.substr(0, 200)));
  }

  absl::Status Delete(const std::string& path, bool force) {
    auto r = Call(bhttp::verb::delete_, path + (force ? "?gracePeriodSeconds=0" : ""), "");
    if (!r.ok()) return r.status();
    if (r->status / 100 == 2 || r->status == 404) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("delete ", path, ": the API server answered ", r->status));
  }

  absl::StatusOr<json::value> Get(const std::string& path) {
    auto r = Call(bhttp::verb::get, path, "");
    if (!r.ok()) return r.status();
    if (r->status == 404) return absl::NotFoundError(path);
    if (r->status != 200) return absl::UnavailableError(absl::StrCat("GET ", path, ": ", r->status));
    boost::system::error_code ec;
    json::value v = json::parse(r->body, ec);
    if (ec) return absl::UnavailableError("GET " + path + ": not JSON");
    return v;
  }

  absl::StatusOr<http::ClientResponse> Call(bhttp::verb method, const std::string& path, const std::string& body,
                                            const std::string& content_type = "application/json") {
    // Service account tokens rotate: read the file now and then.
    auto now = std::chrono::steady_clock::now();
    if (token_.empty() || now - token_read_ > std::chrono::seconds(60)) {
      token_ = ReadTrimmed(o_.token_file);
      token_read_ = now;
    }
    std::map<std::string, std::string> headers{{"authorization", "Bearer " + token_}, {"accept", "application/json"}};
    if (!body.empty()) headers["content-type"] = content_type;
    auto r = client_->Send(method, path, headers, body);
    if (!r.ok()) client_->Reset();
    return r;
  }

  KubernetesOptions o_;
  std::unique_ptr<http::Client> client_;
  std::string token_;
  std::chrono::steady_clock::time_point token_read_{};
};

}  // namespace

absl::StatusOr<std::unique_ptr<NodeProvider>> NewKubernetesProvider(KubernetesOptions options) {
  if (options.ray_auth != "token" && options.ray_auth != "none") {
    return absl::InvalidArgumentError("ray_auth '" + options.ray_auth + "' is not token or none");
  }
  if (options.ray_auth == "none") {
    log::Warn("Ray clusters run without token authentication (lifecycle.kubernetes.ray_auth: none): their "
              "dashboard and Jobs API answer anyone who reaches the pods; keep them behind NetworkPolicies", {});
  }
  auto p = std::make_unique<KubernetesProvider>(std::move(options));
  RELAY_RETURN_IF_ERROR(p->Init());
  return std::unique_ptr<NodeProvider>(std::move(p));
}

}  // namespace relay::lifecycle
