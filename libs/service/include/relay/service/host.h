// Runs a relay service: the one place that knows the start and drain order.
//
// Start: common settings -> the service's own settings -> every config error
// at once -> the service starts (routes, readiness checks, producers) -> the
// HTTP server listens (/healthz, /readyz, /metrics included).
//
// Shutdown, the drain sequence:
//   1. /readyz answers 503 "draining" for http.drain_delay while the server
//      keeps accepting and serving (a balancer sees it and stops sending);
//   2. the listener closes, idle connections close, requests in flight
//      finish (their responses say Connection: close), within
//      http.drain_timeout (connections still open then are cut off, and
//      Shutdown returns false);
//   3. Service::Drain with what is left of http.drain_timeout (at least 1 s):
//      consumers stop and commit, producers flush;
//   4. the service is destroyed, then the server.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "relay/service/service.h"

namespace relay::service {

class Host {
 public:
  // Fails (InvalidArgument) on any configuration error, or with the
  // service's or the server's start error.
  static absl::StatusOr<std::unique_ptr<Host>> Start(Definition definition, Config config,
                                                     Factories factories = {});
  virtual ~Host() = default;
  virtual uint16_t port() const = 0;
  // The port of /metrics' own listener (http.metrics_listen); 0 without one.
  virtual uint16_t metrics_port() const = 0;
  virtual Runtime& runtime() = 0;
  // OK when ready; the reasons otherwise ("draining", failing checks).
  virtual absl::Status Ready() const = 0;
  // OK while no part of the service stopped for good (Runtime::Fatal).
  virtual absl::Status Live() const = 0;
  // Called (once, on the thread that reported it) on the first
  // Runtime::Fatal; Main uses it to start the drain.
  virtual void OnFatal(std::function<void()> handler) = 0;
  // The drain sequence above. Idempotent. False if a step ran out of time.
  virtual bool Shutdown() = 0;
};

// main() of every relay service:
//   <name> [--config FILE] [--port-file FILE]
// Every key can also come from RELAY_* variables. Runs until SIGTERM or
// SIGINT, or until a part of the service stops for good (Runtime::Fatal),
// then drains. Exit codes: 0 drained cleanly after a signal, 1 start
// failure, an incomplete drain or a Fatal, 2 bad usage or configuration. The port file is written
// (atomically) once the server listens, so a launcher can wait for it.
int Main(int argc, char** argv, Definition definition);

}  // namespace relay::service
