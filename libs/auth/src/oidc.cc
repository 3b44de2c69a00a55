#include "relay/auth/oidc.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>

#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <yaml-cpp/yaml.h>

#include "absl/strings/escaping.h"
#include "relay/base/status.h"
#include "relay/http/client.h"

namespace relay::auth {

namespace json = boost::json;

namespace {

std::string ClaimString(const json::object& claims, std::string_view name) {
  const json::value* v = claims.if_contains(name);
  if (!v) return "";
  if (v->is_string()) return std::string(v->as_string());
  if (v->is_int64() || v->is_uint64()) return json::serialize(*v);
  return "";
}

std::optional<int64_t> ClaimTime(const json::object& claims, std::string_view name) {
  const json::value* v = claims.if_contains(name);
  if (!v) return std::nullopt;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->as_uint64());
  if (v->is_double()) return static_cast<int64_t>(v->as_double());
  return std::nullopt;
}

bool AudienceMatches(const json::object& claims, const std::string& audience) {
  const json::value* aud = claims.if_contains("aud");
  if (!aud) return false;
  if (aud->is_string()) return aud->as_string() == audience;
  if (aud->is_array()) {
    for (const auto& a : aud->as_array()) {
      if (a.is_string() && a.as_string() == audience) return true;
    }
  }
  return false;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// GET over libs/http's client (TLS verified against the system's roots).
absl::StatusOr<std::string> HttpGet(const std::string& url, std::chrono::milliseconds timeout) {
  auto parsed = boost::urls::parse_uri(url);
  if (!parsed) return absl::InvalidArgumentError("not a URL: " + url);
  std::string origin = std::string(parsed->scheme()) + "://" + std::string(parsed->encoded_host_and_port());
  std::string target = std::string(parsed->encoded_target());
  if (target.empty()) target = "/";
  http::ClientOptions options;
  options.request_timeout = timeout;
  options.user_agent = "relay-collector";
  RELAY_ASSIGN_OR_RETURN(auto client, http::Client::New(origin, options));
  RELAY_ASSIGN_OR_RETURN(auto response, client->Send(boost::beast::http::verb::get, target, {}, ""));
  if (response.status != 200) return absl::UnavailableError(url + " answered " + std::to_string(response.status));
  return std::move(response.body);
}

}  // namespace

absl::StatusOr<std::map<std::string, RsaKey>> ParseJwks(std::string_view text) {
  boost::system::error_code ec;
  json::value doc = json::parse(json::string_view(text.data(), text.size()), ec);
  const json::object* o = ec ? nullptr : doc.if_object();
  const json::value* keys = o ? o->if_contains("keys") : nullptr;
  if (!keys || !keys->is_array()) return absl::InvalidArgumentError("JWKS without a keys array");
  std::map<std::string, RsaKey> out;
  for (const auto& k : keys->as_array()) {
    const json::object* jwk = k.if_object();
    if (!jwk) continue;
    if (ClaimString(*jwk, "kty") != "RSA") continue;
    if (std::string use = ClaimString(*jwk, "use"); !use.empty() && use != "sig") continue;
    if (std::string alg = ClaimString(*jwk, "alg"); !alg.empty() && alg != "RS256") continue;
    std::string kid = ClaimString(*jwk, "kid");
    auto key = RsaKey::FromJwk(ClaimString(*jwk, "n"), ClaimString(*jwk, "e"));
    if (!key.ok()) return absl::InvalidArgumentError("JWKS key " + kid + ": " + std::string(key.status().message()));
    out.emplace(std::move(kid), std::move(*key));
  }
  if (out.empty()) return absl::InvalidArgumentError("JWKS has no RSA signing key");
  return out;
}

absl::StatusOr<json::object> ToJwk(const RsaKey& key, std::string_view kid) {
  BIGNUM* n = nullptr;
  BIGNUM* e = nullptr;
  if (EVP_PKEY_get_bn_param(key.get(), OSSL_PKEY_PARAM_RSA_N, &n) != 1 ||
      EVP_PKEY_get_bn_param(key.get(), OSSL_PKEY_PARAM_RSA_E, &e) != 1) {
    BN_free(n);
    return absl::InvalidArgumentError("not an RSA key");
  }
  auto b64 = [](const BIGNUM* bn) {
    std::string bytes(BN_num_bytes(bn), '\0');
    BN_bn2bin(bn, reinterpret_cast<unsigned char*>(bytes.data()));
    return absl::WebSafeBase64Escape(bytes);
  };
  json::object jwk{{"kty", "RSA"}, {"use", "sig"}, {"alg", "RS256"}, {"kid", kid}, {"n", b64(n)}, {"e", b64(e)}};
  BN_free(n);
  BN_free(e);
  return jwk;
}

absl::StatusOr<std::vector<OidcIssuer>> LoadOidcProviders(const std::string& path) {
  std::vector<OidcIssuer> out;
  try {
    YAML::Node root = YAML::LoadFile(path);
    YAML::Node providers = root["providers"];
    if (!providers || !providers.IsSequence()) return absl::InvalidArgumentError(path + ": needs a providers list");
    for (const auto& p : providers) {
      OidcIssuer i;
      auto str = [&](const char* k) { return p[k] ? p[k].as<std::string>() : std::string(); };
      i.issuer = str("issuer");
      i.audience = str("audience");
      i.jwks_url = str("jwks_url");
      i.jwks_file = str("jwks_file");
      if (p["repository_claim"]) i.repository_claim = str("repository_claim");
      for (const char* map : {"repositories", "required_claims"}) {
        if (!p[map]) continue;
        if (!p[map].IsMap()) return absl::InvalidArgumentError(path + ": " + map + " must be a map");
        for (const auto& kv : p[map]) {
          (std::string(map) == "repositories" ? i.repositories : i.required_claims)[kv.first.as<std::string>()] =
              kv.second.as<std::string>();
        }
      }
      out.push_back(std::move(i));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(path + ": " + e.what());
  }
  return out;
}

OidcVerifier::OidcVerifier(std::vector<OidcIssuer> issuers, OidcOptions options, const Clock* clock, Fetch fetch)
    : issuers_(std::move(issuers)), options_(options), clock_(clock), fetch_(std::move(fetch)) {
  if (!fetch_) fetch_ = HttpGet;
  for (size_t i = 0; i < issuers_.size(); ++i) keys_.push_back(std::make_unique<Keys>());
}

absl::StatusOr<std::unique_ptr<OidcVerifier>> OidcVerifier::New(std::vector<OidcIssuer> issuers, OidcOptions options,
                                                                const Clock* clock, Fetch fetch) {
  if (issuers.empty()) return absl::InvalidArgumentError("no OIDC issuer configured");
  std::set<std::string> seen;
  for (const auto& i : issuers) {
    if (i.issuer.empty()) return absl::InvalidArgumentError("an OIDC issuer without `issuer`");
    if (!seen.insert(i.issuer).second) return absl::InvalidArgumentError("OIDC issuer listed twice: " + i.issuer);
    if (i.audience.empty()) return absl::InvalidArgumentError(i.issuer + ": no audience");
    if (i.jwks_url.empty() == i.jwks_file.empty()) {
      return absl::InvalidArgumentError(i.issuer + ": exactly one of jwks_url and jwks_file");
    }
    if (i.repository_claim.empty()) return absl::InvalidArgumentError(i.issuer + ": empty repository_claim");
  }
  return std::unique_ptr<OidcVerifier>(new OidcVerifier(std::move(issuers), options, clock, std::move(fetch)));
}

bool OidcVerifier::Verifies(std::string_view issuer) const {
  for (const auto& i : issuers_) {
    if (i.issuer == issuer) return true;
  }
  return false;
}

absl::Status OidcVerifier::Prefetch() {
  absl::Status first;
  for (size_t i = 0; i < issuers_.size(); ++i) {
    absl::Status s = Refresh(i, true);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

absl::Status OidcVerifier::RefreshStale() {
  absl::Status first;
  for (size_t i = 0; i < issuers_.size(); ++i) {
    absl::Status s = Refresh(i, false);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

absl::Status OidcVerifier::Refresh(size_t i, bool force) {
  Keys& k = *keys_[i];
  // Whether a fetch is due; under k.mu (shared).
  auto due = [&](std::chrono::steady_clock::time_point now) {
    bool stale = !k.loaded || now - k.fetched_at >= options_.jwks_max_age;
    if (!stale && !force) return false;
    // At most one attempt per interval, whatever asks (a kid nobody has
    // must not make every request fetch).
    return k.last_attempt == std::chrono::steady_clock::time_point{} ||
           now - k.last_attempt >= options_.refetch_interval;
  };
  {
    // The common case, no fetch due, takes no exclusive lock: verifying
    // threads do not queue behind one another.
    std::shared_lock lock(k.mu);
    if (!due(clock_->Now())) return absl::OkStatus();
  }
  std::lock_guard fetch_lock(k.fetch_mu);
  auto now = clock_->Now();
  {
    std::shared_lock lock(k.mu);
    if (!due(now)) return absl::OkStatus();  // another thread just fetched
  }
  {
    std::unique_lock lock(k.mu);
    k.last_attempt = now;
  }
  const OidcIssuer& issuer = issuers_[i];
  auto text = issuer.jwks_url.empty() ? ReadFile(issuer.jwks_file) : fetch_(issuer.jwks_url, options_.fetch_timeout);
  absl::StatusOr<std::map<std::string, RsaKey>> parsed =
      text.ok() ? ParseJwks(*text) : absl::StatusOr<std::map<std::string, RsaKey>>(text.status());
  if (!parsed.ok()) {
    ++refresh_failures_;
    return absl::UnavailableError(issuer.issuer + " JWKS: " + std::string(parsed.status().message()));
  }
  ++refreshes_;
  std::unique_lock lock(k.mu);
  k.by_kid = std::move(*parsed);
  k.fetched_at = now;
  k.loaded = true;
  return absl::OkStatus();
}

bool OidcVerifier::Loaded(size_t i) {
  std::shared_lock lock(keys_[i]->mu);
  return keys_[i]->loaded;
}

std::optional<RsaKey> OidcVerifier::Find(size_t i, const std::string& kid) {
  Keys& k = *keys_[i];
  std::shared_lock lock(k.mu);
  auto it = k.by_kid.find(kid);
  if (it != k.by_kid.end()) return it->second;
  // A JWKS of one key and a token without kid: that key.
  if (kid.empty() && k.by_kid.size() == 1) return k.by_kid.begin()->second;
  return std::nullopt;
}

absl::StatusOr<OidcIdentity> OidcVerifier::Verify(std::string_view token) {
  // The issuer is read before the signature is checked only to pick the
  // keys; nothing from the token is trusted until it verifies under them.
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t dot = token.find('.', start);
    parts.push_back(token.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (parts.size() != 3) return absl::UnauthenticatedError("token is not a JWT");
  std::string claims_text;
  if (!absl::WebSafeBase64Unescape(absl::string_view(parts[1].data(), parts[1].size()), &claims_text)) {
    return absl::UnauthenticatedError("token claims are not base64url");
  }
  boost::system::error_code ec;
  json::value unverified = json::parse(claims_text, ec);
  if (ec || !unverified.is_object()) return absl::UnauthenticatedError("token claims are not a JSON object");
  std::string iss = ClaimString(unverified.as_object(), "iss");
  size_t i = 0;
  while (i < issuers_.size() && issuers_[i].issuer != iss) ++i;
  if (i == issuers_.size()) return absl::UnauthenticatedError("token issuer is not trusted");
  const OidcIssuer& issuer = issuers_[i];

  auto header = PeekHeader(token);
  if (!header.ok()) return header.status();
  // Only RS256 (checked again by VerifyRs256): other algorithms are
  // refused before they can cost a JWKS fetch.
  if (ClaimString(*header, "alg") != "RS256") return absl::UnauthenticatedError("JWT alg must be RS256");
  std::string kid = ClaimString(*header, "kid");
  // First use only: an old but loaded JWKS is refreshed by RefreshStale
  // (a periodic task), never on a request's thread.
  if (!Loaded(i)) (void)Refresh(i, false);
  std::optional<RsaKey> key = Find(i, kid);
  if (!key) {
    (void)Refresh(i, true);  // keys rotate: one look at the current set
    key = Find(i, kid);
  }
  if (!key) return absl::UnauthenticatedError("token key id is not in the issuer's JWKS");
  RELAY_ASSIGN_OR_RETURN(VerifiedJwt jwt, VerifyRs256(token, *key));

  const json::object& c = jwt.claims;
  if (ClaimString(c, "iss") != issuer.issuer) return absl::UnauthenticatedError("token issuer is not trusted");
  if (!AudienceMatches(c, issuer.audience)) return absl::UnauthenticatedError("token audience does not match");
  int64_t now = clock_->UnixMillis() / 1000;
  int64_t skew = options_.skew.count();
  auto exp = ClaimTime(c, "exp");
  if (!exp) return absl::UnauthenticatedError("token has no exp");
  if (now > *exp + skew) return absl::UnauthenticatedError("token expired");
  if (auto nbf = ClaimTime(c, "nbf"); nbf && now + skew < *nbf) {
    return absl::UnauthenticatedError("token not valid yet (nbf)");
  }
  if (auto iat = ClaimTime(c, "iat"); iat && now + skew < *iat) {
    return absl::UnauthenticatedError("token issued in the future (iat)");
  }
  for (const auto& [name, want] : issuer.required_claims) {
    if (ClaimString(c, name) != want) return absl::UnauthenticatedError("token claim " + name + " does not match");
  }
  OidcIdentity id;
  id.issuer = issuer.issuer;
  std::string named = ClaimString(c, issuer.repository_claim);
  if (issuer.repositories.empty()) {
    id.repository = named;
  } else if (auto it = issuer.repositories.find(named); it != issuer.repositories.end()) {
    id.repository = it->second;
  }
  if (id.repository.empty() || id.repository.find('/') == std::string::npos) {
    return absl::UnauthenticatedError("token names no known repository (claim " + issuer.repository_claim + ")");
  }
  id.repository_id = ClaimString(c, "repository_id");
  id.jti = ClaimString(c, "jti");
  id.expires_at = *exp;
  id.claims = std::move(jwt.claims);
  return id;
}

OidcSettings ReadOidcSettings(Config& config, const std::string& prefix) {
  OidcSettings s;
  s.issuer = config.String(prefix + ".oidc.issuer", s.issuer);
  s.audience = config.String(prefix + ".oidc.audience", "");
  s.jwks_url = config.String(prefix + ".oidc.jwks_url", "");
  s.jwks_file = config.String(prefix + ".oidc.jwks_file", "");
  s.providers_file = config.String(prefix + ".providers_file", "");
  if (!s.audience.empty() && s.jwks_url.empty() && s.jwks_file.empty()) s.jwks_url = s.issuer + "/.well-known/jwks";
  return s;
}

absl::StatusOr<std::vector<OidcIssuer>> OidcIssuers(const OidcSettings& s) {
  std::vector<OidcIssuer> issuers;
  if (!s.audience.empty()) {
    OidcIssuer i;
    i.issuer = s.issuer;
    i.audience = s.audience;
    i.jwks_url = s.jwks_url;
    i.jwks_file = s.jwks_file;
    issuers.push_back(std::move(i));
  }
  if (!s.providers_file.empty()) {
    auto more = LoadOidcProviders(s.providers_file);
    if (!more.ok()) return more.status();
    for (auto& i : *more) issuers.push_back(std::move(i));
  }
  return issuers;
}

}  // namespace relay::auth
