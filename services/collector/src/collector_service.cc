#include "relay/collector/collector_service.h"

#include <openssl/rand.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <boost/json.hpp>
#include <boost/url.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "relay/allowlist/allowlist.h"
#include "relay/auth/oidc.h"
#include "relay/auth/relay_token.h"
#include "relay/base/log.h"
#include "relay/base/status.h"
#include "relay/collector/callback.h"
#include "relay/collector/grpc_api.h"
#include "relay/collector/jobs.h"
#include "relay/collector/test_reports.h"
#include "relay/github/webhook_signature.h"
#include "relay/kafka/follower.h"
#include "relay/kafka/reader.h"
#include "relay/v1/collector.pb.h"
#include "relay/v1/dispatch.pb.h"

namespace relay::collector {
namespace {

using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;

std::string JsonString(std::string_view s) { return boost::json::serialize(boost::json::string_view(s.data(), s.size())); }

std::string RandomId() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    // OpenSSL's generator does not fail once seeded; fall back to the
    // clock and a counter rather than answer nothing.
    static std::atomic<uint64_t> n{0};
    uint64_t parts[2] = {static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()), ++n};
    std::memcpy(bytes, parts, sizeof bytes);
  }
  return github::Hex(std::string_view(reinterpret_cast<const char*>(bytes), sizeof bytes));
}

// A record with the headers every relay record carries.
kafka::Record Rec(const std::string& topic, std::string key, const google::protobuf::Message& value,
                  const std::string& delivery_id, int32_t partition = -1) {
  return kafka::Record{topic, std::move(key), value.SerializeAsString(),
                       {{"relay-schema", value.GetDescriptor()->full_name()}, {"relay-delivery-id", delivery_id}},
                       partition};
}

