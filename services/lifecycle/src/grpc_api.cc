#include "relay/lifecycle/grpc_api.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <fstream>
#include <sstream>

#include "prometheus/counter.h"
#include "relay/base/log.h"
#include "relay/base/status.h"
#include "relay/grpc/server.h"
#include "relay/lifecycle/cluster_state.h"
#include "relay/v1/lifecycle.grpc.pb.h"

namespace relay::lifecycle {
namespace {

using namespace std::chrono_literals;

constexpr char kServiceName[] = "relay.v1.LifecycleApi";

// absl and gRPC share the canonical status codes.
grpc::Status ToGrpc(const absl::Status& st) {
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
}

class Service final : public v1::LifecycleApi::Service {
 public:
  Service(Controller* c, const auth::CallerAuthenticator* callers, prometheus::Registry* metrics)
      : c_(c),
        callers_(callers),
        calls_(prometheus::BuildCounter()
                   .Name("relay_lifecycle_api_calls_total")
                   .Help("LifecycleApi calls by method and gRPC status code")
                   .Register(*metrics)) {}

  grpc::Status CreateCluster(grpc::ServerContext* ctx, const v1::CreateClusterRequest* req, v1::Cluster* out) override {
    return Call(ctx, "CreateCluster", [&](const auth::Caller& who) { return Assign(c_->Create(who, *req), out); });
  }
  grpc::Status GetCluster(grpc::ServerContext* ctx, const v1::GetClusterRequest* req, v1::Cluster* out) override {
    return Call(ctx, "GetCluster", [&](const auth::Caller& who) { return Assign(c_->Get(who, req->id()), out); });
  }
  grpc::Status ListClusters(grpc::ServerContext* ctx, const v1::ListClustersRequest* req,
                            v1::ListClustersResponse* out) override {
    return Call(ctx, "ListClusters", [&](const auth::Caller& who) {
      auto r = c_->List(who, *req);
      if (!r.ok()) return r.status();
      for (auto& c : *r) *out->add_clusters() = std::move(c);
      return absl::OkStatus();
    });
  }
  grpc::Status DeleteCluster(grpc::ServerContext* ctx, const v1::DeleteClusterRequest* req, v1::Cluster* out) override {
    return Call(ctx, "DeleteCluster", [&](const auth::Caller& who) { return Assign(c_->Delete(who, req->id()), out); });
  }
  grpc::Status ScaleCluster(grpc::ServerContext* ctx, const v1::ScaleClusterRequest* req, v1::Cluster* out) override {
    return Call(ctx, "ScaleCluster", [&](const auth::Caller& who) { return Assign(c_->Scale(who, *req), out); });
  }
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req, v1::Job* out) override {
    return Call(ctx, "SubmitJob", [&](const auth::Caller& who) { return Assign(c_->SubmitJob(who, *req), out); });
  }
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* out) override {
    return Call(ctx, "GetJob",
                [&](const auth::Caller& who) { return Assign(c_->GetJob(who, req->cluster_id(), req->job_id()), out); });
  }
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req, v1::ListJobsResponse* out) override {
    return Call(ctx, "ListJobs", [&](const auth::Caller& who) {
      auto r = c_->ListJobs(who, req->cluster_id());
      if (!r.ok()) return r.status();
      for (auto& j : *r) *out->add_jobs() = std::move(j);
      return absl::OkStatus();
    });
  }
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req, v1::Job* out) override {
    return Call(ctx, "CancelJob",
                [&](const auth::Caller& who) { return Assign(c_->CancelJob(who, req->cluster_id(), req->job_id()), out); });
  }
  grpc::Status WatchCluster(grpc::ServerContext* ctx, const v1::WatchClusterRequest* req,
                            grpc::ServerWriter<v1::Cluster>* writer) override {
    return Call(ctx, "WatchCluster", [&](const auth::Caller& who) -> absl::Status {
      int64_t seen = -1;
      while (!ctx->IsCancelled()) {
        auto next = c_->WaitForChange(who, req->id(), seen, 1s);
        if (!next.ok()) return next.status();
        if (!next->has_value()) continue;
        const v1::Cluster& c = **next;
        seen = c.version();
        if (!writer->Write(c)) return absl::CancelledError("the watcher went away");
        if (Ended(c)) return absl::OkStatus();
      }
      return absl::CancelledError("cancelled by the caller");
    });
  }

 private:
  template <typename T>
  static absl::Status Assign(absl::StatusOr<T> r, T* out) {
    if (!r.ok()) return r.status();
    *out = std::move(*r);
    return absl::OkStatus();
  }

  // Authenticates, then runs the method: the one path every method takes.
  template <typename F>
  grpc::Status Call(grpc::ServerContext* ctx, const char* method, F&& body) {
    auto it = ctx->client_metadata().find("authorization");
    std::string_view header = it == ctx->client_metadata().end() ? std::string_view()
                                                                 : std::string_view(it->second.data(), it->second.size());
    auto caller = callers_->Authenticate(header);
    absl::Status st = caller.ok() ? body(*caller) : caller.status();
    calls_.Add({{"method", method}, {"code", std::string(absl::StatusCodeToString(st.code()))}}).Increment();
    if (!caller.ok()) {
      log::Warn("call refused: caller not authenticated or not admitted", {{"method", method}, {"peer", ctx->peer()}, {"reason", std::string(st.message())}});
    }
    return ToGrpc(st);
  }

  Controller* c_;
  const auth::CallerAuthenticator* callers_;
  prometheus::Family<prometheus::Counter>& calls_;
};

