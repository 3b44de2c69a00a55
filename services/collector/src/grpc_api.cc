#include "relay/collector/grpc_api.h"

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <mutex>
#include <optional>

#include <boost/json.hpp>
#include <boost/url.hpp>

#include "relay/base/log.h"
#include "relay/base/status.h"
#include "relay/grpc/server.h"
#include "relay/v1/collector_api.grpc.pb.h"

namespace relay::collector {
namespace {

namespace json = boost::json;
namespace bhttp = boost::beast::http;

// A query-parameter value, percent-encoded.
std::string QueryEncode(const std::string& in) { return boost::urls::encode(in, boost::urls::unreserved_chars); }

// Where an HTTP handler's answer lands for a gRPC call waiting on it.
class Answer final : public http::ResponseSink {
 public:
  void Respond(uint64_t, http::Response response) override {
    std::lock_guard lock(mu_);
    if (!response_) response_ = std::move(response);
    cv_.notify_all();
  }
  std::optional<http::Response> Wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [this] { return response_.has_value(); });
    return response_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<http::Response> response_;
};

json::object BodyOf(const http::Response& r) {
  boost::system::error_code ec;
  json::value v = json::parse(r.body(), ec);
  return !ec && v.is_object() ? v.as_object() : json::object{};
}

std::string Field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : "";
}

// The gRPC status for a collector answer that is not a success.
grpc::Status Failure(grpc::ServerContext* ctx, const http::Response& r) {
  json::object body = BodyOf(r);
  std::string message = Field(body, "error");
  if (message.empty()) message = Field(body, "reason");
  if (auto retry = r[bhttp::field::retry_after]; !retry.empty()) {
    ctx->AddTrailingMetadata("retry-after", std::string(retry));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(GrpcCodeForHttp(r.result_int())), message);
}

std::string Bearer(grpc::ServerContext* ctx) {
  auto it = ctx->client_metadata().find("authorization");
  return it == ctx->client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
}

// What report_callback.py would have posted for this request.
std::string CallbackJson(const v1::ReportJobRequest& req) {
  const v1::WorkflowReport& w = req.workflow();
  json::object wf{{"schema_version", "1"},
                  {"status", w.status()},
                  {"conclusion", w.conclusion().empty() ? json::value(nullptr) : json::value(w.conclusion())},
                  {"name", w.name()},
                  {"url", w.url()},
                  {"run_id", w.run_id()},
                  {"run_attempt", w.run_attempt()},
                  {"job_name", w.job_name()},
                  {"check_run_id", w.check_run_id()},
                  {"started_at", w.started_at()},
                  {"completed_at", w.completed_at()},
                  {"artifact_url", w.artifact_url()}};
  if (w.has_test_results()) {
    json::array failed;
    for (const auto& f : w.failed_tests()) failed.push_back(json::value(f));
    wf["test_results"] = json::object{{"passed", w.tests_passed()}, {"failed", w.tests_failed()},
                                      {"skipped", w.tests_skipped()}, {"total", w.tests_total()},
                                      {"failed_tests", failed}};
  }
  json::object body{{"event_type", req.event_type()}, {"delivery_id", req.delivery_id()}, {"workflow", wf}};
  if (!req.relay_token().empty()) body["relay_token"] = req.relay_token();
  return json::serialize(body);
}


class Service final : public v1::CollectorApi::Service {
 public:
  explicit Service(GrpcHandlers handlers) : h_(std::move(handlers)) {}

  grpc::Status ReportJob(grpc::ServerContext* ctx, const v1::ReportJobRequest* req,
                         v1::ReportJobResponse* out) override {
    http::Request request{bhttp::verb::post, "/github/callback", 11};
    request.set(bhttp::field::authorization, Bearer(ctx));
    request.set(bhttp::field::content_type, "application/json");
    request.body() = CallbackJson(*req);
    request.prepare_payload();
    auto answer = std::make_shared<Answer>();
    h_.callback(std::move(request), http::Responder(answer, 1));
    auto r = answer->Wait(h_.timeout);
    if (!r) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no decision in time; report again");
    if (r->result_int() / 100 != 2) return Failure(ctx, *r);
    json::object body = BodyOf(*r);
    out->set_outcome(Field(body, "status"));
    out->set_job_id(Field(body, "job_id"));
    out->set_state(Field(body, "state"));
    return grpc::Status::OK;
  }

