// Calls to the GitHub REST API as a GitHub App: an RS256 app JWT (iss = app
// id, iat 60 s in the past, exp 9 minutes ahead) for the app's own
// endpoints, exchanged for installation tokens (GET
// /repos/{owner}/{repo}/installation, POST
// /app/installations/{id}/access_tokens) that are cached per installation
// until 5 minutes before they expire.
//
// Installations move: an organisation uninstalls and reinstalls the App (a
// new installation id for the same repositories), or a repository moves to
// another installation. So a 401 is answered in steps: a cached token is
// fetched again; a fresh token refused, or a token exchange answered 404/401
// (the installation is gone), makes the repository's installation id be
// looked up again; a repository the lookup answers 404 for is NotFound (the
// App is not installed there: no retry can help). An installation that
// keeps answering 401 after all that is backed off (1 s doubling to 5 min,
// Unavailable meanwhile, without calling GitHub): GitHub may suspend an App
// that hammers it with bad credentials.
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
  // The answer was a 401, or a 404 from a repository that moved to another
  // installation, and the credentials were renewed since: the same call
  // again (under the budget, like any call) is expected to go through.
  bool retry = false;
};

// Installation ids and tokens, shared by every worker. Thread-safe.
class AppCredentials {
 public:
  AppCredentials(std::string app_id, auth::RsaKey key, const Clock* clock);

  // A fresh app JWT.
  absl::StatusOr<std::string> AppJwt() const;
  struct InstallationToken {
    int64_t installation = 0;
    std::string token;
    bool fresh = false;      // the token was fetched by this call, not taken from the cache
    bool looked_up = false;  // so was the installation id
  };
  // The installation id and a token for `repo`, from the cache or from
  // GitHub through `client`. A token exchange that says the installation is
  // gone (404, 401) looks the repository's installation up again, once.
  // NotFound when the App is not installed on `repo` (the message says so);
  // Unavailable while the installation is backed off after repeated 401s,
  // or as GitHub answers (5xx, 429); PermissionDenied for other refusals.
  absl::StatusOr<InstallationToken> TokenFor(const std::string& repo, http::Client& client);
  // Drops the cached token of `repo`'s installation (a 401 on a cached one).
  void ForgetToken(const std::string& repo);
  // Drops `repo`'s installation id and its token: the next TokenFor looks
  // the installation up again.
  void ForgetInstallation(const std::string& repo);
  // A call authenticated for `installation` was answered 401 although its
  // id was just confirmed and its token fresh: backs the installation off.
  void Unauthorized(int64_t installation);
  // A call for `installation` was accepted: ends its backoff.
  void Authorized(int64_t installation);

  int64_t token_fetches() const;
  int64_t installation_lookups() const;  // GET /repos/{owner}/{repo}/installation calls

 private:
  struct Token {
    std::string value;
    int64_t refresh_after_unix = 0;  // 5 minutes before expires_at
  };
  struct Backoff {
    int64_t until_ms = 0;
    int64_t next_ms = 1000;
  };
  struct Found {
    int64_t id = 0;
    bool looked_up = false;  // not from the cache
  };
  absl::StatusOr<Found> InstallationFor(const std::string& repo, http::Client& client);
  absl::Status BackedOff(int64_t installation) const;

  std::string app_id_;
  auth::RsaKey key_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::map<std::string, std::pair<int64_t, int64_t>> installations_;  // lower-case repo -> (id, until unix)
  std::map<int64_t, Token> tokens_;
  std::map<int64_t, Backoff> unauthorized_;  // installations answering 401 for good
  int64_t token_fetches_ = 0;
  int64_t installation_lookups_ = 0;
};

// The message of the NotFound that says the App is not installed on a
// repository starts with this (the DLQ reason and metrics look for it).
inline constexpr char kNotInstalled[] = "app not installed";
bool IsNotInstalled(const absl::Status& status);

// One worker's connection to the API. Not thread-safe.
class Api {
 public:
  Api(std::unique_ptr<http::Client> client, AppCredentials* credentials)
      : client_(std::move(client)), credentials_(credentials) {}
  // Authenticates and sends `call`. A 401 (never applied by GitHub) is
  // answered as the class comment says: a new token, then a new lookup of
  // the installation, then the call again under it. A 404 makes sure the
  // App is still installed (NotFound if not). Transport failures are
  // Unavailable (http::Client's message says whether the request may have
  // been sent).
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
