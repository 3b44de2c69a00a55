#include "relay/collector/callback_front.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <boost/json.hpp>
#include <boost/url.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "relay/base/json_fields.h"
#include "relay/base/digest.h"
#include "relay/base/log.h"
#include "relay/base/random.h"
#include "relay/collector/callback.h"
#include "relay/github/webhook_signature.h"

namespace relay::collector {
namespace {

namespace bhttp = boost::beast::http;

}  // namespace

int RepoRateLimiter::Take(const std::string& repo, std::chrono::steady_clock::time_point now) {
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

CallbackFront::CallbackFront(Parts parts, prometheus::Registry& metrics)
    : p_(parts),
      limiter_(p_.settings->rate_per_repo, p_.settings->burst_per_repo),
      callbacks_(prometheus::BuildCounter()
                     .Name("relay_collector_callbacks_total")
                     .Help("Callbacks answered, by outcome (accepted, replayed, ignored, refused, unavailable) and "
                           "reason (ok, bad_token, not_allowed, bad_body, relay_token, rate_limited, no_dispatch, "
                           "conflict, token_reused, not_durable, no_decision)")
                     .Register(metrics)),
      tokens_refused_(prometheus::BuildCounter()
                          .Name("relay_collector_relay_tokens_refused_total")
                          .Help("Relay tokens refused, by reason (missing, invalid, other_repo, other_delivery)")
                          .Register(metrics)) {
  for (const char* r : {"missing", "invalid", "other_repo", "other_delivery"}) tokens_refused_.Add({{"reason", r}});
}

void CallbackFront::Close() {
  std::unordered_map<std::string, Waiter> left;
  {
    std::lock_guard lock(waiters_mu_);
    left.swap(waiters_);
  }
  for (auto& [id, w] : left) w.responder.Send(Unavailable("the collector is shutting down; retry"));
}

std::variant<http::Response, CallbackFront::Caller> CallbackFront::Authenticate(std::string_view authz) {
  if (authz.size() < 8 || !absl::EqualsIgnoreCase(absl::string_view(authz.data(), 7), "Bearer ")) {
    return Refuse(401, "bad_token", "Authorization: Bearer <OIDC token> is required");
  }
  std::string_view bearer = authz.substr(7);
  auto identity = p_.oidc->Verify(bearer);
  if (!identity.ok()) return Refuse(401, "bad_token", std::string(identity.status().message()));
  auto list = p_.allowlist->Current();
  const allowlist::Entry* entry = list->Find(identity->repository);
  if (!entry) return Refuse(403, "not_allowed", identity->repository + " is not in the allowlist", identity->repository);
  if (entry->level == allowlist::Level::kL1) {
    // Acknowledged, not recorded: a repo demoted to L1 keeps a green CI.
    return Answer(200, "ignored", "level_L1",
                  ",\"detail\":" + JsonQuote(entry->repo + " is at level L1: results are not recorded"));
  }
  if (int wait = limiter_.Take(entry->repo, p_.clock->Now()); wait > 0) {
    auto r = Refuse(429, "rate_limited", "more than the per-repository callback rate; retry later", entry->repo);
    r.set(bhttp::field::retry_after, std::to_string(wait));
    return r;
  }
  return Caller{std::move(*identity), *entry, std::string(bearer)};
}

// The relay token binds a report to a dispatch of `delivery` to the
// caller's repo. `self_report` (nightly/periodic) needs none.
std::optional<http::Response> CallbackFront::CheckRelayToken(const std::string& token, const Caller& caller,
                                              const std::string& delivery, bool self_report,
                                              auth::RelayTokenClaims* claims_out) {
  if (token.empty()) {
    if (self_report || p_.settings->allow_missing_relay_token) return std::nullopt;
    tokens_refused_.Add({{"reason", "missing"}}).Increment();
    return Refuse(403, "relay_token", "relay_token is missing: echo the dispatch's client_payload whole", caller.entry.repo);
  }
  auto claims = p_.keys->Verify(token, p_.clock->UnixMillis() / 1000);
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

http::Response CallbackFront::Answer(int status, const std::string& outcome, const std::string& reason, std::string_view extra) {
  callbacks_.Add({{"outcome", outcome}, {"reason", reason}}).Increment();
  return http::MakeResponse(status, "{\"status\":" + JsonQuote(outcome) + ",\"reason\":" + JsonQuote(reason) +
                                        std::string(extra) + "}");
}

http::Response CallbackFront::Refuse(int status, const std::string& reason, const std::string& detail, const std::string& repo) {
  log::Info("callback refused", {{"status", status}, {"reason", reason}, {"detail", detail}, {"repo", repo}});
  callbacks_.Add({{"outcome", "refused"}, {"reason", reason}}).Increment();
  return http::MakeResponse(status, "{\"error\":" + JsonQuote(detail) + ",\"reason\":" + JsonQuote(reason) + "}");
}

http::Response CallbackFront::Unavailable(const std::string& detail) {
  callbacks_.Add({{"outcome", "unavailable"}, {"reason", "not_durable"}}).Increment();
  auto r = http::MakeResponse(503, "{\"error\":" + JsonQuote(detail) + "}");
  r.set(bhttp::field::retry_after, "5");
  return r;
}

void CallbackFront::HandleCallback(http::Request&& request, http::Responder responder) {
  auto who = Authenticate(request[bhttp::field::authorization]);
  if (auto* refusal = std::get_if<http::Response>(&who)) return responder.Send(std::move(*refusal));
  Caller& caller = std::get<Caller>(who);
  const allowlist::Entry* entry = &caller.entry;
  const auth::OidcIdentity* identity = &caller.identity;
  auto parsed = ParseCallback(request.body());
  if (!parsed.ok()) return responder.Send(Refuse(400, "bad_body", std::string(parsed.status().message()), entry->repo));
  v1::CallbackRequest& req = parsed->request;
  int64_t now_ms = p_.clock->UnixMillis();
  auth::RelayTokenClaims claims;
  if (auto refusal = CheckRelayToken(parsed->relay_token, caller, req.delivery_id(), parsed->self_report, &claims)) {
    return responder.Send(std::move(*refusal));
  }
  if (!parsed->relay_token.empty()) {
    req.set_relay_token_verified(true);
    req.set_relay_token_issued_at_unix(claims.issued_at);
    req.set_relay_token_key_id(claims.key_id);
  }
  req.set_request_id(RandomHex(16));
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
    waiters_.emplace(id, Waiter{std::move(responder), std::chrono::steady_clock::now() + p_.settings->decision_timeout});
  }
  p_.producer->Send(kafka::MessageRecord(p_.settings->topics.callbacks, entry->repo, req, req.delivery_id()),
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
std::variant<http::Response, std::shared_ptr<http::BodyStream>> CallbackFront::HandleReportHeader(const http::RequestHeader& h) {
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
  auto stream = p_.reports->Begin(std::move(t));
  if (!stream.ok()) {
    auto r = http::MakeResponse(http::StatusToHttp(stream.status()), "{\"error\":" + JsonQuote(std::string(stream.status().message())) + "}");
    if (absl::IsUnavailable(stream.status())) r.set(bhttp::field::retry_after, "5");
    return r;
  }
  return *stream;
}

void CallbackFront::Finish(const std::string& id, http::Response response) {
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

bool CallbackFront::IsWaiting(const std::string& request_id) {
  std::lock_guard lock(waiters_mu_);
  return waiters_.count(request_id) > 0;
}

void CallbackFront::OnDecision(const kafka::ConsumedRecord& r) {
  if (!IsWaiting(r.key)) return;  // another instance's caller
  v1::CallbackDecision d;
  if (!d.ParseFromString(r.value)) return;
  Decided(d);
}

// Answers the caller waiting for `d` (if it still waits).
void CallbackFront::Decided(const v1::CallbackDecision& d) {
  http::Response response;
  std::string extra = ",\"job_id\":" + JsonQuote(d.job_id()) + ",\"state\":" + JsonQuote(d.state());
  if (d.outcome() == "refused") {
    std::string reason = d.http_status() == 404 ? "no_dispatch" : d.http_status() == 401 ? "token_reused" : "conflict";
    callbacks_.Add({{"outcome", "refused"}, {"reason", reason}}).Increment();
    response = http::MakeResponse(d.http_status(), "{\"error\":" + JsonQuote(d.reason()) + ",\"reason\":" +
                                                       JsonQuote(reason) + extra + "}");
  } else {
    response = Answer(d.http_status(), d.outcome(), "ok", extra);
  }
  Finish(d.request_id(), std::move(response));
}

void CallbackFront::ExpireWaiters() {
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

}  // namespace relay::collector
