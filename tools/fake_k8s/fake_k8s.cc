#include "fake_k8s.h"

#include <atomic>
#include <boost/json.hpp>
#include <boost/url.hpp>
#include <map>
#include <mutex>
#include <regex>
#include <vector>

#include "absl/strings/str_split.h"
#include "prometheus/registry.h"
#include "relay/http/server.h"

namespace relay::fake_k8s {
namespace {

namespace json = boost::json;
namespace bhttp = boost::beast::http;

http::Response Json(unsigned status, const json::value& v) { return http::MakeResponse(status, json::serialize(v)); }

// The API server's error shape: a Status object.
http::Response Status(unsigned status, const std::string& reason, const std::string& message) {
  return Json(status, json::object{{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
                                   {"message", message}, {"reason", reason}, {"code", status}});
}

struct Fault {
  std::string method;
  std::regex path;
  unsigned status = 500;
  int count = 1;
};

struct Call {
  std::string method, path;
  unsigned status = 0;
};

// "a=b,c=d" (equality only, what relay sends) against an object's labels.
bool Selects(const std::string& selector, const json::object& obj) {
  if (selector.empty()) return true;
  const json::value* labels = obj.at("metadata").as_object().if_contains("labels");
  for (absl::string_view term : absl::StrSplit(selector, ',')) {
    auto eq = term.find('=');
    if (eq == absl::string_view::npos) return false;
    std::string k(term.substr(0, eq)), v(term.substr(eq + 1));
    if (!labels || !labels->is_object()) return false;
    const json::value* have = labels->as_object().if_contains(k);
    if (!have || !have->is_string() || have->as_string() != v) return false;
  }
  return true;
}

class Impl final : public FakeKubernetes {
 public:
  explicit Impl(Options o) : o_(std::move(o)) {}
  ~Impl() override { Stop(); }

  absl::Status Start() {
    http::ServerOptions so;
    so.host = o_.host;
    so.port = o_.port;
    so.threads = 2;
    so.body_limit = 8 * 1024 * 1024;
    auto server = http::Server::Start(so, [this](http::Request&& r, http::Responder s) { s.Send(Serve(r)); }, &registry_);
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    return absl::OkStatus();
  }
  uint16_t port() const override { return server_ ? server_->port() : 0; }
  void Stop() override {
    if (server_ && !stopped_.exchange(true)) server_->Shutdown(std::chrono::seconds(2));
  }

 private:
  using Store = std::map<std::string, json::object>;  // "ns/name" -> object

  http::Response Serve(const http::Request& r) {
    boost::urls::url_view u(std::string_view(r.target()));
    std::string path(u.path());
    std::string selector, grace;
    for (auto p : u.params()) {
      if (p.key == "labelSelector") selector = std::string(p.value);
      if (p.key == "gracePeriodSeconds") grace = std::string(p.value);
    }
    std::lock_guard lock(mu_);
    Call call{std::string(bhttp::to_string(r.method())), std::string(r.target()), 0};
    http::Response res = Route(r, path, selector);
    call.status = res.result_int();
    calls_.push_back(call);
    return res;
  }

  http::Response Route(const http::Request& r, const std::string& path, const std::string& selector) {
    std::vector<std::string> seg = absl::StrSplit(path, '/', absl::SkipEmpty());
    if (!seg.empty() && seg[0] == "_fake") return Control(r, seg);
    if (r[bhttp::field::authorization] != "Bearer " + o_.token) return Status(401, "Unauthorized", "Unauthorized");
    for (auto it = faults_.begin(); it != faults_.end(); ++it) {
      if ((!it->method.empty() && it->method != std::string(bhttp::to_string(r.method()))) ||
          !std::regex_search(std::string(r.target()), it->path)) {
        continue;
      }
      unsigned status = it->status;
      if (--it->count <= 0) faults_.erase(it);
      return Status(status, "InternalError", "injected fault");
    }
    // /api/v1/namespaces/{ns}/pods[/{name}[/log]]
    if (seg.size() >= 5 && seg[0] == "api" && seg[1] == "v1" && seg[2] == "namespaces" && seg[4] == "pods") {
      return Objects(r, pods_, "Pod", "v1", seg[3], seg.size() > 5 ? seg[5] : "", seg.size() > 6 ? seg[6] : "", selector);
    }
    // /apis/ray.io/v1/namespaces/{ns}/rayclusters[/{name}]
    if (seg.size() >= 6 && seg[0] == "apis" && seg[1] == "ray.io" && seg[2] == "v1" && seg[3] == "namespaces" &&
        seg[5] == "rayclusters") {
      return Objects(r, rayclusters_, "RayCluster", "ray.io/v1", seg[4], seg.size() > 6 ? seg[6] : "", "", selector);
    }
    return Status(404, "NotFound", "the server could not find the requested resource");
  }

  http::Response Objects(const http::Request& r, Store& store, const std::string& kind, const std::string& api,
                         const std::string& ns, const std::string& name, const std::string& sub,
                         const std::string& selector) {
    const std::string key = ns + "/" + name;
    auto m = r.method();
    if (name.empty() && m == bhttp::verb::post) {
      boost::system::error_code ec;
      json::value v = json::parse(r.body(), ec);
      if (ec || !v.is_object() || !v.as_object().contains("metadata")) return Status(400, "BadRequest", "not an object");
      json::object obj = v.as_object();
      auto& meta = obj["metadata"].as_object();
      std::string n = meta.contains("name") ? std::string(meta["name"].as_string()) : "";
      if (n.empty()) return Status(422, "Invalid", "metadata.name: Required value");
      if (store.count(ns + "/" + n)) {
        return Status(409, "AlreadyExists", kind + " \"" + n + "\" already exists");
      }
      meta["namespace"] = ns;
      meta["uid"] = "uid-" + std::to_string(++rv_);
      meta["resourceVersion"] = std::to_string(rv_);
      obj["kind"] = kind;
      obj["apiVersion"] = api;
      if (kind == "Pod") {
        obj["status"] = o_.auto_run ? PodStatus("Running", true, -1) : PodStatus("Pending", false, -1);
      } else if (o_.auto_run) {
        obj["status"] = json::object{{"state", "ready"}, {"readyWorkerReplicas", WorkerReplicas(obj)}};
      }
      store[ns + "/" + n] = obj;
      return Json(201, obj);
    }
    if (name.empty() && m == bhttp::verb::get) {
      json::array items;
      for (auto& [k, obj] : store) {
        if (k.rfind(ns + "/", 0) == 0 && Selects(selector, obj)) items.push_back(obj);
      }
      return Json(200, json::object{{"kind", kind + "List"}, {"apiVersion", api},
                                    {"metadata", json::object{{"resourceVersion", std::to_string(rv_)}}},
                                    {"items", items}});
    }
    if (name.empty() && m == bhttp::verb::delete_) {
      json::array items;
      for (auto it = store.begin(); it != store.end();) {
        if (it->first.rfind(ns + "/", 0) == 0 && Selects(selector, it->second)) {
          items.push_back(it->second);
          it = store.erase(it);
        } else {
          ++it;
        }
      }
      ++rv_;
      return Json(200, json::object{{"kind", kind + "List"}, {"apiVersion", api}, {"items", items}});
    }
    auto it = store.find(key);
    if (it == store.end()) return Status(404, "NotFound", kind + " \"" + name + "\" not found");
    if (m == bhttp::verb::get && sub == "log") {
      auto* log = logs_.count(key) ? &logs_[key] : nullptr;
      return http::MakeResponse(200, log ? *log : "", "text/plain");
    }
    if (m == bhttp::verb::get) return Json(200, it->second);
    if (m == bhttp::verb::delete_) {
      json::object gone = it->second;
      store.erase(it);
      ++rv_;
      return Json(200, gone);
    }
    if (m == bhttp::verb::patch) {
      // JSON patch, `replace` only (what relay sends to scale).
      boost::system::error_code ec;
      json::value ops = json::parse(r.body(), ec);
      if (ec || !ops.is_array()) return Status(400, "BadRequest", "not a JSON patch");
      for (auto& op : ops.as_array()) {
        auto& o = op.as_object();
        if (o["op"] != "replace") return Status(422, "Invalid", "only replace is supported here");
        json::value* at = &it->second["spec"];
        std::vector<std::string> parts = absl::StrSplit(std::string(o["path"].as_string()), '/', absl::SkipEmpty());
        for (size_t i = 1; i < parts.size() && at; ++i) {  // parts[0] == "spec"
          if (at->is_object()) {
            at = at->as_object().if_contains(parts[i]);
          } else if (at->is_array()) {
            size_t idx = std::stoul(parts[i]);
            at = idx < at->as_array().size() ? &at->as_array()[idx] : nullptr;
          } else {
            at = nullptr;
          }
        }
        if (!at) return Status(422, "Invalid", "path " + std::string(o["path"].as_string()) + " does not exist");
        *at = o["value"];
      }
      it->second["metadata"].as_object()["resourceVersion"] = std::to_string(++rv_);
      if (o_.auto_run) {
        it->second["status"] = json::object{{"state", "ready"}, {"readyWorkerReplicas", WorkerReplicas(it->second)}};
      }
      return Json(200, it->second);
    }
    return Status(405, "MethodNotAllowed", "method not allowed");
  }

  static int64_t WorkerReplicas(const json::object& rc) {
    int64_t n = 0;
    if (auto* groups = rc.at("spec").as_object().if_contains("workerGroupSpecs"); groups && groups->is_array()) {
      for (auto& g : groups->as_array()) {
        if (auto* r = g.as_object().if_contains("replicas"); r && r->is_int64()) n += r->as_int64();
      }
    }
    return n;
  }

  static json::object PodStatus(const std::string& phase, bool ready, int exit_code) {
    json::object s{{"phase", phase},
                   {"conditions", json::array{json::object{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}}};
    if (exit_code >= 0) {
      s["containerStatuses"] = json::array{
          json::object{{"name", "main"}, {"state", json::object{{"terminated", json::object{{"exitCode", exit_code}}}}}}};
    }
    return s;
  }

  http::Response Control(const http::Request& r, const std::vector<std::string>& seg) {
    boost::system::error_code ec;
    json::value v = r.body().empty() ? json::value(json::object{}) : json::parse(r.body(), ec);
    if (seg.size() == 2 && seg[1] == "calls") {
      json::array out;
      for (const auto& c : calls_) out.push_back(json::object{{"method", c.method}, {"path", c.path}, {"status", c.status}});
      return Json(200, out);
    }
    if (ec || !v.is_object()) return Status(400, "BadRequest", "control bodies are JSON objects");
    auto& o = v.as_object();
    if (seg.size() == 2 && seg[1] == "faults") {
      faults_.push_back(Fault{o.contains("method") ? std::string(o["method"].as_string()) : "",
                              std::regex(o.contains("path") ? std::string(o["path"].as_string()) : ""),
                              o.contains("status") ? static_cast<unsigned>(o["status"].as_int64()) : 500u,
                              o.contains("count") ? static_cast<int>(o["count"].as_int64()) : 1});
      return Json(200, json::object{});
    }
    if (seg.size() == 4 && (seg[1] == "pods" || seg[1] == "rayclusters")) {
      Store& store = seg[1] == "pods" ? pods_ : rayclusters_;
      auto it = store.find(seg[2] + "/" + seg[3]);
      if (it == store.end()) return Status(404, "NotFound", "no such object");
      if (seg[1] == "pods") {
        it->second["status"] = PodStatus(o.contains("phase") ? std::string(o["phase"].as_string()) : "Running",
                                         o.contains("ready") && o["ready"].as_bool(),
                                         o.contains("exitCode") ? static_cast<int>(o["exitCode"].as_int64()) : -1);
        if (o.contains("log")) logs_[it->first] = std::string(o["log"].as_string());
      } else {
        it->second["status"] = o;
      }
      it->second["metadata"].as_object()["resourceVersion"] = std::to_string(++rv_);
      return Json(200, it->second);
    }
    return Status(404, "NotFound", "no such control");
  }

  Options o_;
  prometheus::Registry registry_;
  std::unique_ptr<http::Server> server_;
  std::atomic<bool> stopped_{false};
  std::mutex mu_;
  Store pods_, rayclusters_;
  std::map<std::string, std::string> logs_;
  std::vector<Fault> faults_;
  std::vector<Call> calls_;
  int64_t rv_ = 1000;
};

}  // namespace

absl::StatusOr<std::unique_ptr<FakeKubernetes>> FakeKubernetes::Start(Options options) {
  auto f = std::make_unique<Impl>(std::move(options));
  if (auto st = f->Start(); !st.ok()) return st;
  return std::unique_ptr<FakeKubernetes>(std::move(f));
}

}  // namespace relay::fake_k8s
