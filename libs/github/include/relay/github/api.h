// Calls to the GitHub REST API as a GitHub App: an RS256 app JWT (iss = app
// id, iat 60 s in the past, exp 9 minutes ahead) for the app's own
// endpoints, exchanged for installation tokens (GET
// /repos/{owner}/{repo}/installation, POST
// /app/installations/{id}/access_tokens) that are cached per installation
// until 5 minutes before they expire and refreshed once on a 401.
// `github.api_url` points it at GitHub, GitHub Enterprise or the fake.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <boost/beast/http/verb.hpp>

#include "absl/status/statusor.h"
#include "relay/auth/jwt.h"
#include "relay/base/clock.h"
#include "relay/http/client.h"

namespace relay::github {

struct ApiCall {
  boost::beast::http::verb method = boost::beast::http::verb::get;
  std::string path;  // e.g. "/repos/octo/repo/dispatches"
  std::string body;  // JSON, or empty
  // The repository whose installation token authenticates the call; empty
  // for the app's own endpoints (app JWT).
  std::string repo;
  // Extra request headers (an idempotency key GitHub ignores but logs and
  // the fake records).
  std::map<std::string, std::string> headers;
};

struct ApiResult {
  unsigned status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  int64_t installation_id = 0;  // whose token was used (0: app JWT)
};

// Installation ids and tokens, shared by every worker. Thread-safe.
class AppCredentials {
 public:
  AppCredentials(std::string app_id, auth::RsaKey key, const Clock* clock);

  // A fresh app JWT.
  absl::StatusOr<std::string> AppJwt() const;
  // The installation id and a token for `repo`, from the cache or from
  // GitHub through `client`. NotFound when the app is not installed there;
  // Unavailable / PermissionDenied as GitHub answers.
  absl::StatusOr<std::pair<int64_t, std::string>> TokenFor(const std::string& repo, http::Client& client);
  // Drops the cached token of `repo`'s installation (after a 401).
  void Forget(const std::string& repo);

  int64_t token_fetches() const;

 private:
  struct Token {
    std::string value;
    int64_t refresh_after_unix = 0;  // 5 minutes before expires_at
  };
  absl::StatusOr<int64_t> InstallationFor(const std::string& repo, http::Client& client);

  std::string app_id_;
  auth::RsaKey key_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::map<std::string, std::pair<int64_t, int64_t>> installations_;  // lower-case repo -> (id, until unix)
  std::map<int64_t, Token> tokens_;
  int64_t token_fetches_ = 0;
};

// One worker's connection to the API. Not thread-safe.
class Api {
 public:
  Api(std::unique_ptr<http::Client> client, AppCredentials* credentials)
      : client_(std::move(client)), credentials_(credentials) {}
  // Authenticates and sends `call`; on a 401 with a cached installation
  // token, refreshes it once and sends again (a 401 was not applied).
  // Transport failures are Unavailable (http::Client's message says
  // whether the request may have been sent).
  absl::StatusOr<ApiResult> Call(const ApiCall& call);
  // The installation whose token authenticates calls for `repo` (fetching
  // id and token when not cached); errors as AppCredentials::TokenFor.
  absl::StatusOr<int64_t> Installation(const std::string& repo);

 private:
  absl::StatusOr<ApiResult> Send(const ApiCall& call, const std::string& bearer, int64_t installation);

  std::unique_ptr<http::Client> client_;
  AppCredentials* credentials_;
};

// "2026-11-23T12:00:00Z" -> unix seconds; nullopt when malformed.
std::optional<int64_t> ParseIsoTime(std::string_view text);

}  // namespace relay::github
