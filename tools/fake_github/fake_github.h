// A fake of the GitHub REST API, for tests and the dev stack: the few
// endpoints relay writes to, with GitHub's own rules, and knobs to make it
// misbehave. A test double: nothing in the services knows it is not GitHub.
//
//   app auth        GET /repos/{o}/{r}/installation, POST /app/installations/{id}/access_tokens
//                   (RS256 app JWT checked against the app's public key; tokens expire)
//   dispatches      POST /repos/{o}/{r}/dispatches (event_type 1-100 chars, client_payload an
//                   object of at most 10 keys, body under 64 KB; 204)
//   re-runs         POST /repos/{o}/{r}/actions/runs/{id}/rerun-failed-jobs (201; 403 while running)
//   check runs      POST /repos/{o}/{r}/check-runs, PATCH .../check-runs/{id},
//                   GET /repos/{o}/{r}/commits/{sha}/check-runs, GET .../check-suites/{id}/check-runs
//   comments        GET/POST /repos/{o}/{r}/issues/{n}/comments, PATCH .../issues/comments/{id}
//   rate limits     X-RateLimit-* per installation (primary), a content-creation ceiling per window
//                   (secondary: 429 + Retry-After) and per hour (403 + Retry-After); calls past any
//                   are counted as breaches, and so are writes that arrive while a Retry-After the
//                   fake gave still runs (breaches.retry_after)
//   deliveries      GET /app/hook/deliveries (cursor pages, Link), POST /app/hook/deliveries/{id}/attempts
//                   (hook_deliveries.h): webhooks the fake delivers to intake, signed, or fails to
//   control         POST /_fake/deliver {event, body, guid, mode: ok|fail|unreachable|lost},
//                   POST /_fake/deliveries/drain (waits for posts in flight),
//                   POST /_fake/config {deliver_to, webhook_secret (where deliveries go), latency_ms, token_ttl_seconds, rate_limit: {limit,
//                   window_seconds}, content_limit: {per_window, window_seconds, per_hour}, not_installed:
//                   [repo] (lookups and calls answer 404), reinstall: true (every installation
//                   gets a new id: old tokens answer 401, their exchanges 404), running_runs: [id]},
//                   POST /_fake/faults {path regex, status, method, count, retry_after, message},
//                   GET /_fake/stats (calls, breaches, 401s, token fetches), GET /_fake/calls,
//                   POST /_fake/reset
//
// Every call is kept (method, path, status, times, body of writes) and,
// with `record_file`, appended to it as JSON lines.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace relay::fake_github {

struct Options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string app_id = "1";
  std::string public_key_pem;  // the app's public key (verifies app JWTs)
  std::string record_file;     // JSON lines of every call; empty: memory only
  int threads = 2;
  // Webhook deliveries (hook_deliveries.h): intake's webhook URL and the
  // secret to sign with; empty: only failed deliveries can be made.
  std::string deliver_to;
  std::string webhook_secret;
};

class FakeGitHub {
 public:
  static absl::StatusOr<std::unique_ptr<FakeGitHub>> Start(Options options);
  virtual ~FakeGitHub() = default;
  virtual uint16_t port() const = 0;
  virtual void Stop() = 0;
};

}  // namespace relay::fake_github
