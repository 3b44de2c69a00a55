#include "relay/lifecycle/client.h"

namespace relay::lifecycle {

LifecycleClient::LifecycleClient(const ClientOptions& options) : token_(options.token) {
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (options.tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.ca_pem;
    ssl.pem_cert_chain = options.cert_pem;
    ssl.pem_private_key = options.key_pem;
    creds = grpc::SslCredentials(ssl);
  }
  stub_ = v1::LifecycleApi::NewStub(grpc::CreateChannel(options.address, creds));
}

std::unique_ptr<grpc::ClientContext> LifecycleClient::Context(std::chrono::milliseconds timeout) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  return ctx;
}

}  // namespace relay::lifecycle
