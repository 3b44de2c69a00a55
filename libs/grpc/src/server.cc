#include "relay/grpc/server.h"

namespace relay::grpc_server {

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const std::string& listen, grpc::Service* service,
                                                      Options options) {
  std::unique_ptr<Server> s(new Server());
  if (options.health_service) grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, options.credentials ? options.credentials : grpc::InsecureServerCredentials(),
                           &s->port_);
  builder.RegisterService(service);
  if (options.max_receive_bytes > 0) builder.SetMaxReceiveMessageSize(options.max_receive_bytes);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) return absl::InvalidArgumentError("gRPC: cannot listen on " + listen);
  return s;
}

void Server::Shutdown(std::chrono::milliseconds deadline) {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + deadline);
  server_->Wait();
  server_.reset();
}

}  // namespace relay::grpc_server