  grpc::Status UploadTestReport(grpc::ServerContext* ctx, grpc::ServerReader<v1::TestReportChunk>* reader,
                                v1::UploadTestReportResponse* out) override {
    v1::TestReportChunk chunk;
    if (!reader->Read(&chunk) || !chunk.has_header()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message must be the report's header");
    }
    const v1::TestReportHeader& h = chunk.header();
    std::string target = "/github/test-report?delivery_id=" + QueryEncode(h.delivery_id()) + "&run_id=" +
                         QueryEncode(h.run_id()) + "&run_attempt=" + QueryEncode(h.run_attempt()) +
                         "&job_name=" + QueryEncode(h.job_name());
    if (!h.event_type().empty()) target += "&event_type=" + QueryEncode(h.event_type());
    http::RequestHeader header;
    header.method(bhttp::verb::post);
    header.target(target);
    header.set(bhttp::field::authorization, Bearer(ctx));
    if (!h.relay_token().empty()) header.set("X-Relay-Token", h.relay_token());
    header.set(bhttp::field::content_type, h.format() == "json" ? "application/json" : "application/xml");
    if (h.gzip()) header.set(bhttp::field::content_encoding, "gzip");
    auto decision = h_.report(header);
    if (auto* refusal = std::get_if<http::Response>(&decision)) return Failure(ctx, *refusal);
    auto stream = std::get<std::shared_ptr<http::BodyStream>>(decision);
    while (reader->Read(&chunk)) {
      if (!chunk.has_data()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a second header");
      if (absl::Status st = stream->OnData(chunk.data()); !st.ok()) {
        return grpc::Status(static_cast<grpc::StatusCode>(GrpcCodeForHttp(http::StatusToHttp(st))),
                            std::string(st.message()));
      }
    }
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the upload was cancelled");
    auto answer = std::make_shared<Answer>();
    stream->OnEnd(http::Responder(answer, 1));
    auto r = answer->Wait(h_.timeout);
    if (!r) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not acknowledged in time; upload again");
    if (r->result_int() / 100 != 2) return Failure(ctx, *r);
    json::object body = BodyOf(*r);
    out->set_upload_id(Field(body, "upload_id"));
    out->set_job_id(Field(body, "job_id"));
    if (auto* n = body.if_contains("test_cases"); n && n->is_int64()) out->set_test_cases(n->as_int64());
    if (auto* n = body.if_contains("batches"); n && n->is_int64()) out->set_batches(static_cast<int32_t>(n->as_int64()));
    return grpc::Status::OK;
  }

 private:
  GrpcHandlers h_;
};

class GrpcApiImpl final : public GrpcApi {
 public:
  explicit GrpcApiImpl(GrpcHandlers handlers) : service_(std::move(handlers)) {}
  ~GrpcApiImpl() override { Shutdown(std::chrono::milliseconds(0)); }

  absl::Status Start(const std::string& listen) {
    // Credentials are the OIDC bearer token of each call; TLS is the
    // balancer's in front, as for the HTTP routes.
    grpc_server::Options o;
    o.max_receive_bytes = 4 * 1024 * 1024;  // test reports stream in 64 KiB-ish messages; some slack
    RELAY_ASSIGN_OR_RETURN(server_, grpc_server::Server::Start(listen, &service_, std::move(o)));
    return absl::OkStatus();
  }
  int port() const override { return server_ ? server_->port() : 0; }
  void Shutdown(std::chrono::milliseconds deadline) override {
    if (server_) server_->Shutdown(deadline);
  }

 private:
  Service service_;
  std::unique_ptr<grpc_server::Server> server_;
};

}  // namespace

int GrpcCodeForHttp(unsigned status) {
  switch (status) {
    case 400: case 415: return grpc::StatusCode::INVALID_ARGUMENT;
    case 401: return grpc::StatusCode::UNAUTHENTICATED;
    case 403: return grpc::StatusCode::PERMISSION_DENIED;
    case 404: return grpc::StatusCode::NOT_FOUND;
    case 408: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case 409: return grpc::StatusCode::FAILED_PRECONDITION;
    case 413: case 429: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 503: return grpc::StatusCode::UNAVAILABLE;
    default: return status / 100 == 2 ? grpc::StatusCode::OK : grpc::StatusCode::INTERNAL;
  }
}

absl::StatusOr<std::unique_ptr<GrpcApi>> GrpcApi::Start(const std::string& listen, GrpcHandlers handlers) {
  auto api = std::make_unique<GrpcApiImpl>(std::move(handlers));
  if (auto st = api->Start(listen); !st.ok()) return st;
  return std::unique_ptr<GrpcApi>(std::move(api));
}

}  // namespace relay::collector
