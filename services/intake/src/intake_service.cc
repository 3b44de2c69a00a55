#include "relay/intake/intake_service.h"

#include <unistd.h>

#include <fstream>
#include <mutex>

#include "absl/time/time.h"
#include "relay/base/log.h"
#include "relay/base/status.h"
#include "relay/intake/delivery_dedup.h"
#include "relay/kafka/admin.h"
#include "relay/service/group_consumer.h"

namespace relay::intake {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> ReadSecretsFile(const std::string& path, std::string* error) {
  std::vector<std::string> secrets;
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read " + path;
    return secrets;
  }
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty() && line[0] != '#') secrets.push_back(line);
  }
  return secrets;
}

// The running intake: producer, dedup, handler, and the topic check that
// readiness reads.
class IntakeService final : public service::Service {
 public:
  static absl::StatusOr<std::unique_ptr<service::Service>> Start(IntakeSettings settings,
                                                                  service::Runtime& runtime) {
    return service::Wired(std::unique_ptr<IntakeService>(new IntakeService(std::move(settings))), runtime);
  }

  bool Drain(std::chrono::milliseconds budget) override {
    // Requests in flight finished with the server; what is left in the
    // producer are records whose callers are gone (timed out).
    absl::Status flushed = producer_->Flush(budget);
    if (!flushed.ok()) log::Error("producer flush incomplete", {{"error", std::string(flushed.message())}});
    return flushed.ok();
  }

 private:
  explicit IntakeService(IntakeSettings settings) : settings_(std::move(settings)) {}

 public:
  // Called once, by service::Wired (Start): clients, routes, checks, tasks.
  absl::Status Wire(service::Runtime& runtime) {
    const auto& s = settings_;
    dedup_ = std::make_unique<DeliveryDedup>(&runtime.clock(), s.dedup_window,
                                             static_cast<size_t>(s.dedup_max_entries));
    RELAY_ASSIGN_OR_RETURN(producer_, runtime.factories().producer(s.kafka, &runtime.metrics()));
    RELAY_ASSIGN_OR_RETURN(admin_, runtime.factories().admin(s.kafka.bootstrap, s.kafka.client_id + "-admin"));
    handler_ = std::make_unique<WebhookHandler>(s.webhook, producer_.get(), dedup_.get(), &runtime.clock(),
                                                &runtime.metrics());
    runtime.router().Add(
        boost::beast::http::verb::post, "/github/webhook",
        [h = handler_.get()](http::Request&& r, http::Responder resp) { h->Handle(std::move(r), std::move(resp)); },
        s.max_body);
    service::AddProducerReadiness(runtime, producer_.get());
    runtime.AddReadinessCheck("topic", [this] {
      std::lock_guard lock(topic_mu_);
      return topic_status_;
    });
    runtime.AddReadinessCheck("produce", [h = handler_.get()] { return h->RecentRefusal(); });
    // Checked every interval while it passes, every 2 s while it fails, so
    // readiness comes back soon after the operator's fix or the broker.
    runtime.Every(1s, [this] {
      auto now = std::chrono::steady_clock::now();
      if (now < next_topic_check_) return;
      bool ok = CheckTopic();
      next_topic_check_ = now + (ok ? settings_.topic_check_interval : 2s);
    });
    log::Info("relay-intake configured",
              {{"topic", s.webhook.topic}, {"kafka", s.kafka.bootstrap},
               {"secrets", static_cast<int64_t>(s.webhook.secrets.size())}});
    return absl::OkStatus();
  }

 private:

  // Is the topic there, and does it take the largest record intake sends?
  // The answer (or exactly what is wrong) is logged when it changes and
  // read by /readyz.
  bool CheckTopic() {
    const std::string& topic = settings_.webhook.topic;
    int64_t largest = static_cast<int64_t>(settings_.max_body) + kEnvelopeAllowance;
    absl::Status status;
    // Short: a shutdown waits for a check in progress.
    auto described = admin_->DescribeTopic(topic, 3s);
    if (!described.ok()) {
      status = described.status();
    } else {
      status = kafka::CheckTopicAccepts(*described, largest);
    }
    std::lock_guard lock(topic_mu_);
    if (status.ok() && !topic_status_.ok()) {
      log::Info("topic check passed", {{"topic", topic}, {"partitions", described->partitions},
                                       {"replication_factor", described->replication_factor}});
    } else if (!status.ok() && status != topic_status_) {
      log::Error("topic check failed", {{"topic", topic}, {"error", std::string(status.message())}});
    }
    topic_status_ = status;
    return status.ok();
  }

