// A started gRPC server: listen, serve one service, stop within a deadline.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace relay::grpc_server {

struct Options {
  // Plain TCP when null (TLS is then the balancer's, in front).
  std::shared_ptr<grpc::ServerCredentials> credentials;
  int max_receive_bytes = 0;  // gRPC's default (4 MiB) when 0
  // gRPC's standard health service (grpc.health.v1), whose status the
  // owner sets through server()->GetHealthCheckService().
  bool health_service = false;
};

class Server {
 public:
  // Serves `service` (which must outlive the server) on `listen`
  // ("host:port"). InvalidArgument when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const std::string& listen, grpc::Service* service,
                                                        Options options = {});
  ~Server() { Shutdown(std::chrono::milliseconds(0)); }

  int port() const { return port_; }
  grpc::Server* server() { return server_.get(); }
  // Calls in progress get until `deadline` from now, then are cancelled;
  // returns once every call has ended. Idempotent.
  void Shutdown(std::chrono::milliseconds deadline);

 private:
  Server() = default;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace relay::grpc_server
