#include "relay/github/api.h"

#include <ctime>

#include <boost/json/parse.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "relay/base/status.h"
#include "relay/base/log.h"

namespace relay::github {

namespace bhttp = boost::beast::http;

std::optional<int64_t> ParseIsoTime(std::string_view text) {
  std::tm tm{};
  int consumed = 0;
  std::string s(text);
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &consumed) != 6 ||
      consumed != static_cast<int>(s.size())) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm));
}

namespace {

constexpr int64_t kInstallationCacheSeconds = 3600;
constexpr int64_t kTokenRefreshMarginSeconds = 300;

std::map<std::string, std::string> BaseHeaders(const std::string& bearer) {
  return {{"Accept", "application/vnd.github+json"},
          {"X-GitHub-Api-Version", "2022-11-28"},
          {"Authorization", "Bearer " + bearer}};
}

// A short reason from GitHub's error body ({"message": ...}).
std::string Message(const std::string& body) {
  boost::system::error_code ec;
  auto v = boost::json::parse(body, ec);
  if (!ec && v.is_object()) {
    if (auto* m = v.as_object().if_contains("message"); m && m->is_string()) return std::string(m->as_string());
  }
  return body.substr(0, 200);
}

// A refusal that waiting cures: 429, or a 403 of the primary limit
// (x-ratelimit-remaining: 0) or of a secondary one (Retry-After, or its
// message). The App's lookups and token exchanges are refused so too, and
// such a refusal is not the permission error a plain 403 is.
bool IsRateLimited(const http::ClientResponse& r) {
  if (r.status == 429) return true;
  if (r.status != 403) return false;
  if (r.Header("x-ratelimit-remaining") == "0" || !r.Header("retry-after").empty()) return true;
  std::string message = Message(r.body);
  for (auto& c : message) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return message.find("rate limit") != std::string::npos;
}

}  // namespace

AppCredentials::AppCredentials(std::string app_id, auth::RsaKey key, const Clock* clock)
    : app_id_(std::move(app_id)), key_(std::move(key)), clock_(clock) {}

absl::StatusOr<std::string> AppCredentials::AppJwt() const {
  int64_t now = clock_->UnixMillis() / 1000;
  // iat in the past allows for clock drift; exp at most 10 minutes ahead.
  return auth::SignRs256({{"iat", now - 60}, {"exp", now + 540}, {"iss", app_id_}}, key_);
}

bool IsNotInstalled(const absl::Status& status) {
  return absl::IsNotFound(status) && absl::StartsWith(status.message(), kNotInstalled);
}

absl::StatusOr<AppCredentials::Found> AppCredentials::InstallationFor(const std::string& repo,
                                                                     http::Client& client) {
  std::string key = absl::AsciiStrToLower(repo);
  int64_t now = clock_->UnixMillis() / 1000;
  {
    std::lock_guard lock(mu_);
    if (auto it = installations_.find(key); it != installations_.end() && it->second.second > now) {
      return Found{it->second.first, false};
    }
    ++installation_lookups_;
  }
  auto jwt = AppJwt();
  if (!jwt.ok()) return jwt.status();
  auto r = client.Send(bhttp::verb::get, "/repos/" + repo + "/installation", BaseHeaders(*jwt), "");
  if (!r.ok()) return r.status();
  if (r->status == 404) {
    return absl::NotFoundError(std::string(kNotInstalled) + ": the GitHub App is not installed on " + repo +
                               " (GET /repos/" + repo + "/installation answered 404)");
  }
  if (r->status != 200) {
    std::string why = "installation of " + repo + ": HTTP " + std::to_string(r->status) + ": " + Message(r->body);
    return r->status >= 500 || IsRateLimited(*r) ? absl::UnavailableError(why) : absl::PermissionDeniedError(why);
  }
  boost::system::error_code ec;
  auto v = boost::json::parse(r->body, ec);
  const boost::json::value* id = ec || !v.is_object() ? nullptr : v.as_object().if_contains("id");
  if (!id || !id->is_int64()) return absl::UnavailableError("installation of " + repo + ": no id in the answer");
  std::lock_guard lock(mu_);
  installations_[key] = {id->as_int64(), now + kInstallationCacheSeconds};
  return Found{id->as_int64(), true};
}

absl::Status AppCredentials::BackedOff(int64_t installation) const {
  std::lock_guard lock(mu_);
  auto it = unauthorized_.find(installation);
  int64_t now = clock_->UnixMillis();
  if (it == unauthorized_.end() || it->second.until_ms <= now) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("installation ", installation,
                                             " keeps answering 401 with fresh credentials; calls for it wait ",
                                             (it->second.until_ms - now + 999) / 1000, " s"));
}

