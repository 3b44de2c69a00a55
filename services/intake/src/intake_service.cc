#include "intake_service.h"

#include <unistd.h>

#include <fstream>

#include "relay/base/log.h"
#include "relay/base/status.h"

namespace relay::intake {
namespace {

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

}  // namespace

absl::StatusOr<IntakeSettings> LoadSettings(Config& config) {
  IntakeSettings s;
  if (auto st = http::ParseListenAddress(config.String("http.listen", "127.0.0.1:8080"), &s.http); !st.ok()) {
    return absl::InvalidArgumentError("http.listen: " + std::string(st.message()));
  }
  s.http.threads = static_cast<int>(config.Int("http.threads", 2, 1, 256));
  s.http.header_timeout = config.Duration("http.header_timeout", std::chrono::seconds(10), std::chrono::milliseconds(100), std::chrono::minutes(10));
  s.http.body_timeout = config.Duration("http.body_timeout", std::chrono::seconds(30), std::chrono::milliseconds(100), std::chrono::hours(1));
  // GitHub caps webhook payloads at 25 MB.
  s.http.body_limit = static_cast<uint64_t>(
      config.Bytes("intake.max_body", 25 * 1024 * 1024, 1024, 64 * 1024 * 1024));
  s.drain_timeout = config.Duration("http.drain_timeout", std::chrono::seconds(20), std::chrono::milliseconds(0), std::chrono::minutes(10));

  s.kafka.bootstrap = config.RequiredString("kafka.bootstrap");
  s.kafka.client_id = config.String("kafka.client_id", "relay-intake");
  s.kafka.delivery_timeout = config.Duration("kafka.delivery_timeout", std::chrono::seconds(5), std::chrono::milliseconds(100), std::chrono::minutes(5));
  // 1 ms, not librdkafka's 5: intake answers only after the broker ack, so
  // linger is paid in every response's latency and, with a bounded number of
  // sender connections, in throughput. Measured (docs/benchmarks.md): 1 ms
  // against 2 ms gave 22.8k vs 19.1k req/s at 64 connections and p50 1.7 vs
  // 2.5 ms at 16k req/s, for a few points more broker CPU.
  s.kafka.linger = config.Duration("kafka.linger", std::chrono::milliseconds(1), std::chrono::milliseconds(0), std::chrono::seconds(1));
  s.kafka.compression = config.String("kafka.compression", "lz4");
  // A record holds the whole body plus a little envelope.
  s.kafka.message_max_bytes = static_cast<int64_t>(s.http.body_limit) + 1024 * 1024;

  s.webhook.topic = config.String("intake.topic", "github.webhooks");
  s.webhook.secrets = config.StringList("intake.webhook_secrets");
  std::string secrets_file = config.String("intake.webhook_secrets_file", "");
  if (!secrets_file.empty()) {
    std::string error;
    auto more = ReadSecretsFile(secrets_file, &error);
    if (!error.empty()) return absl::InvalidArgumentError("intake.webhook_secrets_file: " + error);
    s.webhook.secrets.insert(s.webhook.secrets.end(), more.begin(), more.end());
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  s.webhook.instance = host;
  s.dedup_window = config.Duration("intake.dedup_window", std::chrono::hours(1), std::chrono::milliseconds(0), std::chrono::hours(24));
  s.dedup_max_entries = config.Int("intake.dedup_max_entries", 500'000, 0, 100'000'000);
  s.log_level = config.String("log.level", "info");

  RELAY_RETURN_IF_ERROR(config.Finish());
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
  log::Level level;
  if (!log::ParseLevel(s.log_level, &level)) {
    return absl::InvalidArgumentError("log.level: '" + s.log_level + "' is not debug|info|warn|error");
  }
  return s;
}

absl::StatusOr<std::unique_ptr<IntakeService>> IntakeService::Start(IntakeSettings settings) {
  std::unique_ptr<IntakeService> svc(new IntakeService());
  svc->settings_ = std::move(settings);
  auto& s = svc->settings_;
  svc->dedup_ = std::make_unique<DeliveryDedup>(&svc->clock_, s.dedup_window,
                                                static_cast<size_t>(s.dedup_max_entries));
  RELAY_ASSIGN_OR_RETURN(svc->producer_, kafka::NewKafkaProducer(s.kafka, &svc->registry_));
  svc->handler_ = std::make_unique<WebhookHandler>(s.webhook, svc->producer_.get(), svc->dedup_.get(),
                                                   &svc->clock_, &svc->registry_);
  svc->router_.Add(boost::beast::http::verb::post, "/github/webhook",
                   [h = svc->handler_.get()](http::Request&& r, http::Responder resp) {
                     h->Handle(std::move(r), std::move(resp));
                   });
  auto* raw = svc.get();
  http::AddOpsRoutes(svc->router_, svc->registry_,
                     [raw] { return raw->accepting_.load() && raw->producer_->Connected(); });
  RELAY_ASSIGN_OR_RETURN(svc->server_, http::Server::Start(s.http, svc->router_.AsHandler(), &svc->registry_));
  svc->accepting_ = true;
  log::Info("relay-intake listening",
            {{"host", s.http.host}, {"port", svc->server_->port()}, {"topic", s.webhook.topic},
             {"kafka", s.kafka.bootstrap}, {"secrets", static_cast<int64_t>(s.webhook.secrets.size())}});
  return svc;
}

bool IntakeService::Shutdown() {
  if (shut_down_) return true;
  shut_down_ = true;
  if (!server_ || !producer_) return true;  // Start failed part-way: nothing to drain
  accepting_ = false;  // /readyz turns 503 first, so balancers stop sending
  auto start = std::chrono::steady_clock::now();
  log::Info("draining", {{"deadline_ms", settings_.drain_timeout.count()}});
  server_->Shutdown(settings_.drain_timeout);
  auto left = settings_.drain_timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::steady_clock::now() - start);
  auto flushed = producer_->Flush(std::max(left, std::chrono::milliseconds(1000)));
  if (!flushed.ok()) log::Error("producer flush incomplete", {{"error", std::string(flushed.message())}});
  // Responders still held by producer callbacks must go before the server.
  producer_.reset();
  log::Info("drained");
  return flushed.ok();
}

IntakeService::~IntakeService() {
  Shutdown();
  server_.reset();
}

}  // namespace relay::intake
