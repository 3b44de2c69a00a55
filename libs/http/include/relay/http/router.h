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

// Each route has its own body limit (checked by the server before the body
// is read); unknown paths get kDefaultBodyLimit. Add routes before the
// server starts; after that the router is read-only (and thread-safe).
class Router {
 public:
  static constexpr uint64_t kDefaultBodyLimit = 64 * 1024;

  void Add(boost::beast::http::verb method, std::string path, Handler handler,
           uint64_t body_limit = kDefaultBodyLimit);
  // A route whose body is streamed to a BodyStream (server.h) instead of
  // read whole; `body_limit` may exceed the server-wide limit (nothing is
  // held) and does not count in MaxBodyLimit.
  void AddStream(boost::beast::http::verb method, std::string path, StreamHandler handler, uint64_t body_limit);
  void Handle(Request&& request, Responder responder) const;
  Handler AsHandler() const {
    return [this](Request&& r, Responder s) { Handle(std::move(r), std::move(s)); };
  }
  // The largest limit of any route (ServerOptions::body_limit).
  uint64_t MaxBodyLimit() const;
  // For ServerOptions::body_limit_for.
  uint64_t BodyLimit(boost::beast::http::verb method, std::string_view target) const;
  BodyLimitFunction AsBodyLimitFunction() const {
    return [this](boost::beast::http::verb m, std::string_view t) { return BodyLimit(m, t); };
  }
  // For ServerOptions::stream_for.
  const StreamHandler* FindStream(boost::beast::http::verb method, std::string_view target) const;
  StreamHandlerFunction AsStreamFunction() const {
    return [this](boost::beast::http::verb m, std::string_view t) { return FindStream(m, t); };
  }

 private:
  struct Route {
    boost::beast::http::verb method;
    Handler handler;
    uint64_t body_limit;
    StreamHandler stream;  // set for streamed routes (handler is then unused)
  };
  std::map<std::string, std::vector<Route>, std::less<>> routes_;
};

// /healthz (200 while `live()` returns OK or is empty: the process can go
// on; 503 with the reason once a part of it stopped for good, so an
// orchestrator restarts it), /readyz (200 when `ready()` returns OK, else
// 503 with the reason in the body), and /metrics (Prometheus text format of
// `registry`).
void AddOpsRoutes(Router& router, prometheus::Registry& registry, std::function<absl::Status()> ready,
                  std::function<absl::Status()> live = {});
// The same, in two parts: /healthz and /readyz; /metrics alone (for a
// listener of its own that only the scraper may reach).
void AddHealthRoutes(Router& router, std::function<absl::Status()> ready, std::function<absl::Status()> live = {});
void AddMetricsRoute(Router& router, prometheus::Registry& registry);

}  // namespace relay::http