absl::StatusOr<AppCredentials::InstallationToken> AppCredentials::TokenFor(const std::string& repo,
                                                                          http::Client& client) {
  bool looked_up = false;
  for (int round = 0;; ++round) {
    auto found = InstallationFor(repo, client);
    if (!found.ok()) return found.status();
    looked_up = looked_up || found->looked_up;
    const int64_t* installation = &found->id;
    RELAY_RETURN_IF_ERROR(BackedOff(*installation));
    int64_t now = clock_->UnixMillis() / 1000;
    {
      std::lock_guard lock(mu_);
      if (auto it = tokens_.find(*installation); it != tokens_.end() && it->second.refresh_after_unix > now) {
        return InstallationToken{*installation, it->second.value, false, looked_up};
      }
    }
    auto jwt = AppJwt();
    if (!jwt.ok()) return jwt.status();
    auto r = client.Send(bhttp::verb::post, "/app/installations/" + std::to_string(*installation) + "/access_tokens",
                         BaseHeaders(*jwt), "");
    if (!r.ok()) return r.status();
    if (r->status == 404 || r->status == 401) {
      // The installation is gone (the App was reinstalled, or the
      // repository moved): look the repository up again, once.
      if (round == 0 && !found->looked_up) {
        log::Warn("installation token refused; looking the installation up again",
                  {{"repo", repo}, {"installation", *installation}, {"status", static_cast<int64_t>(r->status)}});
        ForgetInstallation(repo);
        continue;
      }
      Unauthorized(*installation);
      return absl::UnavailableError(absl::StrCat("installation token for ", repo, ": installation ", *installation,
                                                 " answered HTTP ", r->status, " right after its lookup: ",
                                                 Message(r->body)));
    }
    if (r->status != 201) {
      std::string why =
          "installation token for " + repo + ": HTTP " + std::to_string(r->status) + ": " + Message(r->body);
      return r->status >= 500 || IsRateLimited(*r) ? absl::UnavailableError(why) : absl::PermissionDeniedError(why);
    }
    boost::system::error_code ec;
    auto v = boost::json::parse(r->body, ec);
    const boost::json::object* o = ec ? nullptr : v.if_object();
    const boost::json::value* token = o ? o->if_contains("token") : nullptr;
    const boost::json::value* expires = o ? o->if_contains("expires_at") : nullptr;
    std::optional<int64_t> expires_at =
        expires && expires->is_string() ? ParseIsoTime(std::string_view(expires->as_string())) : std::nullopt;
    if (!token || !token->is_string() || !expires_at) {
      return absl::UnavailableError("installation token for " + repo + ": malformed answer");
    }
    std::lock_guard lock(mu_);
    ++token_fetches_;
    tokens_[*installation] = Token{std::string(token->as_string()), *expires_at - kTokenRefreshMarginSeconds};
    return InstallationToken{*installation, std::string(token->as_string()), true, looked_up};
  }
}

void AppCredentials::ForgetToken(const std::string& repo) {
  std::lock_guard lock(mu_);
  auto it = installations_.find(absl::AsciiStrToLower(repo));
  if (it != installations_.end()) tokens_.erase(it->second.first);
}

void AppCredentials::ForgetInstallation(const std::string& repo) {
  std::lock_guard lock(mu_);
  installations_.erase(absl::AsciiStrToLower(repo));
}

void AppCredentials::Unauthorized(int64_t installation) {
  std::lock_guard lock(mu_);
  Backoff& b = unauthorized_[installation];
  b.until_ms = clock_->UnixMillis() + b.next_ms;
  b.next_ms = std::min<int64_t>(b.next_ms * 2, 5 * 60 * 1000);
  tokens_.erase(installation);
}

void AppCredentials::Authorized(int64_t installation) {
  std::lock_guard lock(mu_);
  unauthorized_.erase(installation);
}

int64_t AppCredentials::token_fetches() const {
  std::lock_guard lock(mu_);
  return token_fetches_;
}

int64_t AppCredentials::installation_lookups() const {
  std::lock_guard lock(mu_);
  return installation_lookups_;
}

absl::StatusOr<ApiResult> Api::Send(const ApiCall& call, const std::string& bearer, int64_t installation) {
  auto headers = BaseHeaders(bearer);
  if (!call.body.empty()) headers["Content-Type"] = "application/json";
  for (const auto& [k, v] : call.headers) headers[k] = v;
  auto r = client_->Send(call.method, call.path, headers, call.body);
  if (!r.ok()) return r.status();
  return ApiResult{r->status, std::move(r->headers), std::move(r->body), installation};
}

absl::StatusOr<int64_t> Api::Installation(const std::string& repo) {
  auto token = credentials_->TokenFor(repo, *client_);
  if (!token.ok()) return token.status();
  return token->installation;
}

absl::StatusOr<ApiResult> Api::Call(const ApiCall& call) {
  if (call.repo.empty()) {
    auto jwt = credentials_->AppJwt();
    if (!jwt.ok()) return jwt.status();
    return Send(call, *jwt, 0);
  }
  auto token = credentials_->TokenFor(call.repo, *client_);
  if (!token.ok()) return token.status();
  auto result = Send(call, token->token, token->installation);
  if (!result.ok()) return result;
  if (result->status == 401) {
    // GitHub applied nothing. One step further each time: a new token, then
    // a new lookup of the installation, then a backoff.
    if (!token->fresh) {
      log::Warn("GitHub answered 401 to a cached token; fetching a new one", {{"repo", call.repo}});
      credentials_->ForgetToken(call.repo);
      result->retry = true;
    } else if (!token->looked_up) {
      log::Warn("GitHub answered 401 to a fresh token; looking the installation up again",
                {{"repo", call.repo}, {"installation", token->installation}});
      credentials_->ForgetToken(call.repo);
      credentials_->ForgetInstallation(call.repo);
      result->retry = true;
    } else {
      log::Error("GitHub answered 401 to a fresh token of a freshly looked-up installation; backing it off",
                 {{"repo", call.repo}, {"installation", token->installation}});
      credentials_->Unauthorized(token->installation);
    }
    return result;
  }
  if (result->status == 404 && !token->looked_up) {
    // A repository the App was removed from, or one that moved to another
    // installation, answers 404: which is it?
    credentials_->ForgetInstallation(call.repo);
    auto again = credentials_->TokenFor(call.repo, *client_);
    if (!again.ok()) {
      if (IsNotInstalled(again.status())) return again.status();
      return result;  // the lookup failed for another reason: the 404 stands
    }
    result->retry = again->installation != token->installation;
    return result;
  }
  if (result->status < 400) credentials_->Authorized(token->installation);
  return result;
}

}  // namespace relay::github
