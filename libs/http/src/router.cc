#include "relay/http/router.h"

#include <algorithm>

#include "prometheus/text_serializer.h"

namespace relay::http {

namespace bhttp = boost::beast::http;

void Router::Add(bhttp::verb method, std::string path, Handler handler, uint64_t body_limit) {
  routes_[std::move(path)].push_back({method, std::move(handler), body_limit, {}});
}

void Router::AddStream(bhttp::verb method, std::string path, StreamHandler handler, uint64_t body_limit) {
  // The server hands streamed requests to `handler`; this one only runs if
  // a request ever reached Handle (it cannot: a bug), so it answers 500.
  routes_[std::move(path)].push_back(
      {method, [](Request&&, Responder r) { r.Send(MakeResponse(500, R"({"error":"streamed route read whole"})")); },
       body_limit, std::move(handler)});
}

const StreamHandler* Router::FindStream(bhttp::verb method, std::string_view target) const {
  auto it = routes_.find(target.substr(0, target.find('?')));
  if (it == routes_.end()) return nullptr;
  for (const auto& route : it->second) {
    if (route.method == method) return route.stream ? &route.stream : nullptr;
  }
  return nullptr;
}

uint64_t Router::MaxBodyLimit() const {
  uint64_t largest = kDefaultBodyLimit;
  for (const auto& [path, routes] : routes_) {
    for (const auto& route : routes) {
      if (!route.stream) largest = std::max(largest, route.body_limit);
    }
  }
  return largest;
}

uint64_t Router::BodyLimit(bhttp::verb method, std::string_view target) const {
  auto it = routes_.find(target.substr(0, target.find('?')));
  if (it != routes_.end()) {
    for (const auto& route : it->second) {
      if (route.method == method) return route.body_limit;
    }
  }
  return kDefaultBodyLimit;
}

void Router::Handle(Request&& request, Responder responder) const {
  std::string_view target = request.target();
  target = target.substr(0, target.find('?'));
  auto it = routes_.find(target);
  if (it == routes_.end()) {
    responder.Send(MakeResponse(404, R"({"error":"not found"})"));
    return;
  }
  std::string allow;
  for (const auto& route : it->second) {
    if (route.method == request.method()) {
      route.handler(std::move(request), std::move(responder));
      return;
    }
    if (!allow.empty()) allow += ", ";
    allow += std::string(bhttp::to_string(route.method));
  }
  Response response = MakeResponse(405, R"({"error":"method not allowed"})");
  response.set(bhttp::field::allow, allow);
  responder.Send(std::move(response));
}

void AddOpsRoutes(Router& router, prometheus::Registry& registry, std::function<absl::Status()> ready,
                  std::function<absl::Status()> live) {
  AddHealthRoutes(router, std::move(ready), std::move(live));
  AddMetricsRoute(router, registry);
}

void AddHealthRoutes(Router& router, std::function<absl::Status()> ready, std::function<absl::Status()> live) {
  router.Add(bhttp::verb::get, "/healthz", [live = std::move(live)](Request&&, Responder r) {
    absl::Status status = live ? live() : absl::OkStatus();
    r.Send(MakeResponse(status.ok() ? 200 : 503,
                        status.ok() ? "ok\n" : "unhealthy: " + std::string(status.message()) + "\n", "text/plain"));
  });
  router.Add(bhttp::verb::get, "/readyz", [ready = std::move(ready)](Request&&, Responder r) {
    absl::Status status = ready();
    r.Send(MakeResponse(status.ok() ? 200 : 503,
                        status.ok() ? "ready\n" : "not ready: " + std::string(status.message()) + "\n",
                        "text/plain"));
  });
}

void AddMetricsRoute(Router& router, prometheus::Registry& registry) {
  router.Add(bhttp::verb::get, "/metrics", [&registry](Request&&, Responder r) {
    r.Send(MakeResponse(200, prometheus::TextSerializer().Serialize(registry.Collect()),
                        "text/plain; version=0.0.4"));
  });
}

}  // namespace relay::http
