// POST /github/webhook: authenticate, validate, make durable, then answer.
//
//   401  X-Hub-Signature-256 missing or not a signature of the body under an
//        active secret (checked first: nothing else is revealed before it)
//   400  X-GitHub-Event or X-GitHub-Delivery missing or malformed; body not
//        JSON (application/json, or the `payload` field of a form post)
//   202  new delivery, acknowledged by Kafka (acks=all)
//   200  delivery id already durable within the dedup window
//   503  Kafka did not acknowledge within the delivery timeout (Retry-After)
// (404/405/413 and timeouts are the HTTP server's and router's.)
//
// Every outcome increments relay_intake_webhooks_total{outcome}. Thread-safe.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "relay/base/clock.h"
#include "relay/github/webhook_signature.h"
#include "relay/http/server.h"
#include "relay/kafka/producer.h"
#include "delivery_dedup.h"

namespace relay::intake {

inline constexpr char kWebhookSchema[] = "relay.v1.WebhookRecord";

struct WebhookOptions {
  std::vector<std::string> secrets;
  std::string topic = "github.webhooks";
  std::string instance;  // recorded as intake_instance
};

class WebhookHandler {
 public:
  // All pointers must outlive the handler.
  WebhookHandler(WebhookOptions options, kafka::Producer* producer, DeliveryDedup* dedup,
                 const Clock* clock, prometheus::Registry* metrics);

  void Handle(http::Request&& request, http::Responder responder);

  // The record for an authenticated, valid request, or the error response.
  // On success the body has been moved into the record (request.body() is
  // left empty): the body is the bulk of a webhook and is copied only once,
  // into the serialized record. Exposed for the fuzz target and unit tests.
  struct Validated {
    bool ok = false;
    http::Response error;  // when !ok
    kafka::Record record;  // when ok
    std::string delivery_id;
  };
  Validated Validate(http::Request& request);

 private:
  enum Outcome { kAccepted, kDuplicate, kBadSignature, kBadHeaders, kBadBody, kUnavailable, kOutcomeCount };
  http::Response Reject(unsigned status, Outcome outcome, std::string_view reason);
  void Answer(http::Responder& responder, bool durable, bool duplicate, const std::string& delivery_id);

  WebhookOptions options_;
  github::WebhookVerifier verifier_;
  kafka::Producer* producer_;
  DeliveryDedup* dedup_;
  const Clock* clock_;
  prometheus::Family<prometheus::Counter>& outcomes_;
  // Resolved once: a label lookup per request costs a map build and a hash.
  std::array<prometheus::Counter*, kOutcomeCount> counters_{};
};

}  // namespace relay::intake
