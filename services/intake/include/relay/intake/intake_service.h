// relay-intake as a service of the host (libs/service): its settings, its
// route, its readiness conditions and its drain. main.cc is one line; tests
// start it on a Host with fake Kafka clients.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "relay/base/config.h"
#include "relay/kafka/producer.h"
#include "relay/service/service.h"
#include "relay/intake/webhook_handler.h"

namespace relay::intake {

// Bytes a record may add to the body it carries: the request headers kept
// (capped at 64 KiB by the server, with every other header) and the
// record's own fields. Topics must take body + this (kafka::CheckTopicAccepts).
inline constexpr int64_t kEnvelopeAllowance = 72 * 1024;

struct IntakeSettings {
  kafka::ProducerOptions kafka;
  WebhookOptions webhook;
  uint64_t max_body = 25 * 1024 * 1024;  // GitHub caps webhook payloads at 25 MB
  std::chrono::milliseconds dedup_window{std::chrono::hours(1)};
  int64_t dedup_max_entries = 500'000;
  // How often the topic's existence and max.message.bytes are checked.
  std::chrono::milliseconds topic_check_interval{30'000};
};

// Reads every intake key (see deploy/config/intake.example.yaml); errors are
// returned or recorded in `config`.
absl::StatusOr<IntakeSettings> LoadSettings(Config& config, const service::CommonSettings& common);

// relay-intake for service::Main and service::Host.
service::Definition Definition();

}  // namespace relay::intake
