#include "relay/intake/webhook_handler.h"

#include <simdjson.h>

#include <boost/beast/core/string.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string_view.hpp>

#include "relay/base/json_fields.h"
#include "relay/base/digest.h"
#include "relay/base/log.h"
#include "relay/github/webhook_key.h"
#include "relay/v1/webhook.pb.h"

namespace relay::intake {
namespace {

namespace bhttp = boost::beast::http;
using boost::beast::iequals;

// Request headers kept in the record (lower-case), besides event and
// delivery. Never the signature: see body_sha256 in webhook.proto.
constexpr std::string_view kKeptHeaders[] = {
    "user-agent",
    "content-type",
    "x-github-hook-id",
    "x-github-hook-installation-target-type",
    "x-github-hook-installation-target-id",
};

// GitHub event names are lower-case words, digits and underscores
// (e.g. projects_v2_item).
bool ValidEvent(std::string_view event) {
  if (event.empty() || event.size() > 64) return false;
  for (char c : event) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// GitHub sends a GUID; accept any short printable token so redeliveries and
// other senders work, but keep control characters out of keys and logs.
bool ValidDeliveryId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

struct PayloadFacts {
  std::string action;
  std::string repository;
  int64_t repository_id = 0;
  int64_t installation_id = 0;
  // What the record's key may need (relay/github/webhook_key.h).
  int64_t number = 0;
  std::string ref;
  std::string sha;
  int64_t object_id = 0;
};

// A positive integer field of `o`, or 0.
int64_t PositiveInt(simdjson::dom::object o, std::string_view field) {
  int64_t v = 0;
  return o[field].get(v) == simdjson::SUCCESS && v > 0 ? v : 0;
}

// The fields the ordered keys use: the PR's or issue's number, a push's
// ref, a status's sha, a workflow or check object's id.
void ReadKeyFacts(simdjson::dom::object root, std::string_view event, PayloadFacts* facts) {
  simdjson::dom::object o;
  for (const char* holder : {"pull_request", "issue"}) {
    if (root[holder].get(o) == simdjson::SUCCESS && (facts->number = PositiveInt(o, "number")) > 0) break;
  }
  if (facts->number == 0) facts->number = PositiveInt(root, "number");
  std::string_view text;
  if (event == "push" && root["ref"].get(text) == simdjson::SUCCESS) facts->ref = text;
  if (event == "status" && root["sha"].get(text) == simdjson::SUCCESS) facts->sha = text;
  if (std::string_view object = github::KeyObjectOf(event); !object.empty() && root[object].get(o) == simdjson::SUCCESS) {
    facts->object_id = PositiveInt(o, "id");
  }
}

// Documents up to this size are parsed by the thread's own parser, which
// keeps its buffers (about 7x the document) for the next one. A larger one
// gets a parser of its own, freed with it: one 25 MB webhook must not leave
// ~175 MB per I/O thread behind for the life of the process.
constexpr size_t kThreadParserMaxBytes = 1024 * 1024;

bool ParseWith(simdjson::dom::parser& parser, std::string_view json, std::string_view event, PayloadFacts* facts) {
  simdjson::dom::element doc;
  if (parser.parse(json.data(), json.size()).get(doc) != simdjson::SUCCESS) return false;
  simdjson::dom::object root;
  if (doc.get(root) != simdjson::SUCCESS) return false;  // a webhook body is an object
  std::string_view text;
  if (root["action"].get(text) == simdjson::SUCCESS) facts->action = text;
  simdjson::dom::object repo;
  if (root["repository"].get(repo) == simdjson::SUCCESS) {
    if (repo["full_name"].get(text) == simdjson::SUCCESS) facts->repository = text;
    int64_t id = 0;
    if (repo["id"].get(id) == simdjson::SUCCESS) facts->repository_id = id;
  }
  simdjson::dom::object inst;
  int64_t id = 0;
  if (root["installation"].get(inst) == simdjson::SUCCESS && inst["id"].get(id) == simdjson::SUCCESS) {
    facts->installation_id = id;
  }
  ReadKeyFacts(root, event, facts);
  return true;
}

// Fully validates `json` (simdjson's DOM parser checks the whole document)
// and reads the few fields the record carries. Steady state allocates
// nothing: webhook-sized documents reuse the thread's parser.
simdjson::dom::parser& ThreadParser() {
  thread_local simdjson::dom::parser parser(kThreadParserMaxBytes);
  return parser;
}

bool ParsePayload(std::string_view json, std::string_view event, PayloadFacts* facts) {
  if (json.size() > kThreadParserMaxBytes) {
    simdjson::dom::parser once;
    return ParseWith(once, json, event, facts);
  }
  return ParseWith(ThreadParser(), json, event, facts);
}

// Indexed by WebhookHandler::Outcome.
constexpr const char* kOutcomeNames[] = {"accepted", "duplicate", "conflict", "bad_signature",
                                         "bad_headers", "bad_body", "unavailable", "refused"};

}  // namespace

WebhookHandler::WebhookHandler(WebhookOptions options, kafka::Producer* producer, DeliveryDedup* dedup,
                               const Clock* clock, prometheus::Registry* metrics)
    : options_(std::move(options)),
      verifier_(options_.secrets),
      producer_(producer),
      dedup_(dedup),
      clock_(clock),
      outcomes_(prometheus::BuildCounter()
                    .Name("relay_intake_webhooks_total")
                    .Help("Webhook requests by outcome (accepted, duplicate, conflict, bad_signature, "
                          "bad_headers, bad_body, unavailable, refused)")
                    .Register(*metrics)) {
  // All outcomes exported from the start (zeros), so rates work at once.
  for (int i = 0; i < kOutcomeCount; ++i) counters_[i] = &outcomes_.Add({{"outcome", kOutcomeNames[i]}});
}

http::Response WebhookHandler::Reject(unsigned status, Outcome outcome, std::string_view reason) {
  counters_[outcome]->Increment();
  log::Info("webhook rejected", {{"status", status}, {"outcome", kOutcomeNames[outcome]}, {"reason", reason}});
  return http::MakeResponse(status, "{\"error\":" + JsonQuote(reason) + "}");
}

WebhookHandler::Validated WebhookHandler::Validate(http::Request& request) {
  Validated v;
  std::string& body = request.body();
  auto signature = request["X-Hub-Signature-256"];
  if (signature.empty()) {
    v.error = Reject(401, kBadSignature, "missing X-Hub-Signature-256");
    return v;
  }
  if (!verifier_.Verify(signature, body)) {
    v.error = Reject(401, kBadSignature, "X-Hub-Signature-256 does not match the body");
    return v;
  }
  std::string_view event = request["X-GitHub-Event"];
  std::string_view delivery = request["X-GitHub-Delivery"];
  if (!ValidEvent(event)) {
    v.error = Reject(400, kBadHeaders, event.empty() ? "missing X-GitHub-Event" : "malformed X-GitHub-Event");
    return v;
  }
  if (!ValidDeliveryId(delivery)) {
    v.error = Reject(400, kBadHeaders,
                     delivery.empty() ? "missing X-GitHub-Delivery" : "malformed X-GitHub-Delivery");
    return v;
  }
  std::string_view content_type = request[bhttp::field::content_type];
  std::string decoded;
  std::string_view json;
  if (!github::WebhookJson(content_type, body, &decoded, &json)) {
    v.error = Reject(400, kBadBody, "unsupported Content-Type or form post without a payload field");
    return v;
  }
  PayloadFacts facts;
  if (!ParsePayload(json, event, &facts)) {
    v.error = Reject(400, kBadBody, "body is not a JSON object");
    return v;
  }
  // What goes into the record beside the body, and into its key, is short
  // on GitHub (an owner 39 characters, a repository 100, a ref 255 bytes,
  // an action a word). A signed body that says otherwise would make a
  // record past the topic's size: refused for good by the broker, which
  // fails readiness for everyone. Refused here, for this request only.
  if (facts.repository.size() > 256 || facts.action.size() > 64 || facts.ref.size() > 1024 ||
      facts.sha.size() > 128) {
    v.error = Reject(400, kBadBody, "repository.full_name, action, ref or sha longer than GitHub makes them");
    return v;
  }

  v.digest = Sha256(body);
  relay::v1::WebhookRecord record;
  record.set_delivery_id(std::string(delivery));
  record.set_body_sha256(v.digest.data(), v.digest.size());
  record.set_event(std::string(event));
  record.set_action(facts.action);
  record.set_repository(facts.repository);
  record.set_repository_id(facts.repository_id);
  record.set_installation_id(facts.installation_id);
  record.set_received_at_unix_ms(clock_->UnixMillis());
  record.set_body(std::move(body));  // last use of the body: move, not copy
  record.set_content_type(std::string(content_type));
  record.set_intake_instance(options_.instance);
  for (std::string_view name : kKeptHeaders) {
    auto it = request.find(name);
    if (it == request.end()) continue;
    auto* h = record.add_headers();
    h->set_name(std::string(name));
    h->set_value(std::string(it->value()));
  }

  v.ok = true;
  v.delivery_id = std::string(delivery);
  v.record.topic = options_.topic;
  // The key decides which records keep their order (one partition each):
  // the rules, per scheme, are in relay/github/webhook_key.h. Ordered keys
  // from the configured instant only, decided by intake's receive time.
  const bool ordered =
      options_.keys == github::WebhookKeys::kOrdered && record.received_at_unix_ms() >= options_.keys_from_unix_ms;
  v.record.key = github::WebhookKey(ordered ? github::WebhookKeys::kOrdered : github::WebhookKeys::kRepository,
                                    {event, facts.repository, facts.number, facts.ref, facts.sha, facts.object_id},
                                    v.delivery_id);
  v.record.value = record.SerializeAsString();
  v.record.headers = {{kafka::kSchemaHeader, kWebhookSchema},
                      {kafka::kDeliveryHeader, v.delivery_id},
                      {"relay-event", std::string(event)}};
  if (ordered) {
    v.record.headers.push_back({github::kWebhookKeysHeader, github::kOrderedKeysVersion});
    v.record.headers.push_back({github::kWebhookKeysFromHeader, std::to_string(options_.keys_from_unix_ms)});
  }
  return v;
}

void WebhookHandler::Answer(http::Responder& responder, const absl::Status& status, bool duplicate,
                            bool conflict, const std::string& delivery_id) {
  if (kafka::IsPermanentProduceError(status)) {
    counters_[kRefused]->Increment();
    {
      std::lock_guard lock(refusal_mu_);
      refusal_ = status;
      refusal_at_ = clock_->Now();
    }
    log::Error("webhook refused by Kafka", {{"delivery_id", delivery_id}, {"error", std::string(status.message())}});
    // No Retry-After: the same request will be refused again until an
    // operator fixes the topic; GitHub shows the reason with the delivery.
    responder.Send(http::MakeResponse(
        500, "{\"error\":" + JsonQuote("the event cannot be stored: " + std::string(status.message())) + "}"));
    return;
  }
  if (!status.ok()) {
    counters_[kUnavailable]->Increment();
    auto response = http::MakeResponse(503, R"({"error":"the event could not be made durable; retry"})");
    response.set(bhttp::field::retry_after, "5");
    responder.Send(std::move(response));
    return;
  }
  if (!duplicate) {
    std::lock_guard lock(refusal_mu_);
    refusal_ = absl::OkStatus();  // records flow again
  }
  counters_[duplicate ? kDuplicate : conflict ? kConflict : kAccepted]->Increment();
  std::string body = std::string("{\"status\":\"") + (duplicate ? "duplicate" : "accepted") +
                     "\",\"delivery_id\":" + JsonQuote(delivery_id) + (conflict ? ",\"conflict\":true}" : "}");
  responder.Send(http::MakeResponse(duplicate ? 200 : 202, std::move(body)));
}

size_t WebhookHandler::ThreadParserCapacity() { return ThreadParser().capacity(); }

absl::Status WebhookHandler::RecentRefusal() const {
  std::lock_guard lock(refusal_mu_);
  if (refusal_.ok() || clock_->Now() - refusal_at_ > options_.refusal_window) return absl::OkStatus();
  return absl::FailedPreconditionError("Kafka refused a webhook record: " + std::string(refusal_.message()));
}

void WebhookHandler::Handle(http::Request&& request, http::Responder responder) {
  Validated v = Validate(request);
  if (!v.ok) {
    responder.Send(std::move(v.error));
    return;
  }
  // Shared with the dedup waiter, which Begin keeps only for kJoined; exactly
  // one path answers.
  auto shared = std::make_shared<http::Responder>(std::move(responder));
  auto claim = dedup_->Begin(v.delivery_id, v.digest, [this, shared, id = v.delivery_id](bool durable) {
    // The same delivery was in flight: answer with that request's outcome.
    // A failure there frees it, so the sender's retry will be recorded.
    Answer(*shared, durable ? absl::OkStatus() : absl::UnavailableError("not durable"), /*duplicate=*/true,
           /*conflict=*/false, id);
  });
  switch (claim) {
    case DeliveryDedup::Claim::kJoined:
      return;
    case DeliveryDedup::Claim::kDone:
      Answer(*shared, absl::OkStatus(), /*duplicate=*/true, /*conflict=*/false, v.delivery_id);
      return;
    case DeliveryDedup::Claim::kNew:
    case DeliveryDedup::Claim::kConflict:
      break;
  }
  bool conflict = claim == DeliveryDedup::Claim::kConflict;
  if (conflict) {
    log::Warn("delivery id seen before with another body; recording this one too", {{"delivery_id", v.delivery_id}});
  }
  producer_->Send(std::move(v.record), [this, shared, conflict, id = std::move(v.delivery_id),
                                        digest = v.digest](absl::Status status) mutable {
    // On a producer thread: answer only now that the broker has (or has not)
    // acknowledged the record.
    if (!status.ok() && !kafka::IsPermanentProduceError(status)) {
      log::Warn("webhook not durable", {{"delivery_id", id}, {"error", std::string(status.message())}});
    }
    dedup_->Finish(id, digest, status.ok());
    Answer(*shared, status, /*duplicate=*/false, conflict, id);
  });
}

}  // namespace relay::intake
