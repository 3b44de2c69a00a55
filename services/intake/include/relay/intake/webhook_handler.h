// POST /github/webhook: authenticate, validate, make durable, then answer.
//
//   401  X-Hub-Signature-256 missing or not a signature of the body under an
//        active secret (checked first: nothing else is revealed before it)
//   400  X-GitHub-Event or X-GitHub-Delivery missing or malformed; body not
//        JSON (application/json, or the `payload` field of a form post)
//   202  new delivery, acknowledged by Kafka (acks=all); also a known id
//        with a different body, which is recorded and reported as a
//        conflict ("conflict": true in the answer)
//   200  this id and body already durable within the dedup window
//   503  Kafka did not acknowledge within the delivery timeout (Retry-After)
//   500  Kafka refuses the record for good (too large for the topic, no such
//        topic, not authorized): no Retry-After; readiness fails meanwhile
// (404/405/413 and timeouts are the HTTP server's and router's.)
//
// Every outcome increments relay_intake_webhooks_total{outcome}. Thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "relay/base/clock.h"
#include "relay/github/webhook_key.h"
#include "relay/github/webhook_signature.h"
#include "relay/http/server.h"
#include "relay/intake/delivery_dedup.h"
#include "relay/kafka/producer.h"

namespace relay::intake {

inline constexpr char kWebhookSchema[] = "relay.v1.WebhookRecord";

struct WebhookOptions {
  std::vector<std::string> secrets;
  std::string topic = "github.webhooks";
  std::string instance;  // recorded as intake_instance
  // How long a permanent refusal by Kafka keeps readiness failed, unless a
  // record is accepted sooner.
  std::chrono::milliseconds refusal_window{30'000};
  // How records are keyed (intake.record_keys; relay/github/webhook_key.h).
  github::WebhookKeys keys = github::WebhookKeys::kRepository;
  // With kOrdered: records received before this instant (unix ms; 0: none)
  // keep repository keys, so every replica switches at the same moment
  // (intake.record_keys_from; the cut-over: docs/architecture.md, "Topics").
  int64_t keys_from_unix_ms = 0;
};

class WebhookHandler {
 public:
  // All pointers must outlive the handler.
  WebhookHandler(WebhookOptions options, kafka::Producer* producer, DeliveryDedup* dedup,
                 const Clock* clock, prometheus::Registry* metrics);

  void Handle(http::Request&& request, http::Responder responder);

  // OK, or why Kafka last refused a record for good, while that is recent
  // (for /readyz).
  absl::Status RecentRefusal() const;

  // The record for an authenticated, valid request, or the error response.
  // On success the body has been moved into the record (request.body() is
  // left empty): the body is the bulk of a webhook and is copied only once,
  // into the serialized record. Exposed for the fuzz target and unit tests.
  struct Validated {
    bool ok = false;
    http::Response error;  // when !ok
    kafka::Record record;  // when ok
    std::string delivery_id;
    BodyDigest digest{};
  };
  Validated Validate(http::Request& request);

  // Bytes of document the calling thread's JSON parser holds on to (for
  // tests: a very large body must not raise it).
  static size_t ThreadParserCapacity();

 private:
  enum Outcome {
    kAccepted, kDuplicate, kConflict, kBadSignature, kBadHeaders, kBadBody, kUnavailable, kRefused,
    kOutcomeCount
  };
  http::Response Reject(unsigned status, Outcome outcome, std::string_view reason);
  void Answer(http::Responder& responder, const absl::Status& status, bool duplicate, bool conflict,
              const std::string& delivery_id);

  WebhookOptions options_;
  github::WebhookVerifier verifier_;
  kafka::Producer* producer_;
  DeliveryDedup* dedup_;
  const Clock* clock_;
  prometheus::Family<prometheus::Counter>& outcomes_;
  // Resolved once: a label lookup per request costs a map build and a hash.
  std::array<prometheus::Counter*, kOutcomeCount> counters_{};
  mutable std::mutex refusal_mu_;
  absl::Status refusal_;
  std::chrono::steady_clock::time_point refusal_at_;
};

}  // namespace relay::intake
