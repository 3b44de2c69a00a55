// Wires the intake service from its configuration: HTTP server, router,
// webhook handler, Kafka producer, dedup. main.cc only parses flags and
// waits for SIGTERM; tests and the fuzz target build the parts directly.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "relay/base/clock.h"
#include "relay/base/config.h"
#include "relay/http/router.h"
#include "relay/http/server.h"
#include "relay/kafka/producer.h"
#include "delivery_dedup.h"
#include "webhook_handler.h"

namespace relay::intake {

struct IntakeSettings {
  http::ServerOptions http;
  kafka::ProducerOptions kafka;
  WebhookOptions webhook;
  std::chrono::milliseconds dedup_window{std::chrono::hours(1)};
  int64_t dedup_max_entries = 500'000;
  std::chrono::milliseconds drain_timeout{20'000};
  std::string log_level = "info";
};

// Reads every intake key (see config/intake.example.yaml) and validates it.
absl::StatusOr<IntakeSettings> LoadSettings(Config& config);

// A running intake. Destruction order is the drain order: Shutdown() first.
class IntakeService {
 public:
  static absl::StatusOr<std::unique_ptr<IntakeService>> Start(IntakeSettings settings);
  ~IntakeService();

  uint16_t port() const { return server_->port(); }
  // Stop accepting, finish requests in flight (they wait for their Kafka
  // acks), flush the producer. Returns false if the drain deadline passed.
  bool Shutdown();

 private:
  IntakeService() = default;

  IntakeSettings settings_;
  SystemClock clock_;
  prometheus::Registry registry_;
  std::unique_ptr<DeliveryDedup> dedup_;
  std::unique_ptr<kafka::Producer> producer_;
  std::unique_ptr<WebhookHandler> handler_;
  http::Router router_;
  std::unique_ptr<http::Server> server_;
  // Read by /readyz on server threads: true from listening until the drain.
  std::atomic<bool> accepting_{false};
  bool shut_down_ = false;
};

}  // namespace relay::intake
