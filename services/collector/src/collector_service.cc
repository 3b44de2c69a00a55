#include "relay/collector/collector_service.h"

#include <atomic>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "relay/allowlist/allowlist.h"
#include "relay/auth/oidc.h"
#include "relay/auth/relay_token.h"
#include "relay/base/log.h"
#include "relay/base/status.h"
#include "relay/collector/callback.h"
#include "relay/collector/callback_front.h"
#include "relay/collector/grpc_api.h"
#include "relay/collector/job_owner.h"
#include "relay/collector/test_reports.h"
#include "relay/kafka/follower.h"
#include "relay/kafka/reader.h"
#include "relay/service/group_consumer.h"

namespace relay::collector {
namespace {

using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;

// The wiring: settings, Kafka clients, routes, periodic tasks and the
// consumer thread around the two sides of the service, the receiving side
// (callback_front.h) and the owning side (job_owner.h).
class CollectorService final : public service::Service {
 public:
  static absl::StatusOr<std::unique_ptr<service::Service>> Start(CollectorSettings settings,
                                                                  service::Runtime& runtime) {
    return service::Wired(std::unique_ptr<CollectorService>(new CollectorService(std::move(settings), runtime)), runtime);
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
    return service::StopThenFlush(
        budget,
        [this, budget] {
          if (grpc_) grpc_->Shutdown(budget / 2);  // calls in progress finish first
          Stop();
        },
        *producer_);
  }

 private:
  CollectorService(CollectorSettings settings, service::Runtime& runtime)
      : settings_(std::move(settings)),
        clock_(&runtime.clock()),
        jwks_(prometheus::BuildCounter()
                  .Name("relay_collector_jwks_refreshes_total")
                  .Help("JWKS fetches by result (ok, failed)")
                  .Register(runtime.metrics())) {}

 public:
  // Called once, by service::Wired (Start): clients, routes, checks, tasks.
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
    front_ = std::make_unique<CallbackFront>(
        CallbackFront::Parts{&settings_, clock_, allowlist_.get(), keys_.get(), oidc_.get(), producer_.get(), reports_.get()},
        metrics);
    JobOwner::Parts owner;
    owner.settings = &settings_;
    owner.clock = clock_;
    owner.producer = producer_.get();
    owner.reader = reader_.get();
    owner.fetch_reader = fetch_reader_.get();
    // The labels follower calls back before labels_ is assigned: ask it
    // through the pointer set once it is.
    owner.labels_caught_up = [this] {
      kafka::Follower* f = labels_follower_.load();
      return f && f->CaughtUp();
    };
    owner.is_waiting = [this](const std::string& id) { return front_->IsWaiting(id); };
    owner.answer = [this](const v1::CallbackDecision& d) { front_->Decided(d); };
    owner_ = std::make_unique<JobOwner>(std::move(owner), metrics);
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
    RELAY_ASSIGN_OR_RETURN(decisions_, runtime.factories().follower(fo, [this](const kafka::ConsumedRecord& r) { front_->OnDecision(r); }));
    fo.client_id = s.kafka.client_id + "-labels";
    fo.topic = s.topics.labels;
    fo.from_beginning = true;
    fo.max_fetch_wait = 100ms;
    RELAY_ASSIGN_OR_RETURN(labels_, runtime.factories().follower(fo, [this](const kafka::ConsumedRecord& r) { owner_->OnLabels(r); }));
    labels_follower_ = labels_.get();

    kafka::ConsumerOptions co = service::GroupOptions(s.kafka, s.group_id, {s.topics.callbacks, s.topics.dispatches});
    co.retry_backoff_min = 100ms;
    co.retry_backoff_max = 2s;
    // Range hands partition p of both topics to the same member.
    co.extra["partition.assignment.strategy"] = "range";
    service::SetSessionTimeout(co, s.session_timeout);
    co.extra["fetch.wait.max.ms"] = "5";
    co.on_assign = [this](const std::vector<kafka::TopicPartition>& tps) { return owner_->Assigned(tps); };
    co.on_revoke = [this](const std::vector<kafka::TopicPartition>& tps) { owner_->Revoked(tps); };
    RELAY_ASSIGN_OR_RETURN(consumer_, service::GroupConsumer::Open(runtime, std::move(co), producer_.get()));

    runtime.router().Add(
        bhttp::verb::post, "/github/callback",
        [this](http::Request&& r, http::Responder resp) { front_->HandleCallback(std::move(r), std::move(resp)); },
        kMaxCallbackBytes);
    runtime.router().AddStream(
        bhttp::verb::post, "/github/test-report",
        [this](const http::RequestHeader& h) { return front_->HandleReportHeader(h); },
        static_cast<uint64_t>(s.reports.max_report_bytes));
    // Whatever can fail goes before the periodic tasks, which start at once
    // and capture this service.
    if (!s.grpc_listen.empty()) {
      GrpcHandlers handlers;
      handlers.callback = [this](http::Request&& r, http::Responder resp) { front_->HandleCallback(std::move(r), std::move(resp)); };
      handlers.report = [this](const http::RequestHeader& h) { return front_->HandleReportHeader(h); };
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
    runtime.Every(200ms, [this] { front_->ExpireWaiters(); });
    runtime.Every(s.sweep_interval, [this] { owner_->Sweep(); });
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
    consumer_->Start(batches, [this](kafka::Batch& b) { return owner_->HandleBatch(b); });
    log::Info("relay-collector configured", {{"partitions", callbacks},
                                             {"repos", static_cast<int64_t>(allowlist_->Current()->entries().size())},
                                             {"legacy_tokenless", s.allow_missing_relay_token}});
    return absl::OkStatus();
  }

 private:

  void Stop() {
    if (stopping_.exchange(true)) return;
    if (consumer_) consumer_->Stop();
    if (front_) front_->Close();
  }

  CollectorSettings settings_;
  const Clock* clock_;
  std::unique_ptr<allowlist::AllowlistFile> allowlist_;
  std::unique_ptr<auth::RelayTokenKeys> keys_;
  std::unique_ptr<auth::OidcVerifier> oidc_;
  std::unique_ptr<kafka::Producer> producer_;
  std::unique_ptr<kafka::TopicReader> reader_;        // the owner's partition loads
  std::unique_ptr<kafka::TopicReader> fetch_reader_;  // the owner's read-backs of decided jobs
  std::unique_ptr<ReportUploads> reports_;
  std::unique_ptr<CallbackFront> front_;
  std::unique_ptr<JobOwner> owner_;
  std::unique_ptr<service::GroupConsumer> consumer_;
  std::unique_ptr<kafka::Follower> decisions_;
  std::unique_ptr<kafka::Follower> labels_;
  std::atomic<kafka::Follower*> labels_follower_{nullptr};  // labels_, for its own callbacks
  std::unique_ptr<GrpcApi> grpc_;
  std::atomic<bool> stopping_{false};

  prometheus::Family<prometheus::Counter>& jwks_;
  int64_t jwks_seen_ok_ = 0, jwks_seen_failed_ = 0;
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
  return service::Define("relay-collector", LoadSettings, CollectorService::Start);
}

}  // namespace relay::collector
