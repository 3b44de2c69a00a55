#include "relay/http/router.h"

#include "prometheus/text_serializer.h"

namespace relay::http {

namespace bhttp = boost::beast::http;

void Router::Add(bhttp::verb method, std::string path, Handler handler) {
  routes_[std::move(path)].emplace_back(method, std::move(handler));
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
  for (const auto& [method, handler] : it->second) {
    if (method == request.method()) {
      handler(std::move(request), std::move(responder));
      return;
    }
    if (!allow.empty()) allow += ", ";
    allow += std::string(bhttp::to_string(method));
  }
  Response response = MakeResponse(405, R"({"error":"method not allowed"})");
  response.set(bhttp::field::allow, allow);
  responder.Send(std::move(response));
}

void AddOpsRoutes(Router& router, prometheus::Registry& registry, std::function<bool()> ready) {
  router.Add(bhttp::verb::get, "/healthz", [](Request&&, Responder r) {
    r.Send(MakeResponse(200, "ok\n", "text/plain"));
  });
  router.Add(bhttp::verb::get, "/readyz", [ready = std::move(ready)](Request&&, Responder r) {
    bool ok = ready();
    r.Send(MakeResponse(ok ? 200 : 503, ok ? "ready\n" : "not ready\n", "text/plain"));
  });
  router.Add(bhttp::verb::get, "/metrics", [&registry](Request&&, Responder r) {
    r.Send(MakeResponse(200, prometheus::TextSerializer().Serialize(registry.Collect()),
                        "text/plain; version=0.0.4"));
  });
}

}  // namespace relay::http
