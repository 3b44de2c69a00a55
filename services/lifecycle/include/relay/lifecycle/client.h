// A client of relay-lifecycle's gRPC API (relay.v1.LifecycleApi,
// proto/relay/v1/lifecycle.proto): the channel, plaintext or TLS, and a
// context per call carrying the bearer token the API authenticates every
// call by (grpc_api.h). The command line over it is `relayctl clusters`
// (tools/relayctl/clusters.cc).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "relay/v1/lifecycle.grpc.pb.h"

namespace relay::lifecycle {

struct ClientOptions {
  std::string address;  // HOST:PORT
  std::string token;    // the bearer token; empty: calls carry none (the API answers UNAUTHENTICATED)
  // TLS: the server is verified against ca_pem (empty: gRPC's default
  // roots); cert_pem and key_pem, when set, are the client's certificate
  // and key (mTLS). Plaintext unless `tls`.
  bool tls = false;
  std::string ca_pem, cert_pem, key_pem;
};

class LifecycleClient {
 public:
  // No I/O: the channel connects on the first call.
  explicit LifecycleClient(const ClientOptions& options);

  v1::LifecycleApi::Stub& api() { return *stub_; }
  // A context for one call: the token, and a deadline `timeout` from now.
  std::unique_ptr<grpc::ClientContext> Context(std::chrono::milliseconds timeout) const;

 private:
  std::string token_;
  std::unique_ptr<v1::LifecycleApi::Stub> stub_;
};

}  // namespace relay::lifecycle
