// relay-collector's gRPC surface (proto/relay/v1/collector_api.proto): the
// same two calls as the HTTP routes, made by handing the very same handlers
// an equivalent HTTP request, so both surfaces decide alike. Statuses map
// from the HTTP ones (see the proto).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "relay/http/server.h"

namespace relay::collector {

struct GrpcHandlers {
  // POST /github/callback and POST /github/test-report.
  std::function<void(http::Request&&, http::Responder)> callback;
  http::StreamHandler report;
  // How long a call waits for its HTTP handler's answer.
  std::chrono::milliseconds timeout{30'000};
};

class GrpcApi {
 public:
  // Listens on "host:port" (port 0: the kernel picks).
  static absl::StatusOr<std::unique_ptr<GrpcApi>> Start(const std::string& listen, GrpcHandlers handlers);
  virtual ~GrpcApi() = default;
  virtual int port() const = 0;
  // Stops accepting calls; calls in progress get until `deadline`.
  virtual void Shutdown(std::chrono::milliseconds deadline) = 0;
};

// The gRPC status for an HTTP answer of the collector (body: {"error": ...}).
int GrpcCodeForHttp(unsigned http_status);

}  // namespace relay::collector