std::string Sha256Hex(std::string_view data) {
  auto digest = github::Sha256(data);
  return github::Hex(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

// Per-repo token buckets: a matrix may report all at once (the burst), a
// runaway workflow may not flood the relay (the rate).
class RepoRateLimiter {
 public:
  RepoRateLimiter(double rate, double burst) : rate_(rate), burst_(burst) {}
  // 0 when allowed; otherwise the seconds to wait before a token is free.
  int Take(const std::string& repo, std::chrono::steady_clock::time_point now) {
    std::lock_guard lock(mu_);
    auto [it, fresh] = buckets_.try_emplace(repo, Bucket{burst_, now});
    Bucket& b = it->second;
    if (!fresh) {
      double elapsed = std::chrono::duration<double>(now - b.at).count();
      b.tokens = std::min(burst_, b.tokens + elapsed * rate_);
      b.at = now;
    }
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return std::max(1, static_cast<int>(std::ceil((1 - b.tokens) / rate_)));
  }

 private:
  struct Bucket {
    double tokens;
    std::chrono::steady_clock::time_point at;
  };
  const double rate_, burst_;
  std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;
};

// One ci.callbacks partition this instance owns.
struct Partition {
  explicit Partition(Jobs::StateFetcher fetch) : jobs(std::move(fetch)) {}
  std::mutex mu;  // the consumer thread decides, the sweeper looks
  Jobs jobs;
  std::map<std::string, std::chrono::steady_clock::time_point> sweep_asked;  // job id -> when
};

class CollectorService final : public service::Service {
 public:
  static absl::StatusOr<std::unique_ptr<service::Service>> Start(CollectorSettings settings,
                                                                  service::Runtime& runtime) {
    std::unique_ptr<CollectorService> svc(new CollectorService(std::move(settings), runtime));
    RELAY_RETURN_IF_ERROR(svc->Wire(runtime));
    return std::unique_ptr<service::Service>(std::move(svc));
  }

  ~CollectorService() override {
    if (grpc_) grpc_->Shutdown(std::chrono::milliseconds(0));
    Stop();
    reports_.reset();  // waits for uploads being produced
    decisions_.reset();
    labels_.reset();
    producer_.reset();
  }

  bool Drain(std::chrono::milliseconds budget) override {
    auto deadline = std::chrono::steady_clock::now() + budget;
    if (grpc_) grpc_->Shutdown(budget / 2);  // calls in progress finish first
    Stop();
    return service::FlushBefore(*producer_, deadline);
  }

 private:
  CollectorService(CollectorSettings settings, service::Runtime& runtime)
      : settings_(std::move(settings)),
        clock_(&runtime.clock()),
        limiter_(settings_.rate_per_repo, settings_.burst_per_repo),
        callbacks_(prometheus::BuildCounter()
                       .Name("relay_collector_callbacks_total")
                       .Help("Callbacks answered, by outcome (accepted, replayed, ignored, refused, unavailable) and "
                             "reason (ok, bad_token, not_allowed, bad_body, relay_token, rate_limited, no_dispatch, "
                             "conflict, token_reused, not_durable, no_decision)")
                       .Register(runtime.metrics())),
        tokens_refused_(prometheus::BuildCounter()
                            .Name("relay_collector_relay_tokens_refused_total")
                            .Help("Relay tokens refused, by reason (missing, invalid, other_repo, other_delivery)")
                            .Register(runtime.metrics())),
        jwks_(prometheus::BuildCounter()
                  .Name("relay_collector_jwks_refreshes_total")
                  .Help("JWKS fetches by result (ok, failed)")
                  .Register(runtime.metrics())),
        sweeps_(prometheus::BuildCounter()
                    .Name("relay_collector_sweeps_total")
                    .Help("Zombie sweeps: jobs asked to time out (requested) and timed out (timed_out)")
                    .Register(runtime.metrics())),
        jobs_gauge_(prometheus::BuildGauge()
                        .Name("relay_collector_jobs")
                        .Help("Jobs held by the partitions this instance owns")
                        .Register(runtime.metrics())
                        .Add({})),
        decided_gauge_(prometheus::BuildGauge()
                           .Name("relay_collector_jobs_compact")
                           .Help("Of those, decided jobs held in their compact form (the rest whole)")
                           .Register(runtime.metrics())
                           .Add({})),
        state_reads_(prometheus::BuildCounter()
                         .Name("relay_collector_state_reads_total")
                         .Help("Decided jobs' whole states read back from collector.state (replays, late labels)")
                         .Register(runtime.metrics())
                         .Add({})) {
    for (const char* r : {"missing", "invalid", "other_repo", "other_delivery"}) tokens_refused_.Add({{"reason", r}});
    for (const char* r : {"requested", "timed_out"}) sweeps_.Add({{"result", r}});
  }

  absl::Status Wire(service::Runtime& runtime) {
    const auto& s = settings_;
    auto& metrics = runtime.metrics();
    RELAY_ASSIGN_OR_RETURN(allowlist_, allowlist::AllowlistFile::Open(s.allowlist_file, &metrics));
    RELAY_ASSIGN_OR_RETURN(auth::RelayTokenKeys keys, auth::RelayTokenKeys::Load(s.token_keys_file));
    keys_ = std::make_unique<auth::RelayTokenKeys>(std::move(keys));
    RELAY_ASSIGN_OR_RETURN(std::vector<auth::OidcIssuer> issuers, auth::OidcIssuers(s.oidc));
    if (issuers.empty()) {
      return absl::InvalidArgumentError("no OIDC issuer: set collector.oidc.audience (and jwks) or collector.providers_file");
    }
    RELAY_ASSIGN_OR_RETURN(oidc_, auth::OidcVerifier::New(std::move(issuers), {}, clock_));
    if (auto st = oidc_->Prefetch(); !st.ok()) {
      // Not fatal: the issuer may be down now; Verify fetches again.
      log::Warn("JWKS not loaded at start", {{"error", std::string(st.message())}});
    }

    RELAY_ASSIGN_OR_RETURN(producer_, runtime.factories().producer(s.kafka, &metrics));
    RELAY_ASSIGN_OR_RETURN(reader_, runtime.factories().reader(s.kafka.bootstrap));
    RELAY_ASSIGN_OR_RETURN(fetch_reader_, runtime.factories().reader(s.kafka.bootstrap));
    reports_ = std::make_unique<ReportUploads>(s.reports, producer_.get(), clock_, &metrics);
    // A repo's callbacks, dispatches and job state must share a partition
    // number (the same key and partitioner put a repo in the same one).
    RELAY_ASSIGN_OR_RETURN(int callbacks, reader_->Partitions(s.topics.callbacks));
    for (const std::string* t : {&s.topics.dispatches, &s.topics.state}) {
      RELAY_ASSIGN_OR_RETURN(int n, reader_->Partitions(*t));
      if (n != callbacks) {
        return absl::FailedPreconditionError(*t + " has " + std::to_string(n) + " partitions and " + s.topics.callbacks +
                                             " " + std::to_string(callbacks) +
                                             ": they must be equal (a repo's records share a partition number)");
      }
    }

    kafka::FollowerOptions fo;
    fo.bootstrap = s.kafka.bootstrap;
    fo.client_id = s.kafka.client_id + "-decisions";
    fo.topic = s.topics.decisions;
    fo.from_beginning = false;
    fo.max_fetch_wait = 5ms;
    RELAY_ASSIGN_OR_RETURN(decisions_, runtime.factories().follower(fo, [this](const kafka::ConsumedRecord& r) { OnDecision(r); }));
    fo.client_id = s.kafka.client_id + "-labels";
    fo.topic = s.topics.labels;
    fo.from_beginning = true;
    fo.max_fetch_wait = 100ms;
    RELAY_ASSIGN_OR_RETURN(labels_, runtime.factories().follower(fo, [this](const kafka::ConsumedRecord& r) { OnLabels(r); }));
    labels_follower_ = labels_.get();

    kafka::ConsumerOptions co;
    co.bootstrap = s.kafka.bootstrap;
    co.group_id = s.group_id;
    co.client_id = s.kafka.client_id;
    co.topics = {s.topics.callbacks, s.topics.dispatches};
    co.retry_backoff_min = 100ms;
    co.retry_backoff_max = 2s;
    // Range hands partition p of both topics to the same member.
    co.extra["partition.assignment.strategy"] = "range";
    co.extra["session.timeout.ms"] = std::to_string(s.session_timeout.count());
    co.extra["heartbeat.interval.ms"] = std::to_string(std::max<int64_t>(1000, s.session_timeout.count() / 3));
    co.extra["fetch.wait.max.ms"] = "5";
    co.on_assign = [this](const std::vector<kafka::TopicPartition>& tps) { return Assigned(tps); };
    co.on_revoke = [this](const std::vector<kafka::TopicPartition>& tps) { Revoked(tps); };
    RELAY_ASSIGN_OR_RETURN(consumer_, runtime.factories().consumer(co, producer_.get(), &metrics));

    runtime.router().Add(
        bhttp::verb::post, "/github/callback",
        [this](http::Request&& r, http::Responder resp) { HandleCallback(std::move(r), std::move(resp)); },
        kMaxCallbackBytes);
    runtime.router().AddStream(
        bhttp::verb::post, "/github/test-report",
        [this](const http::RequestHeader& h) { return HandleReportHeader(h); },
        static_cast<uint64_t>(s.reports.max_report_bytes));
    // Whatever can fail goes before the periodic tasks, which start at once
    // and capture this service.
    if (!s.grpc_listen.empty()) {
      GrpcHandlers handlers;
      handlers.callback = [this](http::Request&& r, http::Responder resp) { HandleCallback(std::move(r), std::move(resp)); };
      handlers.report = [this](const http::RequestHeader& h) { return HandleReportHeader(h); };
      handlers.timeout = s.decision_timeout + 20s;  // an upload's records may take longer than a decision
      RELAY_ASSIGN_OR_RETURN(grpc_, GrpcApi::Start(s.grpc_listen, std::move(handlers)));
      log::Info("gRPC listening", {{"listen", s.grpc_listen}, {"port", grpc_->port()}});
      prometheus::BuildGauge()
          .Name("relay_collector_grpc_port")
          .Help("The port the gRPC API (relay.v1.CollectorApi) listens on")
          .Register(metrics)
          .Add({})
          .Set(grpc_->port());
    }

    runtime.AddReadinessCheck("kafka", [p = producer_.get()] {
      return p->Connected() ? absl::OkStatus() : absl::UnavailableError("no broker connection");
    });
    runtime.AddReadinessCheck("consumer", [c = consumer_.get()] { return c->Health(); });
    runtime.AddReadinessCheck("decisions", [this] {
      RELAY_RETURN_IF_ERROR(decisions_->Health());
      return decisions_->CaughtUp() ? absl::OkStatus() : absl::UnavailableError("not yet following " + settings_.topics.decisions);
    });
    runtime.AddReadinessCheck("labels", [this] {
      RELAY_RETURN_IF_ERROR(labels_->Health());
      return labels_->CaughtUp() ? absl::OkStatus() : absl::UnavailableError("still reading " + settings_.topics.labels);
    });
    runtime.Every(s.allowlist_reload, [this] { (void)allowlist_->Refresh(); });
    // JWKS older than an hour are refreshed here, off the request threads.
    runtime.Every(60s, [this] {
      if (auto st = oidc_->RefreshStale(); !st.ok()) log::Warn("JWKS refresh failed", {{"error", std::string(st.message())}});
    });
    runtime.Every(200ms, [this] { ExpireWaiters(); });
    runtime.Every(s.sweep_interval, [this] { Sweep(); });
    runtime.Every(1s, [this] {
      int64_t ok = oidc_->refreshes(), failed = oidc_->refresh_failures();
      jwks_.Add({{"result", "ok"}}).Increment(static_cast<double>(ok - jwks_seen_ok_));
      jwks_.Add({{"result", "failed"}}).Increment(static_cast<double>(failed - jwks_seen_failed_));
      jwks_seen_ok_ = ok;
      jwks_seen_failed_ = failed;
    });

    kafka::BatchOptions batches;
    batches.max_records = s.batch_records;
    batches.max_wait = 2ms;  // a caller is waiting for each decision
    // A loop that ends with an error (a fatal client error, a dead-letter
    // topic refusing records) must not leave a process that looks alive.
    consumer_thread_ = std::thread([this, batches, &runtime] {
      absl::Status ended = consumer_->RunBatches(batches, [this](kafka::Batch& b) { return HandleBatch(b); });
      if (!ended.ok()) runtime.Fatal("consumer", ended);
    });
    log::Info("relay-collector configured", {{"partitions", callbacks},
                                             {"repos", static_cast<int64_t>(allowlist_->Current()->entries().size())},
                                             {"legacy_tokenless", s.allow_missing_relay_token}});
    return absl::OkStatus();
  }

  void Stop() {
    if (stopping_.exchange(true)) return;
    if (consumer_) consumer_->Stop();
    if (consumer_thread_.joinable()) consumer_thread_.join();
    std::unordered_map<std::string, Waiter> left;
    {
      std::lock_guard lock(waiters_mu_);
      left.swap(waiters_);
    }
    for (auto& [id, w] : left) w.responder.Send(Unavailable("the collector is shutting down; retry"));
  }

  // --- the receiving side (HTTP threads) ------------------------------------

  // Who is calling and what it may report, as its OIDC token and the
  // allowlist say; or the answer that ends the request (401, 403, 429, and
  // 200 "ignored" for L1).
  struct Caller {
    auth::OidcIdentity identity;
    allowlist::Entry entry;
    std::string bearer;
  };
  std::variant<http::Response, Caller> Authenticate(std::string_view authz) {
    if (authz.size() < 8 || !absl::EqualsIgnoreCase(absl::string_view(authz.data(), 7), "Bearer ")) {
      return Refuse(401, "bad_token", "Authorization: Bearer <OIDC token> is required");
    }
    std::string_view bearer = authz.substr(7);
    auto identity = oidc_->Verify(bearer);
    if (!identity.ok()) return Refuse(401, "bad_token", std::string(identity.status().message()));
    auto list = allowlist_->Current();
    const allowlist::Entry* entry = list->Find(identity->repository);
    if (!entry) return Refuse(403, "not_allowed", identity->repository + " is not in the allowlist", identity->repository);
    if (entry->level == allowlist::Level::kL1) {
      // Acknowledged, not recorded: a repo demoted to L1 keeps a green CI.
      return Answer(200, "ignored", "level_L1",
                    ",\"detail\":" + JsonString(entry->repo + " is at level L1: results are not recorded"));
    }
    if (int wait = limiter_.Take(entry->repo, clock_->Now()); wait > 0) {
      auto r = Refuse(429, "rate_limited", "more than the per-repository callback rate; retry later", entry->repo);
      r.set(bhttp::field::retry_after, std::to_string(wait));
      return r;
    }
    return Caller{std::move(*identity), *entry, std::string(bearer)};
  }

  // The relay token binds a report to a dispatch of `delivery` to the
  // caller's repo. `self_report` (nightly/periodic) needs none.
  std::optional<http::Response> CheckRelayToken(const std::string& token, const Caller& caller,
                                                const std::string& delivery, bool self_report,
                                                auth::RelayTokenClaims* claims_out) {
    if (token.empty()) {
      if (self_report || settings_.allow_missing_relay_token) return std::nullopt;
      tokens_refused_.Add({{"reason", "missing"}}).Increment();
      return Refuse(403, "relay_token", "relay_token is missing: echo the dispatch's client_payload whole", caller.entry.repo);
    }
    auto claims = keys_->Verify(token, clock_->UnixMillis() / 1000);
    if (!claims.ok()) {
      tokens_refused_.Add({{"reason", "invalid"}}).Increment();
      return Refuse(403, "relay_token", "relay_token refused: " + std::string(claims.status().message()), caller.entry.repo);
    }
    if (!absl::EqualsIgnoreCase(absl::string_view(claims->repo), absl::string_view(caller.identity.repository))) {
      tokens_refused_.Add({{"reason", "other_repo"}}).Increment();
      return Refuse(403, "relay_token", "relay_token was issued to another repository", caller.entry.repo);
    }
    if (claims->delivery_id != delivery) {
      tokens_refused_.Add({{"reason", "other_delivery"}}).Increment();
      return Refuse(403, "relay_token", "relay_token was issued for another delivery", caller.entry.repo);
    }
    if (claims_out) *claims_out = *claims;
    return std::nullopt;
  }

  struct Waiter {
    http::Responder responder;
    std::chrono::steady_clock::time_point deadline;
  };

  http::Response Answer(int status, const std::string& outcome, const std::string& reason, std::string_view extra = "") {
    callbacks_.Add({{"outcome", outcome}, {"reason", reason}}).Increment();
    return http::MakeResponse(status, "{\"status\":" + JsonString(outcome) + ",\"reason\":" + JsonString(reason) +
                                          std::string(extra) + "}");
  }
  http::Response Refuse(int status, const std::string& reason, const std::string& detail, const std::string& repo = "") {
    log::Info("callback refused", {{"status", status}, {"reason", reason}, {"detail", detail}, {"repo", repo}});
    callbacks_.Add({{"outcome", "refused"}, {"reason", reason}}).Increment();
    return http::MakeResponse(status, "{\"error\":" + JsonString(detail) + ",\"reason\":" + JsonString(reason) + "}");
  }
  http::Response Unavailable(const std::string& detail) {
    callbacks_.Add({{"outcome", "unavailable"}, {"reason", "not_durable"}}).Increment();
    auto r = http::MakeResponse(503, "{\"error\":" + JsonString(detail) + "}");
    r.set(bhttp::field::retry_after, "5");
    return r;
  }

  void HandleCallback(http::Request&& request, http::Responder responder) {
    auto who = Authenticate(request[bhttp::field::authorization]);
    if (auto* refusal = std::get_if<http::Response>(&who)) return responder.Send(std::move(*refusal));
    Caller& caller = std::get<Caller>(who);
    const allowlist::Entry* entry = &caller.entry;
    const auth::OidcIdentity* identity = &caller.identity;
    auto parsed = ParseCallback(request.body());
    if (!parsed.ok()) return responder.Send(Refuse(400, "bad_body", std::string(parsed.status().message()), entry->repo));
    v1::CallbackRequest& req = parsed->request;
    int64_t now_ms = clock_->UnixMillis();
    auth::RelayTokenClaims claims;
    if (auto refusal = CheckRelayToken(parsed->relay_token, caller, req.delivery_id(), parsed->self_report, &claims)) {
      return responder.Send(std::move(*refusal));
    }
    if (!parsed->relay_token.empty()) {
      req.set_relay_token_verified(true);
      req.set_relay_token_issued_at_unix(claims.issued_at);
      req.set_relay_token_key_id(claims.key_id);
    }
    req.set_request_id(RandomId());
    req.set_received_at_unix_ms(now_ms);
    req.set_repo(entry->repo);
    req.set_repository_id(identity->repository_id);
    req.set_issuer(identity->issuer);
    req.set_token_id(identity->jti.empty() ? "sha256:" + Sha256Hex(caller.bearer) : identity->issuer + "|" + identity->jti);
    req.set_token_expires_at_unix(identity->expires_at);
    req.set_body_sha256(Sha256Hex(request.body()));
    req.set_level(static_cast<int>(entry->level));
    req.set_device(entry->device);

    // 6. To the owner of the repo's partition; its decision comes back on
    // collector.decisions.
    std::string id = req.request_id();
    {
      std::lock_guard lock(waiters_mu_);
      waiters_.emplace(id, Waiter{std::move(responder), std::chrono::steady_clock::now() + settings_.decision_timeout});
    }
    producer_->Send(Rec(settings_.topics.callbacks, entry->repo, req, req.delivery_id()),
                    [this, id](absl::Status st) {
                      if (st.ok()) return;
                      log::Warn("callback not durable", {{"error", std::string(st.message())}});
                      Finish(id, Unavailable("the callback could not be made durable; retry"));
                    });
  }

  // POST /github/test-report?delivery_id=&run_id=&run_attempt=&job_name=
  // [&event_type=nightly|periodic], the relay token in X-Relay-Token, the
  // report as the body (JUnit XML, or JSON with Content-Type
  // application/json; Content-Encoding: gzip allowed). Checked on its
  // header like a callback, before any of the body is read.
  std::variant<http::Response, std::shared_ptr<http::BodyStream>> HandleReportHeader(const http::RequestHeader& h) {
    auto who = Authenticate(h[bhttp::field::authorization]);
    if (auto* refusal = std::get_if<http::Response>(&who)) return std::move(*refusal);
    Caller& caller = std::get<Caller>(who);
    auto url = boost::urls::parse_origin_form(std::string_view(h.target()));
    if (!url) return Refuse(400, "bad_body", "malformed request target", caller.entry.repo);
    std::map<std::string, std::string> q;
    for (auto param : url->params()) q[std::string(param.key)] = std::string(param.value);
    auto digits = [](const std::string& v, bool positive) {
      return !v.empty() && v.size() <= 20 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
             (!positive || v.find_first_not_of('0') != std::string::npos);
    };
    ReportTarget t;
    t.repo = caller.entry.repo;
    t.delivery_id = q["delivery_id"];
    t.run_id = q["run_id"];
    t.run_attempt = q["run_attempt"];
    t.job_name = q["job_name"];
    if (t.delivery_id.empty() || t.delivery_id.size() > 200) return Refuse(400, "bad_body", "delivery_id is required", t.repo);
    if (!digits(t.run_id, true)) return Refuse(400, "bad_body", "run_id must be a string of digits", t.repo);
    if (!digits(t.run_attempt, true)) return Refuse(400, "bad_body", "run_attempt must be a positive integer", t.repo);
    if (t.job_name.empty() || t.job_name.size() > kMaxNameBytes) return Refuse(400, "bad_body", "job_name is required", t.repo);
    const std::string& event = q["event_type"];
    bool self_report = event == "nightly" || event == "periodic";
    if (self_report && (t.delivery_id.size() != 40 || !std::all_of(t.delivery_id.begin(), t.delivery_id.end(),
                                                                   [](char c) { return absl::ascii_isxdigit(c); }))) {
      return Refuse(400, "bad_body", "delivery_id of a " + event + " report must be the upstream commit sha", t.repo);
    }
    std::string token(h["X-Relay-Token"]);
    auth::RelayTokenClaims claims;
    if (auto refusal = CheckRelayToken(token, caller, t.delivery_id, self_report, &claims)) return std::move(*refusal);
    t.dispatched_at_unix_ms = claims.issued_at * 1000;
    std::string type = absl::AsciiStrToLower(std::string(h[bhttp::field::content_type]));
    std::string encoding = absl::AsciiStrToLower(std::string(h[bhttp::field::content_encoding]));
    if (type.rfind("application/json", 0) == 0) {
      t.json = true;
    } else if (!type.empty() && type.rfind("application/xml", 0) != 0 && type.rfind("text/xml", 0) != 0) {
      return Refuse(415, "bad_body", "Content-Type must be application/xml, text/xml or application/json", t.repo);
    }
    if (encoding == "gzip") {
      t.gzip = true;
    } else if (!encoding.empty() && encoding != "identity") {
      return Refuse(415, "bad_body", "Content-Encoding must be gzip or identity", t.repo);
    }
    auto stream = reports_->Begin(std::move(t));
    if (!stream.ok()) {
      auto r = http::MakeResponse(http::StatusToHttp(stream.status()), "{\"error\":" + JsonString(std::string(stream.status().message())) + "}");
      if (absl::IsUnavailable(stream.status())) r.set(bhttp::field::retry_after, "5");
      return r;
    }
    return *stream;
  }

  void Finish(const std::string& id, http::Response response) {
    std::optional<Waiter> w;
    {
      std::lock_guard lock(waiters_mu_);
      auto it = waiters_.find(id);
      if (it == waiters_.end()) return;
      w.emplace(std::move(it->second));
      waiters_.erase(it);
    }
    w->responder.Send(std::move(response));
  }

  bool IsWaiting(const std::string& request_id) {
    std::lock_guard lock(waiters_mu_);
    return waiters_.count(request_id) > 0;
  }

  void OnDecision(const kafka::ConsumedRecord& r) {
    if (!IsWaiting(r.key)) return;  // another instance's caller
    v1::CallbackDecision d;
    if (!d.ParseFromString(r.value)) return;
    Decided(d);
  }

  // Answers the caller waiting for `d` (if it still waits).
  void Decided(const v1::CallbackDecision& d) {
    http::Response response;
    std::string extra = ",\"job_id\":" + JsonString(d.job_id()) + ",\"state\":" + JsonString(d.state());
    if (d.outcome() == "refused") {
      std::string reason = d.http_status() == 404 ? "no_dispatch" : d.http_status() == 401 ? "token_reused" : "conflict";
      callbacks_.Add({{"outcome", "refused"}, {"reason", reason}}).Increment();
      response = http::MakeResponse(d.http_status(), "{\"error\":" + JsonString(d.reason()) + ",\"reason\":" +
                                                         JsonString(reason) + extra + "}");
    } else {
      response = Answer(d.http_status(), d.outcome(), "ok", extra);
    }
    Finish(d.request_id(), std::move(response));
  }

  void ExpireWaiters() {
    auto now = std::chrono::steady_clock::now();
    std::vector<Waiter> late;
    {
      std::lock_guard lock(waiters_mu_);
      for (auto it = waiters_.begin(); it != waiters_.end();) {
        if (it->second.deadline <= now) {
          late.push_back(std::move(it->second));
          it = waiters_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& w : late) {
      // The callback is durable and will be decided; the same callback
      // sent again is recognised (replayed), so a retry is safe.
      callbacks_.Add({{"outcome", "unavailable"}, {"reason", "no_decision"}}).Increment();
      auto r = http::MakeResponse(503, R"({"error":"recorded, but no decision in time; retry the same callback"})");
      r.set(bhttp::field::retry_after, "5");
      w.responder.Send(std::move(r));
    }
  }

  void OnLabels(const kafka::ConsumedRecord& r) {
    v1::PullRequestLabels l;
    if (!l.ParseFromString(r.value)) return;
    std::set<std::string> devices(l.crcr_devices().begin(), l.crcr_devices().end());
    {
      std::lock_guard lock(labels_mu_);
      pr_devices_[absl::AsciiStrToLower(l.upstream_repo()) + "#" + std::to_string(l.number())] = std::move(devices);
    }
    // A label that arrives after the dispatch (during the run or after it)
    // still raises the check runs of the PR's jobs this instance owns.
    // Only once the labels read at start are behind us: at start, the jobs
    // got their check runs when they were decided.
    if (!labels_live_.load()) {
      kafka::Follower* f = labels_follower_.load();
      if (!f || !f->CaughtUp()) return;
      labels_live_ = true;
    }
    std::vector<std::shared_ptr<Partition>> parts;
    {
      std::lock_guard lock(parts_mu_);
      for (auto& [p, part] : parts_) parts.push_back(part);
    }
    LabelLookup lookup = [this](const std::string& repo, int64_t pr) { return Devices(repo, pr); };
    for (auto& part : parts) {
      std::vector<v1::GitHubRequest> writes;
      {
        std::lock_guard lock(part->mu);
        auto wanted = part->jobs.CheckRunsForPullRequest(l.upstream_repo(), l.number(), lookup);
        if (!wanted.ok()) {
          log::Warn("check runs for a late label not requested: decided jobs unreadable",
                    {{"pr", l.upstream_repo() + "#" + std::to_string(l.number())},
                     {"error", std::string(wanted.status().message())}});
          continue;
        }
        writes = std::move(*wanted);
      }
      for (auto& w : writes) {
        std::string repo = w.repo();
        producer_->Send(Rec(settings_.topics.github_requests, repo, w, w.delivery_id()), [](absl::Status st) {
          if (!st.ok()) log::Warn("check run for a late label not requested", {{"error", std::string(st.message())}});
        });
      }
    }
  }

  std::set<std::string> Devices(const std::string& upstream_repo, int64_t pr) {
    std::lock_guard lock(labels_mu_);
    auto it = pr_devices_.find(absl::AsciiStrToLower(upstream_repo) + "#" + std::to_string(pr));
    return it == pr_devices_.end() ? std::set<std::string>{} : it->second;
  }

  // --- the owning side (consumer thread) ------------------------------------

  absl::Status Assigned(const std::vector<kafka::TopicPartition>& tps) {
    int64_t now_unix = clock_->UnixMillis() / 1000;
    for (const auto& tp : tps) {
      if (tp.topic != settings_.topics.callbacks) continue;
      auto part = std::make_shared<Partition>(Fetcher(tp.partition));
      size_t restored = 0, dispatches = 0;
      auto state = reader_->ReadToEnd(settings_.topics.state, {tp.partition}, [&](const kafka::ConsumedRecord& r) {
        if (r.value.empty()) return absl::OkStatus();  // a tombstone
        v1::JobState job;
        if (!job.ParseFromString(r.value)) {
          log::Warn("unreadable job state skipped", {{"partition", tp.partition}, {"offset", r.offset}});
          return absl::OkStatus();
        }
        part->jobs.Restore(std::move(job), r.offset, now_unix);
        ++restored;
        return absl::OkStatus();
      });
      RELAY_RETURN_IF_ERROR(state.status());
      auto facts = reader_->ReadToEnd(settings_.topics.dispatches, {tp.partition}, [&](const kafka::ConsumedRecord& r) {
        v1::DispatchRecord d;
        if (d.ParseFromString(r.value)) {
          part->jobs.AddDispatch(d);
          ++dispatches;
        }
        return absl::OkStatus();
      });
      RELAY_RETURN_IF_ERROR(facts.status());
      log::Info("partition loaded", {{"partition", tp.partition},
                                     {"jobs", static_cast<int64_t>(part->jobs.jobs())},
                                     {"decided_compact", static_cast<int64_t>(part->jobs.decided())},
                                     {"dispatches", static_cast<int64_t>(dispatches)}});
      std::lock_guard lock(parts_mu_);
      parts_[tp.partition] = std::move(part);
    }
    UpdateJobsGauge();
    return absl::OkStatus();
  }

  // Reads a decided job's whole state back from collector.state, for the
  // rare paths that need it (a replay, a late label's check runs). Any
  // thread: the reader is its own, behind a lock.
  Jobs::StateFetcher Fetcher(int32_t partition) {
    return [this, partition](int64_t offset) -> absl::StatusOr<v1::JobState> {
      std::lock_guard lock(fetch_mu_);
      state_reads_.Increment();
      RELAY_ASSIGN_OR_RETURN(kafka::ConsumedRecord r, fetch_reader_->ReadAt(settings_.topics.state, partition, offset));
      v1::JobState job;
      if (!job.ParseFromString(r.value)) {
        return absl::DataLossError("collector.state " + std::to_string(partition) + "@" + std::to_string(offset) +
                                   " is not a relay.v1.JobState");
      }
      return job;
    };
  }

  void Revoked(const std::vector<kafka::TopicPartition>& tps) {
    std::lock_guard lock(parts_mu_);
    for (const auto& tp : tps) {
      if (tp.topic == settings_.topics.callbacks) parts_.erase(tp.partition);
    }
  }

  std::shared_ptr<Partition> Part(int32_t p) {
    std::lock_guard lock(parts_mu_);
    auto it = parts_.find(p);
    return it == parts_.end() ? nullptr : it->second;
  }

  void UpdateJobsGauge() {
    size_t n = 0, decided = 0;
    std::lock_guard lock(parts_mu_);
    for (auto& [p, part] : parts_) {
      std::lock_guard plock(part->mu);
      n += part->jobs.jobs();
      decided += part->jobs.decided();
    }
    jobs_gauge_.Set(static_cast<double>(n));
    decided_gauge_.Set(static_cast<double>(decided));
  }

  absl::Status HandleBatch(kafka::Batch& batch) {
    // L3 check runs depend on the PR's labels: decide nothing before the
    // labels present at start are read (the batch comes again shortly).
    if (!labels_->CaughtUp()) return absl::UnavailableError("still reading " + settings_.topics.labels);
    std::vector<kafka::Record> effects;
    std::vector<StateWrite> stored;           // which of them are job states
    std::vector<kafka::Record> answers;       // for callers waiting at other instances
    std::vector<v1::CallbackDecision> local;  // for callers waiting here
    int64_t now_ms = clock_->UnixMillis();
    LabelLookup labels = [this](const std::string& repo, int64_t pr) { return Devices(repo, pr); };
    std::shared_ptr<Partition> part;  // of the record in hand; looked up when the partition changes
    for (size_t i = 0; i < batch.records().size(); ++i) {
      const kafka::ConsumedRecord& rec = batch.records()[i];
      if (i == 0 || rec.partition != batch.records()[i - 1].partition) part = Part(rec.partition);
      if (!part) return absl::UnavailableError("partition " + std::to_string(rec.partition) + " is not loaded");
      if (rec.topic == settings_.topics.dispatches) {
        v1::DispatchRecord d;
        if (!d.ParseFromString(rec.value)) {
          batch.Reject(i, "not a relay.v1.DispatchRecord");
          continue;
        }
        std::lock_guard lock(part->mu);
        part->jobs.AddDispatch(d);
        continue;
      }
      v1::CallbackRequest req;
      if (!req.ParseFromString(rec.value) || (!req.sweep() && req.request_id().empty())) {
        batch.Reject(i, "not a relay.v1.CallbackRequest");
        continue;
      }
      Decision d;
      {
        std::lock_guard lock(part->mu);
        auto decided = part->jobs.Apply(req, now_ms, labels);
        // A decided job's state could not be read back: the batch comes
        // again (nothing of it was made durable yet).
        if (!decided.ok()) return decided.status();
        d = std::move(*decided);
      }
      if (d.job) {
        stored.push_back(StateWrite{rec.partition, d.job_id, d.job->version(), effects.size()});
        effects.push_back(Rec(settings_.topics.state, "j|" + d.job_id, *d.job, req.delivery_id(), rec.partition));
      }
      if (d.result) effects.push_back(Rec(settings_.topics.results, d.job_id, *d.result, req.delivery_id()));
      if (d.check_run) {
        effects.push_back(Rec(settings_.topics.github_requests, d.check_run->repo(), *d.check_run, req.delivery_id()));
      }
      if (req.sweep()) {
        if (d.outcome == "accepted") sweeps_.Add({{"result", "timed_out"}}).Increment();
        continue;
      }
      v1::CallbackDecision answer;
      answer.set_request_id(req.request_id());
      answer.set_http_status(d.http_status);
      answer.set_outcome(d.outcome);
      answer.set_reason(d.reason);
      answer.set_state(d.state);
      answer.set_job_id(d.job_id);
      if (d.outcome == "refused") {
        log::Info("callback refused by the state machine",
                  {{"status", d.http_status}, {"reason", d.reason}, {"repo", req.repo()}, {"job", d.job_id}});
      }
      if (IsWaiting(req.request_id())) {
        local.push_back(std::move(answer));  // its caller is on this instance: answered directly
      } else {
        answers.push_back(Rec(settings_.topics.decisions, req.request_id(), answer, req.delivery_id()));
      }
    }
    // The state and its effects are durable before anyone hears the
    // decision; if any of them fails the batch comes again, and what was
    // accepted is then a replay that writes the same records again.
    RELAY_ASSIGN_OR_RETURN(std::vector<int64_t> offsets, SendAll(std::move(effects)));
    // Durable: decided jobs keep only their compact form from here on.
    for (const auto& w : stored) {
      if (auto owner = Part(w.partition)) {
        std::lock_guard lock(owner->mu);
        owner->jobs.Stored(w.job_id, w.version, offsets[w.index]);
      }
    }
    for (const auto& d : local) Decided(d);
    for (auto& a : answers) {
      producer_->Send(std::move(a), [](absl::Status st) {
        // A lost answer times the caller out (503); its retry is a replay.
        if (!st.ok()) log::Warn("decision not delivered", {{"error", std::string(st.message())}});
      });
    }
    return absl::OkStatus();
  }

  // A job state written in a batch: records[index] of SendAll.
  struct StateWrite {
    int32_t partition;
    std::string job_id;
    int32_t version;
    size_t index;
  };

  // Sends every record and waits for all acks; the offset each got.
  absl::StatusOr<std::vector<int64_t>> SendAll(std::vector<kafka::Record> records) {
    if (records.empty()) return std::vector<int64_t>{};
    struct Acks {
      std::mutex mu;
      std::condition_variable cv;
      size_t left;
      absl::Status first = absl::OkStatus();
      std::vector<int64_t> offsets;
    };
    auto acks = std::make_shared<Acks>();
    acks->left = records.size();
    acks->offsets.assign(records.size(), -1);
    for (size_t i = 0; i < records.size(); ++i) {
      producer_->SendReported(std::move(records[i]), [acks, i](absl::Status st, int64_t offset) {
        std::lock_guard lock(acks->mu);
        if (!st.ok() && acks->first.ok()) acks->first = st;
        acks->offsets[i] = offset;
        if (--acks->left == 0) acks->cv.notify_all();
      });
    }
    std::unique_lock lock(acks->mu);
    // The producer calls back within its delivery timeout; the margin
    // covers a recreation.
    if (!acks->cv.wait_for(lock, settings_.kafka.delivery_timeout * 3 + 1s, [&] { return acks->left == 0; })) {
      return absl::UnavailableError("job state or results not acknowledged in time");
    }
    if (!acks->first.ok()) return acks->first;
    return acks->offsets;
  }

  // Jobs in progress past the zombie timeout are timed out through the
  // same path as a callback, so their owner decides (once) in order with
  // any late callback of theirs.
  void Sweep() {
    int64_t now_ms = clock_->UnixMillis();
    auto now = std::chrono::steady_clock::now();
    std::vector<std::pair<int32_t, v1::CallbackRequest>> asks;
    {
      std::lock_guard lock(parts_mu_);
      for (auto& [p, part] : parts_) {
        std::lock_guard plock(part->mu);
        part->jobs.Prune(now_ms - settings_.history.count(), now_ms / 1000);
        std::vector<std::string> zombies = part->jobs.InProgressSince(now_ms - settings_.zombie_timeout.count());
        // Asked-for jobs that are no longer zombies (timed out, completed, pruned).
        std::set<std::string> still(zombies.begin(), zombies.end());
        for (auto it = part->sweep_asked.begin(); it != part->sweep_asked.end();) {
          it = still.count(it->first) ? std::next(it) : part->sweep_asked.erase(it);
        }
        for (const std::string& id : zombies) {
          auto asked = part->sweep_asked.find(id);
          if (asked != part->sweep_asked.end() && now - asked->second < 10min) continue;
          part->sweep_asked[id] = now;
          const v1::JobState* job = part->jobs.Find(id);
          v1::CallbackRequest req;
          req.set_sweep(true);
          req.set_request_id(RandomId());
          req.set_received_at_unix_ms(now_ms);
          req.set_repo(job->repo());
          req.set_delivery_id(job->delivery_id());
          req.mutable_workflow()->set_run_id(job->run_id());
          req.mutable_workflow()->set_run_attempt(job->run_attempt());
          req.mutable_workflow()->set_job_name(job->job_name());
          asks.emplace_back(p, std::move(req));
        }
      }
    }
    for (auto& [p, req] : asks) {
      sweeps_.Add({{"result", "requested"}}).Increment();
      log::Info("zombie job to be timed out", {{"repo", req.repo()}, {"run_id", req.workflow().run_id()},
                                               {"job", req.workflow().job_name()}});
      std::string key = req.repo();
      producer_->Send(Rec(settings_.topics.callbacks, std::move(key), req, req.delivery_id(), p),
                      [](absl::Status st) {
                        // Asked again at the next sweep after 10 minutes.
                        if (!st.ok()) log::Warn("sweep request not durable", {{"error", std::string(st.message())}});
                      });
    }
    UpdateJobsGauge();
  }

  CollectorSettings settings_;
  const Clock* clock_;
  RepoRateLimiter limiter_;
  std::unique_ptr<allowlist::AllowlistFile> allowlist_;
  std::unique_ptr<auth::RelayTokenKeys> keys_;
  std::unique_ptr<auth::OidcVerifier> oidc_;
  std::unique_ptr<kafka::Producer> producer_;
  std::unique_ptr<kafka::TopicReader> reader_;  // consumer thread only (assignments)
  std::mutex fetch_mu_;
  std::unique_ptr<kafka::TopicReader> fetch_reader_;  // decided jobs read back (Fetcher)
  std::unique_ptr<kafka::Consumer> consumer_;
  std::unique_ptr<kafka::Follower> decisions_;
  std::unique_ptr<kafka::Follower> labels_;
  std::unique_ptr<ReportUploads> reports_;
  std::unique_ptr<GrpcApi> grpc_;
  std::thread consumer_thread_;
  std::atomic<bool> stopping_{false};

  std::mutex waiters_mu_;
  std::unordered_map<std::string, Waiter> waiters_;  // request id -> the caller waiting for its decision

  std::atomic<bool> labels_live_{false};  // the labels present at start are read
  std::atomic<kafka::Follower*> labels_follower_{nullptr};  // labels_, for its own callbacks
  std::mutex labels_mu_;
  std::unordered_map<std::string, std::set<std::string>> pr_devices_;  // "upstream#pr" -> devices

  std::mutex parts_mu_;
  std::map<int32_t, std::shared_ptr<Partition>> parts_;

  prometheus::Family<prometheus::Counter>& callbacks_;
  prometheus::Family<prometheus::Counter>& tokens_refused_;
  prometheus::Family<prometheus::Counter>& jwks_;
  int64_t jwks_seen_ok_ = 0, jwks_seen_failed_ = 0;
  prometheus::Family<prometheus::Counter>& sweeps_;
  prometheus::Gauge& jobs_gauge_;
  prometheus::Gauge& decided_gauge_;
  prometheus::Counter& state_reads_;
};

}  // namespace

absl::StatusOr<CollectorSettings> LoadSettings(Config& config, const service::CommonSettings&) {
  CollectorSettings s;
  s.kafka = service::ReadProducerOptions(config, "relay-collector");
  s.group_id = config.String("kafka.group_id", "relay-collector");
  s.session_timeout = config.Duration("kafka.session_timeout", 45s, 6s, 5min);
  s.allowlist_file = config.RequiredString("allowlist.file");
  s.allowlist_reload = config.Duration("allowlist.reload_interval", 10s, 100ms, 1h);
  s.token_keys_file = config.RequiredString("tokens.keys_file");
  s.oidc = auth::ReadOidcSettings(config, "collector");
  if (s.oidc.audience.empty() && s.oidc.providers_file.empty()) {
    config.Fail("collector.oidc.audience", "required (the audience downstream workflows request), or set collector.providers_file");
  }
  s.allow_missing_relay_token = config.Bool("collector.allow_missing_relay_token", false);
  s.zombie_timeout = config.Duration("collector.zombie_timeout", 6h, 1s, 7 * 24h);
  s.sweep_interval = config.Duration("collector.sweep_interval", 60s, 100ms, 1h);
  s.history = config.Duration("collector.history", 10 * 24h, 1h, 90 * 24h);
  s.rate_per_repo = static_cast<double>(config.Int("collector.rate_per_repo", 20, 1, 1'000'000));
  s.burst_per_repo = static_cast<double>(config.Int("collector.burst_per_repo", 400, 1, 10'000'000));
  s.decision_timeout = config.Duration("collector.decision_timeout", 10s, 100ms, 5min);
  s.batch_records = static_cast<size_t>(config.Int("collector.batch_records", 2'000, 1, 100'000));
  s.reports.max_report_bytes = config.Bytes("collector.max_report_bytes", 512LL << 20, 1 << 10, 8LL << 30);
  s.reports.max_uploads = static_cast<int>(config.Int("collector.max_uploads", 4, 1, 256));
  s.reports.batch_cases = static_cast<size_t>(config.Int("collector.report_batch_cases", 2'000, 1, 100'000));
  s.reports.upload_timeout = config.Duration("collector.report_timeout", 10min, 10s, 24h);
  s.reports.topic = s.topics.test_reports;
  s.grpc_listen = config.String("collector.grpc_listen", "");
  if (!s.grpc_listen.empty()) {
    http::ServerOptions probe;
    if (auto st = http::ParseListenAddress(s.grpc_listen, &probe); !st.ok()) {
      config.Fail("collector.grpc_listen", std::string(st.message()));
    }
  }
  return s;
}

service::Definition Definition() {
  return {"relay-collector",
          [](Config& config, const service::CommonSettings& common) -> absl::StatusOr<service::Starter> {
            RELAY_ASSIGN_OR_RETURN(CollectorSettings settings, LoadSettings(config, common));
            return service::Starter([settings = std::move(settings)](service::Runtime& runtime) mutable {
              return CollectorService::Start(std::move(settings), runtime);
            });
          }};
}

}  // namespace relay::collector