std::string ReadPem(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Api final : public GrpcApi {
 public:
  Api(Controller* c, const auth::CallerAuthenticator* callers, prometheus::Registry* metrics)
      : service_(c, callers, metrics) {}
  ~Api() override { Shutdown(0ms); }

  absl::Status Start(const std::string& listen, const TlsOptions& tls) {
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
    if (!tls.cert_file.empty()) {
      grpc::SslServerCredentialsOptions ssl(tls.client_ca_file.empty()
                                                ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      std::string cert = ReadPem(tls.cert_file), key = ReadPem(tls.key_file);
      if (cert.empty() || key.empty()) return absl::InvalidArgumentError("cannot read lifecycle.tls.cert_file or key_file");
      ssl.pem_key_cert_pairs.push_back({key, cert});
      if (!tls.client_ca_file.empty()) {
        ssl.pem_root_certs = ReadPem(tls.client_ca_file);
        if (ssl.pem_root_certs.empty()) return absl::InvalidArgumentError("cannot read lifecycle.tls.client_ca_file");
      }
      creds = grpc::SslServerCredentials(ssl);
    }
    grpc_server::Options o;
    o.credentials = std::move(creds);
    o.health_service = true;
    RELAY_ASSIGN_OR_RETURN(server_, grpc_server::Server::Start(listen, &service_, std::move(o)));
    SetServing(false);
    return absl::OkStatus();
  }
  int port() const override { return server_ ? server_->port() : 0; }
  void SetServing(bool serving) override {
    if (server_ && server_->server()->GetHealthCheckService()) {
      server_->server()->GetHealthCheckService()->SetServingStatus(kServiceName, serving);
    }
  }
  void Shutdown(std::chrono::milliseconds deadline) override {
    if (server_) server_->Shutdown(deadline);
  }

 private:
  Service service_;
  std::unique_ptr<grpc_server::Server> server_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcApi>> GrpcApi::Start(const std::string& listen, const TlsOptions& tls,
                                                        Controller* controller,
                                                        const auth::CallerAuthenticator* callers,
                                                        prometheus::Registry* metrics) {
  auto api = std::make_unique<Api>(controller, callers, metrics);
  if (auto st = api->Start(listen, tls); !st.ok()) return st;
  return std::unique_ptr<GrpcApi>(std::move(api));
}

}  // namespace relay::lifecycle
