// OpenID Connect ID tokens from CI providers (GitHub Actions, Buildkite):
// who is calling, proven by the provider, never by the request body.
//
// A token is accepted when, for one configured issuer whose `iss` it
// carries exactly: alg is RS256 and the signature verifies under the key
// its `kid` names in the issuer's JWKS; `aud` is (or contains) the
// configured audience; exp, nbf and iat hold within a small skew; every
// required claim has its value; and the claims name a repository (the
// `repository` claim, or a mapped claim such as Buildkite's pipeline).
//
// JWKS come from a URL (GET, cached) or a file. A `kid` not in the cache
// makes one refetch, at most once per `refetch_interval` per issuer, so a
// flood of tokens with made-up kids cannot turn into a flood of fetches.
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "absl/status/statusor.h"
#include "relay/auth/jwt.h"
#include "relay/base/clock.h"
#include "relay/base/config.h"

namespace relay::auth {

struct OidcIssuer {
  std::string issuer;    // exact `iss`
  std::string audience;  // `aud` must equal it (or, as an array, contain it)
  std::string jwks_url;  // one of these two
  std::string jwks_file;
  // The claim naming the caller's repository ("owner/repo"). When
  // `repositories` is not empty the claim's value is looked up there
  // (Buildkite: pipeline slug -> repository); unmapped values are refused.
  std::string repository_claim = "repository";
  std::map<std::string, std::string> repositories;
  std::map<std::string, std::string> required_claims;  // claim -> exact string value
};

struct OidcOptions {
  std::chrono::seconds skew{60};
  std::chrono::seconds refetch_interval{60};
  std::chrono::seconds jwks_max_age{3600};  // a cached JWKS is refetched after this (URL) or re-read (file)
  std::chrono::milliseconds fetch_timeout{5000};
};

// The caller, as the token proves it.
struct OidcIdentity {
  std::string issuer;
  std::string repository;     // "owner/repo"
  std::string repository_id;  // when the token has one
  std::string jti;            // "" when the token has none
  int64_t expires_at = 0;     // unix seconds
  boost::json::object claims;
};

// Issuer name -> its providers' settings, from YAML:
//   providers:
//     - issuer: https://agent.buildkite.com
//       audience: relay
//       jwks_url: https://agent.buildkite.com/.well-known/jwks
//       repository_claim: pipeline_slug
//       repositories: {my-pipeline: my-org/my-repo}
//       required_claims: {organization_slug: my-org}
absl::StatusOr<std::vector<OidcIssuer>> LoadOidcProviders(const std::string& path);

// What a service reads to know its issuers: one GitHub Actions-style issuer
// (<prefix>.oidc.issuer, .audience, .jwks_url, .jwks_file; the JWKS URL
// defaults to <issuer>/.well-known/jwks) and/or <prefix>.providers_file.
// Collector and lifecycle read the same keys under their own prefix.
struct OidcSettings {
  std::string issuer = "https://token.actions.githubusercontent.com";
  std::string audience;  // empty: no such issuer
  std::string jwks_url;
  std::string jwks_file;
  std::string providers_file;
};
OidcSettings ReadOidcSettings(Config& config, const std::string& prefix);
// Empty when neither the audience nor a providers file is set.
absl::StatusOr<std::vector<OidcIssuer>> OidcIssuers(const OidcSettings& settings);

class OidcVerifier {
 public:
  // GETs a URL and returns the body (the JWKS fetcher; tests may pass
  // their own). Any non-200 is an error.
  using Fetch = std::function<absl::StatusOr<std::string>(const std::string& url, std::chrono::milliseconds timeout)>;

  // InvalidArgument when an issuer is incomplete. JWKS are loaded lazily,
  // on first use; `Prefetch` loads them now.
  static absl::StatusOr<std::unique_ptr<OidcVerifier>> New(std::vector<OidcIssuer> issuers, OidcOptions options,
                                                           const Clock* clock, Fetch fetch = {});
  // Loads every issuer's JWKS; the first failure, after trying all.
  absl::Status Prefetch();
  // Refetches (URL) or re-reads (file) every JWKS older than jwks_max_age.
  // Call it periodically: Verify fetches only when an issuer has no keys
  // yet or a token names an unknown kid (at most once per
  // refetch_interval), so a request thread never waits for a routine
  // refresh.
  absl::Status RefreshStale();

  // Unauthenticated with the reason (safe to show the caller: it never
  // contains the token).
  absl::StatusOr<OidcIdentity> Verify(std::string_view token);
  // Whether `issuer` (exact `iss`) is one of the configured issuers.
  bool Verifies(std::string_view issuer) const;

  // For /metrics.
  int64_t refreshes() const { return refreshes_.load(); }
  int64_t refresh_failures() const { return refresh_failures_.load(); }

 private:
  struct Keys {
    std::mutex fetch_mu;  // one fetch at a time per issuer
    std::shared_mutex mu;
    std::map<std::string, RsaKey> by_kid;
    std::chrono::steady_clock::time_point fetched_at{};
    std::chrono::steady_clock::time_point last_attempt{};
    bool loaded = false;
  };
  OidcVerifier(std::vector<OidcIssuer> issuers, OidcOptions options, const Clock* clock, Fetch fetch);
  // Refetches when allowed (`force`: a kid was missing); the status of
  // the attempt, OK when no attempt was due.
  absl::Status Refresh(size_t issuer, bool force);
  std::optional<RsaKey> Find(size_t issuer, const std::string& kid);
  bool Loaded(size_t issuer);

  std::vector<OidcIssuer> issuers_;
  OidcOptions options_;
  const Clock* clock_;
  Fetch fetch_;
  std::vector<std::unique_ptr<Keys>> keys_;
  std::atomic<int64_t> refreshes_{0}, refresh_failures_{0};
};

// Parses a JWKS document ({"keys":[{kty,kid,n,e,...}]}): RSA signing keys
// by kid (keys for other uses or types are skipped).
absl::StatusOr<std::map<std::string, RsaKey>> ParseJwks(std::string_view json);

// A public key as a JWK (tests, the dev OIDC issuer).
absl::StatusOr<boost::json::object> ToJwk(const RsaKey& key, std::string_view kid);

}  // namespace relay::auth
