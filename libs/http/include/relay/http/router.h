// Maps (method, exact path) to a handler. Unknown path: 404; known path,
// other method: 405 with an Allow header. The query string is ignored for
// matching.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "prometheus/registry.h"
#include "relay/http/server.h"

namespace relay::http {

class Router {
 public:
  void Add(boost::beast::http::verb method, std::string path, Handler handler);
  void Handle(Request&& request, Responder responder) const;
  Handler AsHandler() const {
    return [this](Request&& r, Responder s) { Handle(std::move(r), std::move(s)); };
  }

 private:
  std::map<std::string, std::vector<std::pair<boost::beast::http::verb, Handler>>, std::less<>> routes_;
};

// /healthz (process is up), /readyz (`ready()` true: 200, else 503), and
// /metrics (Prometheus text format of `registry`).
void AddOpsRoutes(Router& router, prometheus::Registry& registry, std::function<bool()> ready);

}  // namespace relay::http
