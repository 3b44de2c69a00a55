// relay-lifecycle's gRPC server: LifecycleApi (proto/relay/v1/lifecycle.proto)
// on the controller, plus the standard health service (grpc.health.v1,
// service "relay.v1.LifecycleApi" SERVING only on the leader) and server
// reflection (registered by main.cc, which alone links
// libgrpc++_reflection: a test that links this library and carries its own
// reflection client stubs would otherwise register the same proto twice).
//
// Every LifecycleApi call is authenticated first (CallerAuthenticator:
// `authorization: Bearer` metadata), before its request is looked at; no
// credentials or bad ones: UNAUTHENTICATED. The health and reflection
// services answer without credentials: they expose no cluster data (the
// API's schema is public in this repository) and probes cannot carry
// tokens. Transport: plaintext by default (TLS at the balancer, as for the
// other services), or TLS with optional client certificates (mTLS) when
// lifecycle.tls.* is set; the bearer token is required either way.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "relay/auth/callers.h"
#include "relay/lifecycle/controller.h"

namespace relay::lifecycle {

struct TlsOptions {
  std::string cert_file;       // server certificate chain (PEM); empty: plaintext
  std::string key_file;
  std::string client_ca_file;  // set: clients must present a certificate it signed (mTLS)
};

class GrpcApi {
 public:
  static absl::StatusOr<std::unique_ptr<GrpcApi>> Start(const std::string& listen, const TlsOptions& tls,
                                                        Controller* controller,
                                                        const auth::CallerAuthenticator* callers,
                                                        prometheus::Registry* metrics);
  virtual ~GrpcApi() = default;
  virtual int port() const = 0;
  // The health service's answer for relay.v1.LifecycleApi.
  virtual void SetServing(bool serving) = 0;
  // Calls in progress get until `deadline` to finish.
  virtual void Shutdown(std::chrono::milliseconds deadline) = 0;
};

}  // namespace relay::lifecycle