  IntakeSettings settings_;
  std::unique_ptr<DeliveryDedup> dedup_;
  std::unique_ptr<kafka::Admin> admin_;
  // Before the handler: destroying the producer runs the callbacks of any
  // record still in it, which use the handler.
  std::unique_ptr<WebhookHandler> handler_;
  std::unique_ptr<kafka::Producer> producer_;
  std::mutex topic_mu_;
  absl::Status topic_status_ = absl::UnavailableError("not checked yet");
  std::chrono::steady_clock::time_point next_topic_check_{};  // the periodic task's thread only
};

}  // namespace

absl::StatusOr<IntakeSettings> LoadSettings(Config& config, const service::CommonSettings& common) {
  IntakeSettings s;
  s.kafka = service::ReadProducerOptions(config, "relay-intake");
  s.max_body = static_cast<uint64_t>(config.Bytes("intake.max_body", 25 * 1024 * 1024, 1024, 64 * 1024 * 1024));
  // A record holds the whole body plus its envelope; librdkafka's request
  // limit leaves room for the batch around it.
  s.kafka.message_max_bytes = static_cast<int64_t>(s.max_body) + kEnvelopeAllowance + 1024 * 1024;
  s.webhook.topic = config.String("intake.topic", "github.webhooks");
  // Today's keys unless asked: changing them under a running deployment
  // moves a repository's events between partitions (the cut-over:
  // docs/architecture.md, "Topics").
  if (std::string keys = config.String("intake.record_keys", "repository");
      !github::ParseWebhookKeys(keys, &s.webhook.keys)) {
    config.Fail("intake.record_keys", "must be repository or ordered, not \"" + keys + "\"");
  }
  if (std::string from = config.String("intake.record_keys_from", ""); !from.empty()) {
    absl::Time t;
    std::string err;
    if (!absl::ParseTime(absl::RFC3339_full, from, &t, &err)) {
      config.Fail("intake.record_keys_from", "not an RFC 3339 time (2026-12-01T06:00:00Z): " + err);
    } else {
      s.webhook.keys_from_unix_ms = absl::ToUnixMillis(t);
    }
  }
  s.webhook.secrets = config.StringList("intake.webhook_secrets");
  std::string secrets_file = config.String("intake.webhook_secrets_file", "");
  if (!secrets_file.empty()) {
    std::string error;
    auto more = ReadSecretsFile(secrets_file, &error);
    if (!error.empty()) config.Fail("intake.webhook_secrets_file", error);
    s.webhook.secrets.insert(s.webhook.secrets.end(), more.begin(), more.end());
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  s.webhook.instance = host;
  s.dedup_window = config.Duration("intake.dedup_window", 1h, 0ms, 24h);
  s.dedup_max_entries = config.Int("intake.dedup_max_entries", 500'000, 0, 10'000'000);
  s.topic_check_interval = config.Duration("intake.topic_check_interval", 30s, 1s, 1h);
  s.webhook.refusal_window = s.topic_check_interval;
  // The Kafka answer, not the HTTP deadline, must decide a request's fate:
  // the delivery bound plus room for validation and the deadline sweep.
  if (common.http.handler_timeout < s.kafka.delivery_timeout + 2s) {
    config.Fail("http.handler_timeout", "must be at least kafka.delivery_timeout (" +
                                            std::to_string(s.kafka.delivery_timeout.count()) + " ms) + 2s");
  }
  if (s.webhook.secrets.empty()) {
    return absl::InvalidArgumentError(
        "no webhook secret: set intake.webhook_secrets (RELAY_INTAKE_WEBHOOK_SECRETS) or "
        "intake.webhook_secrets_file; an intake without one would accept anything");
  }
  for (const auto& secret : s.webhook.secrets) {
    if (secret.size() < 16) {
      return absl::InvalidArgumentError("intake.webhook_secrets: every secret must be at least 16 characters");
    }
  }
  return s;
}

service::Definition Definition() {
  return service::Define("relay-intake", LoadSettings, IntakeService::Start);
}

}  // namespace relay::intake
